"""Writes ``mutants.json``: universalmutator's C mutants of the seed's train.c, as edits, a seeded sample.

``python -m tests.conformance.seed.generate MUTATE [--sample N]`` runs universalmutator's ``mutate`` (the
command, e.g. ``mutate`` from ``pip install universalmutator``) on a copy of the seed, turns each mutant into
its edit (line, column, the text replaced, its replacement), drops those inside comments and the duplicates,
and keeps a sample of N drawn with a fixed seed (the order of the edits in the file, then ``random.Random(47)``).
The list is fixed in the repository so that the tests need neither the tool nor its version.
"""

from __future__ import annotations

import argparse
import difflib
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.conformance.seed.mutants import LIST, seed


def edit(original: str, mutated: str) -> tuple[int, int, str, str] | None:
    """The one edit between two texts: (line, col, old, new), None where they differ in no line or several."""
    a, b = original.split("\n"), mutated.split("\n")
    if len(a) != len(b):
        return None
    lines = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
    if len(lines) != 1:
        return None
    x, y = a[lines[0]], b[lines[0]]
    m = difflib.SequenceMatcher(None, x, y, autojunk=False)
    ops = [op for op in m.get_opcodes() if op[0] != "equal"]
    lo, hi, lo2, hi2 = ops[0][1], ops[-1][2], ops[0][3], ops[-1][4]
    return lines[0] + 1, lo, x[lo:hi], y[lo2:hi2]


def in_comment(source: str, line: int, col: int) -> bool:
    """Whether (line, col) lies in a ``/* */`` or ``//`` comment of ``source``."""
    lines = source.split("\n")
    pos = sum(len(s) + 1 for s in lines[: line - 1]) + col
    i, comment = 0, False
    while i < pos:
        if not comment and source.startswith("/*", i):
            comment, i = True, i + 2
        elif comment and source.startswith("*/", i):
            comment, i = False, i + 2
        elif not comment and source.startswith("//", i):
            end = source.find("\n", i)
            if end == -1 or end >= pos:
                return True
            i = end
        else:
            i += 1
    return comment


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mutate", help="universalmutator's mutate command")
    ap.add_argument("--sample", type=int, default=150)
    args = ap.parse_args(argv)
    path = seed()
    if path is None:
        raise SystemExit("no shared/seed/train.c (set MESHNB_SHARED)")
    source = path.read_text()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "train.c").write_text(source)
        (work / "m").mkdir()
        subprocess.run(
            [*args.mutate.split(), "train.c", "c", "--noCheck", "--mutantDir", "m"],
            cwd=work,
            check=True,
            capture_output=True,
        )
        files = sorted((work / "m").glob("*.c"), key=lambda p: int(p.name.split(".")[-2]))
        edits: list[tuple[int, int, str, str]] = []
        for f in files:
            e = edit(source, f.read_text())
            if e is not None and e not in edits and not in_comment(source, e[0], e[1]):
                edits.append(e)
    total = len(edits)
    chosen = sorted(random.Random(47).sample(range(total), min(args.sample, total)))
    doc = {
        "about": (
            f"universalmutator's C mutants of shared/seed/train.c: {len(files)} made, {total} distinct edits "
            f"outside comments, {len(chosen)} drawn (random.Random(47).sample); ids index the distinct edits"
        ),
        "mutants": [dict(zip(("line", "col", "old", "new"), edits[i]), id=i) for i in chosen],
    }
    rows = ",\n".join(" " + json.dumps(m) for m in doc["mutants"])
    LIST.write_text(f'{{"about": {json.dumps(doc["about"])},\n"mutants": [\n{rows}\n]}}\n')
    print(doc["about"], file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
