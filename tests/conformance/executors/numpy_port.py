"""``python numpy_port.py [--f32] CASE_DIR OUT_DIR``: a numpy port of the train program, written from
SPEC.md for ``meshnb check --exec`` (nothing of meshnb is imported).

Its mistake (the default, executor ``f64-at-stores``): every step is computed in float64 and rounded to
f32 (and flushed, NaNs made canonical) only where a value is stored: the sums published and applied,
the params, the loss. ``--f32`` rounds and flushes after every op as mode Z says: the same port without
the mistake (the tests run it as a second control, so that a failure of the default is its mistake).
The cluster's members run in lockstep in one loop (no exchange page is needed without timeouts).
"""

from __future__ import annotations

import json
import math
import struct
import sys
from pathlib import Path

import numpy as np
import numpy.typing as npt

F32 = "--f32" in sys.argv[1:]
Arr = npt.NDArray[np.floating]

PARAMS, LR, SPT, INV, NEXT, ERR, PENDING, ROUND, STEP_HI, X, Y, LOSS = 0, 16, 20, 24, 28, 32, 36, 40, 44, 64, 1088, 2112


def z(a: Arr) -> npt.NDArray[np.float32]:
    """Round to f32, flush a subnormal to a zero of its sign, make a NaN canonical (SPEC 2)."""
    with np.errstate(all="ignore"):
        u = np.atleast_1d(np.asarray(a, dtype=np.float32)).view(np.uint32).copy()
    u = np.where((u & 0x7F800000) == 0, u & 0x80000000, u)
    u = np.where(((u & 0x7F800000) == 0x7F800000) & ((u & 0x7FFFFF) != 0), np.uint32(0x7FFFFFFF), u)
    return u.astype(np.uint32).view(np.float32)


def op(a: Arr, b: Arr, f: str) -> Arr:
    """One op of the step: mode Z in f32 (``--f32``), or float64 left unrounded (the mistake)."""
    with np.errstate(all="ignore"):
        if F32:
            a, b = z(a), z(b)
        else:
            a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        r = {"+": np.add, "-": np.subtract, "*": np.multiply}[f](a, b)
    return z(r) if F32 else r


def samples() -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """X and Y as init writes them (SPEC 4; in f32 whatever the mode: they are stored)."""
    h = z(np.float32(2.0) / z(np.float32(255.0)))
    xs = z(np.float32(-1.0) + z(z(np.arange(256, dtype=np.float32)) * h))
    ys = np.empty(256, np.float32)
    for i, x in enumerate(xs.astype(np.float64)):
        r = 1.0 - abs(x) if abs(x) > 0.5 else abs(x)
        ys[i] = math.copysign(float(np.float32(math.sin(math.pi * r))), x)
    return xs, ys


def step_sums(p: Arr, xs: Arr, ys: Arr, off: int) -> Arr:
    """The five sums of the warp (SPEC 5), lanes as a vector, the butterfly by index xor."""
    g = off % 8
    x, y = xs[g::8], ys[g::8]
    x2 = op(x, x, "*")
    x3 = op(x2, x, "*")
    pred = op(op(op(op(op(op(p[3], x, "*"), p[2], "+"), x, "*"), p[1], "+"), x, "*"), p[0], "+")
    e = op(pred, y, "-")
    v = [e, op(e, x, "*"), op(e, x2, "*"), op(e, x3, "*"), op(e, e, "*")]
    lanes = np.arange(32)
    for o in (16, 8, 4, 2, 1):
        v = [op(w, w[lanes ^ o], "+") for w in v]
    return np.array([w[0] for w in v])


def main(case_dir: Path, out_dir: Path) -> int:
    cj = json.loads((case_dir / "case.json").read_text())
    n, steps, spt = cj["systems"], cj["steps"], cj["steps_per_task"]
    views = [bytearray((case_dir / f"in-{k}.page").read_bytes()) for k in range(n)]
    if cj["start"] == "init":
        xs, ys = samples()
        inv = z(np.float32(1.0) / z(np.float32(32 * n)))[0]
        for v in views:
            v[:] = bytes(4096)
            v[X : X + 1024] = xs.tobytes()
            v[Y : Y + 1024] = ys.tobytes()
            struct.pack_into("<fIf", v, LR, 0.5, spt, inv)
            base = int(cj["step_base"])
            struct.pack_into("<I", v, NEXT, base & 0xFFFFFFFF)
            struct.pack_into("<I", v, STEP_HI, base >> 32)

    def u32(v: bytearray, off: int) -> int:
        return int(struct.unpack_from("<I", v, off)[0])

    def f32s(v: bytearray, off: int, count: int) -> npt.NDArray[np.float32]:
        return z(np.frombuffer(bytes(v[off : off + 4 * count]), "<f4"))

    lr_at = {e["before_step"]: int(e["word"], 16) for e in cj["set_lr"]}
    # injected timeouts: the members run in lockstep, so a timed-out round resumed by the next TASK
    # changes nothing but the member's ROUND (the round's low half, never cleared: SPEC 8, 9)
    timeouts = {(e["system"], int(e["round"])) for e in cj.get("inject_timeouts", [])}
    trace: list[int] = []
    done = 0
    while True:
        if done in lr_at:
            for v in views:
                v[LR : LR + 4] = z(np.array([lr_at[done]], np.uint32).view(np.float32)).tobytes()
        if done == steps:
            break
        stop = min([steps] + [s for s in lr_at if s > done])
        count = min(u32(views[0], SPT), stop - done)
        # one TASK on every member, in lockstep
        base = u32(views[0], STEP_HI) << 32 | u32(views[0], NEXT)
        for v in views:  # a pending round is dropped without a group or when arg does not match it (SPEC 8)
            resume = cj["group"] and u32(v, ROUND) == (base + 1) & 0xFFFFFFFF
            if u32(v, PENDING) and not resume:
                struct.pack_into("<I", v, PENDING, 0)
        st = [(f32s(v, PARAMS, 4), f32s(v, LR, 1)[0], f32s(v, INV, 1)[0]) for v in views]
        xy = [
            (np.frombuffer(bytes(v[X : X + 1024]), "<f4"), np.frombuffer(bytes(v[Y : Y + 1024]), "<f4")) for v in views
        ]
        ps = [s[0] for s in st]
        for i in range(count):
            t = base + i
            own = [z(step_sums(ps[k], *xy[k], (t * n + k) % 2**32)) for k in range(n)]  # stored: published
            total = own[0]
            for m in range(1, n):
                total = z(op(total, own[m], "+"))
            trace += [int(w) for w in total.view(np.uint32)]
            for k, v in enumerate(views):
                _, lr, inv = st[k]
                ps[k] = z(np.array([op(ps[k][j], op(lr, op(total[j], inv, "*"), "*"), "-") for j in range(4)]).ravel())
                v[LOSS + 4 * (t % 256) : LOSS + 4 * (t % 256) + 4] = z(op(total[4], inv, "*")).tobytes()
                if (k, t + 1) in timeouts:
                    struct.pack_into("<I", v, ROUND, (t + 1) & 0xFFFFFFFF)
        for k, v in enumerate(views):
            v[PARAMS : PARAMS + 16] = ps[k].tobytes()
            struct.pack_into("<I", v, ERR, 0)
            if cj["group"]:
                struct.pack_into("<I", v, PENDING, 0)
            struct.pack_into("<I", v, NEXT, (base + count) & 0xFFFFFFFF)
            struct.pack_into("<I", v, STEP_HI, (base + count) >> 32)
        done += count
    for k, v in enumerate(views):
        (out_dir / f"out-{k}.page").write_bytes(bytes(v))
    (out_dir / "trace.bin").write_bytes(struct.pack(f"<{len(trace)}I", *trace))
    return 0


if __name__ == "__main__":
    paths = [a for a in sys.argv[1:] if a != "--f32"]
    sys.exit(main(Path(paths[0]), Path(paths[1])))
