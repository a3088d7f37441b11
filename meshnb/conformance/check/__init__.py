"""``meshnb check``: an executor's page (and trace, or task-boundary pages) against meshnb's.

Where the bits part (:mod:`.compare`: the page diff named from the layout table, the first differing step
and sums, the first differing task), then why (:mod:`.diagnosis`: the part replayed under every fault
model; else :mod:`.localise`: the single op, or the page's transformation, and meshnb's lane values).
:mod:`.cases` reads the inputs as a :class:`Setup`, :mod:`.report` types the :class:`Report`; this module
joins them in :func:`check`.
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
    """Checks an executor's page (and trace, or boundary pages) against meshnb's and diagnoses a failure
    (``progress`` is told each model replayed), within :data:`DIAG_STEPS` and :data:`REPLAY_STEPS` (read at the call).

    Examples
    --------
    >>> from meshnb.conformance import faults
    >>> from meshnb.conformance.check import check, executor_run, setup_from_run
    >>> from meshnb.testing.reference import init_page
    >>> setup = setup_from_run(init_page(), 16)
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
