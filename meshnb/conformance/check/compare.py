"""Where the bits part: the page diff named from the layout table, the first differing step of the
trace (and which of its five sums), the first task-boundary page that differs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from meshnb.view import LAYOUT, RESERVED

from .. import model
from ..fpu import ulps
from ..pack import Case, PackError
from .cases import Setup, page_bytes, reference_state
from .report import Report, TaskPart, TracePart, WordDiff

if TYPE_CHECKING:
    from numpy.typing import NDArray


def _f32(w: int) -> str:
    return repr(float(np.uint32(w).view(np.float32)))


def loss_step(case: Case, index: int) -> int | None:
    """The step whose loss LOSS[index] holds after the run (None: not written by this run)."""
    end = case.step_base + case.steps - 1
    if case.steps == 0:
        return None
    t = end - ((end - index) % 256)
    return t if t >= case.step_base else None


def page_diff(case: Case, want: bytes, got: bytes) -> list[WordDiff]:
    """Every differing word, named from the layout table (hex and float)."""
    wv = np.frombuffer(want, dtype="<u4")
    gv = np.frombuffer(got, dtype="<u4")
    out: list[WordDiff] = []
    for f in LAYOUT:
        for i in np.nonzero(wv[f.word : f.word + f.count] != gv[f.word : f.word + f.count])[0]:
            w, g = int(wv[f.word + i]), int(gv[f.word + i])
            d = WordDiff(
                field=f.name if f.count == 1 else f"{f.name}[{i}]",
                offset=f.offset + 4 * int(i),
                expected=f"{w:08x}",
                got=f"{g:08x}",
            )
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
                WordDiff(
                    field=f"reserved@{off}",
                    offset=off,
                    expected=f"{int(wv[off // 4]):08x}",
                    got=f"{int(gv[off // 4]):08x}",
                )
            )
    return out


def first_trace_diff(want: NDArray[np.uint32], got: NDArray[np.uint32]) -> tuple[int, list[str]] | None:
    """The first step whose applied sums differ, and which of the five (None if none)."""
    n = min(len(want), len(got))
    rows = np.nonzero((want[:n] != got[:n]).any(axis=1))[0]
    if len(rows):
        t = int(rows[0])
        return t, [model.SUMS[j] for j in range(5) if want[t, j] != got[t, j]]
    return None


def rows_hex(r: NDArray[np.uint32]) -> list[str]:
    """A trace row's (or params') words as 8 hex digits each."""
    return [f"{int(w):08x}" for w in r]


def compare(
    setup: Setup,
    got_page: bytes,
    system: int,
    got_trace: NDArray[np.uint32] | None,
    pages: list[tuple[int, bytes]] | None,
) -> tuple[Report, tuple[int, int, bytes] | None]:
    """Where system ``system``'s bits part from meshnb's: the report (its verdict FAIL if any part differs, no
    diagnosis) and the first differing task (its first step, steps done, the executor's page).  PackError naming
    the argument for a page or trace of the wrong size, or a system not in the case.
    """
    case = setup.case
    if not 0 <= system < case.systems:
        raise PackError(f"system {system} is not in this case's {case.systems}")
    page_bytes(got_page, "got_page")
    rep = Report("PASS", case.name, system)
    if setup.manifest_note:
        rep.notes.append(setup.manifest_note)
    want = setup.expected[system]
    rep.diff = page_diff(case, want, got_page)
    rep.samples = [{"field": d["field"], "ulps": d.get("ulps", 0)} for d in rep.diff if "sample" in d]
    if got_trace is not None:
        if got_trace.shape != setup.trace.shape:
            raise PackError(f"got_trace: {len(got_trace)} steps, the run has {len(setup.trace)}")
        td = first_trace_diff(setup.trace, got_trace)
        if td is not None:
            t, which = td
            rep.trace = TracePart(
                step=t,
                absolute_step=case.step_base + t,
                sums=which,
                expected=rows_hex(setup.trace[t]),
                got=rows_hex(got_trace[t]),
            )
    task = None
    if pages is not None:
        prev = 0
        for n, pg in pages:
            ref_pg = reference_state(setup, n)[system] if n < case.steps else want
            if pg != ref_pg:
                fields = [d["field"] for d in page_diff(case, ref_pg, pg)][:20]
                rep.task = TaskPart({"from": prev, "steps_done": n, "file": f"{n}.page", "fields": fields})
                task = (prev, n, pg)
                break
            prev = n
    if rep.diff or rep.trace or rep.task:
        rep.verdict = "FAIL"
    return rep, task
