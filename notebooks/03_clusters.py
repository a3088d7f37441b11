# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 3. Clusters: N systems in lockstep
#
# A *cluster* is N systems that train one cubic together. At every step each member computes the
# five sums on its own batch, publishes them on a shared exchange page, waits for every other
# member's, adds all N up in member order, and applies that total. Every member applies the same
# total, so every member's params stay bitwise identical.
#
# Member `k` of `N` at step `t` uses batch `(t N + k) mod 8`, and the page's `INV_BATCH` is
# `1 / (32 N)`, so one step of a cluster is one step of SGD on `32 N` samples:
#
# | N | batches in one step | what it is |
# |---|---|---|
# | 1 | one batch of 32 samples | the SGD of notebook 01 |
# | 2 | batches `{0,1}`, `{2,3}`, `{4,5}`, `{6,7}` in turn | SGD on 64 samples a step |
# | 4 | batches `{0..3}`, `{4..7}` in turn | SGD on 128 samples a step |
# | 8 | all 8 batches, every step | full-batch gradient descent |
#
# meshnb runs a cluster with one of four backends: `fused` (the whole cluster in one compiled loop,
# no exchange: the fastest), `threads` (one thread per member, a real exchange page with timeouts),
# `processes` (one OS process per member, the page in shared memory) and `mpi` (one MPI rank per
# member, on one machine or many; a round is an MPI collective). All four give the same bits.
#
# This notebook runs the first three, which start their members from the calling Python process.
# The `mpi` backend does not run here: its members are the ranks of an MPI job, N processes that
# `mpiexec` starts (`.venv/bin/mpiexec -n 4 .venv/bin/meshnb train --backend mpi`, see the README's
# MPI section), and a notebook's kernel is one process that is not part of such a job.
#
# This notebook uses only the public API described in the README.

# %%
# %matplotlib inline
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display

import meshnb
import meshnb.testing

plt.rcParams.update({"figure.figsize": (10, 4.2), "figure.dpi": 90, "axes.grid": True, "grid.alpha": 0.3})

# %% [markdown]
# ## 3.1 Loss curves for N = 1, 2, 4, 8
#
# We run 4,096 steps of each cluster size with the fused backend and keep the trace: with a cluster,
# row `t` of the trace holds the *total* that step `t` applied, so the step's loss is
# `total(e^2) * INV_BATCH`, the mean squared error over the step's `32 N` samples.

# %%
STEPS = 4096
SIZES = [1, 2, 4, 8]
runs = {n: meshnb.train(STEPS, systems=n, backend="fused", keep_trace=True) for n in SIZES}

for n, r in runs.items():
    assert len({s.digest for s in r.systems}) == 1 and len({s.trace_digest for s in r.systems}) == 1
    print(
        f"N = {n}: INV_BATCH = 1/{round(1 / float(r.view['INV_BATCH']))}, params {r.params_hex}, "
        f"every member has digest {r.digest[:16]}..."
    )

published = [v for v in meshnb.testing.vectors()["runs"] if v["steps"] == STEPS and v["systems"] in runs]
assert published, "no published vector for these runs"
for v in published:
    r = runs[v["systems"]]
    assert (r.digest, r.trace_digest, r.params_hex) == (v["digest"], v["trace_digest"], v["params"])
    print(f"N = {v['systems']}: digest, trace digest and params match the published vector")

# %%
x = runs[1].view["X"].astype(np.float64)
y = runs[1].view["Y"].astype(np.float64)
lsq = np.polynomial.polynomial.polyfit(x, y, 3)  # float64 least squares
lsq_mse = np.mean((np.polynomial.polynomial.polyval(x, lsq) - y) ** 2)

fig, axes = plt.subplots(2, len(SIZES), figsize=(12, 6.5), sharey="row")
steps = np.arange(STEPS)
tail = steps[-48:]
for i, (n, r) in enumerate(runs.items()):
    loss = r.trace.view(np.float32)[:, 4] * r.view["INV_BATCH"]  # the loss of each step
    top, bottom = axes[0, i], axes[1, i]
    top.plot((steps + 1) * 32 * n, loss, lw=0.7, color=f"C{i}")
    top.set(
        xscale="log",
        yscale="log",
        xlabel="samples seen (32 N a step)",
        title=f"N = {n}" + (" (full batch)" if n == 8 else ""),
    )
    bottom.plot(tail, loss[tail], "o-", ms=3, lw=0.8, color=f"C{i}")
    bottom.set(xlabel="step", title=f"N = {n}: the last 48 steps")
    for ax in (top, bottom):
        ax.axhline(lsq_mse, color="k", ls="--", lw=1)
axes[0, 0].set_ylabel("loss of the step (MSE, y units^2)")
axes[1, 0].set_ylabel("loss of the step (MSE, y units^2)")
axes[0, 0].plot([], [], "k--", lw=1, label="least-squares cubic")
axes[0, 0].legend(loc="upper right")
for ax in axes[0, 1:]:
    ax.sharex(axes[0, 0])  # one samples axis: the shift to the right is the cost of the larger batches
axes[0, 0].set_xlim(20, 1.5 * 32 * max(SIZES) * STEPS)
fig.suptitle(
    f"Loss per step, {STEPS:,} steps, learning rate 0.5. What to see: every N gets near the dashed line in the "
    "same steps, so N = 8 reads 8x the samples (top); the loop's levels, one per place in the cycle (bottom)",
    fontsize=10,
)
fig.tight_layout()
plt.show()

reach = {}
for n, r in runs.items():
    loss = r.trace.view(np.float32)[:, 4] * r.view["INV_BATCH"]
    reach[n] = int(np.flatnonzero(loss < 2 * lsq_mse)[0]) + 1  # steps until a step's loss is below 2x the floor
    print(
        f"N = {n}: first loss below twice the least-squares MSE at step {reach[n]}, after {reach[n] * 32 * n:,} samples"
    )
# The same steps (to one step: 3.2 derives it from the cycle's rate per step), so N = 8 reads 8x the samples.
assert max(reach.values()) - min(reach.values()) <= 1 and abs(reach[8] * 8 / reach[1] - 8) <= 8 / reach[1]
levels = {n: np.unique(r.trace.view(np.float32)[-48:, 4] * r.view["INV_BATCH"]) for n, r in runs.items()}
print("distinct loss values in the last 48 steps:", {n: len(v) for n, v in levels.items()})
# Grouped by the step's place in the batch cycle (t mod 8 / N): one level per place, a word or two wide.
by_place, width, apart = {}, {}, {}
for n, r in runs.items():
    tail_loss, m = r.trace.view(np.float32)[-48:, 4] * r.view["INV_BATCH"], 8 // n
    by_place[n] = [tail_loss[tail % m == k].astype(np.float64) for k in range(m)]
    width[n] = max(v.max() / v.min() - 1 for v in by_place[n])
    centres = np.sort([v.mean() for v in by_place[n]])
    apart[n] = (centres[1:] / centres[:-1] - 1).min() if m > 1 else np.inf
    apart_text = f", the places {apart[n]:.1e} apart" if m > 1 else ""
    print(f"N = {n}: {m} place(s) in the cycle, each within {width[n]:.1e} (relative){apart_text}")
assert len(levels[1]) > 8 and len(levels[2]) > 4  # more float32 values than levels: the orbit is 48 steps long
assert max(width.values()) < 1e-6 and apart[1] > 1e-4 and apart[2] > 1e-4
spread4 = levels[4].max() / levels[4].min() - 1
print(f"N = 4: the levels differ by {spread4:.1e} (relative); N = 8: {levels[8]} against {lsq_mse:.7f}")
assert spread4 < 1e-5 and levels[4].min() > lsq_mse and abs(levels[8].max() / lsq_mse - 1) < 1e-5

# %% [markdown]
# **What the plots show.** Top: the whole run, against the samples seen. All four need about the
# same number of *steps* to get near the least-squares line (dashed; the step counts are printed
# above): same learning rate, and each step's gradient is a mean over its samples. So *at this
# fixed LR* the larger clusters are slower per sample seen: N = 8 reads about 8 times the samples
# for the same progress. That is the LR's doing, not the cluster's: at equal `lr / N` every N needs
# the same samples, in N times fewer steps (section 3.2). Bottom: the last 48 steps. With N = 1 the
# loss keeps the sawtooth of notebook 01: 8 levels, one per batch (13 distinct float32 values,
# printed: the run is on a 48-step orbit, so a level moves by a word or two from one pass to the
# next); N = 2 has 4 levels, one per pair of batches (5 values). With N = 4 the
# steps alternate between two halves of the data that mirror each other, and their losses come out
# equal to six digits: a flat line, but a little above the least-squares line, since the params
# still swing between the halves (the table below). With N = 8 every step sees all 256 samples: a
# flat line at the least-squares value.

# %%
print(f"{'N':>2} {'a':>12} {'c':>12} {'max |p - p_lsq|':>16}")
for n, r in runs.items():
    p = r.params.astype(np.float64)
    print(f"{n:>2} {p[0]:12.3e} {p[2]:12.3e} {np.abs(p - lsq).max():16.3e}")

# %% [markdown]
# The gap of notebook 01 comes from seeing one batch at a time. At this one LR it shrinks with N,
# but not because each step sees more of the data: it shrinks because `lr / N` does, the gap going
# as `lr / N` (section 3.2; at *equal* `lr / N` the loops of N = 1, 2, 4 differ by the within-group
# pairs, up to 25% in the largest param, 3.2.1). Only N = 8, where every step sees every sample, has
# no loop: `a` and `c` are within about `1e-7` of zero instead of `4e-3`.
# `b` and `d` stop about `1e-5` short of the least-squares values: there, along the direction where
# `b` and `d` trade off against each other, the float32 steps stop making progress: their updates
# round away (notebook 06 shows why and how far). The next cell runs 16 times longer.

# %%
longer = meshnb.train(STEPS * 16, systems=8, backend="fused")
print(f"N = 8 after {STEPS:,} steps:  {runs[8].params_hex}")
print(f"N = 8 after {STEPS * 16:,} steps: {longer.params_hex}")
same_bd = longer.params_hex[1::2] == runs[8].params_hex[1::2]
print("b and d: the same words", same_bd, "; a and c move, at sizes", np.abs(longer.params[::2]).max(), "and below")
assert same_bd and np.abs(longer.params[::2]).max() < 1e-6

# %% [markdown]
# Running 16 times longer leaves `b` and `d` on the same words; `a` and `c` keep jittering about 0
# at the size printed (rounding noise in sums that should cancel). Float64 gradient descent, sketched
# in notebook 01, gets within `1e-13`.

# %% [markdown]
# ## 3.2 Clusters at equal lr/N
#
# A cluster step applies `lr` times the mean gradient over its `32 N` samples, that is `lr / N`
# times the *sum* of its N batches' mean gradients, all taken at the same params. N single-system
# steps at LR `eta = lr / N` take each gradient where the previous step left the params: their map is
# `(I - eta A_N) ... (I - eta A_1) = I - eta (A_1 + ... + A_N) + eta^2 sum_{j<k} A_k A_j - ...`, the
# cluster step's `I - eta (A_1 + ... + A_N)` plus the *within-group pairs*, second order in `eta`. So
# the fair comparison holds the LR per batch, `lr / N`, fixed. We run N = 1, 2, 4, 8 at
# `lr / N` = 1/32, 1/16, 1/8 and 1/5 (the range every claim below speaks of; 3.2.1 scans the float64
# loop from `lr / N = 2^-12` to 1/5), each for `1024 / lr` steps (the same number of the slow mode's
# time constants, a whole number of cycles), and read:
#
# - **samples to converge**: the mean loss of each cycle (every sample once) against its final
#   value; converged from the first cycle after which it stays within 1e-3 of the way from the
#   first cycle's;
# - **the parameter gap and the excess loss** at the run's end (a cycle's end) against the
#   least-squares cubic, beside the exact float64 loop of the same cluster.
#
# How far up `lr / N` can go is set by the stability of the cycle: the product of the per-step maps
# `I - lr A_t` over one cycle must have spectral radius below 1 (float64, scanned on a fine grid of LR).

# %%
ETAS = [1 / 32, 1 / 16, 1 / 8, 1 / 5]
V = np.vander(x, 4, increasing=True)
A_full = V.T @ V / 256


def cycle(n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(A_t, c_t) of each step of a cluster of n's batch cycle: its gradient is A_t p - c_t."""
    out = []
    for t in range(8 // n):
        rows = np.concatenate([np.arange((t * n + k) % 8, 256, 8) for k in range(n)])
        out.append((V[rows].T @ V[rows] / (32 * n), V[rows].T @ y[rows] / (32 * n)))
    return out


def float64_loop_offset(lr: float, n: int) -> np.ndarray:
    """The exact float64 loop's offset from the least squares at a cycle's end: the composed map's fixed point.

    Solved for the offset d = p - p* itself: a step is d <- (I - lr A_t) d - lr r_t, r_t = A_t p* - c_t
    (centred, so that the r_t sum to zero as at the exact p*), and I - M is built as a sum, not as I minus
    M's rounded product. Solving for p and subtracting p* instead loses ~1e-11 to cancellation, digits that
    a small LR's residual against the first order (3.2.1) would print as its own.
    """
    steps = cycle(n)
    r = np.array([a_t @ lsq - c_t for a_t, c_t in steps])
    r -= r.mean(axis=0)
    i_minus_m, c = np.zeros((4, 4)), np.zeros(4)
    for (a_t, _), r_t in zip(steps, r, strict=True):
        i_minus_m, c = i_minus_m + lr * a_t @ (np.eye(4) - i_minus_m), c - lr * (a_t @ c + r_t)
    return np.linalg.solve(i_minus_m, c)


def radius(lr: float, n: int) -> float:
    m = np.eye(4)
    for a_t, _ in cycle(n):
        m = (np.eye(4) - lr * a_t) @ m
    return float(np.abs(np.linalg.eigvals(m)).max())


lr_grid = np.linspace(1.5, 2.0, 2001)
lr_max = {n: float(lr_grid[np.argmax([radius(lr, n) >= 1 for lr in lr_grid])]) for n in SIZES}
assert all(radius(1.5, n) < 1 for n in SIZES)  # stable below the scanned range
samples, gap, gap64, excess, stall_bound, stall_bd = {}, {}, {}, {}, {}, {}
for eta in ETAS:
    for n in SIZES:
        lr = float(np.float32(n * np.float32(eta)))  # n times the f32 LR per batch: exact, n a power of 2
        steps = round(1024 / lr)
        r = meshnb.train(steps, systems=n, backend="fused", set_lr={0: np.float32(lr).view(np.uint32)}, keep_trace=True)
        m = 8 // n
        pass_loss = (
            (r.trace.view(np.float32)[:, 4] * r.view["INV_BATCH"]).astype(np.float64).reshape(-1, m).mean(axis=1)
        )
        off = np.abs(pass_loss - pass_loss[-1]) > 1e-3 * (pass_loss[0] - pass_loss[-1])
        samples[eta, n] = 256 * (int(np.flatnonzero(off)[-1]) + 1)
        d = r.params.astype(np.float64) - lsq
        gap[eta, n], excess[eta, n] = np.linalg.norm(d), d @ A_full @ d
        if n == 8:  # the stall set's bound on b and d (notebook 06): (|A^-1_jb| ulp(b) + |A^-1_jd| ulp(d)) / (2 lr)
            ulp_bd = np.spacing(np.abs(r.params[[1, 3]])).astype(np.float64)
            stall_bound[eta] = np.linalg.norm(np.abs(np.linalg.inv(A_full)[[1, 3]][:, [1, 3]]) @ ulp_bd / (2 * lr))
            stall_bd[eta] = np.linalg.norm(d[[1, 3]])
        gap64[eta, n] = np.linalg.norm(float64_loop_offset(lr, n))

print(
    "stability ceiling (spectral radius of the cycle's map = 1): "
    + ", ".join(f"N = {n}: lr {lr_max[n]:.4f}, lr/N {lr_max[n] / n:.4f}" for n in SIZES)
)
print(f"2 / lambda_max(A) = {2 / np.linalg.eigvalsh(A_full)[-1]:.4f}")
print(f"{'lr/N':>6} {'N':>2} {'steps':>6} {'samples':>8} {'|p - p*|':>10} {'float64 loop':>12} {'excess':>10}")
for eta in ETAS:
    for n in SIZES:
        row = f"{eta:6.4f} {n:2} {samples[eta, n] // (32 * n):6} {samples[eta, n]:8} {gap[eta, n]:10.3e}"
        loop = f"{gap64[eta, n]:12.3e}" if gap64[eta, n] > 1e-12 else f"{'< 1e-12':>12}"  # N = 8: rounding
        print(f"{row} {loop} {excess[eta, n]:10.3e}")
# Samples to converge: K / (lr/N) plus a fixed number of cycles (the first cycle, the reference, is N's own).
spread = np.array([max(samples[e, n] for n in SIZES) / min(samples[e, n] for n in SIZES) for e in ETAS])
same_samples = float(spread.max())
spread_slope = np.polyfit(np.log(ETAS), np.log(spread - 1), 1)[0]
fit_resid, fits = {}, {}
for n in SIZES:
    inv = 1 / np.array(ETAS)
    k_n, off_n = np.polyfit(inv, [samples[e, n] for e in ETAS], 1)
    fits[n] = (k_n, off_n)
    fit_resid[n] = np.abs(k_n * inv + off_n - [samples[e, n] for e in ETAS]).max()
    print(f"N = {n}: samples to converge = {k_n:.0f} / (lr/N) {off_n:+.0f}, off the fit by at most {fit_resid[n]:.0f}")
print(
    "samples to converge, largest / smallest over N, at lr/N = "
    + ", ".join(f"{e:.4g}: {q:.4f}" for e, q in zip(ETAS, spread))
    + f"; the spread - 1 goes as (lr/N)^{spread_slope:.2f}"
)
n8_share = max(gap[e, 8] / gap[e, 1] for e in ETAS)
print(
    f"N = 8's whole gap (float32's stall): at most {100 * n8_share:.1f}% of N = 1's; in b and d "
    + ", ".join(f"{stall_bd[e] / stall_bound[e]:.3f}" for e in ETAS)
    + " of the stall set's bound"
)
assert max(ETAS) < min(lr_max[n] / n for n in SIZES) == lr_max[8] / 8
# 3.1 at LR 0.5: the slow mode shrinks by the cycle's radius per step, radius(0.5, N)^(N/8), the same for every N
# to 0.1%, so the steps to twice the floor are N = 1's times ln(rate_1) / ln(rate_N), to the one step a read has.
rate = {n: radius(0.5, n) ** (n / 8) for n in SIZES}
reach_theory = {n: reach[1] * np.log(rate[1]) / np.log(rate[n]) for n in SIZES}
print(
    "3.1, LR 0.5: the slow mode's rate per step "
    + ", ".join(f"N = {n}: {rate[n]:.6f}" for n in SIZES)
    + "; steps to twice the floor, measured / from the rate: "
    + ", ".join(f"{reach[n]} / {reach_theory[n]:.1f}" for n in SIZES)
)
assert all(abs(reach[n] - reach_theory[n]) <= 1 for n in SIZES)
# Read once a cycle: a run's samples are seen to one cycle (256 samples), so the fit leaves less than one.
assert max(fit_resid.values()) < 256, f"a fit misses by {max(fit_resid.values()):.0f} samples, one cycle is 256"
# A fixed number of cycles apart: the relative spread falls in proportion to lr/N (slope 1), towards 1.
assert 0.8 < spread_slope < 1.2 and (np.diff(spread) > 0).all()
# N = 8's gap is float32's stall: b and d inside the stall set, a and c jittering at 1e-7 at most.
assert all(stall_bd[e] <= stall_bound[e] and gap[e, 8] ** 2 - stall_bd[e] ** 2 < 1e-13 for e in ETAS)
assert all(abs(gap[e, n] / gap64[e, n] - 1) < 0.1 for e in ETAS[1:] for n in (1, 2, 4))

# %% [markdown]
# ### 3.2.1 The loop at equal lr/N: the within-group pairs
#
# The loop's offset from the least-squares cubic `p*` is first order in `eta = lr / N`. Write the
# step of a cluster's cycle as `e <- e - lr (Abar_s e + rbar_s)`, with `e = p - p*`, `Abar_s` and
# `rbar_s = Abar_s p* - cbar_s` the means over the step's batches (the residual gradients `r_g` of the
# 8 batches at `p*` sum to 0). To first order `e = lr u`, `u` falls by `rbar_s` at each step, and the
# loop closes only if `sum_s Abar_s u_{s-1} = 0`; at the end of a cycle that gives
#
# `p_end - p* = (eta / 8) A^-1 sum_{g < h, g and h in different steps} A_h r_g + O(eta^2)`
#
# over the pairs of batches `g < h` (`A` = the mean of the 8 `A_g`). N = 1 (notebook 01's `u_7`) has
# all 28 pairs; a cluster has none *within* a step, where its members' gradients are taken at the
# same params: N = 2 drops 4 of them (24 left), N = 4 drops 12 (16 left), N = 8 all (no loop). The
# within-group pairs are second order in a step's map but first order in the loop, which is itself
# of order `eta`: at equal `lr / N` the loops are *not* the same as `lr / N -> 0`. Their ratio tends
# to the ratio of the two sums, printed below; the exact float64 loop (the cycle's fixed point, solved
# directly, no expansion) checks the derivation: the first-order term must miss it by `O(eta^2)`,
# a relative residual that falls in proportion to `eta`.

# %%
batch = []
for g in range(8):
    v_g = V[g::8]  # batch g: samples g, g + 8, ..., as the program reads them
    batch.append((v_g.T @ v_g / 32, v_g.T @ (v_g @ lsq - y[g::8]) / 32))  # (A_g, r_g at the least squares)


def cross_pairs(n: int) -> list[tuple[int, int]]:
    """The pairs of batches g < h that a cycle of a cluster of n takes in different steps."""
    return [(g, h) for h in range(8) for g in range(h) if h // n != g // n]


def first_order(n: int) -> np.ndarray:
    """The loop's offset at a cycle's end per unit of lr/N: (1/8) A^-1 sum over cross-step pairs A_h r_g."""
    pairs = [batch[h][0] @ batch[g][1] for g, h in cross_pairs(n)]
    return np.linalg.solve(8 * A_full, np.sum(pairs, axis=0) if pairs else np.zeros(4))


ETA_SCAN = np.geomspace(2.0**-12, 0.2, 33)
u_n = {n: first_order(n) for n in SIZES}
exact = {n: np.array([float64_loop_offset(n * e, n) for e in ETA_SCAN]) for n in (1, 2, 4)}
exact_gap = {n: np.linalg.norm(exact[n], axis=1) for n in exact}
exact_excess = {n: np.einsum("ij,jk,ik->i", exact[n], A_full, exact[n]) for n in exact}
limit = {n: np.linalg.norm(u_n[n]) / np.linalg.norm(u_n[1]) for n in (2, 4)}
limit_excess = {n: (u_n[n] @ A_full @ u_n[n]) / (u_n[1] @ A_full @ u_n[1]) for n in (2, 4)}
ratio = {n: exact_gap[n] / exact_gap[1] for n in (2, 4)}
small = ETA_SCAN <= 1 / 64
resid_slope = {}
for n in (1, 2, 4):
    resid = np.linalg.norm(exact[n] - np.outer(ETA_SCAN, u_n[n]), axis=1) / exact_gap[n]
    resid_slope[n] = np.polyfit(np.log(ETA_SCAN[small]), np.log(resid[small]), 1)[0]
    print(
        f"N = {n}: first-order gap {np.linalg.norm(u_n[n]):.5f} x lr/N; off the exact float64 loop by "
        f"{resid[0]:.1e} (relative) at lr/N = 2^-12, {resid[-1]:.3f} at 1/5; the residual goes as "
        f"(lr/N)^{resid_slope[n]:.3f}"
    )
cross = float(np.interp(1.0, ratio[4], ETA_SCAN))  # the N = 4 ratio rises through 1 here
measured_ratio = {n: np.array([gap[e, n] / gap[e, 1] for e in ETAS]) for n in (2, 4)}
for n in (2, 4):
    print(
        f"N = {n} / N = 1 at equal lr/N: gap {ratio[n][0]:.4f} at 2^-12 (limit {limit[n]:.4f}: "
        f"{len(cross_pairs(n))} of 28 pairs), "
        f"{ratio[n][-1]:.3f} at 1/5; excess {exact_excess[n][0] / exact_excess[1][0]:.4f} "
        f"(limit {limit_excess[n]:.4f}) to {exact_excess[n][-1] / exact_excess[1][-1]:.3f}; meshnb "
        + ", ".join(f"{q:.3f}" for q in measured_ratio[n])
    )
print(
    f"N = 4's loop is N = 1's size at lr/N = {cross:.3f}; max |p* offset| of N = 4 / N = 1 as lr/N -> 0: "
    f"{np.abs(u_n[4]).max() / np.abs(u_n[1]).max():.4f}"
)
# The derivation: its error is second order in a first-order gap, a relative residual that goes as lr/N.
assert all(0.95 < q < 1.05 for q in resid_slope.values()) and np.abs(u_n[8]).max() == 0
assert all(abs(ratio[n][0] / limit[n] - 1) < 1e-3 for n in (2, 4))  # the scan's end meets the limit
assert all(abs(exact_excess[n][0] / exact_excess[1][0] / limit_excess[n] - 1) < 2e-3 for n in (2, 4))
# Over the whole range the N = 4 loop is below N = 1's for small lr/N and above it from `cross` on.
assert (np.diff(ratio[4]) > 0).all() and limit[4] < 0.9 and ratio[4][-1] > 1.2 and ETAS[1] < cross < ETAS[2]
# meshnb's float32 runs follow the float64 ratio where float32's stall is small (lr/N >= 1/16).
f64_at = {n: np.array([gap64[e, n] / gap64[e, 1] for e in ETAS]) for n in (2, 4)}
assert all(np.abs(measured_ratio[n][1:] / f64_at[n][1:] - 1).max() < 0.1 for n in (2, 4))

# %%
fig, (ax0, ax1, ax2) = plt.subplots(1, 3, figsize=(14, 4.4))
for i, n in enumerate(SIZES):
    ax0.semilogx(
        ETAS,
        [samples[e, n] * e for e in ETAS],
        "os^D"[i],
        ms=9 - 1.5 * i,
        mfc="none",
        mew=1.5,
        color=f"C{i}",
        label=f"N = {n}",
    )
    ax1.loglog(
        ETAS,
        [gap[e, n] for e in ETAS],
        "os^D"[i],
        ms=9 - 1.5 * i,
        mfc="none",
        mew=1.5,
        color=f"C{i}",
        label=f"N = {n}, meshnb" + (" (float32's stall)" if n == 8 else ""),
        zorder=3,
    )
    if n < 8:
        ax1.loglog(ETA_SCAN, exact_gap[n], "-", lw=1, color=f"C{i}")
        ax1.loglog(ETA_SCAN, ETA_SCAN * np.linalg.norm(u_n[n]), ":", lw=1.5, color=f"C{i}")
    eta_line = np.linspace(ETAS[0], ETAS[-1], 50)
    ax0.semilogx(eta_line, fits[n][0] + fits[n][1] * eta_line, "-", lw=1, color=f"C{i}")
for i, n in ((1, 2), (2, 4)):
    ax2.semilogx(ETA_SCAN, ratio[n], "-", lw=1.5, color=f"C{i}", label=f"N = {n}: exact float64 loop")
    ax2.axhline(limit[n], color=f"C{i}", ls=":", lw=1.5, label=f"N = {n}: first-order limit {limit[n]:.3f}")
    ax2.semilogx(ETAS, measured_ratio[n], "os^D"[i], ms=7, mfc="none", mew=1.5, color=f"C{i}", label=f"N = {n}: meshnb")
ax2.axhline(1, color="k", lw=0.8)
ax0.plot([], [], "k-", lw=1, label="fit: K / (lr/N) + a few cycles")
ax1.plot([], [], "k-", lw=1, label="exact float64 loop")
ax1.plot([], [], "k:", lw=1.5, label="first order: (lr/N) |u_N|")
ax0.set(xlabel="lr / N (per batch)", ylabel="samples to converge x lr/N", title="Samples to converge x lr/N")
ax1.set(xlabel="lr / N (per batch)", ylabel="|p - p*| at a cycle's end (param units)", title="The loop's gap")
ax2.set(xlabel="lr / N (per batch)", ylabel="gap of N / gap of N = 1 (ratio)", title="Equal lr/N: N's loop / N = 1's")
for ax in (ax0, ax1, ax2):
    ax.set_xticks(ETAS, ["1/32", "1/16", "1/8", "1/5"])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.legend(fontsize=7)
for ax in (ax1, ax2):
    ax.set_xticks([2.0**-12, 2.0**-8, 1 / 32, 1 / 8, 1 / 5], ["2^-12", "2^-8", "1/32", "1/8", "1/5"])
fig.suptitle(
    "What to see: the same samples (left, a few cycles apart); the loop's gap follows its first-order line "
    "(middle, dotted) and, at equal lr/N, is N = 1's only near one lr/N (right)",
    fontsize=9,
)
fig.tight_layout()
plt.show()
display(
    Markdown(
        f"**What a cluster buys, and what it does not.** At equal `lr / N`, from 1/32 to 1/5, every N needs the "
        f"same samples to converge up to a fixed few cycles (largest / smallest {spread.min():.3f} at 1/32 to "
        f"{same_samples:.3f} at 1/5; a constant number of cycles apart, so the spread falls as "
        f"`(lr / N)^{spread_slope:.2f}` towards 1): N times fewer steps, the N members reading their batches in "
        "parallel, a step costing one batch plus the exchange. It does not buy fewer samples: they go as "
        "`K / (lr / N)` plus a few cycles for every N (the fits above). And it does not buy a smaller loop for "
        "free: the loop's gap is `(lr / N) |u_N|` to first order (middle, dotted, beside the exact float64 loop "
        f"and meshnb's points), where `u_N` drops the within-group pairs. As `lr / N -> 0` N = 2's loop is "
        f"{limit[2]:.3f} and N = 4's {limit[4]:.3f} of N = 1's (the excess {limit_excess[2]:.3f} and "
        f"{limit_excess[4]:.3f}); N = 4's ratio rises with `lr / N`, through 1 at {cross:.3f}, to "
        f'{ratio[4][-1]:.2f} at 1/5 (right). So "equal `lr / N`, the same loop" holds only near '
        f"`lr / N = {cross:.2f}`; what holds over the whole range is that the gap goes as `lr / N`, and a "
        "smaller loop costs samples whatever N. Only N = 8, whose every step is the full gradient, has no loop "
        f"(its gap, float32's stall, is at most {100 * n8_share:.1f}% of N = 1's: `b` and `d` end inside the "
        f"stall set of notebook 06, at {min(stall_bd[e] / stall_bound[e] for e in ETAS):.2f} to "
        f"{max(stall_bd[e] / stall_bound[e] for e in ETAS):.2f} of its bound). At `lr / N = 1/32` meshnb's "
        "N = 4 point sits above the float64 ratio: there float32's stall is a tenth of the gap. And a cluster "
        f"lowers the ceiling: the cycle is stable up to about the same LR for every N ({min(lr_max.values()):.3f} "
        f"to {max(lr_max.values()):.3f}, near `2 / lambda_max(A)`), so `lr / N` can go N times less far: "
        f"{lr_max[8] / 8:.3f} for N = 8 against {lr_max[1]:.3f} for N = 1."
    )
)

# %% [markdown]
# ## 3.3 A stalled member
#
# The `threads` backend runs each member on its own thread, with a real exchange page: a member
# that has published waits for the others for at most `timeout_ms`. If the wait times out, the task
# stops with the round still pending (the page's `ERR = 1`, and the `timeouts` counter goes up), and
# the host calls the task again, which waits again for the same round. Nothing is recomputed, so a
# timeout changes no bits.
#
# `stalls=[(k, task, ms)]` makes member `k` sleep `ms` milliseconds at the start of its task number
# `task` (counted from 0, retries included). We stall member 2 of a 4-member cluster for 300 ms, with
# a 20 ms timeout, and compare with the fault-free fused run.

# %%
clean = meshnb.train(1024, systems=4, backend="fused")
stalled = meshnb.train(1024, systems=4, backend="threads", timeout_ms=20, stalls=[(2, 3, 300)])

rows = ["| member | timeouts | steps | digest | same as fault-free |", "|---|---|---|---|---|"]
for s, c in zip(stalled.systems, clean.systems):
    rows.append(
        f"| {s.system} | {s.counters['timeouts']} | {s.counters['steps']} | `{s.digest[:16]}...` | "
        f"{s.digest == c.digest and s.trace_digest == c.trace_digest} |"
    )
display(Markdown("\n".join(rows)))
assert all(s.digest == clean.digest and s.trace_digest == clean.trace_digest for s in stalled.systems)
assert sum(s.counters["timeouts"] for s in stalled.systems) > 0

# %% [markdown]
# **What the table shows.** While member 2 sleeps, the other three publish their sums for the next
# round and wait; each time a wait reaches 20 ms it times out and is retried, at most 300 / 20 = 15
# times while member 2 sleeps (fewer on a busy machine, where the retries themselves take time: the
# table counts this run's). Member 2 itself has little to wait for: when it wakes, the others' sums
# are already there.
# Once it publishes, the round completes and the run goes on. The final digest and trace digest of
# every member equal those of the fault-free run: the stall cost time, not bits.

# %% [markdown]
# ## 3.4 Speed
#
# Timings depend on the machine and its load; the bits do not. `meshnb bench` measures every backend
# (fused, threads, processes; `mpi` under `mpiexec`) and names the machine it ran on; the README's
# Speed section and the performance page give its figures. In short: the fused backend does the work
# of N members in one loop with no exchange; `threads` and `processes` pay at every step for the
# exchange (publish, wait, read), which is what they exist to exercise, the way a real mesh does.
