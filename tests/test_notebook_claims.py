"""Claim mutation for notebooks 01-04 and 06: a claim's assert fails when the claim is made false.

Each test reads a notebook's cells from its py:percent text, changes one key input (an LR, a step
count, a fault model) in memory, executes only the code cells up to the cell that asserts the
claim on a real Jupyter kernel (``tests/test_notebooks.py``'s kernel, headless state and empty
working directory), and expects that cell, and no earlier one, to fail with an AssertionError.
A notebook whose assert could not fail on a false claim fails its test here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import jupytext
import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from .test_notebooks import CELL_TIMEOUT_S, KERNEL, NB_DIR, headless  # noqa: F401  (headless: a fixture)

pytestmark = [pytest.mark.notebooks, pytest.mark.slow, pytest.mark.usefixtures("headless")]


def _cell(nb: nbformat.NotebookNode, marker: str) -> int:
    """The index of the one code cell whose source holds ``marker``."""
    found = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and marker in c.source]
    assert len(found) == 1, f"{marker!r} is in {len(found)} code cells"
    return found[0]


@pytest.fixture
def claim_fails(tmp_path: Path) -> Callable[..., None]:
    """``claim_fails(name, old, new, claim, in_cell=old)``: in notebook ``name``'s code cell holding
    ``in_cell``, ``old`` becomes ``new``; the code cells up to ``claim``'s run, in an empty working
    directory: the claim's cell, and no earlier one, fails with an AssertionError."""

    def run(name: str, old: str, new: str, claim: str, in_cell: str | None = None) -> None:
        nb = jupytext.read(NB_DIR / f"{name}.py")
        changed, last = _cell(nb, old if in_cell is None else in_cell), _cell(nb, claim)
        assert changed <= last and nb.cells[changed].source.count(old) == 1, (
            f"{old!r} is not once in the cell to mutate"
        )
        nb.cells[changed].source = nb.cells[changed].source.replace(old, new)
        nb.cells = [c for c in nb.cells[: last + 1] if c.cell_type == "code"]
        run_dir = tmp_path / "cwd"
        run_dir.mkdir()
        client = NotebookClient(
            nb, timeout=CELL_TIMEOUT_S, kernel_name=KERNEL, resources={"metadata": {"path": str(run_dir)}}
        )
        with pytest.raises(CellExecutionError) as failed:
            client.execute()
        assert failed.value.ename == "AssertionError", f"{failed.value.ename}: {failed.value.evalue}"
        errors = [i for i, c in enumerate(nb.cells) if any(o.output_type == "error" for o in c.get("outputs", []))]
        assert errors == [len(nb.cells) - 1], "an earlier cell failed, not the claim's"

    return run


def test_01_the_limit_cycle_slope_needs_the_lr_to_change(claim_fails: Callable[..., None]) -> None:
    # Every "LR" of the limit-cycle fit run at 0.5: the gap no longer falls with the LR (slope 1.0x).
    old = "set_lr={0: np.float32(lr).view(np.uint32)}"
    new = "set_lr={0: np.float32(0.5).view(np.uint32)}"
    claim_fails("01_training", old, new, "slope_gap = np.polyfit", in_cell="def loop_meshnb")


def test_01_the_first_order_theory_needs_the_pass_end_offset(claim_fails: Callable[..., None]) -> None:
    # Without u_7 (the derived offset at the pass end) the theory no longer meets the float64 loop.
    old = "u = u_end - np.cumsum(r_g, axis=0)"
    claim_fails("01_training", old, "u = -np.cumsum(r_g, axis=0)", "slope_gap = np.polyfit")


def test_01_the_loss_settles_by_step_400_only_at_lr_one_half(claim_fails: Callable[..., None]) -> None:
    # At LR 1/16 the run takes 8 times the steps to settle: 400 steps leave the pass mean far from its end.
    old = "r = meshnb.train(STEPS, keep_trace=True)"
    new = "r = meshnb.train(STEPS, keep_trace=True, set_lr={0: np.float32(1 / 16).view(np.uint32)})"
    claim_fails("01_training", old, new, "settle = {s:")


def test_01_the_run_stops_at_the_loop_s_largest_a_and_c(claim_fails: Callable[..., None]) -> None:
    # One step more before the pass is recorded: the recorded pass ends after batch 0, not at the largest a and c.
    old = "page = r.page\n"
    new = "page = meshnb.train(1, view_in=r.page).page\n"
    claim_fails("01_training", old, new, "batch_opt = np.array")


def test_01_the_pass_end_s_gap_follows_the_first_order_offset(claim_fails: Callable[..., None]) -> None:
    # u_7 with 7 A in place of 8 A (one batch left out of the pass): 14% off, the runs' 10% bound fails.
    old = "u_end = np.linalg.solve(8 * A_full"
    claim_fails("01_training", old, "u_end = np.linalg.solve(7 * A_full", "on_theory = gaps")


def test_02_b_and_d_follow_lr_t_c_at_every_pass_end(claim_fails: Callable[..., None]) -> None:
    # The theory's c over 250 samples in place of 256: 2.4% off, the 1e-3 bound at the pass ends fails.
    old = 'c_full = V.T @ ti.view["Y"].astype(np.float64) / 256'
    new = 'c_full = V.T @ ti.view["Y"].astype(np.float64) / 250'
    claim_fails("02_float_mode_z", old, new, "on_line = ")


def test_02_the_loss_grows_at_the_cycle_s_rate(claim_fails: Callable[..., None]) -> None:
    # The cycle's map of 7 steps, not 8: its rate is not the loss's growth from step 8 on.
    old = "    if s < 8:"
    claim_fails("02_float_mode_z", old, "    if s < 7:", "rate_fit = np.polyfit")


def test_02_mode_z_flushes_only_subnormal_updates(claim_fails: Callable[..., None]) -> None:
    # At LR 2^-100 the updates are normal numbers: mode Z's params move too, and the claim is false.
    mutate, claim = "TINY = np.uint32(0x00800000)", "first_normal = "
    claim_fails("02_float_mode_z", mutate, "TINY = np.uint32(0x0D800000)", claim)


def test_02_the_table_s_rows_need_mode_z_s_read(claim_fails: Callable[..., None]) -> None:
    # A page read without the flush and NaN rule: the rows that say a word is read as zero or NaN are false.
    old = "z = words[0], fz.flush_bits(np.uint32(words[0]))"
    claim_fails("02_float_mode_z", old, "z = words[0], words[0]", "assert z == claimed")


def test_02_the_loss_grows_tenfold_per_step_at_lr_4(claim_fails: Callable[..., None]) -> None:
    # At LR 3.5 the loss does not gain a decade every step from step 5 on.
    old = "BIG = np.uint32(0x40800000)"
    claim_fails("02_float_mode_z", old, "BIG = np.uint32(0x40600000)", "slow = np.flatnonzero")


def test_03_equal_samples_need_equal_lr_per_batch(claim_fails: Callable[..., None]) -> None:
    # Every N at the same LR (not the same lr/N): the samples to converge part by N.
    old = "lr = float(np.float32(n * np.float32(eta)))"
    claim_fails("03_clusters", old, "lr = float(np.float32(eta))", "same_samples = ")


def test_03_the_loop_at_equal_lr_per_batch_drops_the_within_group_pairs(claim_fails: Callable[..., None]) -> None:
    # Every pair of batches counted for every N (a cluster step taken for N single steps): the first-order
    # loop is then the same for every N, and the exact float64 loop, whose ratio goes to 0.82 for N = 4, refutes it.
    old = "if h // n != g // n]"
    claim_fails("03_clusters", old, "]", "resid_slope = {}")


def test_03_the_same_steps_follow_the_cycle_s_rate_per_step(claim_fails: Callable[..., None]) -> None:
    # The cycle's radius taken as a rate per step for every N (not per 8 / N steps): the steps it predicts for
    # N = 2, 4, 8 are off by far more than the one step a read has.
    old = "rate = {n: radius(0.5, n) ** (n / 8) for n in SIZES}"
    new = "rate = {n: radius(0.5, n) for n in SIZES}"
    claim_fails("03_clusters", old, new, "reach_theory = ")


def test_04_the_diagnosis_names_the_executor_s_rule(claim_fails: Callable[..., None]) -> None:
    # Both executors flush like x86: the one said to flush before rounding is not named so.
    old = "m=faults.model(name)"
    claim_fails("04_checking_an_executor", old, 'm=faults.model("x86-ftz")', old)


def test_06_the_gap_is_the_same_only_at_equal_lr_per_batch(claim_fails: Callable[..., None]) -> None:
    # The same LR for N = 1, 2, 4 instead of the same lr/N: the loop's gaps part by about N.
    old = "equal_lr_n = [loop_gap[n, 0.125 * n].max() for n in (1, 2, 4)]"
    new = "equal_lr_n = [loop_gap[n, 0.5].max() for n in (1, 2, 4)]"
    claim_fails("06_precision", old, new, old)


def test_06_the_loop_s_first_order_term_drops_the_within_group_pairs(claim_fails: Callable[..., None]) -> None:
    # Every pair of batches counted for every N: the first-order term no longer meets the float64 loop of
    # N = 2 and 4 to O(lr^2), and the residual's slope (1 for the derivation) says so.
    old = "if h // n != g // n]"
    claim_fails("06_precision", old, "]", "rel_resid, resid_slope = {}, {}")


def test_06_float32_s_part_is_inside_the_stall_set(claim_fails: Callable[..., None]) -> None:
    # The stall set's bound without its cross terms (each of b and d alone): the runs end outside it.
    old = "np.abs(A_inv[[1, 3]][:, [1, 3]])"
    new = "np.diag(np.abs(np.diag(A_inv)[[1, 3]]))"
    claim_fails("06_precision", old, new, "stall_frac = np.array(")


def test_06_the_attractor_count_is_the_long_runs(claim_fails: Callable[..., None]) -> None:
    # Counted after 8,192 steps instead of 32,768: fewer runs have reached their orbits (other counts).
    old = "np.geomspace(1, 32768 // 8, 30)"
    claim_fails("06_precision", old, "np.geomspace(1, 8192 // 8, 30)", "periods = [period(t)")
