"""``meshnb check``: an executor's page (and trace, or task-boundary pages) against meshnb's.

Three answers, in order: where the bits part (a field-by-field diff of the pages named from the
layout table, the first differing step of the trace and which of its five sums, or the first
task whose page differs); then why: the diagnosis replays the part where they first part, from
meshnb's state before it, under every fault model of :mod:`meshnb.conformance.faults`, and names
each model that reproduces the executor's bits exactly.  Where none does, it finds the op
(:mod:`.localise`): the first differing step replayed with every single-op change of
:mod:`meshnb.conformance.mutants`, the changes that reproduce the executor's row named (or the
closest one), or the page's first differing word and the simple transformation that makes it;
and it gives meshnb's lane-level values (pred, e, each product) of the first differing sum, for
the developer to hold against theirs.

One role a module: :mod:`.cases` (the inputs: a pack case or a run from a start page, as a
:class:`Setup`; the executor's trace and pages), :mod:`.compare` (where the bits part),
:mod:`.diagnosis` (why: the whole-run models), :mod:`.localise` (which op), :mod:`.report`
(the typed :class:`Report`, as text and JSON); this
module joins them in :func:`check` and names them all.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from .cases import (
    MAX_CHECK_STEPS,
    Setup,
    load_case,
    load_trace,
    page_bytes,
    read_pages_dir,
    reference_state,
    run_bounds,
    setup_from_run,
)
from .compare import compare, first_trace_diff, loss_step, page_diff
from .diagnosis import (
    DIAG_STEPS,
    EXTEND,
    REPLAY_STEPS,
    WINDOW,
    diagnose,
    executor_run,
    first_divergence,
    lane_table,
    replay,
)
from .localise import localise_page, localise_step
from .report import (
    Counterfactual,
    Diagnosis,
    Localisation,
    Report,
    TaskPart,
    TracePart,
    Verdict,
    WordDiff,
    localisation_summary,
    printable,
)

__all__ = [
    "DIAG_STEPS",
    "EXTEND",
    "MAX_CHECK_STEPS",
    "REPLAY_STEPS",
    "WINDOW",
    "Counterfactual",
    "Diagnosis",
    "Localisation",
    "Report",
    "Setup",
    "TaskPart",
    "TracePart",
    "Verdict",
    "WordDiff",
    "check",
    "compare",
    "diagnose",
    "executor_run",
    "first_divergence",
    "first_trace_diff",
    "lane_table",
    "load_case",
    "load_trace",
    "localisation_summary",
    "localise_page",
    "localise_step",
    "loss_step",
    "page_bytes",
    "page_diff",
    "printable",
    "read_pages_dir",
    "reference_state",
    "replay",
    "run_bounds",
    "setup_from_run",
]


def check(
    setup: Setup,
    got_page: bytes,
    *,
    system: int = 0,
    got_trace: NDArray[np.uint32] | None = None,
    pages: list[tuple[int, bytes]] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Checks an executor's page (and trace, or boundary pages) against meshnb's; diagnoses a failure
    (``progress`` is told each model as the diagnosis replays it) within this module's
    :data:`DIAG_STEPS` and :data:`REPLAY_STEPS` (read at the call).

    Examples
    --------
    >>> from meshnb.conformance import faults
    >>> from meshnb.conformance.check import check, executor_run, setup_from_run
    >>> from meshnb.testing.reference import init_page
    >>> setup = setup_from_run(init_page(), 16)
    >>> check(setup, setup.expected[0]).verdict  # meshnb's own page
    'PASS'
    >>> got = executor_run(setup, faults.model("fma-horner"))  # an executor that contracts x * d + c into an FMA
    >>> report = check(setup, got.pages[0], got_trace=got.trace)
    >>> report.verdict, report.trace["step"], [m["name"] for m in report.diagnosis["models"]]
    ('FAIL', 1, ['fma-horner'])
    """
    rep, task = compare(setup, got_page, system, got_trace, pages)
    if rep.verdict == "FAIL":
        rep.diagnosis = diagnose(
            setup, system, got_page, got_trace, task, progress, diag_steps=DIAG_STEPS, replay_steps=REPLAY_STEPS
        )
    return rep
