"""Notebook 05's claims can fail: each test changes one input or threshold of a claim and sees its assert raise.

A claim-mutation test runs the committed notebook's cells up to the one that holds the claim, on a
real Jupyter kernel as ``test_notebooks.py`` runs them (same kernel, same headless state), with one
cell's source rewritten in memory; the claim's ``assert`` must then raise ``AssertionError``.  The
notebook unchanged passes every assert (``test_notebooks.py::test_notebook_executes``), so each test
shows an assert that separates the true claim from a false one.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from .test_notebooks import CELL_TIMEOUT_S, KERNEL, _committed, headless  # noqa: F401 (headless: a fixture)

NAME = "05_sweeps"


def _run_mutated(tmp_path: Path, old: str, new: str, claim: str) -> CellExecutionError:
    """Run the cells up to the one holding ``claim`` with ``old`` replaced by ``new`` in its cell; the error."""
    nb = _committed(NAME)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    changed = [i for i in code if old in nb.cells[i].source]
    holding = [i for i in code if claim in nb.cells[i].source]
    assert len(changed) == 1 and len(holding) == 1, "the notebook no longer has the cell this test changes"
    assert changed[0] <= holding[0]
    nb.cells[changed[0]].source = nb.cells[changed[0]].source.replace(old, new)
    nb.cells = [c for i, c in enumerate(nb.cells) if i <= holding[0] and c.cell_type == "code"]
    run_dir = tmp_path / "cwd"
    run_dir.mkdir()
    client = NotebookClient(
        nbformat.from_dict(nb),
        timeout=CELL_TIMEOUT_S,
        kernel_name=KERNEL,
        resources={"metadata": {"path": str(run_dir)}},
    )
    with pytest.raises(CellExecutionError) as caught:
        client.execute()
    assert caught.value.ename == "AssertionError", f"failed otherwise than on the claim: {caught.value}"
    assert claim in str(caught.value), "another assert failed than the claim's"
    return caught.value


@pytest.mark.notebooks
@pytest.mark.slow
def test_short_budget_best_lr_claim_fails_for_longer_budgets(headless: None, tmp_path: Path) -> None:  # noqa: F811
    # "For budgets up to 32 steps the best LR lies above the divergence line": false up to 64 steps.
    claim = "assert (LRS[best_k[short]] > max(first_over, line[1])).all() and below > SHORT"
    _run_mutated(tmp_path, "SHORT = 32", "SHORT = 64", claim)


@pytest.mark.notebooks
@pytest.mark.slow
def test_float64_agreement_fails_with_another_batch_order(headless: None, tmp_path: Path) -> None:  # noqa: F811
    # "5.1-5.3 are float64 behaviour": a float64 run with the batches one place out of SPEC 8's order
    # is not meshnb's run, and the assert that compares them must see it.
    claim = "assert np.median(rel) < 1e-6"
    _run_mutated(tmp_path, "return [[(t * n + k) % 8 ", "return [[(t * n + k + 1) % 8 ", claim)


@pytest.mark.notebooks
@pytest.mark.slow
def test_settle_constant_claim_fails_on_the_geometric_grid(headless: None, tmp_path: Path) -> None:  # noqa: F811
    # "read at every pass end the steps to settle are the closed form's to 1% below LR 0.5": read at
    # the geometric checkpoints alone (the grid the notebook used before) they are up to twice as late.
    claim = "assert (~settled).any() and np.abs(resid[near]).max() < 0.01"
    _run_mutated(tmp_path, "settle = settle_steps(FINE, fine_mse[:, 0], 0.01)", _GEOMETRIC_SETTLE, claim)


_GEOMETRIC_SETTLE = "settle = settle_steps(GEO_READS, fine_mse[np.searchsorted(FINE, GEO_READS), 0], 0.01)"


@pytest.mark.notebooks
@pytest.mark.slow
def test_stall_claim_fails_at_a_quarter_ulp(headless: None, tmp_path: Path) -> None:  # noqa: F811
    # "every settled run ends where the drift of b and d is below half an ulp": the settled runs' drift
    # reaches 0.68 of half an ulp, so the same claim at a quarter of an ulp is false and its assert must see it.
    claim = "assert (drift[in_time][:, bd] < 1).all() and np.median(drift[in_time][:, [0, 2]]) > 10"
    _run_mutated(tmp_path, "HALF = 0.5", "HALF = 0.25", claim)


@pytest.mark.notebooks
@pytest.mark.slow
def test_best_lr_model_is_a_minimum_only_on_its_wide_grid(headless: None, tmp_path: Path) -> None:  # noqa: F811
    # "the model's best LR is a minimum of the model, not its grid's end": on the sweep's own grid
    # (1e-4 .. 2) the model's best for the shortest budgets is the grid's last LR, and the assert must see it.
    claim = "assert model_k.min() > 0 and model_k.max() < len(MODEL_LRS) - 1"
    _run_mutated(
        tmp_path, "MODEL_LRS = np.geomspace(1e-5, 4.0, 8192)", "MODEL_LRS = np.geomspace(1e-4, 2.0, 8192)", claim
    )
