"""The sweep loop's C anchor (issue 25): build ``sweep_anchor.c``, check its bits against
``meshnb.sweep``, and time it beside meshnb's sweep loop in one process.

Used by ``bench/test_bench_sweep_anchor.py`` and by ``meshnb bench`` (path ``sweep-c-anchor``,
found when the source checkout's ``bench/`` is beside the package).  Both sides are timed the
same way: one thread, the CPU time of the thread that runs the loop (``time.thread_time``; ctypes
and the loop both run on the calling thread), M LR systems from one page, ``S`` steps, rounds
interleaved C / meshnb so that a shared machine's load falls on both alike.

The C is compiled for the ISA numba compiles for (``meshnb.cpu.target_shape``): 16 floats a
vector for AVX-512 code, 8 for AVX2 code (``NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=""``), and
:func:`loop_avx512_lines` checks meshnb's compiled loop for zmm registers (and every other
mark of AVX-512 code), so an AVX2 figure is one of
AVX2 code.
"""

from __future__ import annotations

import ctypes
import platform
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from meshnb import cpu, loops
from meshnb import sweeps as sw
from meshnb.loops import sweep as sweep_loop
from meshnb.sweeps.lanes import Lanes

SOURCE = Path(__file__).with_name("sweep_anchor.c")
LOSS = 528  # the page's LOSS words (SPEC 3)
# LR words at the edges (SET_LR flushes them in mode Z): NaNs, infinities, subnormals and the
# FTZ band, zeros, the smallest normal, ordinary and huge LRs.
EDGE_LRS = np.array(
    [
        0x7FC00000, 0xFFC00001, 0x7F800001, 0x7F800000, 0xFF800000, 0x00000001, 0x807FFFFF, 0x00400000,
        0x80000000, 0x00000000, 0x00800000, 0x3F800000, 0x40000000, 0x3F000000, 0x3A83126F, 0x4B000000,
    ],
    dtype=np.uint32,
)  # fmt: skip


def unavailable() -> str | None:
    """Why the anchor cannot run here (None when it can)."""
    if platform.machine().lower() not in ("x86_64", "amd64") or not cpu.HAS_DAZ:
        return "the C sweep anchor needs an x86-64 CPU"
    if shutil.which("gcc") is None:
        return "no C compiler (gcc) found"
    if not SOURCE.is_file():
        return f"{SOURCE} is not here (a source checkout has it)"
    if cpu.target_shape().isa not in ("avx512", "avx2"):
        return f"the C anchor is written for AVX-512 and AVX2 code, numba compiles for {cpu.target_shape()}"
    return None


def lanes_of_target() -> int:
    """Floats per vector of the ISA numba compiles for: the C anchor's width."""
    return 16 if cpu.target_shape().isa == "avx512" else 8


def build(block: int, out_dir: Path | None = None) -> ctypes.CDLL:
    """Compile the anchor for the target ISA, ``block`` groups stepped together (no FMA
    contraction, no reassociation)."""
    w = lanes_of_target()
    isa = "-mavx512f" if w == 16 else "-mavx2"
    if out_dir is None:  # a folder of its own, gone once the library is loaded (the mapping stays)
        with tempfile.TemporaryDirectory(prefix="meshnb-anchor-") as scratch:
            return build(block, Path(scratch))
    folder = out_dir
    lib = folder / f"sweep_anchor_{w}x{block}.so"
    cmd = ["gcc", "-O3", isa, "-ffp-contract=off", f"-DW={w}", f"-DBLOCK={block}", "-shared", "-fPIC"]
    subprocess.run([*cmd, "-o", str(lib), str(SOURCE)], check=True, capture_output=True)
    dll = ctypes.CDLL(str(lib))
    p = ctypes.c_void_p
    dll.sweep_anchor.argtypes = [p, p, ctypes.c_uint64, ctypes.c_uint64, p, p]
    dll.sweep_anchor.restype = ctypes.c_int
    dll.anchor_clock_probe.argtypes = [ctypes.c_uint64]
    dll.anchor_clock_probe.restype = ctypes.c_uint64
    return dll


def c_run(dll: ctypes.CDLL, page: np.ndarray, lr_words: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """The anchor's final params ``[m, 4]`` and loss ring ``[m, 256]`` (relative step r at r mod 256)."""
    m = lr_words.size
    params, ring = np.zeros((m, 4), np.uint32), np.zeros((m, 256), np.uint32)
    lr = np.ascontiguousarray(lr_words, dtype=np.uint32)
    if dll.sweep_anchor(page.ctypes.data, lr.ctypes.data, m, steps, params.ctypes.data, ring.ctypes.data) != 0:
        raise MemoryError("the C anchor's arrays")
    return params, ring


def check_bits(dll: ctypes.CDLL, m: int = 108, steps: int = 300, base: int = 12345) -> None:
    """The anchor's params and loss words equal ``meshnb.sweep``'s final pages, ``m`` systems (not
    a multiple of a group) with the edge LR words and a log range, from a page whose step base is
    not 0 mod 8; steps > 256, so the whole loss ring is compared.  Raises AssertionError."""
    lrs = np.concatenate([EDGE_LRS, np.geomspace(1e-4, 1.5, m - EDGE_LRS.size).astype(np.float32).view(np.uint32)])
    page = np.frombuffer(sw.init_page(), "<u4").copy()
    r = sw.sweep(steps, lrs=lrs, view_in=page.tobytes(), step_base=base, keep_pages=True)
    assert r.final_pages is not None
    final = r.final_pages.view("<u4").reshape(m, 1024)
    page[7], page[11] = base & 0xFFFFFFFF, base >> 32
    params, ring = c_run(dll, page, lrs, steps)
    bad = np.flatnonzero((params != final[:, :4]).any(axis=1))
    assert bad.size == 0, f"C anchor params differ from meshnb.sweep: systems {bad[:8].tolist()}"
    loss = np.roll(ring, base % 256, axis=1)  # LOSS[(base + j) mod 256] = the loss of relative step j
    bad = np.flatnonzero((loss != final[:, LOSS : LOSS + 256]).any(axis=1))
    assert bad.size == 0, f"C anchor loss words differ from meshnb.sweep: systems {bad[:8].tolist()}"


def meshnb_loop(lr_words: np.ndarray, steps: int) -> Callable[[], None]:
    """meshnb's sweep loop alone on these systems (one thread, mode Z with DAZ): a call runs ``steps``."""
    m = lr_words.size
    sh = sweep_loop.shape()
    systems = sw.describe(steps, lrs=lr_words)
    lanes = Lanes(systems.words(0, m), True, steps, 0, sh)
    a = lanes.arrays
    no_trace = np.empty((lanes.groups, 0), np.float32)

    def run(count: int = steps) -> None:
        sweep_loop.run_groups(
            a["tabs"], a["stabs"], a["tab_of"], a["params"], a["hyper"], a["ring"], a["hist"], no_trace,
            0, count, 0, loops.Z_DAZ, sh,
        )  # fmt: skip

    run(1)  # the first call (a compile, or numba's cache) out of the timing
    return run


_EVEX = re.compile(r"zmm|%[xy]mm(1[6-9]|2\d|3[01])\b|\{1to\d+\}|%k[0-7]")


def loop_avx512_lines() -> list[str]:
    """The lines of meshnb's compiled sweep loop (mode Z with DAZ, the target's shape) that only
    AVX-512 code has: a zmm register, xmm/ymm 16-31, an embedded broadcast or a mask register.
    The loop is compiled afresh here (numba's cache keeps no assembly to read back)."""
    import numba

    sh = sweep_loop.shape()
    fresh = numba.njit(nogil=True, error_model="numpy")(sweep_loop.entry(loops.Z_DAZ, sh).py_func)
    a = sweep_loop.empty_arrays(0, 0, 0, sh.lanes)
    tabs = np.zeros((1, sweep_loop.tab_floats(sh.lanes)), dtype=np.float32)
    stabs = np.zeros((1, sweep_loop.SHARED_FLOATS), dtype=np.float32)
    args = (a["params"], a["hyper"], a["ring"], a["hist"], a["trace"])
    fresh(tabs, stabs, np.zeros(0, np.int64), *args, np.int64(0), np.int64(0), np.int64(0))
    asm = "\n".join(fresh.inspect_asm().values())
    if "vaddps" not in asm:
        raise RuntimeError("the sweep loop's assembly could not be read")
    return [line for line in asm.splitlines() if _EVEX.search(line)]


def clock_ghz(dll: ctypes.CDLL, n: int = 20_000_000) -> float:
    """This core's clock while it runs, from a chain of dependent multiplies (3 cycles each)."""
    t0 = time.thread_time()
    dll.anchor_clock_probe(n)
    return 12 * n / (time.thread_time() - t0) / 1e9


def interleaved(fns: dict[str, Callable[[], object]], rounds: int, system_steps: int) -> dict[str, list[float]]:
    """Rounds of every function in turn: each one's thread CPU ns per system-step, a value a round."""
    out: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.thread_time()
            fn()
            out[name].append((time.thread_time() - t0) / system_steps * 1e9)
    return out


# Op counts of one system-step (SPEC 5 and 6): 32 lanes x (3 mul + 3 add in Horner, 1 sub, 4 mul
# for the terms), 5 x 31 tree adds, 4 x (2 mul + 1 sub) for the update, 1 mul for the loss.
ADDS = 32 * 4 + 5 * 31 + 4
MULS = 32 * 7 + 4 * 2 + 1


def floor_cycles(lanes: int) -> float:
    """The op-count floor of one system-step on this CPU, in cycles, from its ports: on Intel's
    Golden Cove class (this project's Xeon), 512-bit adds and multiplies issue on 2 ports (p0, p5)
    together; 256-bit multiplies on 2 (p0, p1) and adds on 2 (p1, p5), 3 of either a cycle in all."""
    ops = ADDS + MULS
    if lanes == 16:
        return ops / 16 / 2
    return max(ops / 3, MULS / 2, ADDS / 2) / 8


def median(xs: list[float]) -> float:
    return float(statistics.median(xs))


# --- `meshnb bench`'s paths: a run from a start page, its digest --------------------------------

BENCH_SYSTEMS = 1024


def bench_lrs() -> np.ndarray:
    """The LR words of ``meshnb bench``'s sweep paths: a log range."""
    return np.geomspace(1e-4, 1.0, BENCH_SYSTEMS).astype(np.float32).view(np.uint32)


def digest(params: np.ndarray, ring: np.ndarray) -> str:
    """SHA-256 of the systems' final params ``[m, 4]`` and loss rings ``[m, 256]`` (relative step r at r mod 256)."""
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(params).tobytes() + np.ascontiguousarray(ring).tobytes()).hexdigest()


def meshnb_run(page: bytes, steps: int) -> str:
    """meshnb's sweep loop alone, one thread, the bench's LRs from ``page``: the digest of its words."""
    lrs = bench_lrs()
    sh = sweep_loop.shape()
    systems = sw.describe(steps, lrs=lrs, view_in=page)
    lanes = Lanes(systems.words(0, lrs.size), True, steps, 0, sh)
    a = lanes.arrays
    sweep_loop.run_groups(
        a["tabs"], a["stabs"], a["tab_of"], a["params"], a["hyper"], a["ring"], a["hist"],
        np.empty((lanes.groups, 0), np.float32), 0, steps, 0, loops.Z_DAZ, sh,
    )  # fmt: skip
    ring = lanes.ring_words()
    ring[:, min(steps, 256) :] = 0  # rows no step wrote, as the C leaves them
    return digest(lanes.params_words(), ring)


def c_runner(block: int) -> Callable[[bytes, int], str]:
    """The C anchor (built now) as a ``meshnb bench`` run: the digest of its words."""
    dll = build(block)

    def run(page: bytes, steps: int) -> str:
        params, ring = c_run(dll, np.frombuffer(page, "<u4").copy(), bench_lrs(), steps)
        return digest(params, ring)

    return run


def library_run(page: bytes, steps: int) -> str:
    """``meshnb.sweep`` of the same systems (final pages kept): the digest both runs must give."""
    lrs = bench_lrs()
    r = sw.sweep(steps, lrs=lrs, view_in=page, keep_pages=True)
    assert r.final_pages is not None
    final = r.final_pages.view("<u4").reshape(lrs.size, 1024)
    base = int(np.frombuffer(page, "<u4")[11]) << 32 | int(np.frombuffer(page, "<u4")[7])
    ring = np.zeros((lrs.size, 256), np.uint32)
    js = np.arange(max(0, steps - 256), steps)
    ring[:, js % 256] = final[:, LOSS + (base + js) % 256]
    return digest(final[:, :4], ring)
