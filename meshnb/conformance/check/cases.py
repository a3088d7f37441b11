"""A check's inputs: a pack case read and verified (:func:`load_case`), or a run made from a start page
(:func:`setup_from_run`), as a :class:`Setup`; the executor's trace and task-boundary pages.  Every error
is a one-line :class:`~meshnb.conformance.pack.PackError` naming the argument or the case file's field.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from meshnb.checkpoint import MAX_SYSTEMS
from meshnb.runspec import (
    LrChange,
    OptionError,
    check_int,
    check_run,
    check_step_base,
    describe,
    next_steps,
)
from meshnb.view import FIELDS, VIEW_BYTES, View

from .. import faults, model
from ..fpu import Ops
from ..pack import (
    END,
    MAX_FILE,
    Case,
    PackError,
    check_sha,
    has_manifest,
    load_manifest,
    manifest_path,
    parse_json,
    read_file,
    run_case,
)
from .report import printable


@dataclass
class Setup:
    """What the host did: the case (steps, LR changes, systems), every system's start page, meshnb's answer."""

    case: Case
    in_pages: list[bytes]
    expected: list[bytes]
    trace: np.ndarray
    manifest_note: str = ""
    per_step: tuple[np.ndarray, np.ndarray] | None = None  # cache of _params_per_step
    # The executor's input files as read and verified (case.json, in-K.page): what `check --exec`
    # hands the executor, so a pack changed on disk during a check cannot reach it.
    inputs: dict[str, bytes] = field(default_factory=dict)


def page_bytes(data: bytes, what: str) -> bytes:
    """``data`` if it is a whole page; PackError naming ``what`` otherwise."""
    if len(data) != VIEW_BYTES:
        raise PackError(f"{what}: a page is {VIEW_BYTES} bytes, this has {len(data)}")
    return data


U32_MAX = 0xFFFFFFFF
# Page spans from the layout table (SPEC 7): the samples X and Y, and INV_BATCH
SAMPLES_SPAN = slice(FIELDS["X"].offset, FIELDS["Y"].offset + FIELDS["Y"].nbytes)
_INV = slice(FIELDS["INV_BATCH"].offset, FIELDS["INV_BATCH"].offset + 4)
MAX_CHECK_STEPS = 1 << 22  # a checked run's trace (20 bytes a step) is held in memory: 80 MiB at most
"""The most steps a checked run takes (the checker holds its trace): not :data:`meshnb.runspec.MAX_STEPS`."""
_WORD = re.compile(r"[0-9a-fA-F]{1,8}")


def _checked(rule: Callable[..., int], value: object, *args: object) -> int:
    """A :mod:`meshnb.runspec` rule of a value, its message made printable and short (a hostile string)."""
    try:
        return rule(value, *args)
    except TypeError as e:
        raise TypeError(printable(str(e))[:160]) from None
    except OptionError as e:
        if e.names and len(e.template) <= 160 and printable(e.template) == e.template:  # the names as flags, on a CLI
            raise OptionError(e.template, *e.names, flags=e.flags) from None
        raise OptionError(printable(str(e))[:160]) from None


def _int(value: object, what: str, lo: int, hi: int) -> int:
    """:func:`meshnb.runspec.check_int`, printable and short (:func:`_checked`)."""
    return _checked(check_int, value, what, lo, hi)


def run_bounds(steps: int, steps_per_task: int, step_base: int, set_lr: Any) -> tuple[LrChange, ...]:
    """The LR changes of a run, sorted by step, by :func:`meshnb.runspec.check_run`'s rules and at most
    :data:`MAX_CHECK_STEPS` steps (the checker holds the trace); TypeError or OptionError naming the value.
    """
    _int(steps, "steps", 0, MAX_CHECK_STEPS)
    return check_run(steps, steps_per_task, step_base, set_lr)


def _parse_case(cj: object) -> Case:
    if not isinstance(cj, dict):
        raise ValueError("not a JSON object")
    name, about, start = cj["name"], cj["about"], cj["start"]
    if not all(isinstance(v, str) for v in (name, about, start)):
        raise ValueError("name, about and start are strings")
    if name in ("", ".", "..") or "/" in name or "\0" in name:  # experiments are written under it
        raise ValueError(f"{printable(repr(name))[:40]} is not a case name (a plain file name)")
    systems = _int(cj["systems"], "systems", 1, MAX_SYSTEMS)
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
    lr: list[LrChange] = []  # the file's words; several at one step apply in order, as train's
    for e in cj["set_lr"]:
        word = e["word"]
        if not isinstance(word, str) or _WORD.fullmatch(word) is None:
            raise ValueError(f"set_lr word {printable(repr(word))[:20]} is not a hex word of up to 8 digits")
        lr.append(LrChange(_int(e["before_step"], "set_lr before_step", 0, END), int(word, 16)))
    steps = _int(cj["steps"], "steps", 0, MAX_CHECK_STEPS)
    if start != "init" and not start.startswith("page "):
        raise ValueError(f"start {printable(repr(start))[:40]} is neither 'init' nor 'page NAME'")
    calls = cj.get("calls", [])  # the executor makes them: hex words, at steps of the run
    if not isinstance(calls, list) or not all(isinstance(e, dict) for e in calls):
        raise ValueError("calls is a list of objects")
    for e in calls:
        if any(not isinstance(e.get(k), str) or _WORD.fullmatch(e[k]) is None for k in ("op", "arg")):
            raise ValueError("calls: op and arg are hex words of up to 8 digits")
        _int(e.get("before_step"), "calls before_step", 0, steps)
    timeouts = cj.get("inject_timeouts", [])
    if not isinstance(timeouts, list) or (timeouts and not group):
        raise ValueError("inject_timeouts is a list, and only a group's rounds time out")
    injected = []
    for e in timeouts:
        if not isinstance(e, dict):
            raise ValueError("an inject_timeouts entry is an object")
        injected.append(
            (
                _int(e["system"], "inject_timeouts system", 0, systems - 1),
                _int(e["before_step"], "inject_timeouts before_step", 0, max(0, steps - 1)),
            )
        )
    case = Case(
        name,
        about,
        steps,
        None,
        systems,
        group,
        _int(cj["steps_per_task"], "steps_per_task", 1, U32_MAX),
        tuple(sorted(lr, key=lambda c: c[0])),
        _checked(check_step_base, base),
        None if start == "init" else start.removeprefix("page "),
        timeouts=tuple(injected),
    )
    run_bounds(case.steps, case.steps_per_task, case.step_base, case.set_lr)
    return case


def load_case(directory: str | Path, *, verify: bool = True) -> Setup:
    """A pack case directory, every file checked against the pack's manifest (in its parent) as it is read;
    no link is followed, and without a manifest the case is refused unless ``verify`` is False.
    """
    root = Path(directory).absolute()
    if root.is_symlink():
        raise PackError(f"{directory}: a symbolic link; a case is read only where it is, in its pack")
    if not root.is_dir():
        raise PackError(f"{directory}: not a case directory")
    pack_root = root.parent
    manifest = load_manifest(pack_root) if has_manifest(pack_root) else None
    if manifest is not None:
        for rel in manifest["files"]:
            manifest_path(rel)  # an entry outside the pack is refused, as pack --verify refuses it
        if f"{root.name}/case.json" not in manifest["files"]:
            raise PackError(f"{directory}: not a case of the pack in {pack_root}")
    elif verify:
        raise PackError(
            f"{directory}: FAIL to verify: no manifest.json beside the case, so its files cannot be checked"
            " (a check without verifying can be asked for)"
        )
    seen: set[str] = set()

    def get(rel: str, limit: int = MAX_FILE) -> bytes:
        data = read_file(root / rel, limit)
        if manifest is not None:  # the bytes checked are the bytes used
            check_sha(pack_root, manifest, f"{root.name}/{rel}", data)
        seen.add(rel)
        return data

    cj_path = root / "case.json"
    inputs = {"case.json": get("case.json", 1 << 20)}
    try:
        case = _parse_case(parse_json(inputs["case.json"], cj_path))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        if isinstance(e, PackError):
            raise
        raise PackError(f"{cj_path}: not a case description ({printable(str(e))})") from None
    ins = [page_bytes(get(f"in-{k}.page"), f"in-{k}.page") for k in range(case.systems)]
    inputs.update((f"in-{k}.page", page) for k, page in enumerate(ins))
    if any(pg != ins[0] for pg in ins):  # meshnb's runs (and the pack's cases) start every member alike
        raise PackError(f"{directory}: the members start from different pages, which check does not replay")
    at = int(next_steps(np.frombuffer(ins[0], dtype="<u4")[None, :])[0])
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
        note = "no manifest.json beside the case (verify off): its files were not verified"
    return Setup(case, ins, outs, trace, note, inputs=inputs)


def setup_from_run(
    view_in: bytes,
    steps: int,
    *,
    systems: int | None = None,
    steps_per_task: int | None = None,
    set_lr: Any = None,
    step_base: int | None = None,
) -> Setup:
    """A setup from a start page and the run options (as :func:`meshnb.train` takes them: ``set_lr``
    a mapping or pairs, each LR a number or an f32 word, :func:`meshnb.runspec.lr_word`), checked
    by :mod:`meshnb.runspec`'s rules, ``train``'s answers: a TypeError, or an
    :class:`~meshnb.runspec.OptionError` naming the argument, for a run that cannot be made.

    Parameters
    ----------
    view_in : bytes
        The start page (4096 bytes), every system's.
    steps : int
        Steps to run, 0 to ``MAX_CHECK_STEPS`` (the trace is held in memory).
    systems : int, optional
        A group of this many systems in lockstep (1 to ``MAX_SYSTEMS``); None: one system alone.
    steps_per_task : int, optional
        STEPS_PER_TASK to set first (None: as ``view_in`` says).
    set_lr : dict or sequence of (step, lr) pairs, optional
        LR changes, as ``train`` takes them.
    step_base : int, optional
        The first step (STEP_HI:NEXT_STEP) to set (None: as ``view_in`` says).

    Returns
    -------
    Setup
        The case (named ``view-in``), the start pages, and meshnb's expected pages and trace.

    Examples
    --------
    >>> from meshnb.conformance.check import setup_from_run
    >>> from meshnb.testing.reference import init_page
    >>> setup = setup_from_run(init_page(), 8, step_base=1 << 32)
    >>> from meshnb.view import View
    >>> setup.case.step_base, View(bytearray(setup.expected[0])).next_step - (1 << 32)
    (4294967296, 8)
    """
    if systems is not None:
        _int(systems, "systems", 1, MAX_SYSTEMS)
    try:
        _int(steps, "steps", 0, MAX_CHECK_STEPS)  # the checker's own bound: it holds the trace in memory
        run = describe(  # train's description of the run, by the same rules (one group of systems=N)
            steps,
            view_in=view_in,
            steps_per_task=steps_per_task,
            step_base=step_base,
            set_lr=set_lr or (),
            group=systems or 0,
            one_page=True,
        )
    except OptionError as e:  # train's answer, said as the checker's (its names still a command line's flags)
        raise OptionError("the run cannot be made: " + e.template, *e.names, flags=e.flags) from None
    page = run.words(0, 1)[0].astype("<u4").tobytes()  # STEPS_PER_TASK and the step base set
    v = View.from_bytes(page)
    changes = run.set_lr
    case = Case(
        "view-in",
        "a run from a start page (view_in)",
        steps,
        None,
        systems or 1,
        systems is not None,
        v["STEPS_PER_TASK"],
        changes,
        v.next_step,
        "view-in",
    )
    try:
        res = run_case(case, [page])
    except (ValueError, TypeError) as e:
        raise PackError(f"the run cannot be made: {e}") from None
    return Setup(case, [page] * case.systems, res.out_pages, res.trace, "")


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


def load_trace(path: str | Path, limit: int = MAX_FILE) -> np.ndarray:
    """An executor's trace file: (steps, 5) u32 words, at most ``limit`` bytes."""
    raw = read_file(Path(path), limit, follow=True)
    if len(raw) % 20:
        raise PackError(f"{path}: {len(raw)} bytes is not a whole number of 20-byte steps")
    return np.frombuffer(raw, dtype="<u4").astype(np.uint32).reshape(-1, 5)


def reference_state(setup: Setup, n: int, m: faults.Model = faults.EXACT) -> list[bytes]:
    """Every system's page after ``n`` steps, as meshnb computes them, with what model ``m`` makes of the
    setup (its samples and INV_BATCH from init, its LR word after a SET_LR); SET_LR calls at ``n`` are the replay's.
    """
    case = setup.case
    pages = setup.in_pages
    if n > 0:
        sub = replace(case, steps=n, set_lr=tuple((s, w) for s, w in case.set_lr if s < n))
        pages = run_case(sub, pages).out_pages
    if m is faults.EXACT:
        return list(pages)
    out = []
    init = model.init_page(case.systems, case.grouped, m.assignment) if case.from_init else None
    ops = Ops(m.rules)
    done = [w for s, w in case.set_lr if s < n]
    for pg in pages:
        b = bytearray(pg)
        if init is not None:
            b[SAMPLES_SPAN] = init[SAMPLES_SPAN]
            b[_INV] = init[_INV]
        if done and m.raw_lr_inv:
            struct.pack_into("<I", b, model.OFF_LR, done[-1])
        elif done:
            struct.pack_into("<I", b, model.OFF_LR, int(ops.read(done[-1])))
        out.append(bytes(b))
    return out
