"""The conformance pack: cases an executor team runs on its own hardware, with meshnb's answers.

:data:`CASES` is the one table of cases.  :func:`write_pack` writes, per case, ``case.json``
(what the host does), ``in-K.page`` and ``out-K.page`` per system K, ``trace.bin`` (the applied
sums, 5 little-endian u32 words a step) and ``expected.json`` (the digests); at the top a
``manifest.json`` (every file's SHA-256 and the pack version) and a README.  The bytes depend
only on the cases and meshnb's results: the same pack every time (no times, sorted keys).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import meshnb
from meshnb import files
from meshnb.testing import pages as hard
from meshnb.testing import reference as ref

PACK_VERSION = 1
U64 = 1 << 64
END = U64 - 1  # the next step after step 2^64 - 2, the last one that may run (SPEC 8)


@dataclass(frozen=True)
class Case:
    """One case: a start page (init, or a hard page), a run, and what it exposes."""

    name: str
    about: str
    steps: int
    quick_steps: int | None = None  # steps in the quick pack; None: the case is left out of it
    systems: int = 1
    grouped: bool = False  # a cluster (SPEC 9); systems > 1 implies it
    steps_per_task: int = 64
    set_lr: tuple[tuple[int, int], ...] = ()  # (steps of this run done, f32 word), as --set-lr
    step_base: int = 0
    page: str | None = None  # a page of start_pages() (the hard pages and the pack's probes), else init

    def sized(self, quick: bool) -> Case:
        """The case as the pack (quick or full) runs it."""
        if not quick or self.quick_steps is None or self.quick_steps == self.steps:
            return self
        scale = self.quick_steps / self.steps
        lr = tuple((min(self.quick_steps, round(s * scale)), w) for s, w in self.set_lr)
        base = self.step_base
        if base + self.steps == END:  # keep ending at the last step
            base = END - self.quick_steps
        return Case(
            self.name,
            self.about,
            self.quick_steps,
            self.quick_steps,
            self.systems,
            self.grouped,
            self.steps_per_task,
            lr,
            base,
            self.page,
        )

    @property
    def from_init(self) -> bool:
        return self.page is None

    def in_page(self) -> bytes:
        """Every system's start page."""
        page = ref.init_page(self.systems, self.grouped) if self.page is None else start_pages()[self.page]
        out = bytearray(page)
        struct.pack_into("<I", out, 20, self.steps_per_task)
        struct.pack_into("<I", out, 28, self.step_base & 0xFFFFFFFF)
        struct.pack_into("<I", out, 44, self.step_base >> 32)
        return bytes(out)


def _subnormal_x(page: bytes, scale: float) -> list[int]:
    """X scaled by ``scale`` (a power of two), rounded into the subnormal range as IEEE does."""
    x = np.frombuffer(page, "<f4", 256, 64).astype(np.float64) * scale
    return [int(w) for w in x.astype(np.float32).view(np.uint32)]


def probe_pages() -> dict[str, bytes]:
    """The pack's own start pages, built to separate the flush rules (see each case's about)."""
    base = ref.init_page(1)
    # Params 0, so e = -y: e = 00800000 on even samples (x = 3F7FFFFF) and 00800001 on odd ones
    # (x = 3F7FFFFE), and e * x is the op probe mul(3F7FFFFF, 00800000) on the even steps and
    # mul(3F7FFFFE, 00800001) on the odd ones; lr * g underflows, so the params stay 0 in mode Z.
    xs = [0x3F7FFFFF if i % 2 == 0 else 0x3F7FFFFE for i in range(256)]
    ys = [0x80800000 if i % 2 == 0 else 0x80800001 for i in range(256)]
    tiny = hard.with_words(hard.with_words(hard.with_words(base, hard.X, xs), hard.Y, ys), hard.PARAMS, [0] * 4)
    # Subnormal samples times huge params: normal products unless the inputs are flushed (DAZ).
    sub = hard.with_words(
        hard.with_words(base, hard.X, _subnormal_x(base, 2.0**-130)),
        hard.PARAMS,
        [0x3F800000, 0x72000000, 0x00000000, 0x7A000000],
    )
    return {"tininess-probes": tiny, "subnormal-samples-huge-params": sub}


def start_pages() -> dict[str, bytes]:
    """Every named start page: meshnb.testing's hard pages and the pack's probes."""
    return {**hard.hard_pages(), **probe_pages()}


def _hard_cases() -> list[Case]:
    return [
        Case(f"hard-{name}", f"the hard page {name!r} (meshnb.testing.pages): 64 steps", 64, 64, page=name)
        for name in hard.hard_pages()
    ] + [
        Case(
            "probe-tininess",
            "X alternating 3F7FFFFF and 3F7FFFFE, Y alternating 80800000 and 80800001, "
            "params 0: e * x is the op probes (mode Z: 00800000; tininess before rounding: 0 on every step; "
            "x86 FTZ: 0 on the even steps)",
            64,
            64,
            page="tininess-probes",
        ),
        Case(
            "probe-subnormal-samples",
            "every X subnormal (x 2^-130), params up to 2^117: products that are "
            "normal unless subnormal inputs are flushed",
            64,
            64,
            page="subnormal-samples-huge-params",
        ),
    ]


CASES: tuple[Case, ...] = (
    Case("default", "the default run of one system from init (4096 steps; 256 in the quick pack)", 4096, 256),
    Case("long", "a long run: 65536 steps (the trajectory settles into a cycle)", 65536, None),
    Case(
        "step-base-2^32",
        "a step base just below 2^32: the step crosses into STEP_HI = 1",
        600,
        128,
        step_base=(1 << 32) - 300,
    ),
    Case(
        "step-base-2^64-2", "a run ending at step 2^64 - 2, the last step that may run", 600, 128, step_base=END - 600
    ),
    Case(
        "partial-last-task",
        "steps not a multiple of the 64-step tasks: the last task is shorter "
        "(STEPS_PER_TASK written before it and restored)",
        1000,
        200,
    ),
    Case("steps-per-task-1", "STEPS_PER_TASK = 1: one step a task", 300, 64, steps_per_task=1),
    Case("steps-per-task-odd", "STEPS_PER_TASK = 37 and a partial last task", 1001, 100, steps_per_task=37),
    Case(
        "lr-changes",
        "SET_LR before step 0, mid-run (after half the steps, not at a task boundary) and after the last step",
        600,
        100,
        set_lr=((0, 0x3F400000), (300, 0x3E800000), (600, 0x3F000000)),
    ),
    Case(
        "lr-underflow",
        "LR = 2^-126: every update lr * g underflows and is flushed, the params never move",
        300,
        100,
        set_lr=((0, 0x00800000),),
    ),
    Case(
        "lr-tiny-updates",
        "LR = 2^-120: updates near 2^-126, some flushed, params of order 1e-35 whose products underflow",
        300,
        100,
        set_lr=((0, 0x03800000),),
    ),
    Case(
        "lr-subnormal",
        "SET_LR with a subnormal word mid-run: LR reads as 0 and is written as 0",
        300,
        100,
        set_lr=((150, 0x00400000),),
    ),
    Case(
        "lr-divergent-nan",
        "LR = 8: the params diverge, overflow to inf and end in NaN",
        400,
        200,
        set_lr=((0, 0x41000000),),
    ),
    *_hard_cases(),
    Case("cluster-2", "a cluster of N = 2 from init", 1024, 96, systems=2, grouped=True),
    Case(
        "cluster-3",
        "a cluster of N = 3 from init (fold order shows with 3 slots)",
        600,
        96,
        systems=3,
        grouped=True,
        set_lr=((300, 0x3F400000),),
    ),
    Case("cluster-8", "a cluster of N = 8 from init (full-batch descent)", 512, 64, systems=8, grouped=True),
    Case("cluster-1", "a group of one: INV_BATCH 1/32, slots, a fold of one", 300, 64, systems=1, grouped=True),
)
BY_NAME: dict[str, Case] = {c.name: c for c in CASES}


def cases(quick: bool = False) -> list[Case]:
    """The cases of the full or the quick pack."""
    return [c.sized(quick) for c in CASES if not quick or c.quick_steps is not None]


@dataclass
class Result:
    """meshnb's answer for a case: the out pages per system, the trace, the digests."""

    out_pages: list[bytes]
    trace: np.ndarray
    digests: list[str] = field(default_factory=list)
    trace_digest: str = ""


def run_case(case: Case, in_pages: list[bytes] | None = None) -> Result:
    """Runs ``case`` with meshnb (the fused loop for groups, the single-system loop otherwise)."""
    page = case.in_page() if in_pages is None else in_pages[0]
    lr = dict(case.set_lr)
    if case.grouped:
        r = meshnb.train(case.steps, view_in=page, set_lr=lr, keep_trace=True, systems=case.systems, backend="fused")
        outs = [s.page for s in r.systems]
        trace = np.asarray(r.systems[0].trace, dtype=np.uint32)
    else:
        r = meshnb.train(case.steps, view_in=page, set_lr=lr, keep_trace=True)
        outs = [r.page]
        trace = np.asarray(r.trace, dtype=np.uint32)
    return Result(outs, trace.reshape(-1, 5), [ref.digest(p) for p in outs], ref.trace_digest(trace))


def case_json(case: Case) -> dict[str, Any]:
    """What the host does for ``case`` (case.json)."""
    return {
        "name": case.name,
        "about": case.about,
        "steps": case.steps,
        "systems": case.systems,
        "group": case.grouped,
        "steps_per_task": case.steps_per_task,
        "set_lr": [{"before_step": s, "word": f"{w:08x}"} for s, w in case.set_lr],
        "step_base": str(case.step_base),
        "step_base_hex": f"{case.step_base >> 32:08x}:{case.step_base & 0xFFFFFFFF:08x}",
        "start": "init" if case.from_init else f"page {case.page}",
        "host": (
            "Load in-K.page as system K's view (or run init with the group, then set STEP_HI:NEXT_STEP "
            "to step_base and STEPS_PER_TASK to steps_per_task: the same page when start is init). Call "
            "TASK with arg = NEXT_STEP until `steps` steps are done; before the last task, if fewer steps "
            "remain than STEPS_PER_TASK, write that count to STEPS_PER_TASK and restore it after. Each "
            "set_lr entry is a SET_LR call with the word, made when before_step steps of this run are "
            "done (shorten the task before so one starts there; at `steps`, after the last task)."
        ),
        "timeouts": (
            "A round's timeout changes no bits: after a TASK that timed out (ERR = 1) call TASK "
            "again with arg = NEXT_STEP; the pages and trace must match whatever the timeouts. "
            "ERR and PENDING are 0 at the end."
        ),
        "files": {
            "in": [f"in-{k}.page" for k in range(case.systems)],
            "out": [f"out-{k}.page" for k in range(case.systems)],
            "trace": "trace.bin (the sums each step applied, 5 u32 little-endian words a step)",
        },
    }


def _dump(obj: Any) -> bytes:
    return (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode()


PACK_README = """\
# meshnb conformance pack (version {version})

Each directory is a case. `case.json` says what the host does (steps, STEPS_PER_TASK, SET_LR
calls with the step of this run they precede, the step base, the systems); `in-K.page` is system
K's 4096-byte view before the run, `out-K.page` the view after it, `trace.bin` the five sums each
step applied (u32 little-endian, 5 words a step; the same for every member of a cluster), and
`expected.json` the digests. `manifest.json` holds every file's SHA-256: a copy that does not
match is refused.

To run a case on your executor: load in-K.page into system K (or run init with the group and write
the step base and STEPS_PER_TASK), run the tasks as case.json says, dump system K's view and, if you
can, the applied sums. Then:

    meshnb check CASE_DIR --page OUT.page [--trace TRACE.bin] [--system K] [--json]
    meshnb check CASE_DIR --page OUT.page --pages DIR   # DIR/NNNNNNNN.page: the view after N steps

`meshnb check` diffs the pages field by field, finds the first step (or task) whose bits part, and
replays it under fault models (flush rules, DAZ, FMA, lane sum order, fold order, NaNs, samples,
LR/INV_BATCH reads) to name the ones that reproduce your bits. Exit 0 pass, 1 fail, 2 bad input.

Cases: {cases}
"""


def write_pack(directory: str | os.PathLike[str], quick: bool = False) -> dict[str, Any]:
    """Writes the pack into ``directory`` (created; existing case files are replaced); returns the manifest."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}

    def put(rel: str, data: bytes) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        files[rel] = hashlib.sha256(data).hexdigest()

    chosen = cases(quick)
    for case in chosen:
        page = case.in_page()
        res = run_case(case)
        put(f"{case.name}/case.json", _dump(case_json(case)))
        for k in range(case.systems):
            put(f"{case.name}/in-{k}.page", page)
            put(f"{case.name}/out-{k}.page", res.out_pages[k])
        put(f"{case.name}/trace.bin", np.ascontiguousarray(res.trace, dtype="<u4").tobytes())
        put(
            f"{case.name}/expected.json",
            _dump({"digests": res.digests, "trace_digest": res.trace_digest, "steps": case.steps}),
        )
    put("README.md", PACK_README.format(version=PACK_VERSION, cases=", ".join(c.name for c in chosen)).encode())
    manifest = {
        "pack_version": PACK_VERSION,
        "quick": quick,
        "generator": "meshnb conformance pack",
        "cases": [c.name for c in chosen],
        "files": dict(sorted(files.items())),
    }
    (root / "manifest.json").write_bytes(_dump(manifest))
    return manifest


class PackError(ValueError):
    """A pack or case that cannot be used (exit 2)."""


MAX_FILE = 64 << 20  # no pack file is near this; a bigger one is not ours


def read_file(path: Path, limit: int = MAX_FILE) -> bytes:
    """A regular file's bytes, refusing special files and oversized ones (:func:`meshnb.files.read_input`)."""
    try:
        return files.read_input(path, "file", limit)
    except files.InputError as e:
        raise PackError(str(e).removeprefix("file ")) from None


def load_manifest(root: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(read_file(root / "manifest.json", 1 << 22))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PackError(f"{root / 'manifest.json'}: not JSON ({e})") from None
    if (
        not isinstance(manifest, dict)
        or manifest.get("pack_version") != PACK_VERSION
        or not isinstance(manifest.get("files"), dict)
    ):
        raise PackError(f"{root / 'manifest.json'}: not a version {PACK_VERSION} pack manifest")
    return manifest


def verify_files(root: Path, manifest: dict[str, Any], prefix: str = "") -> int:
    """Checks every manifest file under ``prefix`` against its SHA-256; returns how many."""
    n = 0
    for rel, sha in manifest["files"].items():
        if not isinstance(rel, str) or not rel.startswith(prefix):
            continue
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            raise PackError(f"manifest names a path outside the pack: {rel!r}")
        data = read_file(root / rel)
        if hashlib.sha256(data).hexdigest() != sha:
            raise PackError(f"{root / rel}: does not match the pack's manifest (SHA-256 differs)")
        n += 1
    return n


def verify_pack(directory: str | os.PathLike[str]) -> int:
    """Checks a whole pack against its manifest; returns the number of files checked."""
    root = Path(directory)
    return verify_files(root, load_manifest(root))
