"""Lockstep rounds against their C floor (issue 35), side by side in one run.

``bench/round_floor.c`` runs only the round (counters and slots on a page in memory, meshnb's
layout, the fold in system order; no step) with the spin, yield and futex policies, members as
threads or processes; every member's digest is checked against numpy's first.  Beside it
meshnb's threads-2 and processes-2 rounds, timed as marginal times a round (two run lengths in
one process: start-up and warm-up cancel), all interleaved so that a shared machine's load falls
on each alike.  The ratios (meshnb / the floor's yield and spin policies) are printed and kept in
``extra_info``; the targets are issue 35's (within 3x of yield, aiming at spin), read off, not
asserted (the machine's load decides them).  Skipped with a reason without gcc, Linux or x86.

Run::

    python -m pytest bench/test_bench_round_floor.py --benchmark-only -s
"""

from __future__ import annotations

import pytest
import round_floor as floor  # bench/ is on the path, as for every bench module

pytestmark = pytest.mark.skipif(floor.unavailable() is not None, reason=str(floor.unavailable()))


@pytest.fixture(scope="module")
def exe(tmp_path_factory):
    return floor.build(tmp_path_factory.mktemp("round-floor"))


@pytest.mark.parametrize("members", floor.MEMBERS)
@pytest.mark.parametrize("policy", floor.POLICIES)
@pytest.mark.parametrize("n", [2, 4])
def test_floor_bits(exe, n, policy, members) -> None:
    floor.checked_run(exe, n, 300, policy, members)


def test_a_wrong_digest_is_caught(exe, monkeypatch) -> None:
    monkeypatch.setattr(floor, "expected_digest", lambda n, rounds: 0)
    with pytest.raises(AssertionError, match="digests"):
        floor.checked_run(exe, 2, 100, "spin", "threads")


@pytest.mark.parametrize("members", floor.MEMBERS)
def test_rounds_against_the_c_floor(benchmark, record, short: bool, exe, members) -> None:
    # long runs: a quiet round of ~0.5 us (2-core Xeon) lasts 0.2 s at the long length, not lost in the noise
    rounds, (lo, hi), repeats = (2000, (256, 2048), 1) if short else (400_000, (40_000, 400_000), 3)
    fns = {p: (lambda p=p: floor.checked_run(exe, 2, rounds, p, members)) for p in floor.POLICIES}
    fns["meshnb"] = lambda: floor.marginal_round_ns(members, 2, lo, hi, repeats=1)
    load = floor.load_average()
    med = floor.interleaved(fns, repeats)
    record(benchmark, f"{members}-2-round", hi, systems=2, unit="round")
    benchmark.extra_info.update(
        {f"ns_c_{p}": med[p] for p in floor.POLICIES},
        ns_meshnb=med["meshnb"],
        ratio_yield=med["meshnb"] / med["yield"],
        ratio_spin=med["meshnb"] / med["spin"],
        load_average=load,
    )
    print(
        f"\n{members}-2, load average {load:.2f}, median of {repeats}: C floor ns a round: spin {med['spin']:.0f}, "
        f"yield {med['yield']:.0f}, futex {med['futex']:.0f}; meshnb {med['meshnb']:.0f} "
        f"({med['meshnb'] / med['yield']:.2f}x yield, {med['meshnb'] / med['spin']:.2f}x spin)"
    )
    benchmark.group = "rounds against the C floor"
    benchmark.pedantic(lambda: floor.checked_run(exe, 2, rounds, "spin", members), rounds=1, iterations=1)
