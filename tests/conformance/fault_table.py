"""The quick pack's cases whose bits each fault model of :data:`meshnb.conformance.faults.MODELS` changes:
computed by running each model as an executor on every case, kept in ``fault_models.json`` beside this
file, and shown as the fault-model table of docs/guide/checking-an-executor.md::

    python -m tests.conformance.fault_table --record   # compute the record (about a minute)
    python -m tests.conformance.fault_table            # print the guide's table from the record

``tests/conformance/test_check.py`` holds the check to the record (it fails and names each model on exactly
these cases) and fails when the record's cases are not the quick pack's or the guide's table is not
the record's.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from meshnb.conformance import check, faults, pack
from meshnb.conformance.model import Run

RECORD = Path(__file__).resolve().parent / "fault_models.json"
HEAD = "| model | what the executor does | quick-pack cases it changes |\n| --- | --- | --- |"


def executor_runs(setups: dict[str, check.Setup], m: faults.Model) -> dict[str, Run]:
    """Every case of ``setups`` run by an executor with fault ``m`` (the hard pages of 64 steps side by
    side in one run, the others by :func:`meshnb.conformance.check.executor_run`)."""
    hard = [n for n, s in setups.items() if not s.case.from_init and s.case.steps == 64]
    side = faults.run([setups[n].in_pages[0] for n in hard], 64, grouped=False, independent=True, m=m)
    runs = {n: Run([side.pages[k]], side.trace[:, k]) for k, n in enumerate(hard)}
    for n, s in setups.items():
        if n not in runs:  # from init, or a probe of one or two steps
            runs[n] = check.executor_run(s, m)
    return runs


def changes(setups: dict[str, check.Setup], m: faults.Model) -> list[str]:
    """The cases (in ``setups``' order) whose pages or trace an executor with fault ``m`` changes."""
    runs = executor_runs(setups, m)
    out = []
    for n, s in setups.items():
        r = runs[n]
        if r.pages != s.expected or not np.array_equal(r.trace, s.trace):
            out.append(n)
    return out


def compute() -> dict[str, object]:
    """The record: the quick pack's case names, and each model's changed cases."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "quick"
        pack.write_pack(root, quick=True)
        setups = {c.name: check.load_case(root / c.name) for c in pack.cases(quick=True)}
        return {"cases": list(setups), "models": {m.name: changes(setups, m) for m in faults.MODELS}}


def load() -> dict[str, object]:
    """The record (``fault_models.json``)."""
    doc: dict[str, object] = json.loads(RECORD.read_text())
    return doc


def exposed() -> dict[str, set[str]]:
    """Each model's changed cases, from the record."""
    models = load()["models"]
    assert isinstance(models, dict)
    return {name: set(cases) for name, cases in models.items()}


def cases_text(changed: list[str], every: list[str]) -> str:
    """A model's cases in words: listed, or "every case but ..." where that is shorter.

    >>> cases_text(["a", "c"], ["a", "b", "c"])
    'every case but b'
    >>> cases_text(["b"], ["a", "b", "c"])
    'b'
    """
    if not changed:
        return "none"
    if len(changed) == len(every):
        return "every case"
    if 2 * len(changed) > len(every):
        return "every case but " + ", ".join(c for c in every if c not in changed)
    return ", ".join(changed)


def table(record: dict[str, object]) -> str:
    """The guide's fault-model table from a record."""
    every, models = record["cases"], record["models"]
    assert isinstance(every, list) and isinstance(models, dict)
    rows = [f"| `{name}` | {faults.model(name).doc} | {cases_text(cases, every)} |" for name, cases in models.items()]
    return HEAD + "\n" + "\n".join(rows)


def main(argv: list[str]) -> int:
    if "--record" in argv:
        RECORD.write_text(json.dumps(compute(), indent=1) + "\n")
    print(table(load()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
