"""Helpers of the sweep tests: a system run alone through ``meshnb.train``, and the check of a
sweep's every system against it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

import meshnb
from meshnb.sweeps import SweepResult

from ..util import run_meshnb

ROOT = Path(__file__).resolve().parents[2]

# LR words: ordinary, tiny (updates that underflow), subnormal and NaN (SET_LR flushes them in
# mode Z), huge (divergence to inf and NaN), negative.
LR_WORDS = np.array(
    [
        0x3F000000, 0x3E800000, 0x3D4CCCCD, 0x3A83126F, 0x1E800000, 0x0DA24260, 0x00400000, 0x80000001, 0x7FC00001,
        0xFF800001, 0x7E800000, 0x40400000, 0x3F7FFFFF, 0xBF000000, 0x00000000, 0x3FC00000, 0x3C23D70A,
    ],
    dtype=np.uint32,
)  # fmt: skip


def alone(page: bytes | None, steps: int, lr: int | None, base: int | None, z: bool):
    """The system as ``train`` runs it alone."""
    return meshnb.train(
        steps, view_in=page, set_lr=None if lr is None else {0: np.uint32(lr)}, step_base=base, z=z, keep_trace=True
    )


def check_against_train(
    r: SweepResult, steps: int, pages: list[bytes | None], lrs: np.ndarray | None, bases: list[int | None], z: bool
) -> None:
    """Every system of ``r`` bit-equal to its own ``train``: page, digest, trace digest, params, last loss."""
    assert r.steps == steps and len(r) == len(bases)
    for k in range(len(r)):
        p = pages[int(r.page_index[k])]
        lr = None if lrs is None else lrs[int(r.lr_index[k])]
        one = alone(p, steps, lr, bases[k], z)
        assert r.page(k) == one.page, f"system {k}: page differs"
        assert r.digests[k] == one.digest
        assert r.trace_digests[k] == one.trace_digest
        assert r.params_hex[k] == one.params_hex
        assert r.last_loss_words[k] == np.float32(one.last_loss).view(np.uint32)


def cli(*args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    """``python -m meshnb sweep ARGS`` (tests.util's one way to run the command), from the repository."""
    return run_meshnb("sweep", *args, timeout=timeout, cwd=ROOT, **kw)
