"""Checking an executor (issue 18): a whole quick pack's outputs, and op vectors, per call.

- ``check-pack-outputs``: ``meshnb check PACK --outputs DIR`` in-process (:func:`suite.run_suite`)
  on the quick pack's own (correct) outputs: loading and verifying every case against the
  manifest, then comparing every page and trace; what the pack costs beyond the executor's time;
- ``ops-verify-1M``: ``ops verify mul`` of a million lines in ``ops gen``'s layout, streamed in
  chunks (:func:`ops.verify_chunks`).

Each result is checked: every case passes, and the vectors have no wrong line.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import pytest

from meshnb.conformance import ops, pack, suite


@pytest.fixture(scope="module")
def quick_outputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("bench-pack")
    pk, outs = root / "pack", root / "outs"
    pack.write_pack(pk, quick=True)
    for c in pack.cases(quick=True):
        (outs / c.name).mkdir(parents=True)
        for f in [f"out-{k}.page" for k in range(c.systems)] + ["trace.bin"]:
            shutil.copy(pk / c.name / f, outs / c.name / f)
    return pk, outs


def test_check_pack_outputs(benchmark: Any, record: Any, quick_outputs: tuple[Path, Path]) -> None:
    pk, outs = quick_outputs
    result = benchmark(suite.run_suite, pk, outputs=outs)
    assert result.exit_code == 0 and result.count("PASS") == len(pack.cases(quick=True))
    record(benchmark, "check-pack-outputs", 1, unit="call")


def test_ops_verify_a_million_lines(benchmark: Any, record: Any) -> None:
    data = ops.gen_lines("mul", 2, 1, 1_000_000)

    def verify() -> ops.VerifyReport:
        return ops.verify_chunks("mul", ops.chunks_of(io.BytesIO(data).read))

    report = benchmark(verify)
    assert report.checked == 1_000_000 and report.wrong == 0
    record(benchmark, "ops-verify-1M", 1, unit="call")
