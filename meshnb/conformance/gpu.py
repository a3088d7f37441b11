"""``meshnb gpu-check``'s checks: the CUDA image on a device against meshnb's CPU, bit for bit.

They need numba-cuda (a device, or its simulator in the tests); :mod:`meshnb.cli.cuda` parses and prints."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..api import train
from ..backend_table import BY_NAME
from ..cuda import compare, host
from ..runspec import LrChange, describe
from ..samebits import array_bits, differences
from ..sweeps import lr_words, sweep
from ..testing.pages import hard_pages
from . import check, pack

CPU_TIMED_SYSTEMS = 1 << 14  # the CPU sweep timed beside the device's (2^14 x 1024 steps: seconds)
DIFFERENCES_SHOWN = 10  # the sweep's first differences said (of up to 2 x --sample)


def pack_check(cases: list[Any] | None = None) -> list[tuple[str, str]]:
    """Every quick-pack case (or ``cases``) through the CUDA image, checked against the CPU: ``[(name, verdict)]``."""
    cuda = BY_NAME["cuda"]  # the table's row: its name (train refuses, up front, what its row cannot run)
    out: list[tuple[str, str]] = []
    for case in pack.cases(quick=True) if cases is None else cases:
        want = pack.run_case(case)
        page = case.in_page()
        setup = check.Setup(case, [page] * case.systems, want.out_pages, want.trace)
        lr = [LrChange(s, w) for s, w in case.set_lr]  # the case's f32 words, taken as words
        systems = case.systems if case.grouped else None  # None: one system without a group
        r = train(case.steps, view_in=page, set_lr=lr, keep_trace=True, backend=cuda.name, systems=systems)
        verdict = "PASS"
        for k, s in enumerate(r.systems):
            trace = np.asarray(s.trace, dtype=np.uint32).reshape(-1, 5)
            if check.check(setup, s.page, system=k, got_trace=trace).verdict != "PASS":
                verdict = "FAIL"
        out.append((case.name, verdict))
    return out


IEEE_STEPS = 16  # every hard page a few tasks into IEEE mode: NaN, inf and subnormal words appear


def ieee_check(steps: int = IEEE_STEPS, pages: dict[str, bytes] | None = None) -> list[tuple[str, str]]:
    """Every hard page (or ``pages``) in IEEE mode on the device against ``train(z=False)``: ``[(page, verdict)]``."""
    pages = hard_pages() if pages is None else pages
    names = list(pages)
    words = np.stack([np.frombuffer(pages[n], dtype="<u4").astype(np.uint32) for n in names])
    got = host.run_systems(describe(steps, view_in=words, z=False))  # P pages, each with its own LR
    out: list[tuple[str, str]] = []
    for k, name in enumerate(names):
        want = np.frombuffer(train(steps, view_in=pages[name], z=False).page, dtype="<u4")
        out.append((name, "PASS" if compare.words_equal(want, got.pages[k], z=False) else "FAIL"))
    return out


def sweep_check(systems: int, steps: int, sample: int) -> dict[str, Any]:
    """M systems (LRs 1e-3 to 1 in log, step bases spread) on the device, ``sample`` of them against the
    CPU sweep (final pages, trace digests); system-steps per second of both."""
    lrs = lr_words(np.geomspace(1e-3, 1.0, systems).astype(np.float32))
    bases = (np.arange(systems, dtype=np.uint64) * np.uint64(977)) % np.uint64(1 << 40)
    host.run_systems(describe(1, lrs=lrs[:1], step_base=bases[:1]))  # compile outside the timing
    gpu = host.run_systems(describe(steps, lrs=lrs, step_base=bases))
    pick = np.unique(np.linspace(0, systems - 1, min(sample, systems)).astype(np.int64))
    cpu = sweep(steps, lrs=lrs[pick], step_base=bases[pick].astype(object).tolist(), trace=True, keep_pages=True)
    gpu_trace = host.run_systems(describe(steps, lrs=lrs[pick], step_base=bases[pick]), trace=True)
    # The CPU's rate from a sweep big enough to fill every core (the sample alone may not)
    timed = min(systems, CPU_TIMED_SYSTEMS)
    cpu_rate = sweep(steps, lrs=lrs[:timed], step_base=bases[:timed].astype(object).tolist())
    if cpu.final_pages is None:  # keep_pages=True keeps them
        raise RuntimeError("the CPU sweep kept no pages")
    # Same bits? (samebits: the comparison every harness shares) the final pages, the trace digests
    pages_differ = differences(array_bits(pick, page=gpu.pages[pick]), array_bits(pick, page=cpu.final_pages))
    traces_differ = differences(
        array_bits(pick, trace_digest=gpu_trace.trace_digests), array_bits(pick, trace_digest=cpu.trace_digests)
    )
    return {
        "systems": systems,
        "steps": steps,
        "sampled": len(pick),
        "pages_equal": not pages_differ,
        "trace_digests_equal": not traces_differ,
        "differences": (pages_differ + traces_differ)[:DIFFERENCES_SHOWN],
        "gpu_system_steps_per_s": systems * steps / gpu.seconds if gpu.seconds else float("inf"),
        "cpu_system_steps_per_s": cpu_rate.system_steps_per_second,
        "cpu_systems_timed": timed,
    }


def passed(cases: list[tuple[str, str]], ieee: list[tuple[str, str]], sweep_doc: dict[str, Any]) -> bool:
    """Whether every part passed: each pack case and hard page ``"PASS"``, the sweep's pages and trace digests equal.

    >>> ok = {"pages_equal": True, "trace_digests_equal": True}
    >>> passed([("default", "PASS")], [("nan-lr", "PASS")], ok), passed([("default", "FAIL")], [], ok)
    (True, False)
    """
    same = bool(sweep_doc["pages_equal"]) and bool(sweep_doc["trace_digests_equal"])
    return all(v == "PASS" for _, v in cases + ieee) and same
