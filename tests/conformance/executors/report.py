"""What ``meshnb check PACK --exec`` says of each executor of this package, as the markdown table of
docs/guide/checking-an-executor.md ("Measured on executors we did not write"). Re-run it after the
diagnosis changes and paste the table::

    python -m tests.conformance.executors.report [PACK] [--full] [--detail] [--only NAMES] [--cases GLOB]

Without PACK it writes the quick pack (``--full``: the full one) into a temporary directory. Each
executor runs on every case (``-j 2``); the row names the first failing case (in the pack's order), its
first difference, and the check's diagnosis line (the fault models it names, or what it says instead);
``--detail`` lists every failing case after the table.
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


def row(e: Executor, code: int, doc: dict[str, object], seconds: float) -> str:
    cases = doc.get("cases", [])
    assert isinstance(cases, list)
    bad = failing(doc)
    score = f"{len(bad)}/{len(cases)}"
    first, where, said = "none", "", "passes every case"
    if bad:
        first, where, said = str(bad[0]["name"]), str(bad[0]["where"] or ""), says(bad[0])
    mistake = e.mistake.replace("|", "\\|")
    return f"| `{e.name}` | {e.kind} | {mistake} | {code} | {score} | `{first}` | {where} | {said} | {seconds:.0f} |"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance.executors.report", description=__doc__)
    parser.add_argument("pack", nargs="?", type=Path, help="a pack (default: a new quick pack)")
    parser.add_argument("--full", action="store_true", help="without PACK: write the full pack")
    parser.add_argument("--detail", action="store_true", help="list every failing case after the table")
    parser.add_argument("--only", help="the executors to run, comma-separated (default: all)")
    parser.add_argument("--cases", help="only the cases whose names match (check's --cases)")
    a = parser.parse_args(argv)
    details: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        if a.pack:
            pack = a.pack
        else:
            pack = Path(tmp) / "pack"
            flags = [] if a.full else ["--quick"]
            subprocess.run([sys.executable, "-m", "meshnb", "pack", str(pack), *flags], check=True, capture_output=True)
        print(
            "| executor | kind | the mistake | exit | cases failed | first failing case | first difference"
            " | what the check says there | s |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        chosen = a.only.split(",") if a.only else list(EXECUTORS)
        for e in (EXECUTORS[n] for n in chosen):
            binary = build(e, Path(tmp))
            start = time.monotonic()
            code, doc = check(pack, command(e, binary), "-j", "2", *(["--cases", a.cases] if a.cases else []))
            print(row(e, code, doc, time.monotonic() - start), flush=True)
            details += [f"- `{e.name}` on `{c['name']}`: {c['where'] or ''}: {says(c)}" for c in failing(doc)]
    if a.detail:
        print("\nEvery failing case:\n\n" + "\n".join(details))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
