"""Faulty executors of the train program written apart from meshnb (issue 34, item 4).

Each is a port of the seed as an executor team would write one, from ``shared/SPEC.md`` alone, with ONE
plausible porting mistake; ``correct`` is the same port without it (the control). None is derived from
``meshnb.conformance.faults`` or the check's diagnosis: they measure how well the check localises a fault
it was not built from. The C ports are one source, ``train_port.c``, built with one ``-D FAULT_*`` (or one
compiler flag) each; ``f64-at-stores`` is a numpy port (``numpy_port.py``).

Examples
--------
>>> from tests.conformance.executors import EXECUTORS
>>> EXECUTORS["correct"].mistake
'none (the control)'
>>> [e.name for e in EXECUTORS.values() if e.kind == "control"]
['correct', 'numpy-correct']
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "train_port.c"


@dataclass(frozen=True)
class Executor:
    """One executor: how it is built (gcc flags for the C port; none for the numpy port) and its mistake."""

    name: str
    kind: str  # what class of mistake: FPU rule, precision, ordering, counters, page layout, ...
    mistake: str
    flags: tuple[str, ...] | None  # gcc flags beyond the base ones; None: the numpy port
    args: tuple[str, ...] = ()  # the numpy port's arguments
    cpu: str = ""  # a CPU flag (/proc/cpuinfo) the executor needs to show its mistake
    catches: str = ""  # a case of the quick pack the mistake fails (as the report found); the tests check it


EXECUTORS: dict[str, Executor] = {
    e.name: e
    for e in (
        Executor("correct", "control", "none (the control)", ()),
        Executor(
            "numpy-correct", "control", "none (the numpy port's control: mode Z after every op)", None, ("--f32",)
        ),
        Executor(
            "fast-math",
            "compiler flag",
            "the C port built with `-ffast-math` (FTZ/DAZ set at start-up, `isnan` folded away)",
            ("-ffast-math",),
            catches="lr-divergent-nan",
        ),
        Executor(
            "fp-contract",
            "contraction",
            "a flush per statement (`z(acc * x + c)` for each Horner step), built with `-mfma -ffp-contract=fast`"
            " (what `-march=native` gives on an FMA machine): gcc fuses the Horner steps",
            ("-DFAULT_EXPR_FLUSH", "-mfma", "-ffp-contract=fast"),
            catches="default",
            cpu="fma",
        ),
        Executor(
            "flush-per-statement",
            "FPU rule",
            "the same source as `fp-contract` built without FMA: in each Horner statement only the result is"
            " flushed, not its inputs or its product",
            ("-DFAULT_EXPR_FLUSH",),
            catches="probe-subnormal-samples",
        ),
        Executor(
            "mxcsr-ftz-daz",
            "FPU rule",
            "mode Z left to the hardware: x86 MXCSR FTZ + DAZ set, only NaNs made canonical in software",
            ("-DFAULT_MXCSR",),
            catches="probe-tininess",
        ),
        Executor(
            "flush-to-plus-zero",
            "FPU rule",
            "a subnormal result flushed to +0 whatever its sign",
            ("-DFAULT_FLUSH_POSITIVE_ZERO",),
            catches="hard-tiny-samples",
        ),
        Executor(
            "f64-at-stores",
            "precision",
            "a numpy port computing each step in float64, rounded to f32 (and flushed) only where it is stored",
            None,
            catches="default",
        ),
        Executor(
            "sin-f32",
            "samples",
            "samples from `sinf((float)M_PI * x)` (f32 sine, no exact reduction)",
            ("-DFAULT_SIN_F32",),
            catches="default",
        ),
        Executor(
            "xor-order",
            "ordering",
            "the butterfly's rounds in the order 1, 2, 4, 8, 16",
            ("-DFAULT_XOR_ORDER",),
            catches="default",
        ),
        Executor(
            "apply-regrouped",
            "ordering",
            "apply's product regrouped: `(lr * g) * inv` for `lr * (g * inv)`",
            ("-DFAULT_APPLY_REGROUPED",),
            catches="lr-divergent-nan",
        ),
        Executor(
            "inv-batch-recomputed",
            "header read",
            "INV_BATCH recomputed as `1 / (32 N)` instead of read from the page",
            ("-DFAULT_INV_RECOMPUTED",),
            catches="hard-inv-batch-at-flush-boundary",
        ),
        Executor(
            "loss-ring-off-by-one",
            "page layout",
            "the loss written to LOSS[(t + 1) mod 256]",
            ("-DFAULT_LOSS_INDEX",),
            catches="steps-per-task-1",
        ),
        Executor(
            "batch-offset",
            "cluster",
            "every member takes batch `t N` (the `+ k` of `t N + k` dropped)",
            ("-DFAULT_BATCH_OFFSET",),
            catches="cluster-2",
        ),
        Executor(
            "step-hi-no-carry",
            "counters",
            "the step counter kept in 32 bits: STEP_HI never carried",
            ("-DFAULT_STEP_HI_NO_CARRY",),
            catches="step-base-2^32",
        ),
    )
}

BASE_FLAGS = ("-O2", "-std=gnu11", "-Wall", "-Wextra", "-Werror")


def compiler() -> str | None:
    """The C compiler (``$CC`` or gcc, cc), None if there is none."""
    for cc in (os.environ.get("CC"), "gcc", "cc"):
        if cc and shutil.which(cc):
            return cc
    return None


def missing_cpu(e: Executor) -> str | None:
    """The CPU flag ``e`` needs that this machine lacks (or cannot tell), else None."""
    if not e.cpu:
        return None
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return e.cpu
    return None if e.cpu in flags else e.cpu


def build(e: Executor, into: Path) -> Path | None:
    """Compile the C port with ``e``'s flags into ``into`` (None for the numpy port); the binary."""
    if e.flags is None:
        return None
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler")
    binary = into / f"train_port-{e.name}"
    cmd = [cc, *BASE_FLAGS, *e.flags, "-o", str(binary), str(SOURCE), "-lm", "-lpthread"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return binary


def command(e: Executor, binary: Path | None) -> str:
    """The ``--exec`` command line of ``e`` (built into ``binary``)."""
    if binary is None:
        return " ".join([sys.executable, str(HERE / "numpy_port.py"), *e.args])
    return f"{sys.executable} {HERE / 'host.py'} {binary}"
