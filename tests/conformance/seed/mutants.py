"""The seed's own mutants: ``shared/seed/train.c`` with one edit each (universalmutator's C rules), built over
this folder's headers into native executors, and run on a conformance pack.

A mutant is stored as its edit (a line of train.c, a column, the text replaced and its replacement:
``mutants.json``, made by ``generate.py``), never as C: the seed stays in the shared folder beside the clone
(``$MESHNB_SHARED`` or ``../shared``), and the tests that need it skip without it.

``python -m tests.conformance.seed.mutants PACK [--full PACK] [--check] [--ids ...]`` prints one JSON line
per mutant: built or not, the first case of each pack that kills it (its outputs differ from the pack's),
or, for a mutant that no case kills, whether it differs from the seed on the extra pages of
:func:`screen_runs` (not equivalent) or not (equivalent, with the runs as the evidence); with ``--check``,
``meshnb check``'s verdict line on the first case that kills it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conformance.executors import compiler

HERE = Path(__file__).resolve().parent
LIST = HERE / "mutants.json"
FLAGS = ("-O2", "-std=gnu11", "-ffp-contract=off", "-w")
CASE_SECONDS = 20.0  # a mutant's run of one case past this is killed (a hang counts as a kill)


def seed() -> Path | None:
    """The seed's ``train.c``: ``$MESHNB_SHARED/seed/train.c`` or ``../shared`` beside the clone; None."""
    root = os.environ.get("MESHNB_SHARED")
    path = (Path(root) if root else HERE.parents[3] / "shared") / "seed" / "train.c"
    return path if path.is_file() else None


@dataclass(frozen=True)
class Mutant:
    """One edit of train.c: on ``line`` (1-based), at ``col`` (0-based), ``old`` replaced by ``new``."""

    id: int
    line: int
    col: int
    old: str
    new: str

    def apply(self, source: str) -> str:
        """``source`` with the edit; ValueError where the text at the place is not ``old``."""
        lines = source.split("\n")
        text = lines[self.line - 1]
        if text[self.col : self.col + len(self.old)] != self.old:
            raise ValueError(f"mutant {self.id}: line {self.line} does not hold {self.old!r} at {self.col}")
        lines[self.line - 1] = text[: self.col] + self.new + text[self.col + len(self.old) :]
        return "\n".join(lines)

    def describe(self, source: str) -> str:
        """The edit in words: ``line 87: `done < steps` -> `done <= steps```."""
        text = source.split("\n")[self.line - 1].strip()
        return f"line {self.line}: `{self.old}` -> `{self.new}` in `{text[:90]}`"


def load() -> list[Mutant]:
    """Every mutant of the fixed list."""
    return [Mutant(**m) for m in json.loads(LIST.read_text())["mutants"]]


def build(source: str, into: Path, name: str = "train") -> Path | None:
    """Compile ``source`` (train.c's text) over this folder's headers; the binary, None if it does not compile."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler")
    into.mkdir(parents=True, exist_ok=True)
    src = into / f"{name}.c"
    src.write_text(source)
    binary = into / name
    r = subprocess.run(
        [cc, *FLAGS, "-I", str(HERE), "-o", str(binary), str(src), "-lm", "-lpthread"],
        capture_output=True,
        check=False,
    )
    return binary if r.returncode == 0 else None


def run_case(binary: Path, case_dir: Path, out: Path) -> tuple[list[bytes], bytes] | str:
    """Run ``binary`` on a case: its out pages and trace, or why not (an exit code, a timeout)."""
    from tests.conformance.seed.executor import argv

    cj = json.loads((case_dir / "case.json").read_text())
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    try:
        r = subprocess.run(argv(str(binary), case_dir, out), capture_output=True, timeout=CASE_SECONDS, check=False)
    except subprocess.TimeoutExpired:
        return f"ran past {CASE_SECONDS:.0f} s"
    if r.returncode != 0:
        return f"exit {r.returncode}: {r.stderr.decode(errors='replace').strip()[-200:]}"
    try:
        pages = [(out / f"out-{k}.page").read_bytes() for k in range(cj["systems"])]
        return pages, (out / "trace.bin").read_bytes()
    except OSError as e:
        return f"no output: {e}"


def first_kill(binary: Path, pack: Path, work: Path) -> tuple[str, str] | None:
    """The first case of ``pack`` (manifest order) on which ``binary``'s outputs differ from the pack's:
    ``(case, what differs)``; None when it passes every case."""
    for name in json.loads((pack / "manifest.json").read_text())["cases"]:
        case_dir = pack / name
        got = run_case(binary, case_dir, work / "out")
        if isinstance(got, str):
            return name, got
        pages, trace = got
        n = len(pages)
        want = [(case_dir / f"out-{k}.page").read_bytes() for k in range(n)]
        if pages != want:
            return name, "page"
        if trace != (case_dir / "trace.bin").read_bytes():
            return name, "trace"
    return None


def screen_runs(root: Path) -> list[Path]:
    """The extra runs that tell a surviving mutant from the seed: a case directory each (case.json, in-K.page),
    written under ``root``: every start page of the pack (hard, probe and state pages) for 300 steps with
    STEPS_PER_TASK 7, 64 and 300, alone, and (but the one with a round pending) as a cluster of 3; 40
    random pages (random params and LR, half with random samples) for 70 steps; init's page at step
    bases near 2^32 and 2^64 - 2 and clusters of 2 and 4, with SET_LRs of every class."""
    import numpy as np

    from meshnb.conformance import pack

    runs: list[tuple[str, pack.Case, list[bytes]]] = []
    starts = pack.start_pages()
    for name, page in starts.items():
        for spt in (7, 64, 300):
            runs.append((f"{name}-{spt}", pack.Case(name, "", 300, steps_per_task=spt, page=name), [page]))
        if name != "pending-alone-match":  # a cluster cannot start with a round pending (its slots are gone)
            c3 = pack.Case(name, "", 100, systems=3, grouped=True, steps_per_task=33, page=name)
            runs.append((f"{name}-cluster3", c3, [c3.in_page()] * 3))
    rng = np.random.default_rng(47)
    for i in range(40):
        page = _random_page(rng, samples=i % 2 == 1)
        runs.append((f"random-{i}", pack.Case(f"random-{i}", "", 70, steps_per_task=int(rng.integers(1, 80))), [page]))
    words = (0x80000000, 0x807FFFFF, 0x00000001, 0xBE000000, 0x7F800000, 0xFF800001, 0x3F000000)
    lr = tuple((5 * i + 3, w) for i, w in enumerate(words))
    for base in ((1 << 32) - 20, (1 << 64) - 1 - 64, (7 << 32) + 5):
        runs.append((f"base-{base:x}", pack.Case("b", "", 64, steps_per_task=9, step_base=base, set_lr=lr), []))
    for g in (2, 4):
        runs.append(
            (f"cluster{g}-lr", pack.Case("c", "", 90, systems=g, grouped=True, steps_per_task=13, set_lr=lr), [])
        )
    out = []
    for name, case, pages in runs:
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        doc = pack.case_json(case)
        doc["start"] = "page" if pages else "init"
        (d / "case.json").write_text(json.dumps(doc))
        for k in range(case.systems):
            (d / f"in-{k}.page").write_bytes(pages[k] if pages else case.in_page())
        out.append(d)
    return out


def _random_page(rng: object, samples: bool) -> bytes:
    """Init's page with random params (magnitudes 2^-12 .. 2^6, both signs) and LR (2^-9 .. 1); with
    ``samples``, X and Y random in [-1, 1] too."""
    import numpy as np

    from meshnb.testing import pages as hard
    from meshnb.testing import reference as ref

    g: np.random.Generator = rng  # type: ignore[assignment]
    params = (g.choice([-1.0, 1.0], 4) * 2.0 ** g.uniform(-12, 6, 4)).astype(np.float32)
    page = hard.with_words(ref.init_page(), hard.PARAMS, params.view(np.uint32))
    page = hard.with_words(page, hard.LR, np.array([2.0 ** g.uniform(-9, 0)], np.float32).view(np.uint32))
    if samples:
        for off in (hard.X, hard.Y):
            page = hard.with_words(page, off, g.uniform(-1, 1, 256).astype(np.float32).view(np.uint32))
    return page


def differs_from_seed(binary: Path, original: Path, runs: list[Path], work: Path) -> str | None:
    """The first screening run on which ``binary``'s outputs (or failure) differ from the seed's, else None."""
    for d in runs:
        if run_case(binary, d, work / "a") != run_case(original, d, work / "b"):
            return d.name
    return None


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pack", type=Path, help="a quick pack")
    ap.add_argument("--full", type=Path, help="a full pack too")
    ap.add_argument("--ids", type=int, nargs="*", help="only these mutants")
    ap.add_argument("--check", action="store_true", help="meshnb check's verdict on the first killing case")
    ap.add_argument("--record", action="store_true", help="write the rows to results.json (the tests' record)")
    args = ap.parse_args(argv)
    rows: list[dict[str, object]] = []
    src_path = seed()
    if src_path is None:
        raise SystemExit("no shared/seed/train.c (set MESHNB_SHARED)")
    source = src_path.read_text()
    chosen = [m for m in load() if args.ids is None or m.id in args.ids]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        original = build(source, work / "seed")
        assert original is not None, "the seed does not build over the headers"
        runs: list[Path] | None = None
        for m in chosen:
            row: dict[str, object] = {"id": m.id, "edit": m.describe(source)}
            binary = build(m.apply(source), work / "m")
            if binary is None:
                row["built"] = False
                print(json.dumps(row), flush=True)
                continue
            row["built"] = True
            if binary.read_bytes() == original.read_bytes():
                row["same_code"] = True  # equivalent: the compiler made the seed's machine code
                print(json.dumps(row), flush=True)
                continue
            packs = {"quick": args.pack, **({"full": args.full} if args.full else {})}
            for which, p in packs.items():
                kill = first_kill(binary, p, work)
                row[which] = None if kill is None else {"case": kill[0], "differs": kill[1]}
                if kill and args.check:
                    row[f"{which}_check"] = check_line(binary, p, kill[0])
            if not any(row[w] for w in packs):
                if runs is None:
                    runs = screen_runs(work / "screen")
                row["screen"] = differs_from_seed(binary, original, runs, work)
                row["screen_runs"] = len(runs)
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.record:
        record(rows)
    return 0


RESULTS = HERE / "results.json"


def record(rows: list[dict[str, object]]) -> None:
    """Writes ``results.json``: each mutant's outcome (built, same machine code, the first case of each
    pack that kills it, the first screening run that tells it from the seed), without check's lines."""
    keep = ("built", "same_code", "quick", "full", "screen", "screen_runs")
    out = {str(r["id"]): {k: r[k] for k in keep if k in r} for r in rows}
    body = ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in out.items())
    RESULTS.write_text(
        '{"about": "python -m tests.conformance.seed.mutants QUICK --full FULL --record",\n'
        f'"mutants": {{\n{body}\n}}}}\n'
    )


def check_line(binary: Path, pack: Path, case: str) -> dict[str, object]:
    """``meshnb check PACK --exec ... --cases CASE --json``'s verdict for the case: its first difference, the
    models named and the localisation's sentence."""
    import sys

    exe = f"{sys.executable} {HERE / 'executor.py'} {binary}"
    r = subprocess.run(
        [sys.executable, "-m", "meshnb", "check", str(pack), "--exec", exe, "--cases", case, "--json"]
        + ["--case-timeout", str(CASE_SECONDS)],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        doc = json.loads(r.stdout)
    except json.JSONDecodeError:
        return {"exit": r.returncode, "error": r.stderr.strip()[-300:]}
    return {"exit": r.returncode, "case": doc["cases"][0] if doc.get("cases") else doc}


if __name__ == "__main__":
    raise SystemExit(main())


def markdown(results: dict[str, dict[str, Any]], checks: dict[int, dict[str, Any]], source: str) -> str:
    """The seed-mutant section of docs/guide/mutation-score.md: the score per pack, the equivalent
    mutants with their evidence, and what ``check --exec`` said on each killed mutant's first case."""
    ms = {m.id: m for m in load()}
    built = [i for i in ms if results[str(i)]["built"]]
    same = [i for i in built if results[str(i)].get("same_code")]
    rest = [i for i in built if i not in same]
    surv = [i for i in rest if not results[str(i)].get("quick") and not results[str(i)].get("full")]
    equiv = [i for i in surv if not results[str(i)].get("screen")]
    noneq = [i for i in rest if i not in equiv]
    lines = [
        "| pack | killed / non-equivalent | built | same machine code | equivalent on every screening run |",
        "|---|---|---|---|---|",
    ]
    for p in ("quick", "full"):
        killed = [i for i in noneq if results[str(i)].get(p)]
        lines.append(
            f"| {p} | **{len(killed)} / {len(noneq)}** | {len(built)} of {len(ms)} | {len(same)} | {len(equiv)} |"
        )
    kinds: dict[str, list[int]] = {}
    rows = []
    for i in sorted(checks):
        c = checks[i]
        say = c.get("case", {})
        verdict, msg = say.get("verdict", "?"), say.get("message", c.get("error", ""))
        if verdict == "ERROR":
            kind = "error (the executor failed the case: crash, hang or no output)"
        elif say.get("models") or ("; cause not proved" not in msg and "single op" in msg):
            kind = "named a cause"
        elif "seen: init" in msg:
            kind = "located: init"
        elif "seen: step" in msg:
            kind = "located: a step (sums or word), cause not proved"
        elif "seen:" in msg:
            kind = "located: a span, cause not proved"
        else:
            kind = "not located"
        kinds.setdefault(kind, []).append(i)
        named = msg.split("; ", 1)[1] if "; " in msg else msg
        edit, end = ms[i].describe(source).replace("|", "\\|"), named.replace("|", "\\|")
        rows.append(f"| {i} | {edit} | `{say.get('name', '')}` | {kind} | {end} |")
    out = "\n".join(lines) + "\n\nWhat `check --exec` said on the first quick-pack case that kills each mutant:\n\n"
    out += "| what it said | mutants |\n|---|---|\n"
    out += "\n".join(f"| {k} | {len(v)} |" for k, v in sorted(kinds.items())) + "\n\n"
    out += "| mutant | the edit | case | what it said | the line's end |\n|---|---|---|---|---|\n" + "\n".join(rows)
    out += "\n\nEquivalent (the same bits as the seed on every one of the screening runs):\n\n"
    out += "\n".join(f"- {i}: {ms[i].describe(source)}" for i in equiv)
    return out + "\n"
