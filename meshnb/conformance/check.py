"""``meshnb check``: an executor's page (and trace, or task-boundary pages) against meshnb's.

Three answers, in order: where the bits part (a field-by-field diff of the pages named from the
layout table, the first differing step of the trace and which of its five sums, or the first
task whose page differs); then why: the diagnosis replays the part where they first part, from
meshnb's state before it, under every fault model of :mod:`.faults`, and names each model that
reproduces the executor's bits exactly.  Where none does, it prints meshnb's lane-level values
(pred, e, each product) of the first differing sum, for the developer to hold against theirs.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

import meshnb
from meshnb.view import FIELDS, LAYOUT, RESERVED, VIEW_BYTES

from . import faults
from .fpu import Ops, ulps
from .pack import (
    END,
    MAX_FILE,
    Case,
    PackError,
    check_sha,
    has_manifest,
    load_manifest,
    parse_json,
    read_file,
    run_case,
)

EXTEND = 64  # rows after the first differing one that a model must reproduce too
WINDOW = 4  # steps replayed before the first differing step (an apply fault shows a step later)


# =============================================================================================
# Inputs
# =============================================================================================


@dataclass
class Setup:
    """What the host did: the case (steps, LR changes, systems) and every system's start page."""

    case: Case
    in_pages: list[bytes]
    expected: list[bytes]
    trace: np.ndarray
    manifest_note: str = ""
    per_step: tuple[np.ndarray, np.ndarray] | None = None  # cache of _params_per_step


def page_bytes(data: bytes, what: str) -> bytes:
    """``data`` if it is a whole page; PackError naming ``what`` otherwise."""
    if len(data) != VIEW_BYTES:
        raise PackError(f"{what}: a page is {VIEW_BYTES} bytes, this has {len(data)}")
    return data


_page = page_bytes

U32_MAX = 0xFFFFFFFF
# Page spans from the layout table (SPEC 7): the samples X and Y, and INV_BATCH
_SAMPLES = slice(FIELDS["X"].offset, FIELDS["Y"].offset + FIELDS["Y"].nbytes)
_INV = slice(FIELDS["INV_BATCH"].offset, FIELDS["INV_BATCH"].offset + 4)
MAX_STEPS = 1 << 22  # a checked run's trace (20 bytes a step) is held in memory: 80 MiB at most
_WORD = re.compile(r"[0-9a-fA-F]{1,8}")


def printable(text: str) -> str:
    """``text`` with control characters (newlines, ANSI escapes) escaped, so that a name read from
    a file cannot forge a line of the report on a terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _int(value: object, what: str, lo: int, hi: int) -> int:
    if type(value) is not int or not lo <= value <= hi:
        raise ValueError(f"{what} {printable(repr(value))[:60]} is not an integer from {lo} to {hi}")
    return value


def run_bounds(
    steps: int, steps_per_task: int, step_base: int, set_lr: dict[int, int] | tuple[tuple[int, int], ...]
) -> None:
    """ValueError (naming the value) unless the run can be made: steps from 0 to :data:`MAX_STEPS`,
    STEPS_PER_TASK from 1 to 2^32 - 1, a step base from 0 that ends the run at step 2^64 - 1 at the
    latest (SPEC 8), SET_LR before steps 0 .. ``steps`` with u32 words."""
    _int(steps, "steps", 0, MAX_STEPS)
    _int(steps_per_task, "steps_per_task", 1, U32_MAX)
    _int(step_base, "step_base", 0, END - 1)
    if step_base + steps > END:
        raise ValueError(f"step_base {step_base} + steps {steps} runs past step 2^64 - 2, the last that may run")
    for s, w in dict(set_lr).items():
        _int(s, "set_lr before_step", 0, steps)
        _int(w, "set_lr word", 0, U32_MAX)


def _parse_case(cj: object) -> Case:
    if not isinstance(cj, dict):
        raise ValueError("not a JSON object")
    name, about, start = cj["name"], cj["about"], cj["start"]
    if not all(isinstance(v, str) for v in (name, about, start)):
        raise ValueError("name, about and start are strings")
    systems = _int(cj["systems"], "systems", 1, 64)
    group = cj["group"]
    if type(group) is not bool:
        raise ValueError(f"group {printable(repr(group))[:20]} is not true or false")
    if systems > 1 and not group:
        raise ValueError(f"{systems} systems are a cluster: group must be true")
    base = cj["step_base"]
    if isinstance(base, str) and base.isdigit() and len(base) <= 20:
        base = int(base)
    if not isinstance(cj["set_lr"], list):
        raise ValueError("set_lr is a list")
    lr: dict[int, int] = {}
    for e in cj["set_lr"]:
        word = e["word"]
        if not isinstance(word, str) or _WORD.fullmatch(word) is None:
            raise ValueError(f"set_lr word {printable(repr(word))[:20]} is not a hex word of up to 8 digits")
        s = _int(e["before_step"], "set_lr before_step", 0, END)
        if s in lr:
            raise ValueError(f"two set_lr entries before step {s}")
        lr[s] = int(word, 16)
    case = Case(
        name,
        about,
        _int(cj["steps"], "steps", 0, MAX_STEPS),
        None,
        systems,
        group,
        _int(cj["steps_per_task"], "steps_per_task", 1, U32_MAX),
        tuple(sorted(lr.items())),
        _int(base, "step_base", 0, END - 1),
        None if start == "init" else start.removeprefix("page "),
    )
    run_bounds(case.steps, case.steps_per_task, case.step_base, case.set_lr)
    return case


def load_case(directory: str | Path, *, verify: bool = True) -> Setup:
    """A pack case directory, every file checked against the pack's manifest (in its parent) as
    it is read.  The case directory must not be a symbolic link, nor any file in it; without a
    manifest the case is refused unless ``verify`` is False (``--no-manifest``)."""
    root = Path(directory).absolute()
    if root.is_symlink():
        raise PackError(f"{directory}: a symbolic link; a case is read only where it is, in its pack")
    if not root.is_dir():
        raise PackError(f"{directory}: not a case directory")
    pack_root = root.parent
    manifest = load_manifest(pack_root) if has_manifest(pack_root) else None
    if manifest is not None:
        if f"{root.name}/case.json" not in manifest["files"]:
            raise PackError(f"{directory}: not a case of the pack in {pack_root}")
    elif verify:
        raise PackError(
            f"{directory}: FAIL to verify: no manifest.json beside the case, so its files cannot be checked"
            " (--no-manifest checks it anyway)"
        )
    seen: set[str] = set()

    def get(rel: str, limit: int = MAX_FILE) -> bytes:
        data = read_file(root / rel, limit)
        if manifest is not None:  # the bytes checked are the bytes used
            check_sha(pack_root, manifest, f"{root.name}/{rel}", data)
        seen.add(rel)
        return data

    cj_path = root / "case.json"
    try:
        case = _parse_case(parse_json(get("case.json", 1 << 20), cj_path))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        if isinstance(e, PackError):
            raise
        raise PackError(f"{cj_path}: not a case description ({printable(str(e))})") from None
    ins = [page_bytes(get(f"in-{k}.page"), f"in-{k}.page") for k in range(case.systems)]
    if any(pg != ins[0] for pg in ins):  # meshnb's runs (and the pack's cases) start every member alike
        raise PackError(f"{directory}: the members start from different pages, which check does not replay")
    at = struct.unpack_from("<I", ins[0], FIELDS["STEP_HI"].offset)[0] << 32
    at |= struct.unpack_from("<I", ins[0], FIELDS["NEXT_STEP"].offset)[0]
    if at != case.step_base:
        raise PackError(f"{root / 'in-0.page'}: its step {at} is not the case's step_base {case.step_base}")
    outs = [page_bytes(get(f"out-{k}.page"), f"out-{k}.page") for k in range(case.systems)]
    raw = get("trace.bin")
    if len(raw) != 20 * case.steps:
        raise PackError(f"{root / 'trace.bin'}: {len(raw)} bytes, not 20 x {case.steps} steps")
    trace = np.frombuffer(raw, dtype="<u4").astype(np.uint32).reshape(-1, 5)
    if manifest is not None:
        for rel in sorted(manifest["files"]):  # the rest of the case (expected.json): whole, as shipped
            if isinstance(rel, str) and rel.startswith(f"{root.name}/") and rel.count("/") == 1:
                part = rel.split("/", 1)[1]
                if part not in seen:
                    get(part)
        note = f"{len(seen)} case files match the pack's manifest"
    else:
        note = "no manifest.json beside the case (--no-manifest): its files were not verified"
    return Setup(case, ins, outs, trace, note)


def setup_from_run(
    view_in: bytes,
    steps: int,
    *,
    systems: int | None = None,
    steps_per_task: int | None = None,
    set_lr: dict[int, int] | None = None,
    step_base: int | None = None,
) -> Setup:
    """A setup from a start page and the run options (as ``meshnb train`` takes them); ValueError
    (naming the option) for a run that cannot be made."""
    page = bytearray(page_bytes(view_in, "--view-in"))
    if systems is not None:
        _int(systems, "--systems", 1, 64)
    if steps_per_task is not None:
        _int(steps_per_task, "--steps-per-task", 1, U32_MAX)
        struct.pack_into("<I", page, FIELDS["STEPS_PER_TASK"].offset, steps_per_task)
    if step_base is not None:
        _int(step_base, "--step-base", 0, END - 1)
        struct.pack_into("<I", page, FIELDS["NEXT_STEP"].offset, step_base & U32_MAX)
        struct.pack_into("<I", page, FIELDS["STEP_HI"].offset, step_base >> 32)
    v = meshnb.View.from_bytes(bytes(page))
    try:
        run_bounds(steps, v["STEPS_PER_TASK"], v.next_step, set_lr or {})
    except ValueError as e:
        raise PackError(f"the run cannot be made: {e}") from None
    case = Case(
        "view-in",
        "a run from --view-in",
        steps,
        None,
        systems or 1,
        systems is not None,
        v["STEPS_PER_TASK"],
        tuple(sorted((set_lr or {}).items())),
        v.next_step,
        "view-in",
    )
    try:
        res = run_case(case, [bytes(page)])
    except (ValueError, TypeError) as e:
        raise PackError(f"the run cannot be made: {e}") from None
    return Setup(case, [bytes(page)] * case.systems, res.out_pages, res.trace, "")


# =============================================================================================
# Where the bits part
# =============================================================================================


def _f32(w: int) -> str:
    return repr(float(np.uint32(w).view(np.float32)))


def loss_step(case: Case, index: int) -> int | None:
    """The step whose loss LOSS[index] holds after the run (None: not written by this run)."""
    end = case.step_base + case.steps - 1
    if case.steps == 0:
        return None
    t = end - ((end - index) % 256)
    return t if t >= case.step_base else None


def page_diff(case: Case, want: bytes, got: bytes) -> list[dict[str, Any]]:
    """Every differing word, named from the layout table (hex and float)."""
    wv = np.frombuffer(want, dtype="<u4")
    gv = np.frombuffer(got, dtype="<u4")
    out: list[dict[str, Any]] = []
    for f in LAYOUT:
        for i in np.nonzero(wv[f.word : f.word + f.count] != gv[f.word : f.word + f.count])[0]:
            w, g = int(wv[f.word + i]), int(gv[f.word + i])
            d: dict[str, Any] = {
                "field": f.name if f.count == 1 else f"{f.name}[{i}]",
                "offset": f.offset + 4 * int(i),
                "expected": f"{w:08x}",
                "got": f"{g:08x}",
            }
            if f.dtype == "f32":
                d["expected_f32"], d["got_f32"] = _f32(w), _f32(g)
            if f.name == "LOSS":
                d["step"] = loss_step(case, int(i))
            if f.name in ("X", "Y"):
                d["sample"] = int(i)
                d["ulps"] = int(ulps(w, g))
            out.append(d)
    for start, end in RESERVED:
        for i in np.nonzero(wv[start // 4 : end // 4] != gv[start // 4 : end // 4])[0]:
            off = start + 4 * int(i)
            out.append(
                {
                    "field": f"reserved@{off}",
                    "offset": off,
                    "expected": f"{int(wv[off // 4]):08x}",
                    "got": f"{int(gv[off // 4]):08x}",
                }
            )
    return out


def first_trace_diff(want: np.ndarray, got: np.ndarray) -> tuple[int, list[str]] | None:
    """The first step whose applied sums differ, and which of the five (None if none)."""
    n = min(len(want), len(got))
    rows = np.nonzero((want[:n] != got[:n]).any(axis=1))[0]
    if len(rows):
        t = int(rows[0])
        return t, [faults.SUMS[j] for j in range(5) if want[t, j] != got[t, j]]
    return None


def reference_state(setup: Setup, n: int, m: faults.Model = faults.EXACT) -> list[bytes]:
    """Every system's page after ``n`` steps of the run, as meshnb computes them, with what the
    model would have made of the setup (its samples and INV_BATCH when the case starts from init,
    its LR word after a SET_LR).  SET_LR calls at ``n`` are left for the replay."""
    case = setup.case
    pages = setup.in_pages
    if n > 0:
        sub = replace(case, steps=n, set_lr=tuple((s, w) for s, w in case.set_lr if s < n))
        pages = run_case(sub, pages).out_pages
    if m is faults.EXACT:
        return list(pages)
    out = []
    init = faults.init_page(case.systems, case.grouped, m) if case.from_init else None
    ops = Ops(m.rules)
    done = [w for s, w in case.set_lr if s < n]
    for pg in pages:
        b = bytearray(pg)
        if init is not None:
            b[_SAMPLES] = init[_SAMPLES]
            b[_INV] = init[_INV]
        if done and m.raw_lr_inv:
            struct.pack_into("<I", b, faults.OFF_LR, done[-1])
        elif done:
            struct.pack_into("<I", b, faults.OFF_LR, int(ops.read(done[-1])))
        out.append(bytes(b))
    return out


def replay(setup: Setup, start: int, steps: int, m: faults.Model, pages: list[bytes] | None = None) -> faults.Run:
    """Steps ``start`` .. ``start + steps`` of the run under model ``m``, from meshnb's state at ``start``
    (or from ``pages``)."""
    case = setup.case
    state = reference_state(setup, start, m) if pages is None else pages
    end = start + steps
    # a SET_LR at the end of the part is made after it only when that is the end of the run (a page at
    # a task boundary is the view before the next task's SET_LR)
    lr = {s - start: w for s, w in case.set_lr if start <= s < end or s == end == case.steps}
    return faults.run(state, steps, grouped=case.grouped, set_lr=lr, m=m)


# =============================================================================================
# The diagnosis
# =============================================================================================


@dataclass
class Report:
    """Everything ``check`` found; ``verdict`` is "PASS" or "FAIL"."""

    verdict: str
    case: str
    system: int
    diff: list[dict[str, Any]] = field(default_factory=list)
    trace: dict[str, Any] | None = None
    task: dict[str, Any] | None = None
    samples: list[dict[str, Any]] = field(default_factory=list)
    diagnosis: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 for PASS, 1 for FAIL (the command's exit code)."""
        return 0 if self.verdict == "PASS" else 1

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready values (``check --json``)."""
        return dict(self.__dict__)

    def text(self) -> str:
        """The report as ``check`` prints it: the verdict line, notes, diff, trace, diagnosis."""
        what = []
        if self.diff:
            what.append(f"{len(self.diff)} page words differ")
        if self.trace:
            what.append(f"trace parts at step {self.trace['step']} (of this run)")
        if self.task:
            what.append(f"first differing task ends after {self.task['steps_done']} steps")
        lines = [
            f"{self.verdict}: case {printable(self.case)}, system {self.system}"
            + (f": {'; '.join(what)}" if what else "")
        ]
        lines += [f"note: {n}" for n in self.notes]
        if self.diff:
            lines.append("page diff (field: expected -> got):")
            for d in self.diff[:40]:
                extra = ""
                if "step" in d:
                    extra = f"  (loss of step {d['step']})" if d["step"] is not None else "  (not written by this run)"
                if "sample" in d:
                    extra = f"  (sample {d['sample']}, {d['ulps']} ulps)"
                fl = f"  {d['expected_f32']} -> {d['got_f32']}" if "expected_f32" in d else ""
                lines.append(f"  {d['field']:<16} {d['expected']} -> {d['got']}{fl}{extra}")
            if len(self.diff) > 40:
                lines.append(f"  ... {len(self.diff) - 40} more")
        if self.trace:
            t = self.trace
            lines.append(
                f"trace: first differing step {t['step']} (absolute step {t['absolute_step']}): {', '.join(t['sums'])}"
            )
            lines.append("  expected " + " ".join(t["expected"]) + "\n  got      " + " ".join(t["got"]))
        if self.task:
            lines.append(
                f"pages: the first differing task runs steps {self.task['from']} .. {self.task['steps_done']}"
                f" ({self.task['file']})"
            )
        if self.samples:
            lines.append("samples: " + ", ".join(f"{s['field']} by {s['ulps']} ulps" for s in self.samples))
        if self.diagnosis:
            dg = self.diagnosis
            if dg.get("skipped"):
                lines.append(f"diagnosis not made: {dg['skipped']}")
                return "\n".join(lines)
            lines.append(f"diagnosis ({dg['how']}):")
            if dg["models"]:
                for m in dg["models"]:
                    lines.append(f"  reproduced by {m['name']}: {m['doc']}")
            else:
                lines.append("  no fault model reproduces these bits")
            for m in dg.get("first_step_only", []):
                lines.append(f"  reproduces the first differing step only (parts later): {m['name']}")
            if dg.get("lanes"):
                lines.append(dg["lanes"])
        return "\n".join(lines)


def _rows_hex(r: np.ndarray) -> list[str]:
    return [f"{int(w):08x}" for w in r]


def lane_table(setup: Setup, step: int, system: int) -> str:
    """meshnb's lane values at ``step`` of the run (system ``system``), as a text table."""
    case = setup.case
    state = reference_state(setup, step)
    ops = Ops()
    n = case.systems
    t = case.step_base + step
    p = np.stack([ops.read(faults.words_at(pg, faults.OFF_PARAMS, 4)) for pg in state])
    xs = np.stack([faults.words_at(pg, faults.OFF_X, faults.SAMPLES) for pg in state])
    ys = np.stack([faults.words_at(pg, faults.OFF_Y, faults.SAMPLES) for pg in state])
    offs = np.array([(t * n + k) & 0xFFFFFFFF for k in range(n)], dtype=np.uint64)
    idx = faults.lane_samples(offs)
    rows = np.arange(n)[:, None]
    lv = faults.lanes(ops, faults.EXACT, p, xs[rows, idx], ys[rows, idx])
    k = system if n > 1 else 0
    head = f"meshnb's lanes at step {step} (absolute {t}), system {k}, batch {int(offs[k]) % 8}, params " + " ".join(
        _rows_hex(p[k])
    )
    lines = [head, "  lane sample x        y        pred     e        e*x      e*x2     e*x3     e*e"]
    for lane in range(32):
        vals = [lv["x"][k, lane], lv["y"][k, lane], lv["pred"][k, lane]] + [lv["v"][k, j, lane] for j in range(5)]
        lines.append(f"  {lane:4d} {int(idx[k, lane]):6d} " + " ".join(f"{int(v):08x}" for v in vals))
    own = faults.lane_sum(ops, faults.EXACT, lv["v"])
    for m in range(n):
        lines.append(f"  own sums of system {m}: " + " ".join(_rows_hex(own[m])))
    if case.grouped:
        lines.append("  fold: " + " ".join(_rows_hex(faults.fold(ops, faults.EXACT, own))))
    return "\n".join(lines)


def _candidates(setup: Setup, got_page: bytes) -> list[faults.Model]:
    """Every registered model, plus one that takes the executor's own samples when they differ."""
    models = list(faults.MODELS)
    exp = setup.expected[0]
    if got_page[_SAMPLES] != exp[_SAMPLES]:
        models.append(
            faults.Model(
                "executor-samples", "the executor's own samples (X, Y as in its page): samples not correctly rounded"
            )
        )
    return models


DIAG_STEPS = 1 << 17  # the diagnosis reads meshnb's run up to its part: this many steps at most
REPLAY_STEPS = 4096  # and replays at most this many steps under each model (numpy, ~0.3 ms a step)


def _too_long(end: int, replayed: int) -> str:
    """Why the diagnosis is not made ("" if it is): a part too far into the run or too long."""
    if end > DIAG_STEPS:
        return (
            f"the first difference is {end} steps into the run, past the {DIAG_STEPS} steps the diagnosis"
            " follows; check a shorter run, or give --pages with a task boundary near it"
        )
    if replayed > REPLAY_STEPS:
        return (
            f"without a trace or task pages it would replay {replayed} steps under each model (at most"
            f" {REPLAY_STEPS}); give --trace or --pages"
        )
    return ""


def _with_samples(pages: list[bytes], got_page: bytes) -> list[bytes]:
    return [pg[: _SAMPLES.start] + got_page[_SAMPLES] + pg[_SAMPLES.stop :] for pg in pages]


def diagnose(
    setup: Setup,
    system: int,
    got_page: bytes,
    got_trace: np.ndarray | None,
    task: tuple[int, int, bytes] | None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Replays the first differing part under every model; names those that reproduce the bits.

    The part replayed for a model starts at ``WINDOW`` steps before the first differing step (an
    apply fault shows one step later), or earlier, at the step where the model first parts from
    meshnb on meshnb's trajectory (a fault can change the params long before the sums show it);
    a model that never parts from meshnb on this run cannot reproduce a difference and is skipped."""
    case = setup.case
    found: list[faults.Model] = []
    lanes_at: int | None = None
    diff_t = first_trace_diff(setup.trace, got_trace) if got_trace is not None else None
    if diff_t is not None:
        end = diff_t[0] + 1
        window = max(0, diff_t[0] - WINDOW)
        how = (
            f"from meshnb's state at step {window} (or earlier, where the model first parts from meshnb), "
            f"the trace rows to step {diff_t[0]}"
        )
        lanes_at = diff_t[0]
    elif task is not None:
        window, end = task[0], task[1]
        how = f"the task of steps {window} .. {end} from meshnb's page after {window} steps, the pages"
        lanes_at = window
    elif got_trace is not None:
        window, end = max(0, case.steps - WINDOW), case.steps
        how = f"the trace matches: the last {case.steps - window} steps from meshnb's state, the final pages"
    else:
        window, end = 0, case.steps
        how = "no trace: the whole run from the start pages, the final pages"
    # With a trace, a model that reproduces the first differing step is also held to the rows after
    # it (up to EXTEND steps): two flush rules can agree on one step and part on the next.
    far = min(case.steps, end + EXTEND) if diff_t is not None else end
    skip = _too_long(end, far - window)
    if skip:
        return {"how": "not made", "models": [], "skipped": skip}
    first_only: list[faults.Model] = []
    candidates = _candidates(setup, got_page)
    for i, m in enumerate(candidates):
        if progress is not None:
            progress(f"diagnosis: model {i + 1} of {len(candidates)}, {m.name}")
        if m.name == "executor-samples":
            start = 0 if diff_t is None and task is None else window
            r = replay(setup, start, far - start, m, _with_samples(reference_state(setup, start), got_page))
        else:
            d = first_divergence(setup, m, upto=end + 1)  # only a divergence up to the part's end counts
            final = diff_t is None and task is None  # the final page: a SET_LR after the last step counts
            if d is None or d > end or (d == end and not (final and end == case.steps)):
                continue  # the model gives meshnb's bits over the part compared
            start = min(window, d)
            r = replay(setup, start, far - start, m)
        if diff_t is not None:
            assert got_trace is not None  # a differing step comes from a trace
            ok = np.array_equal(r.trace[: end - start], got_trace[start:end])
            if ok and not np.array_equal(r.trace, got_trace[start:far]):
                first_only.append(m)
                continue
        elif task is not None:
            ok = r.pages[system] == task[2]
        else:
            ok = r.pages[system] == got_page
        if ok:
            found.append(m)
    if diff_t is not None:
        how += f" and on to step {far - 1}"
    out: dict[str, Any] = {
        "how": "replayed " + how + " compared",
        "models": [{"name": m.name, "doc": m.doc} for m in found],
    }
    if first_only:
        out["first_step_only"] = [{"name": m.name, "doc": m.doc} for m in first_only]
    if not found and lanes_at is not None and lanes_at < case.steps:
        out["lanes"] = lane_table(setup, lanes_at, system)
    return out


# =============================================================================================
# check
# =============================================================================================

_PAGE_NAME = re.compile(r"^(\d{1,20})\.page$")


def read_pages_dir(directory: str | Path, steps: int) -> list[tuple[int, bytes]]:
    """Task-boundary pages: ``DIR/N.page`` is the view after N steps of the run (any digits)."""
    root = Path(directory)
    if not root.is_dir():
        raise PackError(f"{root}: not a directory of pages")
    found = []
    for p in sorted(root.iterdir()):
        mt = _PAGE_NAME.match(p.name)
        if mt is None:
            continue
        n = int(mt.group(1))
        if not 0 <= n <= steps:
            raise PackError(f"{p}: step count {n} is outside the run of {steps} steps")
        found.append((n, page_bytes(read_file(p, follow=True), str(p))))
    if not found:
        raise PackError(f"{root}: no N.page files")
    return sorted(found)


def check(
    setup: Setup,
    got_page: bytes,
    *,
    system: int = 0,
    got_trace: np.ndarray | None = None,
    pages: list[tuple[int, bytes]] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Checks an executor's page (and trace, or boundary pages) against meshnb's; diagnoses a failure
    (``progress`` is told each model as the diagnosis replays it)."""
    case = setup.case
    if not 0 <= system < case.systems:
        raise PackError(f"system {system} is not in this case's {case.systems}")
    _page(got_page, "--page")
    rep = Report("PASS", case.name, system)
    if setup.manifest_note:
        rep.notes.append(setup.manifest_note)
    want = setup.expected[system]
    rep.diff = page_diff(case, want, got_page)
    rep.samples = [{"field": d["field"], "ulps": d["ulps"]} for d in rep.diff if "sample" in d]
    if got_trace is not None:
        if got_trace.shape != setup.trace.shape:
            raise PackError(f"--trace: {len(got_trace)} steps, the run has {len(setup.trace)}")
        td = first_trace_diff(setup.trace, got_trace)
        if td is not None:
            t, which = td
            rep.trace = {
                "step": t,
                "absolute_step": case.step_base + t,
                "sums": which,
                "expected": _rows_hex(setup.trace[t]),
                "got": _rows_hex(got_trace[t]),
            }
    task = None
    if pages is not None:
        prev = 0
        for n, pg in pages:
            ref_pg = reference_state(setup, n)[system] if n < case.steps else want
            if pg != ref_pg:
                rep.task = {
                    "from": prev,
                    "steps_done": n,
                    "file": f"{n}.page",
                    "fields": [d["field"] for d in page_diff(case, ref_pg, pg)][:20],
                }
                task = (prev, n, pg)
                break
            prev = n
    if rep.diff or rep.trace or rep.task:
        rep.verdict = "FAIL"
        rep.diagnosis = diagnose(setup, system, got_page, got_trace, task, progress)
    return rep


def load_trace(path: str | Path, limit: int = MAX_FILE) -> np.ndarray:
    """An executor's trace file: (steps, 5) u32 words, at most ``limit`` bytes."""
    raw = read_file(Path(path), limit, follow=True)
    if len(raw) % 20:
        raise PackError(f"{path}: {len(raw)} bytes is not a whole number of 20-byte steps")
    return np.frombuffer(raw, dtype="<u4").astype(np.uint32).reshape(-1, 5)


# =============================================================================================
# A faulty executor's whole run, fast
# =============================================================================================


def _params_per_step(setup: Setup, upto: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """meshnb's params before each step (upto + 1, 4) and the LR in force at each step (upto,), for
    the first ``upto`` steps (default all), rebuilt from the trace with the plain-Python reference ops."""
    from meshnb.testing import reference as ref

    case = setup.case
    n = case.steps if upto is None else min(case.steps, upto)
    if setup.per_step is not None and len(setup.per_step[1]) >= n:
        return setup.per_step[0][: n + 1], setup.per_step[1][:n]
    page = setup.in_pages[0]
    p = [ref.py_flush(w) for w in struct.unpack_from("<4I", page, faults.OFF_PARAMS)]
    lr = ref.py_flush(struct.unpack_from("<I", page, faults.OFF_LR)[0])
    inv = ref.py_flush(struct.unpack_from("<I", page, faults.OFF_INV)[0])
    changes = dict(case.set_lr)
    ps = np.zeros((n + 1, 4), dtype=np.uint32)
    lrs = np.zeros(n, dtype=np.uint32)
    ps[0] = p
    for s in range(n):
        if s in changes:
            lr = ref.py_flush(changes[s])
        row = [int(w) for w in setup.trace[s]]
        p = [ref.py_sub(p[j], ref.py_mul(lr, ref.py_mul(row[j], inv))) for j in range(4)]
        ps[s + 1] = p
        lrs[s] = lr
    setup.per_step = (ps, lrs)
    return ps, lrs


DIVERGENCE_BLOCK = 4096  # steps evaluated at once by first_divergence (memory: ~10 KB a step and system)


def first_divergence(setup: Setup, m: faults.Model, upto: int | None = None) -> int | None:
    """The first step at which model ``m`` computes other bits than meshnb on this setup (its sums,
    params or loss), evaluated a block of steps at once on meshnb's trajectory; None if it does
    not within the first ``upto`` steps (default: the whole run).

    Up to that step the model's run is meshnb's, bit for bit: every step is a function of the
    state before it, and the state before the first divergent step is meshnb's."""
    case = setup.case
    ops, z = Ops(m.rules), Ops()
    start = setup.in_pages if not case.from_init else reference_state(setup, 0, m)
    pg = start[0]
    params = faults.words_at(pg, faults.OFF_PARAMS, 4)
    lr_word, inv_word = (int(faults.words_at(pg, off)[0]) for off in (faults.OFF_LR, faults.OFF_INV))
    if (
        not np.array_equal(ops.read(params), z.read(params))
        or not np.array_equal(faults.read_word(ops, m, lr_word), z.read(lr_word))
        or not np.array_equal(faults.read_word(ops, m, inv_word), z.read(inv_word))
        or any(pg[_SAMPLES] != p0[_SAMPLES] for p0 in setup.in_pages)
    ):
        return 0
    for s, w in case.set_lr:
        if int(faults.read_word(ops, m, w)) != int(z.read(w)):
            return s
    if case.steps == 0:
        return None
    steps = case.steps if upto is None else max(0, min(case.steps, upto))
    ps, lrs = _params_per_step(setup, steps)
    xs = faults.words_at(pg, faults.OFF_X, faults.SAMPLES)
    ys = faults.words_at(pg, faults.OFF_Y, faults.SAMPLES)
    inv_m = int(faults.read_word(ops, m, inv_word))
    inv_z = int(z.read(inv_word))
    for lo in range(0, steps, DIVERGENCE_BLOCK):
        hi = min(steps, lo + DIVERGENCE_BLOCK)
        hit = _divergence_in(setup, m, ops, z, (xs, ys, inv_m, inv_z), ps[lo : hi + 1], lrs[lo:hi], lo)
        if hit is not None:
            return hit
    return None


def _divergence_in(
    setup: Setup,
    m: faults.Model,
    ops: Ops,
    z: Ops,
    page: tuple[np.ndarray, np.ndarray, int, int],
    ps: np.ndarray,
    lrs: np.ndarray,
    lo: int,
) -> int | None:
    """:func:`first_divergence` over steps ``lo`` .. ``lo + len(lrs)``: meshnb's params before each
    (and after the last) ``ps``, the LR ``lrs``; the start page's samples and INV_BATCH reads."""
    case = setup.case
    xs, ys, inv_m, inv_z = page
    n, steps = case.systems, len(lrs)
    t = case.step_base + lo + np.arange(steps, dtype=object)
    offs = np.array([(int(tt) * n + k) & 0xFFFFFFFF for tt in t for k in range(n)], dtype=np.uint64)
    idx = faults.lane_samples(offs)
    p_rep = np.repeat(ps[:-1], n, axis=0)
    own = faults.lane_sum(ops, m, faults.lanes(ops, m, p_rep, xs[idx], ys[idx])["v"])  # (steps*n, 5)
    if case.grouped:
        own = own.reshape(steps, n, 5)
        slots = ops.read(own)
        order = list(range(n - 1, -1, -1)) if m.fold == "reverse" else list(range(n))
        acc = ops.read(slots[:, order[0]])
        for k in order[1:]:
            acc = ops.add(acc, ops.read(slots[:, k]))
        applied = acc
    else:
        applied = own
    trace = setup.trace[lo : lo + steps]
    inv = np.full((steps, 1), inv_m, dtype=np.uint32)
    newp = faults.apply(ops, m, ps[:-1], applied, lrs[:, None], inv)
    loss_m = faults.loss(ops, m, applied, inv)
    loss_z = faults.loss(z, faults.EXACT, trace, np.full((steps, 1), inv_z, dtype=np.uint32))
    bad = (applied != trace).any(axis=1) | (newp != ps[1:]).any(axis=1) | (loss_m != loss_z)
    hits = np.nonzero(bad)[0]
    return lo + int(hits[0]) if len(hits) else None


def executor_run(setup: Setup, m: faults.Model) -> faults.Run:
    """What an executor with fault ``m`` gives for this setup: :func:`faults.run` from the step where
    ``m`` first parts from meshnb (:func:`first_divergence`), meshnb's bits before it.  The tests
    check that it equals the plain :func:`faults.run` from the start."""
    case = setup.case
    d = first_divergence(setup, m)
    if d is None:
        return faults.Run(list(setup.expected), setup.trace.copy())
    if d == 0:
        return faults.run(
            setup.in_pages, case.steps, grouped=case.grouped, set_lr=dict(case.set_lr), m=m, from_init=case.from_init
        )
    r = replay(setup, d, case.steps - d, m)
    return faults.Run(r.pages, np.concatenate([setup.trace[:d], r.trace]))
