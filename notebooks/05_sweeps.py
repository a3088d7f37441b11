# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 5. Sweeps: the questions a learning-rate sweep answers
#
# `meshnb.sweep` runs M independent systems in one call, each exactly the system `meshnb.train`
# would run alone (same page, params, digest and trace digest, bit for bit), many to a vector
# register. Here it runs tens of thousands of systems to answer the questions one asks of a
# learning rate (LR):
#
# 1. How good is the fit after a given number of steps, for every LR?
#    [5.1](#51-the-loss-over-all-256-samples-against-lr-and-step)
# 2. [Which LR is best for a given step budget?](#52-the-best-lr-for-a-step-budget)
# 3. [How many steps does each LR need to settle?](#53-steps-to-settle)
# 4. [Where does training diverge, and how does that compare with 2 / lambda_max?](#54-the-divergence-threshold)
# 5. Where do float mode Z and IEEE float32 part as the LR shrinks into the subnormals?
#    [5.5](#55-mode-z-and-ieee-at-tiny-learning-rates)
# 6. [Each point's digest, for checking an executor.](#56-every-points-digest-for-checking-an-executor)
#
# Every number in the text below is printed by the cell above it, and the cell asserts it: a
# change to meshnb that makes a sentence false makes the notebook fail in the tests.

# %%
# %matplotlib inline
import json

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display
from matplotlib.colors import LogNorm

import meshnb
from meshnb import sweep

plt.rcParams.update({"figure.figsize": (10, 4.2), "figure.dpi": 90, "axes.grid": True, "grid.alpha": 0.3})


def f32_word(value: float) -> int:
    """The bits of a float32 (a Python float is rounded to float32 first)."""
    return int(np.float32(value).view(np.uint32))


def word_f32(word: int) -> float:
    """The float32 whose bits are `word`, as a Python float."""
    return float(np.uint32(word).view(np.float32))


# %% [markdown]
# ## 5.1 The loss over all 256 samples against LR and step
#
# A system's `last_loss` is the loss of its last step: the mean squared error on *that step's batch*
# only (batch 7 after a multiple of 8 steps). It is the wrong yardstick for comparing LRs: even the
# least-squares cubic scores differently on each batch. The question is how well the params fit all
# 256 samples. meshnb does not compute that number, so we compute it here: **a float64 evaluation
# of the f32 params** (the page's samples `X` and `Y`, read as float32 and widened to float64; the
# cubic and its mean squared error in float64). It is a measurement of the f32 state, not a
# quantity the program produces bit-exactly.
#
# The sweep: 8,192 LRs spaced evenly in log from `1e-4` to `2`, all from `init`, run for 4,096 steps
# in float mode Z. To see every LR at many step counts, the run is cut into pieces: each piece
# continues from the previous piece's final pages (`view_in`, with `keep_pages=True`), which
# resumes bit for bit; the cell checks that the chained run gives the same digests as one call of
# 4,096 steps.

# %%
STEPS = 4096
LRS = np.geomspace(1e-4, 2.0, 8192).astype(np.float32)
# Where the params are read: after whole passes of the 8 batches (step counts that are multiples of 8), since
# the fit depends on where in the pass a run stops (notebook 01's loop).
CHECKPOINTS = 8 * np.unique(np.geomspace(1, STEPS // 8, 32).round().astype(int))

init = meshnb.train(0)
x = init.view["X"].astype(np.float64)  # the 256 samples as the program holds them, widened
y = init.view["Y"].astype(np.float64)
V = np.vander(x, 4, increasing=True)  # columns 1, x, x^2, x^3


def mse_all(params: np.ndarray) -> np.ndarray:
    """Mean squared error over all 256 samples of f32 params [M, 4], evaluated in float64."""
    with np.errstate(all="ignore"):
        return np.mean((params.astype(np.float64) @ V.T - y) ** 2, axis=1)


start_mse = float(mse_all(np.zeros((1, 4)))[0])
lsq = np.linalg.lstsq(V, y, rcond=None)[0]
lsq_mse = float(mse_all(lsq[None, :])[0])

mse = np.empty((len(CHECKPOINTS), len(LRS)))
done, part = 0, None
for i, t in enumerate(CHECKPOINTS):
    if part is None:
        part = sweep(int(t), lrs=LRS, keep_pages=True)
    else:
        part = sweep(int(t) - done, view_in=part.final_pages, keep_pages=True)
    done = int(t)
    mse[i] = mse_all(part.params)
final = part
one_call = sweep(STEPS, lrs=LRS)
assert final.digests == one_call.digests, "the chained sweep is not the one-call sweep"
overflowed = ~np.isfinite(mse[-1])
worse = ~overflowed & (mse[-1] > start_mse)
print(
    f"{len(LRS):,} systems x {STEPS:,} steps in {len(CHECKPOINTS)} pieces; "
    f"the chained run's digests equal one call's: {final.digests == one_call.digests}"
)
print(f"MSE over all samples at the start {start_mse:.5f}; least-squares cubic {lsq_mse:.6f}")
print(
    f"at step {STEPS}: {overflowed.sum()} systems overflowed (a param inf or NaN), "
    f"{worse.sum()} fit worse than at the start"
)
print(
    f"the smallest LR that overflowed: {LRS[overflowed].min():.5g}; "
    f"the smallest that fits worse than the start: {LRS[worse].min():.5g}"
)

# %% [markdown]
# The heatmap needs one more number: the LR where full-batch gradient descent stops being stable.
# An SGD step is `p <- p - lr * (1/n) V_B^T (V_B p - y_B)` on the batch `B` (`n` samples, `V_B`
# its rows of `[1, x, x^2, x^3]`), so the params' error is multiplied by `I - lr * A_B` with
# `A_B = (1/n) V_B^T V_B`, the batch's normal matrix. Averaged over the 8 batches this is
# `A = (1/256) V^T V` over all samples; gradient descent with `A` is stable while
# `lr < 2 / lambda_max(A)`. We compute `A` in float64 from the f32 samples, the batch matrices
# `A_g` (`n = 32`) for comparison, and the LR at which the *cycle* of 8 batch steps,
# `(I - lr A_7) ... (I - lr A_0)`, has spectral radius 1 (bisection in float64).

# %%
A = V.T @ V / 256
eig = np.linalg.eigvalsh(A)
lam_min, lam_max = float(eig[0]), float(eig[-1])
lr_crit = 2 / lam_max
batch_crit = [2 / np.linalg.eigvalsh(V[g::8].T @ V[g::8] / 32)[-1] for g in range(8)]


def cycle_radius(lr: float) -> float:
    """Spectral radius per step of one pass of cyclic SGD's error map (float64)."""
    m = np.eye(4)
    for g in range(8):
        m = (np.eye(4) - lr * (V[g::8].T @ V[g::8] / 32)) @ m
    return float(np.abs(np.linalg.eigvals(m)).max() ** (1 / 8))


lo, hi = 1.0, 2.5
assert cycle_radius(lo) < 1 < cycle_radius(hi)
for _ in range(60):
    mid = (lo + hi) / 2
    lo, hi = (mid, hi) if cycle_radius(mid) < 1 else (lo, mid)
lr_cycle = hi
print(f"eigenvalues of A = V^T V / 256: {np.array2string(eig, precision=5)}")
print(
    f"2 / lambda_max(A) = {lr_crit:.5f};  2 / lambda_max(A_g), g = 0..7: {min(batch_crit):.5f} .. {max(batch_crit):.5f}"
)
print(f"the cycle of 8 batch steps has spectral radius 1 at LR {lr_cycle:.5f}")

# %%
fig, ax = plt.subplots(figsize=(10, 5))
excess = np.ma.masked_invalid(mse - lsq_mse)  # how far above the best any cubic can do
cmap = plt.get_cmap("viridis").with_extremes(bad="0.25", over="tab:pink")
mesh = ax.pcolormesh(
    LRS, CHECKPOINTS, excess, norm=LogNorm(vmin=1e-6, vmax=start_mse - lsq_mse), cmap=cmap, shading="nearest"
)
fig.colorbar(mesh, ax=ax, extend="both", label="MSE over all samples - least-squares MSE (float64 evaluation)")
ok = np.isfinite(mse)
best_k = np.array([np.nanargmin(np.where(ok[i], mse[i], np.nan)) for i in range(len(CHECKPOINTS))])
ax.plot(LRS[best_k], CHECKPOINTS, "w.", ms=5, label="best LR at each step")
ax.axvline(lr_crit, color="tab:red", lw=1.5, label=f"2 / lambda_max(A) = {lr_crit:.4f}")
ax.set_xlim(LRS[0], LRS[-1])
ok = np.isfinite(mse)
best_k = np.array([np.nanargmin(np.where(ok[i], mse[i], np.nan)) for i in range(len(CHECKPOINTS))])
ax.set(
    xscale="log",
    yscale="log",
    xlabel="learning rate",
    ylabel="steps run",
    title="Excess loss over all 256 samples by LR and step\n(pink: worse than the start; dark grey: overflowed)",
)
ax.legend(loc="lower left", facecolor="0.85")
plt.show()
print(
    f"LR {LRS[0]:.0e} after {STEPS} steps: excess {mse[-1, 0] - lsq_mse:.3f} (at the start {start_mse - lsq_mse:.3f})"
)
rows3 = [0, len(CHECKPOINTS) // 2, -1]
print(
    f"best excess at {CHECKPOINTS[rows3].tolist()} steps: "
    f"{np.array2string(mse[rows3, best_k[rows3]] - lsq_mse, precision=6)}"
)
assert mse[-1, 0] - lsq_mse > 0.1 and worse.any() and LRS[worse].max() < LRS[overflowed].min()
mid = len(CHECKPOINTS) // 2
assert mse[-1, best_k[-1]] < mse[mid, best_k[mid]] < mse[0, best_k[0]]

# %% [markdown]
# **What the heatmap shows.** Read a row to compare LRs at one step budget, a column to follow one
# LR through the run. The colour is the MSE over all samples minus the least-squares MSE, the part a
# better training could still remove. The smallest LRs have not got far in 4,096 steps (yellow at
# the top left); the valley of good fits moves to smaller LRs as the budget grows (white dots), and
# along it the excess keeps falling. Just left of the red
# line the runs still converge, but to a wide loop whose end-of-pass point fits worse than the
# start (pink); right of it the error grows every pass until a param overflows (dark grey), the
# later the closer the LR is to the line (section 5.4).

# %% [markdown]
# ## 5.2 The best LR for a step budget

# %%
best_mse = mse[np.arange(len(CHECKPOINTS)), best_k]
k_final = int(best_k[-1])
k_batch = int(np.nanargmin(np.where(np.isfinite(final.last_loss), final.last_loss, np.nan)))
print(f"after {STEPS} steps the lowest MSE over all samples is {best_mse[-1]:.6f}, at LR {LRS[k_final]:.4g}")
print(f"  (the least-squares cubic: {lsq_mse:.6f}; ratio {best_mse[-1] / lsq_mse:.4f})")
print(
    f"the last step's batch loss alone would pick LR {LRS[k_batch]:.4g} "
    f"(batch loss {final.last_loss[k_batch]:.6f}, but MSE over all samples {mse[-1, k_batch]:.6f})"
)
for t in (64, 512, STEPS):
    i = int(np.flatnonzero(t == CHECKPOINTS)[0]) if t in CHECKPOINTS else int(np.argmin(abs(CHECKPOINTS - t)))
    print(f"  budget {CHECKPOINTS[i]:>5} steps: best LR {LRS[best_k[i]]:.4g}, MSE {best_mse[i]:.6f}")
assert LRS[k_final] < 0.5 < LRS[k_batch]  # the two yardsticks disagree, by a factor of several
assert mse[-1, k_batch] > 1.01 * best_mse[-1]

assert LRS[best_k[0]] > 0.9 * lr_crit  # the shortest budget: just below the divergence line
assert LRS[best_k[-1]] < LRS[best_k[len(best_k) // 2]] < LRS[best_k[0]]

fig, (ax0, ax1) = plt.subplots(1, 2)
for t in (16, 64, 256, 1024, STEPS):
    i = int(np.argmin(abs(CHECKPOINTS - t)))
    ax0.loglog(LRS[ok[i]], mse[i, ok[i]] - lsq_mse, lw=1, label=f"{CHECKPOINTS[i]} steps")
ax0.axvline(lr_crit, color="tab:red", lw=1, label="2 / lambda_max(A)")
ax0.set(
    ylim=(1e-7, 2 * start_mse),
    xlabel="learning rate",
    ylabel="MSE - least-squares MSE",
    title="Excess loss by LR at a few budgets\n(clipped: runs past the red line blow up)",
)
ax0.legend(fontsize=8, loc="lower left")
ax1.loglog(CHECKPOINTS, LRS[best_k], "o-", ms=3, label="best LR (left axis)")
ax1.set(xlabel="step budget", ylabel="best learning rate", title="The best LR and its excess loss, by budget")
ax1b = ax1.twinx()
ax1b.loglog(CHECKPOINTS, best_mse - lsq_mse, "s-", ms=3, color="tab:orange", label="its excess loss (right axis)")
ax1b.set_ylabel("best MSE - least-squares MSE", color="tab:orange")
ax1b.grid(False)
handles = ax1.get_legend_handles_labels()[0] + ax1b.get_legend_handles_labels()[0]
ax1.legend(handles=handles, loc="upper right", fontsize=8)
fig.tight_layout()
plt.show()

# %%
display(
    Markdown(
        f"**What the plots show.** With {STEPS:,} steps the best fit to all samples is at LR "
        f"{LRS[k_final]:.3g}, within {100 * (best_mse[-1] / lsq_mse - 1):.2f}% of the least-squares cubic. "
        f"Judged by the last step's batch loss the winner would be LR {LRS[k_batch]:.3g}, whose fit to all "
        f"samples is {100 * (mse[-1, k_batch] / best_mse[-1] - 1):.1f}% worse: the batch loss rewards the "
        "params being near *that batch's* optimum, which a larger LR achieves by swinging further round "
        "the loop of notebook 01. For short budgets the best LR sits just below the divergence line "
        "(progress per step is all that counts); as the budget grows it moves left, since the SGD loop's "
        "excess loss grows with the LR (notebook 06) and a long run can afford slower steps."
    )
)

# %% [markdown]
# ## 5.3 Steps to settle
#
# How many steps does an LR need before its fit stops improving? We run every 16th LR of the sweep
# on to 65,536 steps (the runs continue from their pages at step 4,096) and call an LR *settled* at
# the first step from which its MSE over all samples stays within 1% of its value at 65,536 steps.
# The slowest direction of `A` decays like `(1 - lr lambda_min)^t`, so the reference line is the time
# constant `1 / (lr lambda_min)`.

# %%
LONG = 1 << 16
sub = np.arange(0, len(LRS), 16)
sub = sub[np.isfinite(mse[-1, sub]) & (mse[-1, sub] < start_mse)]
pieces = 8 * np.unique(np.geomspace(STEPS // 8, LONG // 8, 17).round().astype(int))[1:]  # whole passes
long_steps = np.r_[CHECKPOINTS, pieces]
long_mse = np.vstack([mse[:, sub], np.empty((len(pieces), len(sub)))])
pages, done = final.final_pages[sub], STEPS
for i, t in enumerate(pieces):
    part = sweep(int(t) - done, view_in=pages, keep_pages=True)
    pages, done = part.final_pages, int(t)
    long_mse[len(CHECKPOINTS) + i] = mse_all(part.params)
limit = long_mse[-1]
stable = np.abs(long_mse[-2] / limit - 1) < 1e-3  # still moving at the end: not settled within LONG
outside = np.abs(long_mse / limit - 1) > 0.01
last_out = np.array([np.flatnonzero(outside[:, j]).max(initial=-1) for j in range(len(sub))])
settle = np.where(
    stable & (last_out + 1 < len(long_steps)), long_steps[np.minimum(last_out + 1, len(long_steps) - 1)], 0
)
settled = stable & (settle > 0)
ratio = settle[settled] * LRS[sub][settled] * lam_min
print(
    f"{settled.sum()} of {len(sub)} LRs settle within {LONG:,} steps; "
    f"the smallest that does: {LRS[sub][settled].min():.3g}"
)
print(
    f"steps to settle x lr x lambda_min: median {np.median(ratio):.2f} (range {ratio.min():.2f} .. {ratio.max():.2f})"
)
q25, q75 = np.percentile(ratio, [25, 75])
print(f"the middle half of the LRs: {q25:.2f} .. {q75:.2f}")
assert settled.any() and (~settled).any() and q75 / q25 < 1.3

fig, ax = plt.subplots()
ax.loglog(LRS[sub][settled], settle[settled], ".", ms=4, label="steps to settle within 1% (step where it is read)")
lr_line = LRS[sub]
ax.loglog(lr_line, 1 / (lr_line * lam_min), "k:", label="1 / (lr lambda_min): the slowest mode's time constant")
ax.axhline(LONG, color="gray", lw=0.8, ls="--", label=f"end of the run ({LONG:,} steps)")
ax.axvline(lr_crit, color="tab:red", lw=1, label="2 / lambda_max(A)")
ax.set(xlabel="learning rate", ylabel="steps", title="Steps until the fit to all samples stops improving")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# **What the plot shows.** Over the LRs that settle, the steps needed follow the slowest mode's time
# constant `1 / (lr lambda_min)` times a nearly constant factor (steps x lr x lambda_min: the middle
# half of the LRs within the narrow range printed above; the extremes come from reading the fit at
# whole passes only, and from the fast mode near the divergence line): halve the LR, double the steps.
# The smaller LRs do not settle within
# 65,536 steps.

# %% [markdown]
# ## 5.4 The divergence threshold
#
# Bisection on LR *words*: the positive float32 words are ordered as their values, so bisecting the
# integer word finds the smallest float32 LR that diverges, to the last bit. A fit worse than the
# start is no test of divergence (the pink band above converges, to a wide loop); divergence is
# growth without bound, which in float32 ends in overflow. So "diverges within T steps" is: after T
# steps a param is infinite or NaN. Each probe is one `meshnb.train` run; the threshold is found
# for T = 4,096 and T = 65,536, and checked with a sweep of the 512 words on either side.


# %%
def overflows(word: int, steps: int) -> bool:
    return not np.isfinite(meshnb.train(steps, set_lr={0: np.uint32(word)}).params).all()


def bisect(steps: int) -> tuple[int, int]:
    """The words (last that does not overflow within `steps`, first that does), and the probes run."""
    lo, hi = f32_word(1.0), f32_word(2.0)
    assert not overflows(lo, steps) and overflows(hi, steps)
    probes = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if overflows(mid, steps) else (mid, hi)
        probes += 1
    return hi, probes


threshold = {}
for T in (STEPS, 1 << 16):
    hi, probes = bisect(T)
    near = sweep(T, lrs=np.arange(hi - 512, hi + 512, dtype=np.uint32))
    over = ~np.isfinite(near.params).all(axis=1)
    assert not over[:512].any() and over[512:].all(), "the threshold is not a clean edge"
    threshold[T] = word_f32(hi)
    print(
        f"T = {T:>6}: {probes} probes; first LR that overflows: word {hi:08x} = {threshold[T]:.7g} "
        f"({100 * (threshold[T] / lr_crit - 1):+.3f}% from 2/lambda_max, {100 * (threshold[T] / lr_cycle - 1):+.3f}% "
        f"from the cycle's LR); the 512 words below all stay finite, the 512 from it on all overflow"
    )
assert lr_cycle < threshold[1 << 16] < threshold[STEPS]
assert threshold[1 << 16] / lr_cycle - 1 < 2e-3
# In the last sweep (from init, LR 0 .. 2), the smallest LR that overflowed lies at the 4,096-step threshold too.
assert LRS[overflowed].min() >= threshold[STEPS] and LRS[threshold[STEPS] > LRS].max() < threshold[STEPS]

# %%
display(
    Markdown(
        f"Within {STEPS:,} steps the first float32 LR that overflows is {threshold[STEPS]:.6g}; within "
        f"{1 << 16:,} steps, {threshold[1 << 16]:.6g}, "
        f"{100 * (threshold[1 << 16] / lr_cycle - 1):.2f}% above the LR where the cycle of 8 batch steps "
        f"turns unstable ({lr_cycle:.5f}) and {100 * (threshold[1 << 16] / lr_crit - 1):+.2f}% from "
        f"`2 / lambda_max(A)` = {lr_crit:.5f}. Just past the instability the error grows only a little each "
        "pass, so it takes more steps to overflow: the threshold found by running falls toward the cycle's "
        "LR as the runs get longer. The edge is clean: every word below it stays finite, every word from it "
        "on overflows. The one-batch matrices alone would put the line anywhere between "
        f"{min(batch_crit):.4f} and {max(batch_crit):.4f}; the cycle's LR is "
        f"{100 * (1 - lr_cycle / lr_crit):.2f}% below that of their mean `A`."
    )
)

# %% [markdown]
# ## 5.5 Mode Z and IEEE at tiny learning rates
#
# In the middle of the LR range no operation produces a subnormal or a NaN, and mode Z *is* IEEE
# float32: same bits (the first cell checks it on the 8,192 LRs of section 5.1). As the LR shrinks
# toward the bottom of float32 the updates `lr * g` become
# subnormal, which mode Z writes as zero and IEEE keeps. We sweep 2,048 LRs from the smallest
# subnormal (`2^-149`) to `1e-20`, in both modes, keep the final pages and compare them word by word,
# param by param.

# %%
mid_ieee = sweep(STEPS, lrs=LRS, z=False)
same_bits = np.array(one_call.digests) == np.array(mid_ieee.digests)
print(
    f"LR 1e-4 .. 2, {len(LRS):,} LRs: the same digest in both modes for {same_bits.sum():,}; different for "
    f"{(~same_bits).sum()}, all of them runs that overflowed (NaN: canonical in mode Z, not in IEEE): "
    f"{bool(overflowed[~same_bits].all())}"
)
assert same_bits[~overflowed].all() and overflowed[~same_bits].all()

TINY = np.unique(np.geomspace(2.0**-149, 1e-20, 2048).astype(np.float32))
tz = sweep(STEPS, lrs=TINY, keep_pages=True)
ti = sweep(STEPS, lrs=TINY, z=False, keep_pages=True)
wz, wi = tz.final_pages.view("<u4"), ti.final_pages.view("<u4")
fields = {f.name: slice(f.offset // 4, f.offset // 4 + f.count) for f in meshnb.LAYOUT}
differ_fields = sorted({name for name, s in fields.items() if (wz[:, s] != wi[:, s]).any()})
loss_same = bool((wz[:, fields["LOSS"]] == wi[:, fields["LOSS"]]).all())
pdiff = tz.params_words != ti.params_words  # [M, 4]
SMALLEST_NORMAL = 2.0**-126
sub_lr = TINY < SMALLEST_NORMAL
print("page fields that differ between the modes for some LR:", differ_fields)
print("loss ring bit-equal for every LR:", loss_same)
print(
    f"subnormal LRs ({sub_lr.sum()}): mode Z reads LR 0 for all: {(tz.lr_words[sub_lr] == 0).all()}; "
    f"mode Z params all zero: {(tz.params_words[sub_lr] == 0).all()}"
)
last_diff = {}
for j, name in enumerate("abcd"):
    d = np.flatnonzero(pdiff[:, j])
    last_diff[name] = float(TINY[d.max()]) if d.size else None
    ieee_moves = (ti.params_words[sub_lr, j] != 0).mean()
    print(
        f"  {name}: differs for {pdiff[:, j].sum():4} LRs, the largest {last_diff[name]:.3g}; "
        f"IEEE moves it at {100 * ieee_moves:.0f}% of the subnormal LRs"
    )
assert loss_same and set(differ_fields) == {"LR", "PARAMS"}
print(f"the largest |param| of any run: {np.abs(ti.params).max():.2g}")
assert (tz.params_words[sub_lr] == 0).all() and np.abs(ti.params).max() < 1e-15
slow = [n for n in "abcd" if last_diff[n] is not None and last_diff[n] < 10 * SMALLEST_NORMAL]
fast = [n for n in "abcd" if n not in slow]
assert slow == ["b", "d"] and fast == ["a", "c"]

# %%
fig, axes = plt.subplots(1, 4, figsize=(13, 3.6), sharey=True)
floor = 1e-46
for j, (ax, name) in enumerate(zip(axes, "abcd")):
    vi = np.abs(ti.params[:, j].astype(np.float64))
    vz = np.abs(tz.params[:, j].astype(np.float64))
    ax.axvspan(TINY[0], SMALLEST_NORMAL, color="0.9")
    ax.axhspan(floor, SMALLEST_NORMAL, color="tab:blue", alpha=0.06)
    ax.plot(TINY, np.where(vi > 0, vi, floor), lw=1, label="IEEE float32")
    ax.plot(TINY, np.where(vz > 0, vz, floor), "--", lw=1.5, label="mode Z")
    ax.plot(
        TINY[pdiff[:, j]], np.full(pdiff[:, j].sum(), 1e-5), "|", color="tab:red", ms=8, label="Z and IEEE words differ"
    )
    ax.set(
        xscale="log",
        yscale="log",
        ylim=(floor / 10, 1e-2),
        xlabel="learning rate",
        title=f"|{name}| after {STEPS} steps",
    )
    ax.xaxis.set_major_locator(plt.LogLocator(numticks=4))
    ax.yaxis.set_major_locator(plt.LogLocator(numticks=6))
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.yaxis.set_minor_locator(plt.NullLocator())
axes[0].set_ylabel("|param| (0 drawn at the bottom)")
axes[0].legend(fontsize=7, loc="upper left")
fig.suptitle("Grey: subnormal LRs (mode Z reads them as 0); blue band: subnormal params", y=1.02)
fig.tight_layout()
plt.show()

# %%
display(
    Markdown(
        f"**What the plots show.** Below `2^-126` (grey) mode Z reads the LR word as 0: nothing moves "
        "and every param stays exactly 0, while IEEE runs the subnormal LR. Above it both modes run the same "
        "LR, and a param parts only while its update `lr * g` underflows: `a` and `c`, whose gradients are "
        "small (the data are odd, so the even terms nearly cancel), differ up to LR "
        f"{max(last_diff[n] for n in fast):.3g}; `b` and `d`, with gradients of order 0.1 to 1, only up to "
        f"{max(last_diff[n] for n in slow):.3g}, within a factor of 10 of the smallest normal LR. "
        "The loss ring is bit-equal at every LR (params below 1e-15, printed above, change no prediction in float32): "
        "only the PARAMS and LR words tell the modes apart, and the digest, which covers the params, does."
    )
)


# %% [markdown]
# ## 5.6 Every point's digest, for checking an executor
#
# Each system's result is its own: `r.digests[k]`, `r.trace_digests[k]` (with `trace=True`),
# `r.page(k)` (the final page, to continue elsewhere with `view_in`). An executor that runs `init`,
# `SET_LR` with the word `r.lr_words[k]` and 4,096 steps must produce the digest `r.digests[k]`.
# `r.to_records()` (or `r.to_frame()` with pandas) gives a table; the command line writes the same as
# CSV or JSON: `meshnb sweep --lr 1e-4:2:8192:log --steps 4096 --csv sweep.csv`. (How fast a sweep
# runs on a given machine: `meshnb bench`.)

# %%
records = one_call.to_records()
for rec in records[:: len(records) // 4]:
    print(f"LR word {rec['lr_word']}  last loss {rec['last_loss']:<12.6g} digest {rec['digest'][:24]}...")
alone = meshnb.train(STEPS, set_lr={0: int(one_call.lr_words[k_final])})
assert alone.digest == one_call.digests[k_final] and alone.page == one_call.page(k_final)
print(f"system {k_final} (the best LR) run alone by meshnb.train: same digest and same page")
print(json.dumps(records[k_final])[:160], "...")
