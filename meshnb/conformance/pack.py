"""The conformance pack: :data:`CASES` (one table), run by meshnb and written with its answers.

Per case ``case.json``, ``in-K.page``, ``out-K.page``, ``trace.bin`` and ``expected.json``; at the
top ``manifest.json`` (every file's SHA-256) and a README: the same bytes every time.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import struct
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from meshnb import files
from meshnb.testing import pages as hard
from meshnb.testing import reference as ref

PACK_VERSION = 2
U64 = 1 << 64
END = U64 - 1  # the next step after step 2^64 - 2, the last one that may run (SPEC 8)


@dataclass(frozen=True)
class Case:
    """One case of the pack: a start page (init, or a named page), a run, and what it exposes (a line)."""

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
    calls: tuple[tuple[int, int, int], ...] = ()  # (steps of this run done, op, arg): calls that change nothing
    # (system, steps of this run done): that step's round times out there, then resumes (mark_timeouts)
    timeouts: tuple[tuple[int, int], ...] = ()

    def sized(self, quick: bool) -> Case:
        """The case as the full or the quick pack runs it (fewer steps, the same last step or 2^32 crossing)."""
        if not quick or self.quick_steps is None or self.quick_steps == self.steps:
            return self
        q, scale, base = self.quick_steps, self.quick_steps / self.steps, self.step_base
        if base + self.steps == END:  # keep ending at the last step
            base = END - q
        elif base >> 32 != (base + self.steps - 1) >> 32:  # keep crossing the 2^32 multiple, halfway
            base = ((base + self.steps - 1) >> 32 << 32) - q // 2
        lr = tuple((min(q, round(s * scale)), w) for s, w in self.set_lr)
        calls = tuple((min(q, round(s * scale)), op, arg) for s, op, arg in self.calls)
        timeouts = tuple((k, min(q - 1, round(s * scale))) for k, s in self.timeouts)
        return replace(self, steps=q, set_lr=lr, step_base=base, calls=calls, timeouts=timeouts)

    @property
    def from_init(self) -> bool:
        """Whether the case starts from ``init`` (no named start page)."""
        return self.page is None

    def in_page(self) -> bytes:
        """The start page: init's or the named one, with the case's STEPS_PER_TASK and step base."""
        page = ref.init_page(self.systems, self.grouped) if self.page is None else start_pages()[self.page]
        out = bytearray(page)
        struct.pack_into("<I", out, 20, self.steps_per_task)
        struct.pack_into("<I", out, 28, self.step_base & 0xFFFFFFFF)
        struct.pack_into("<I", out, 44, self.step_base >> 32)
        return bytes(out)


def mark_timeouts(case: Case, pages: list[bytes], start: int = 0, steps: int | None = None) -> list[bytes]:
    """``pages`` after steps ``start`` .. ``start + steps`` run without the case's timeouts, with ROUND as
    those timeouts leave it (SPEC 9)."""
    end = case.steps if steps is None else start + steps
    out = [bytearray(p) for p in pages]
    for k, at in sorted(case.timeouts, key=lambda e: e[1]):
        if start <= at < end and k < len(out):
            struct.pack_into("<I", out[k], 40, (case.step_base + at + 1) & 0xFFFFFFFF)
    return [bytes(p) for p in out]


TINY_PARAMS = (0x03000000, 0x83000000, 0x02800000, 0x02000000)  # a, b, c, d of order 1e-38
HUGE_PARAMS = (0x3F800000, 0x72000000, 0x00000000, 0x7A000000)  # a, b, c, d up to 2^117


def probe_pages() -> dict[str, bytes]:
    """The pack's own start pages by name, built to separate the flush rules."""
    base = ref.init_page(1)
    # Params 0, so e = -y: e = 00800000 on even samples (x = 3F7FFFFF) and 00800001 on odd ones
    # (x = 3F7FFFFE), and e * x is the op probe mul(3F7FFFFF, 00800000) on the even steps and
    # mul(3F7FFFFE, 00800001) on the odd ones; lr * g underflows, so the params stay 0 in mode Z.
    xs = [0x3F7FFFFF if i % 2 == 0 else 0x3F7FFFFE for i in range(256)]
    ys = [0x80800000 if i % 2 == 0 else 0x80800001 for i in range(256)]
    tiny = hard.with_words(hard.with_words(hard.with_words(base, hard.X, xs), hard.Y, ys), hard.PARAMS, [0] * 4)
    # Subnormal samples times huge params: normal products unless the inputs are flushed (DAZ).
    sub = hard.with_words(hard.with_words(base, hard.X, _scaled(base, hard.X, 2.0**-130)), hard.PARAMS, HUGE_PARAMS)
    # Found by the mutation harness: Y or X times 2^-126 put e and e*x (with params 1e-38, p - lr*g)
    # at the flush boundary.
    y126 = hard.with_words(base, hard.Y, _scaled(base, hard.Y, 2.0**-126))
    x126 = hard.with_words(base, hard.X, _scaled(base, hard.X, 2.0**-126))
    return {
        "tininess-probes": tiny,
        "subnormal-samples-huge-params": sub,
        "tiny-y": y126,
        "tiny-y-tiny-params": hard.with_words(y126, hard.PARAMS, TINY_PARAMS),
        "tiny-x-huge-params": hard.with_words(x126, hard.PARAMS, HUGE_PARAMS),
        # LR 2^-120, b and d one ulp above step 0's updates lr*g (82A1FB5C and 81FD262C, from
        # init's sums, which params this tiny do not change): p - lr*g is -2^-149 * 2, -2^-150 * 2,
        # subnormal, flushed to -0 in mode Z
        "subnormal-update": hard.with_words(
            hard.with_words(base, hard.LR, [0x03800000]), hard.PARAMS, [0, 0x82A1FB5D, 0, 0x81FD262D]
        ),
    }


def _scaled(page: bytes, offset: int, scale: float) -> list[int]:
    """The 256 words at ``offset`` times ``scale``, rounded to f32."""
    with np.errstate(all="ignore"):
        v = np.frombuffer(page, "<f4", 256, offset).astype(np.float64) * scale
        return [int(w) for w in v.astype(np.float32).view(np.uint32)]


_HEADER = {"LR": 16, "ERR": 32, "PENDING": 36, "ROUND": 40}  # SPEC 7's offsets of the words a state page sets


def _header(page: bytes, **words: int) -> bytes:
    """``page`` with header words (by their SPEC 7 names) set."""
    out = bytearray(page)
    for name, value in words.items():
        struct.pack_into("<I", out, _HEADER[name], value)
    return bytes(out)


def state_pages() -> dict[str, bytes]:
    """Start pages whose header holds the states a TASK distinguishes (SPEC 8, 9)."""
    one = ref.init_page(1)
    return {
        "err-pending-round": _header(one, ERR=1, PENDING=1, ROUND=0xDEADBEEF),
        "pending-alone-match": _header(one, PENDING=1, ROUND=1),
        "pending-cluster-mismatch": _header(ref.init_page(2, True), ERR=1, PENDING=1, ROUND=0x12345),
        "round-match-not-pending": _header(ref.init_page(2, True), ROUND=1),
        "lr-minus-inf": _header(one, LR=0xFF800000),
    }


def start_pages() -> dict[str, bytes]:
    """Every named start page: the hard pages, the probes and the state pages."""
    return {**hard.hard_pages(), **probe_pages(), **state_pages()}


BAD_OPS = (0x01, 0x02, 0x0F, 0x11, 0x20, 0x100, 0x110, 0x10010, 0x80000000, 0x80000010, 0xFFFFFFFF)
"""Op codes the program does not know (SPEC 8: R_BAD_OP, nothing done)."""
_BAD_CALLS = tuple((at, op, 0x3E800000) for at in (0, 9, 24) for op in BAD_OPS)  # arg: an LR word, a step

# fmt: off
CASES: tuple[Case, ...] = (  # a case a row: name, what it exposes, steps (full pack, quick pack), what else it sets
    Case("default", "the default run of one system from init (4096 steps; 256 in the quick pack)", 4096, 256),
    Case("long", "a long run: 65536 steps (the trajectory settles into a cycle)", 65536, None),
    Case("step-base-2^32", "a step base just below 2^32: the step crosses into STEP_HI = 1",
         600, 128, step_base=(1 << 32) - 300),
    Case("step-base-2^64-2", "a run ending at step 2^64 - 2, the last step that may run",
         600, 128, step_base=END - 600),
    Case("partial-last-task", "steps not a multiple of the 64-step tasks: the last task is shorter (STEPS_PER_TASK "
         "written before it and restored)", 1000, 200),
    Case("steps-per-task-1", "STEPS_PER_TASK = 1: one step a task", 300, 64, steps_per_task=1),
    Case("steps-per-task-odd", "STEPS_PER_TASK = 37 and a partial last task", 1001, 100, steps_per_task=37),
    Case("lr-changes", "SET_LR before step 0, mid-run (after half the steps, not at a task boundary) and after the "
         "last step", 600, 100, set_lr=((0, 0x3F400000), (300, 0x3E800000), (600, 0x3F000000))),
    Case("lr-underflow", "LR = 2^-126: every update lr * g underflows and is flushed, the params never move",
         300, 100, set_lr=((0, 0x00800000),)),
    Case("lr-tiny-updates", "LR = 2^-120: updates near 2^-126, some flushed, params of order 1e-35 whose products "
         "underflow", 300, 100, set_lr=((0, 0x03800000),)),
    Case("lr-subnormal", "SET_LR with a subnormal word mid-run: LR reads as 0 and is written as 0",
         300, 100, set_lr=((150, 0x00400000),)),
    Case("lr-divergent-nan", "LR = 8: the params diverge, overflow to inf and end in NaN",
         400, 200, set_lr=((0, 0x41000000),)),
    *(Case(f"hard-{n}", f"the hard page {n!r} (meshnb.testing.pages): 64 steps", 64, 64, page=n)
      for n in hard.hard_pages()),
    # the probes: pages built to separate the flush rules (probe_pages)
    Case("probe-tininess", "X alternating 3F7FFFFF and 3F7FFFFE, Y alternating 80800000 and 80800001, params 0: e * x "
         "is the op probes (mode Z: 00800000; tininess before rounding: 0 on every step; x86 FTZ: 0 on the even steps)",
         64, 64, page="tininess-probes"),
    Case("probe-subnormal-samples", "every X subnormal (x 2^-130), params up to 2^117: products that are normal unless "
         "subnormal inputs are flushed", 64, 64, page="subnormal-samples-huge-params"),
    Case("probe-tiny-y", "Y times 2^-126, init's params: e = pred - y lands at the flush boundary on some lanes, "
         "flushed in mode Z (an e computed without the flush or without DAZ differs)", 64, 64, page="tiny-y"),
    Case("probe-tiny-y-tiny-params", "Y times 2^-126, params of order 1e-38: apply's p - lr*g at the flush boundary, "
         "flushed in mode Z", 64, 64, page="tiny-y-tiny-params"),
    Case("probe-tiny-x-huge-params", "X times 2^-126, params up to 2^117: e*x at the flush boundary, flushed in mode Z",
         64, 64, page="tiny-x-huge-params"),
    Case("probe-subnormal-update", "one step whose updates p - lr*g of b and d are subnormal, flushed to -0 in mode Z "
         "(later steps read a subnormal param as 0, so only the out page of this step shows it)",
         1, 1, page="subnormal-update"),
    Case("probe-huge-samples-two-steps", "the hard page 'huge-samples' for two steps: step 1's p - lr*g makes a NaN "
         "from infinite operands, mode Z's NaN in the out page (later steps read params canonicalised, so only the "
         "last step's shows)", 2, 2, page="huge-samples"),
    Case("cluster-2", "a cluster of N = 2 from init", 1024, 96, systems=2, grouped=True),
    Case("cluster-3", "a cluster of N = 3 from init (fold order shows with 3 slots)",
         600, 96, systems=3, grouped=True, set_lr=((300, 0x3F400000),)),
    Case("cluster-8", "a cluster of N = 8 from init (full-batch descent)", 512, 64, systems=8, grouped=True),
    Case("cluster-1", "a group of one: INV_BATCH 1/32, slots, a fold of one", 300, 64, grouped=True),
    # the program's state machine (SPEC 8, 9): start headers, op codes, LR classes, timeouts
    Case("state-err-pending-round", "ERR 1, PENDING 1 and ROUND another step's round without a group, the step's high "
         "half 3: a TASK drops the round (PENDING 0), writes ERR 0, keeps ROUND, reads the step's high half",
         70, 70, step_base=(3 << 32) + 1000, page="err-pending-round"),
    Case("state-pending-alone-match", "PENDING 1 without a group, ROUND the first step's round: dropped (PENDING 0), "
         "the step computed", 70, 70, page="pending-alone-match"),
    Case("state-pending-cluster-mismatch", "a cluster of 2 from pages with ERR 1, PENDING 1 and ROUND another step's "
         "round: dropped, the step computed and exchanged",
         70, 70, systems=2, grouped=True, page="pending-cluster-mismatch"),
    Case("state-round-match-not-pending", "a cluster of 2 from pages with PENDING 0 and ROUND the first step's round "
         "(as a resumed round leaves it): no round is pending, so the step is computed and published, not resumed",
         70, 70, systems=2, grouped=True, page="round-match-not-pending"),
    Case("steps-per-task-large", "STEPS_PER_TASK = 300: one task runs more steps than the 256-entry loss ring holds "
         "(260 steps in the quick pack: one task of 260)", 600, 260, steps_per_task=300),
    Case("state-lr-words", "SET_LR words of every class: -0, a negative subnormal, a positive subnormal, a negative "
         "LR, +inf, a negative signalling NaN; unknown op codes (R_BAD_OP, nothing done) before step 0, mid-task and "
         "after the last step",
         24, 24,
         set_lr=((0, 0x80000000), (4, 0x807FFFFF), (8, 0x00000001), (12, 0xBE000000), (16, 0x7F800000),
                 (20, 0xFF800001)),
         calls=_BAD_CALLS),
    Case("state-lr-minus-inf", "LR -inf in the start page: the params end in NaN", 8, 8, page="lr-minus-inf"),
    Case("state-timeout-resume", "a cluster of 2 whose rounds time out (injected by the host): both members at step 10 "
         "(mid-task), system 1 at step 64 (a task's first step: zero steps done, PARAMS written back), system 0 at "
         "step 90; each TASK after resumes the pending round with arg = NEXT_STEP (not recomputed nor republished), "
         "clears ERR and PENDING, and keeps ROUND",
         100, 100, systems=2, grouped=True, timeouts=((0, 10), (1, 10), (1, 64), (0, 90))),
    Case("state-timeout-group-of-one", "a group of one whose rounds time out (injected by the host) at step 5 and at a "
         "task's last step (63): the TASK after resumes the round with arg = NEXT_STEP",
         70, 70, grouped=True, timeouts=((0, 5), (0, 63))),

)
# fmt: on
BY_NAME: dict[str, Case] = {c.name: c for c in CASES}


def cases(quick: bool = False) -> list[Case]:
    """The cases of the full or the quick pack (sized), in the table's order."""
    return [c.sized(quick) for c in CASES if not quick or c.quick_steps is not None]


@dataclass
class Result:
    """meshnb's answer for a case: the out pages, the applied sums ``(steps, 5)``, the digests."""

    out_pages: list[bytes]
    trace: np.ndarray
    digests: list[str] = field(default_factory=list)
    trace_digest: str = ""


def run_case(case: Case, in_pages: list[bytes] | None = None) -> Result:
    """Runs ``case`` (sized) with meshnb, from ``in_pages[0]`` if given."""
    from meshnb.api import train  # the library below, not the package face (and numba on use only)
    from meshnb.runspec import LrChange

    page = case.in_page() if in_pages is None else in_pages[0]
    lr = [LrChange(s, w) for s, w in case.set_lr]  # the case's f32 words, taken as words
    if case.grouped:
        r = train(case.steps, view_in=page, set_lr=lr, keep_trace=True, systems=case.systems, backend="fused")
        outs = [s.page for s in r.systems]
        trace = np.asarray(r.systems[0].trace, dtype=np.uint32)
    else:
        r = train(case.steps, view_in=page, set_lr=lr, keep_trace=True)
        outs = [r.page]
        trace = np.asarray(r.trace, dtype=np.uint32)
    outs = mark_timeouts(case, outs)
    return Result(outs, trace.reshape(-1, 5), [ref.digest(p) for p in outs], ref.trace_digest(trace))


def case_json(case: Case) -> dict[str, Any]:
    """``case.json`` of ``case``: the run, the host's protocol in words, the files."""
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
        "calls": [{"before_step": s, "op": f"{op:08x}", "arg": f"{arg:08x}"} for s, op, arg in case.calls],
        "calls_rule": (
            "Each calls entry is a task(op, arg) call (hex words) made on every system when before_step "
            "steps of this run are done, before any set_lr there (shorten the task before so one starts "
            "there). Their op codes are unknown to the program: each returns R_BAD_OP (ffffffff) and "
            "changes nothing."
        ),
        "timeouts": (
            "A round's timeout changes no bits but ROUND: after a TASK that timed out (ERR = 1) call TASK "
            "again with arg = NEXT_STEP; the pages and trace must match whatever the timeouts, ROUND "
            "aside (a timed-out round's low half, never cleared). ERR and PENDING are 0 at the end."
        ),
        "inject_timeouts": [
            {"system": k, "before_step": s, "round": str(case.step_base + s + 1)} for k, s in case.timeouts
        ],
        "inject_timeouts_rule": (
            "Each inject_timeouts entry makes system `system`'s round of the step that follows before_step "
            "steps of this run (the exchange's round number `round`, the step's + 1) time out once: the "
            "round publishes the system's counter, then returns false at once, as a wait that timed out "
            "(SPEC 9, 10: a host that injects faults for tests). The TASK stops with the round pending; "
            "call TASK again with arg = NEXT_STEP: it resumes the round. The expected pages hold ROUND as "
            "that leaves it."
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


def _stale_temp_dirs(root: Path) -> None:
    """Removes the temporary directories of ``pack`` runs that died before their rename."""
    pattern = re.compile(rf"{re.escape(_temp_base(root))}(?:tmp|old)(\d+)")
    with contextlib.suppress(OSError):
        for name in os.listdir(root.parent):
            m = pattern.fullmatch(name)
            if m and int(m.group(1)) != os.getpid() and not files.pid_alive(int(m.group(1))):
                shutil.rmtree(root.parent / name, ignore_errors=True)


def _temp_base(root: Path) -> str:
    """``.NAME.``, the start of the pack's temporary (``tmpPID``) and old (``oldPID``) directories."""
    return files.temp_prefix(root.name).removesuffix("tmp")


def _exchange(a: Path, b: Path) -> bool:
    """Swaps two paths in one step (renameat2 RENAME_EXCHANGE); False where it is not available."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):  # an old kernel, a file system without it
        return False
    raise OSError(err, os.strerror(err), os.fspath(b))


_OWN_FILE = re.compile(r"case\.json|expected\.json|trace\.bin|(?:in|out)-[0-9]+\.page")  # a case's files


def _strangers(root: Path, manifest: dict[str, Any]) -> list[str]:
    """Every path under ``root`` the pack did not write."""
    cases = {c for c in manifest.get("cases", []) if isinstance(c, str) and "/" not in c and c not in ("", ".", "..")}
    files_ = manifest.get("files")
    listed = {f for f in files_ if isinstance(f, str)} if isinstance(files_, dict) else set()
    out: list[str] = []
    for name in sorted(os.listdir(root)):
        if name in ("manifest.json", "README.md"):
            continue
        path = root / name
        if name not in cases or not stat.S_ISDIR(os.lstat(path).st_mode):
            out.append(name)
            continue
        for inner in sorted(os.listdir(path)):
            rel = f"{name}/{inner}"
            if rel not in listed or not _OWN_FILE.fullmatch(inner) or stat.S_ISDIR(os.lstat(path / inner).st_mode):
                out.append(rel)
    return out


def _replaceable(root: Path) -> bool:
    """Whether ``root`` is there to replace (an empty directory or a pack); False: missing; PackError else."""
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise PackError(f"{root}: a symbolic link; the pack is written as a new directory, never through a link")
    if not stat.S_ISDIR(st.st_mode):
        raise PackError(f"{root}: exists and is not a directory")
    if not os.listdir(root):
        return True
    if not has_manifest(root):
        raise PackError(f"{root}: holds files and is not a pack (no manifest.json); not replaced")
    manifest = load_manifest(root)  # refuses a manifest that is not a regular file
    try:
        strangers = _strangers(root, manifest)
    except OSError as e:
        raise PackError(f"{root}: cannot be read ({e.strerror}); not replaced") from None
    if strangers:
        more = f" and {len(strangers) - 3} more" if len(strangers) > 3 else ""
        raise PackError(
            f"{root}: holds files that are not the pack's ({', '.join(map(repr, strangers[:3]))}{more});"
            " not replaced: move them out, or write the pack elsewhere"
        )
    return True


def write_new(path: Path, data: bytes, *, sync: bool = False) -> None:
    """Writes ``data`` as a new file ``path``, never through a link, fsynced if ``sync``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def write_pack(directory: str | os.PathLike[str], quick: bool = False) -> dict[str, Any]:
    """Writes the pack as a new directory ``directory``; returns the manifest.

    The files go into a new temporary directory beside it, renamed into place at the end: a reader
    sees the old pack or the new one.  An existing pack or an empty directory is replaced.

    Parameters
    ----------
    directory : str or os.PathLike
        The pack's directory (its parent must exist).
    quick : bool, default False
        The quick pack (fewer steps, a second) instead of the full one.

    Returns
    -------
    dict
        The manifest: the pack version, the cases, every file's SHA-256.

    Raises
    ------
    PackError
        When the path cannot take a pack (no parent, a link, a file, a directory of other things).
    meshnb.files.WriteError
        When a file cannot be written (naming it).

    Examples
    --------
    >>> from meshnb.conformance.pack import verify_pack, write_pack
    >>> root = getfixture("tmp_path") / "pack"
    >>> manifest = write_pack(root, quick=True)
    >>> len(manifest["cases"]), verify_pack(root) == len(manifest["files"])
    (47, True)
    >>> write_pack("/nonexistent/dir/pack")
    Traceback (most recent call last):
    ...
    meshnb.conformance.pack.PackError: /nonexistent/dir/pack: directory /nonexistent/dir does not exist
    """
    root = Path(directory)
    if not root.name or root.name in (".", ".."):
        raise PackError(f"{directory}: not a directory name")
    if not root.parent.is_dir():
        raise PackError(f"{root}: directory {root.parent} does not exist")
    replace_old = _replaceable(root)
    try:
        files.check_directory(root, "pack", root)  # before any case runs, not after
    except files.OutputError as e:
        raise PackError(str(e)) from None
    _stale_temp_dirs(root)
    tmp = root.with_name(f"{_temp_base(root)}tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    written: dict[str, str] = {}

    def put(rel: str, data: bytes) -> None:
        try:
            (tmp / rel).parent.mkdir(exist_ok=True)
            write_new(tmp / rel, data, sync=True)
        except OSError as e:
            raise files.WriteError("pack file", root / rel, e) from None
        written[rel] = hashlib.sha256(data).hexdigest()

    try:
        try:
            os.mkdir(tmp, 0o755)
        except OSError as e:
            raise files.WriteError("pack", root, e) from None
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
            "files": dict(sorted(written.items())),
        }
        put("manifest.json", _dump(manifest))
        del written["manifest.json"]
        old = root.with_name(f"{_temp_base(root)}old{os.getpid()}")
        try:
            if replace_old and _exchange(tmp, root):
                old = tmp  # the old pack is now at the temporary name
            elif replace_old:
                os.rename(root, old)  # where the exchange is missing: a moment without a pack
                os.rename(tmp, root)
            else:
                os.rename(tmp, root)
            files.fsync_dir(root.parent)
        except OSError as e:
            raise files.WriteError("pack", root, e) from None
        if replace_old:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


class PackError(ValueError):
    """A pack or case that cannot be used (exit 2): a ``ValueError`` whose one-line message names the path.

    Examples
    --------
    >>> from meshnb.conformance.pack import PackError, manifest_path
    >>> try:
    ...     manifest_path("../etc/passwd")
    ... except PackError as e:
    ...     print(e)
    manifest names a path outside the pack: '../etc/passwd'
    """


MAX_FILE = 64 << 20  # no pack file is near this; a bigger one is not ours


def read_file(path: Path, limit: int = MAX_FILE, *, follow: bool = False) -> bytes:
    """A regular file's bytes (PackError for a special file, over ``limit``, or a link unless ``follow``)."""
    if not follow and path.is_symlink():
        raise PackError(f"{path}: a symbolic link; a pack's files are read only where they are")
    try:
        return files.read_input(path, "file", limit)
    except files.InputError as e:
        raise PackError(str(e).removeprefix("file ")) from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def load_json(path: Path, limit: int) -> Any:
    """A JSON file of the pack (no symbolic link, at most ``limit`` bytes): :func:`parse_json`."""
    return parse_json(read_file(path, limit), path)


def parse_json(raw: bytes, path: Path) -> Any:
    """The JSON document ``raw`` (read from ``path``); PackError for anything else, NaN and Infinity too."""
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise PackError(f"{path}: not JSON ({e})") from None


def load_manifest(root: Path) -> dict[str, Any]:
    """The pack's ``manifest.json`` (a regular file, version :data:`PACK_VERSION`); PackError otherwise."""
    manifest = load_json(root / "manifest.json", 1 << 22)
    version = manifest.get("pack_version") if isinstance(manifest, dict) else None
    if type(version) is not int or version != PACK_VERSION or not isinstance(manifest.get("files"), dict):
        raise PackError(f"{root / 'manifest.json'}: not a version {PACK_VERSION} pack manifest")
    return manifest


def has_manifest(root: Path) -> bool:
    """Whether there is anything at ``root/manifest.json`` (a link, even a broken or looping one)."""
    return os.path.lexists(root / "manifest.json")


def manifest_path(rel: object) -> str:
    """A manifest entry, returned if it is a plain relative path in the pack; PackError otherwise."""
    if not isinstance(rel, str) or not rel or "\0" in rel:
        raise PackError(f"manifest names a path that is not one: {rel!r}")
    parts = Path(rel).parts
    if Path(rel).is_absolute() or ".." in parts or "." in parts or rel != "/".join(parts):
        raise PackError(f"manifest names a path outside the pack: {rel!r}")
    return rel


def check_sha(root: Path, manifest: dict[str, Any], rel: str, data: bytes) -> None:
    """PackError unless ``data`` (read from ``root/rel``) has the manifest's SHA-256 for ``rel``."""
    sha = manifest["files"].get(rel)
    if sha is None:
        raise PackError(f"{root / rel}: not in the pack's manifest")
    if hashlib.sha256(data).hexdigest() != sha:
        raise PackError(f"{root / rel}: does not match the pack's manifest (SHA-256 differs)")


def verify_files(root: Path, manifest: dict[str, Any], prefix: str = "") -> int:
    """Checks the manifest's files under ``prefix`` (``"NAME/"``: a case) against it; returns how many."""
    n = 0
    for rel in list(manifest["files"]):
        if not isinstance(rel, str) or not rel.startswith(prefix):
            continue
        manifest_path(rel)
        for parent in list(Path(rel).parents)[:-1]:
            if (root / parent).is_symlink():
                raise PackError(f"{root / parent}: a symbolic link; a pack's files are read only where they are")
        check_sha(root, manifest, rel, read_file(root / rel))
        n += 1
    return n


def verify_pack(directory: str | os.PathLike[str]) -> int:
    """Checks a whole pack against its manifest; returns the number of files checked.

    Parameters
    ----------
    directory : str or os.PathLike
        The pack.

    Returns
    -------
    int
        The files checked.

    Raises
    ------
    PackError
        For a missing or bad manifest, or a file that differs from it.

    Examples
    --------
    >>> import hashlib, json
    >>> from meshnb.conformance.pack import verify_pack
    >>> root = getfixture("tmp_path")
    >>> (root / "a").mkdir()
    >>> _ = (root / "a" / "case.json").write_bytes(b"{}")
    >>> files = {"a/case.json": hashlib.sha256(b"{}").hexdigest()}
    >>> _ = (root / "manifest.json").write_text(json.dumps({"pack_version": 2, "cases": ["a"], "files": files}))
    >>> verify_pack(root)
    1
    >>> _ = (root / "a" / "case.json").write_bytes(b"{ }")  # a damaged copy
    >>> verify_pack(root)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    meshnb.conformance.pack.PackError: .../a/case.json: does not match the pack's manifest (SHA-256 differs)
    """
    root = Path(directory)
    return verify_files(root, load_manifest(root))


def case_names(root: Path, verify: bool = True) -> list[str]:
    """The pack's case names: its manifest's, or without one (not ``verify``) the directories with a case.json."""
    if not root.is_dir():
        raise PackError(f"{root}: not a pack directory")
    if has_manifest(root):
        listed = load_manifest(root).get("cases")
        if not isinstance(listed, list) or not listed:
            raise PackError(f"{root / 'manifest.json'}: lists no cases")
        names = []
        for name in listed:
            if not isinstance(name, str) or "/" in manifest_path(name):
                raise PackError(f"{root / 'manifest.json'}: {name!r} is not a case name")
            if name in names:
                raise PackError(f"{root / 'manifest.json'}: case {name!r} is listed twice")
            names.append(name)
        return names
    if verify:
        raise PackError(f"{root}: no manifest.json, so its files cannot be verified (--no-manifest checks them anyway)")
    names = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.is_symlink() and (p / "case.json").is_file())
    if not names:
        raise PackError(f"{root}: no case directories (with a case.json)")
    return names
