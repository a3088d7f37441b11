"""docs/guide/checking-an-executor.md's table of what the check says of each executor of
tests/conformance/executors is generated: it is ``report --markdown``'s table of ``measured.json``, and the
record holds the quick pack's cases as they are now (a new or renamed case makes it stale: re-run
``python -m tests.conformance.executors.report --record``)."""

from __future__ import annotations

import json
from pathlib import Path

from meshnb.conformance import pack
from tests.conformance.executors import EXECUTORS, report

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "checking-an-executor.md"


def _record() -> dict[str, object]:
    return json.loads(report.RECORD.read_text())


def test_the_record_holds_the_quick_packs_cases_and_every_executor() -> None:
    rec = _record()
    assert rec["cases"] == [c.name for c in pack.cases(quick=True)], "stale: re-run the report with --record"
    rows = rec["rows"]
    assert isinstance(rows, list)
    assert [r["executor"] for r in rows] == list(EXECUTORS)
    assert all(r["of"] == len(pack.cases(quick=True)) for r in rows)
    assert all((r["failed"] == 0) == (EXECUTORS[r["executor"]].kind == "control") for r in rows)


def test_the_guide_shows_the_records_table() -> None:
    assert report.table(_record()) in GUIDE.read_text(), "paste `report --markdown` into the guide"
