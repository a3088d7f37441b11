"""The pack against the seed program's own mutants (issue 47 item 5; docs/guide/mutation-score.md).

The seed's train.c (``$MESHNB_SHARED/seed`` or ``../shared/seed``; skipped without it) is built over C
headers written from SPEC (``tests/conformance/seed/mesh``) into a native executor. Its mutants (universalmutator's
C rules, a fixed sample: ``seed/mutants.json``) were measured once (``seed/results.json``, made by
``python -m tests.conformance.seed.mutants PACK --full PACK --check``); these tests hold every mutant to its
recorded outcome: not built, the same machine code as the seed, killed by the first case named in each pack,
or equal to the seed on every screening run (equivalent). A fixed small sample runs by default, every mutant
under ``slow``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from meshnb.conformance import pack
from tests.conformance.executors import compiler
from tests.conformance.seed import mutants as sm

RESULTS = json.loads((sm.HERE / "results.json").read_text())["mutants"]
BY_ID = {m.id: m for m in sm.load()}
SAMPLE = (0, 128, 67, 471, 683)  # not built, the same machine code, killed by default, step-base-2^32, a state case

pytestmark = [
    pytest.mark.skipif(sm.seed() is None, reason="no shared/seed/train.c beside this clone (set MESHNB_SHARED)"),
    pytest.mark.skipif(compiler() is None, reason="no C compiler"),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    path = sm.seed()
    assert path is not None
    source = path.read_text()
    binary = sm.build(source, tmp_path_factory.mktemp("seed"))
    assert binary is not None, "the seed does not build over the headers written from SPEC"
    return source, binary


@pytest.fixture(scope="module")
def full_pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("full") / "pack"
    pack.write_pack(root)
    return root


def test_the_seed_over_the_headers_passes_the_quick_pack(
    built: tuple[str, Path], quick_pack: Path, tmp_path: Path
) -> None:
    assert sm.first_kill(built[1], quick_pack, tmp_path) is None


def test_every_mutant_applies_to_the_seed(built: tuple[str, Path]) -> None:
    for m in BY_ID.values():
        m.apply(built[0])  # ValueError where the seed changed under the list
    assert set(RESULTS) == {str(i) for i in BY_ID}


def _holds(mid: int, built: tuple[str, Path], packs: dict[str, Path], tmp: Path) -> None:
    source, original = built
    want = RESULTS[str(mid)]
    binary = sm.build(BY_ID[mid].apply(source), tmp / "m")
    assert (binary is not None) == want["built"], BY_ID[mid].describe(source)
    if binary is None:
        return
    if want.get("same_code"):
        assert binary.read_bytes() == original.read_bytes()
        return
    for which, p in packs.items():
        kill = sm.first_kill(binary, p, tmp)
        if want.get("racy"):  # bits that depend on the threads' timing: killed, by a case that varies
            assert kill is not None, (which, BY_ID[mid].describe(source), want["racy"])
            continue
        assert (kill[0] if kill else None) == (want[which] or {}).get("case"), (which, BY_ID[mid].describe(source))
    if all(want[w] is None for w in packs):
        assert sm.differs_from_seed(binary, original, sm.screen_runs(tmp / "screen"), tmp) == want["screen"]


@pytest.mark.parametrize("mid", SAMPLE)
def test_a_sample_of_mutants_keeps_its_outcome(
    mid: int, built: tuple[str, Path], quick_pack: Path, tmp_path: Path
) -> None:
    _holds(mid, built, {"quick": quick_pack}, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("mid", sorted(BY_ID))
def test_every_mutant_keeps_its_outcome(
    mid: int, built: tuple[str, Path], quick_pack: Path, full_pack: Path, tmp_path: Path
) -> None:
    _holds(mid, built, {"quick": quick_pack, "full": full_pack}, tmp_path)
