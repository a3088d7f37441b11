"""What ``meshnb check PACK --exec`` says of each executor of this package, as the markdown table of
docs/guide/checking-an-executor.md ("Measured on executors we did not write"). Re-run it after the
diagnosis or the pack changes, with ``--record``, then put ``--markdown``'s table in the guide::

    python -m tests.conformance.executors.report [PACK] [--full] [--detail] [--only NAMES] [--cases GLOB] [--record]
    python -m tests.conformance.executors.report --markdown

Without PACK it writes the quick pack (``--full``: the full one) into a temporary directory. Each
executor runs on every case (``-j 2``); the row names the first failing case (in the pack's order), its
first difference, and the check's diagnosis line (the fault models it names, or what it says instead);
``--detail`` lists every failing case after the table. ``--record`` writes the rows and the pack's case
names to ``measured.json`` beside this file; ``--markdown`` prints the guide's table from it, and
``tests/conformance/test_faulty_executors.py`` fails when the guide's table is not that table or the
record's cases are not the quick pack's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.conformance.executors import EXECUTORS, Executor, build, command

ROOT = Path(__file__).resolve().parents[3]
RECORD = Path(__file__).resolve().parent / "measured.json"
HEAD = (
    "| executor | kind | the mistake | exit | cases failed | first failing case | first difference"
    " | what the check says there | s |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def check(pack: Path, cmd: str, *extra: str) -> tuple[int, dict[str, object]]:
    """Run ``meshnb check PACK --exec CMD --json``: its exit code and document."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, "-m", "meshnb", "check", str(pack), "--exec", cmd, "--json", *extra],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    return r.returncode, json.loads(r.stdout) if r.stdout.strip() else {}


def says(c: dict[str, object]) -> str:
    """The check's diagnosis of a failing case: the models it names, or what it says instead."""
    models = c["models"]
    if isinstance(models, list) and models:
        return "names " + ", ".join(str(m) for m in models)
    message = str(c["message"])
    return message.split("; ", 1)[1] if "; " in message else message


def failing(doc: dict[str, object]) -> list[dict[str, object]]:
    cases = doc.get("cases", [])
    assert isinstance(cases, list)
    return [c for c in cases if c["verdict"] != "PASS"]


def measured(e: Executor, code: int, doc: dict[str, object], seconds: float) -> dict[str, object]:
    """One executor's record: its exit code, the cases it failed of those run, the first failing one, its
    first difference, what the check says there, and the seconds."""
    cases = doc.get("cases", [])
    assert isinstance(cases, list)
    bad = failing(doc)
    first, where, said = "none", "", "passes every case"
    if bad:
        first, where, said = str(bad[0]["name"]), str(bad[0]["where"] or ""), says(bad[0])
    return {
        "executor": e.name,
        "exit": code,
        "failed": len(bad),
        "of": len(cases),
        "first": first,
        "where": where,
        "said": said,
        "seconds": round(seconds),
    }


def row_of(r: dict[str, object]) -> str:
    """The guide's table row of a record (:func:`measured`)."""
    e = EXECUTORS[str(r["executor"])]
    mistake = e.mistake.replace("|", "\\|")
    return (
        f"| `{e.name}` | {e.kind} | {mistake} | {r['exit']} | {r['failed']}/{r['of']} | `{r['first']}` | {r['where']}"
        f" | {r['said']} | {r['seconds']} |"
    )


def row(e: Executor, code: int, doc: dict[str, object], seconds: float) -> str:
    return row_of(measured(e, code, doc, seconds))


def table(record: dict[str, object]) -> str:
    """The guide's table from a record (``measured.json``)."""
    rows = record["rows"]
    assert isinstance(rows, list)
    return HEAD + "\n" + "\n".join(row_of(r) for r in rows)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance.executors.report", description=__doc__)
    parser.add_argument("pack", nargs="?", type=Path, help="a pack (default: a new quick pack)")
    parser.add_argument("--full", action="store_true", help="without PACK: write the full pack")
    parser.add_argument("--detail", action="store_true", help="list every failing case after the table")
    parser.add_argument("--only", help="the executors to run, comma-separated (default: all)")
    parser.add_argument("--cases", help="only the cases whose names match (check's --cases)")
    parser.add_argument("--record", action="store_true", help=f"write the rows to {RECORD.name}")
    parser.add_argument("--markdown", action="store_true", help=f"print the table of {RECORD.name} and exit")
    a = parser.parse_args(argv)
    if a.markdown:
        print(table(json.loads(RECORD.read_text())))
        return 0
    details: list[str] = []
    records: list[dict[str, object]] = []
    names: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        if a.pack:
            pack = a.pack
        else:
            pack = Path(tmp) / "pack"
            flags = [] if a.full else ["--quick"]
            subprocess.run([sys.executable, "-m", "meshnb", "pack", str(pack), *flags], check=True, capture_output=True)
        names = json.loads((pack / "manifest.json").read_text())["cases"]
        print(HEAD)
        chosen = a.only.split(",") if a.only else list(EXECUTORS)
        for e in (EXECUTORS[n] for n in chosen):
            binary = build(e, Path(tmp))
            start = time.monotonic()
            code, doc = check(pack, command(e, binary), "-j", "2", *(["--cases", a.cases] if a.cases else []))
            records.append(measured(e, code, doc, time.monotonic() - start))
            print(row_of(records[-1]), flush=True)
            details += [f"- `{e.name}` on `{c['name']}`: {c['where'] or ''}: {says(c)}" for c in failing(doc)]
    if a.detail:
        print("\nEvery failing case:\n\n" + "\n".join(details))
    if a.record:
        doc = {"about": "python -m tests.conformance.executors.report --record", "cases": names, "rows": records}
        RECORD.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
