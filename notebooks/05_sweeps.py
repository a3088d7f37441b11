# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
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
# 3. [How many steps does each LR need to settle, and where does float32 stop?](#53-steps-to-settle)
# 4. Where does training diverge, for one system and for clusters of 2, 4 and 8?
#    [5.4](#54-the-stability-of-cyclic-sgd-per-cluster-size)
# 5. Where do float mode Z and IEEE float32 part as the LR shrinks into the subnormals?
#    [5.5](#55-mode-z-and-ieee-at-tiny-learning-rates)
# 6. [Each point's digest, for checking an executor.](#56-every-points-digest-for-checking-an-executor)
#
# Beside each measurement stands its theory, computed independently in float64 with numpy
# (the linear maps of the steps), with the residual. Every number in the text is printed by a
# cell and asserted there: a change to meshnb (or to an input) that makes a sentence false makes
# the notebook fail in the tests (`tests/test_notebook_claims_05.py` changes inputs and sees the
# asserts fail).

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
# the fit depends on where in the pass a run stops (notebook 01's loop); 32 budgets spaced in log.
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
# **The theory: the steps as linear maps.** An SGD step on the batch `B` (`n` samples, `V_B` its
# rows of `[1, x, x^2, x^3]`) is `p <- p - lr * (V_B^T V_B p - V_B^T y_B) / n = (I - lr A_B) p + lr b_B`,
# an affine map with the batch's normal matrix `A_B = V_B^T V_B / n`. A cluster of N systems folds
# the sums of N batches (SPEC 8: system `k` of step `t` uses batch `(t N + k) mod 8`) and divides by
# `32 N`, so its step is the same map with `A_B` the mean of the N batches' matrices: N = 1 cycles
# through the 8 batches in 8 steps, N = 2 through 4 pairs, N = 4 through 2 halves, and N = 8 takes
# every sample each step (full-batch gradient descent with `A = V^T V / 256`). The product of the
# maps over one cycle, `C(lr)`, is the object: its fixed point is where the loop of notebook 01
# passes at the cycle's end, and its spectral radius decides stability. Below, `C` is computed in
# float64 from the f32 samples (independently of meshnb), and its powers give the float64 run:
# the same training as meshnb's, without float32.

# %%
A = V.T @ V / 256
eig, evec = np.linalg.eigh(A)
lam_min, lam_max = float(eig[0]), float(eig[-1])
lr_crit = 2 / lam_max
A_g = np.array([V[g::8].T @ V[g::8] / 32 for g in range(8)])  # each batch's normal matrix
b_g = np.array([V[g::8].T @ y[g::8] / 32 for g in range(8)])


def step_batches(n: int) -> list[list[int]]:
    """The batches a cluster of n folds at each step of one cycle (8 / n steps)."""
    return [[(t * n + k) % 8 for k in range(n)] for t in range(8 // n)]


def cycle_map(lrs: np.ndarray, n: int = 1) -> np.ndarray:
    """The affine map of one cycle of a cluster of n, [len(lrs), 5, 5] (the last column: the offset)."""
    lrs = np.asarray(lrs, dtype=np.float64).reshape(-1)
    m = np.broadcast_to(np.eye(5), (len(lrs), 5, 5)).copy()
    for batches in step_batches(n):
        s = np.broadcast_to(np.eye(5), (len(lrs), 5, 5)).copy()
        s[:, :4, :4] -= lrs[:, None, None] * A_g[batches].mean(axis=0)
        s[:, :4, 4] = lrs[:, None] * b_g[batches].mean(axis=0)
        m = s @ m
    return m


def radius(lr: float, n: int = 1) -> float:
    """Spectral radius per step of the cycle's linear part."""
    return float(np.abs(np.linalg.eigvals(cycle_map(np.array([lr]), n)[0, :4, :4])).max() ** (n / 8))


def stability_line(n: int) -> float:
    """The LR where the cycle's spectral radius is 1 (bisection in float64)."""
    lo, hi = 1.0, 2.5
    assert radius(lo, n) < 1 < radius(hi, n)
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if radius(mid, n) < 1 else (lo, mid)
    return hi


CLUSTERS = (1, 2, 4, 8)
line = {n: stability_line(n) for n in CLUSTERS}


def fixed_point(lrs: np.ndarray, n: int = 1) -> np.ndarray:
    """Where the loop of a cluster of n passes at each cycle's end, [len(lrs), 4] (float64)."""
    m = cycle_map(lrs, n)
    return np.linalg.solve(np.eye(4) - m[:, :4, :4], m[:, :4, 4:])[..., 0]


def excess(params: np.ndarray) -> np.ndarray:
    """MSE over all samples minus the least-squares MSE, in float64: (p - p*)^T A (p - p*)."""
    d = params - lsq
    return np.einsum("...i,ij,...j->...", d, A, d)


# The float64 run of every LR to every checkpoint: powers of the cycle map on [p0, 1], p0 = 0.
state = np.zeros((len(LRS), 5, 1))
state[:, 4] = 1
cmap1 = cycle_map(LRS)
mse64 = np.empty_like(mse)
done = 0
with np.errstate(all="ignore"):
    for i, t in enumerate(CHECKPOINTS):
        state = np.linalg.matrix_power(cmap1, (int(t) - done) // 8) @ state
        done = int(t)
        mse64[i] = lsq_mse + excess(state[:, :4, 0])
conv = np.isfinite(mse) & (mse < start_mse)  # the runs that are neither overflowed nor worse than the start
rel = np.abs((mse - lsq_mse) / (mse64 - lsq_mse) - 1)[conv]
print(f"eigenvalues of A = V^T V / 256: {np.array2string(eig, precision=5)};  2 / lambda_max(A) = {lr_crit:.6g}")
print(
    f"float32 (mode Z, meshnb) against the float64 run, excess over least squares at {conv.sum():,} "
    f"(checkpoint, LR) points: median relative difference {np.median(rel):.2g}, 99th percentile "
    f"{np.percentile(rel, 99):.2g}"
)
assert np.median(rel) < 1e-6 and np.percentile(rel, 99) < 1e-2

# %% [markdown]
# So sections 5.1 to 5.3 describe **float64 behaviour**: at these LRs and budgets float32 and mode
# Z move the excess loss by a few parts per million (the median printed above); what is seen below
# is the mathematics of cyclic SGD, which meshnb's f32 runs reproduce. float32 shows itself only at
# the divergence edge of a cluster of 8 (5.4) and at subnormal LRs (5.5).

# %%
fig, (ax, zoom) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 1.2]})
excess_map = np.ma.masked_invalid(mse - lsq_mse)  # how far above the best any cubic can do
cmap = plt.get_cmap("viridis").with_extremes(bad="0.25", over="tab:pink")
mesh = ax.pcolormesh(
    LRS, CHECKPOINTS, excess_map, norm=LogNorm(vmin=1e-6, vmax=start_mse - lsq_mse), cmap=cmap, shading="nearest"
)
fig.colorbar(mesh, ax=ax, extend="both", label="MSE over all samples - least-squares MSE (float64 evaluation)")
ok = np.isfinite(mse)
best_k = np.array([np.nanargmin(np.where(ok[i], mse[i], np.nan)) for i in range(len(CHECKPOINTS))])
ax.plot(LRS[best_k], CHECKPOINTS, "w.", ms=5, label="best LR at each step")
ax.axvline(lr_crit, color="tab:red", lw=1.5, label=f"2 / lambda_max(A) = {lr_crit:.4f}")
ax.axvline(line[1], color="w", lw=1, ls="--", label=f"the 8-step cycle's stability line {line[1]:.4f}")
ax.set_xlim(LRS[0], LRS[-1])
ax.set(
    xscale="log",
    yscale="log",
    xlabel="learning rate",
    ylabel="steps run",
    title="Excess loss over all 256 samples by LR and step\n(pink: worse than the start; dark grey: overflowed)",
)
ax.legend(loc="lower left", facecolor="0.85")
edge = LRS >= 1.74  # the divergence edge, on a linear LR axis: the pink and dark grey bands at their width
zoom.pcolormesh(LRS[edge], CHECKPOINTS, excess_map[:, edge], norm=mesh.norm, cmap=cmap, shading="nearest")
zoom.plot(LRS[best_k][LRS[best_k] >= 1.74], CHECKPOINTS[LRS[best_k] >= 1.74], "w.", ms=7)
zoom.axvline(lr_crit, color="tab:red", lw=1.5)
zoom.axvline(line[1], color="w", lw=1, ls="--")
zoom.set(yscale="log", xlabel="learning rate (linear)", ylabel="steps run", title="Zoom: LR 1.74 .. 2")
fig.suptitle(
    "What to see: the valley of good fits (white dots) moves to smaller LRs as the budget grows; at the edge "
    "(right) pink, worse than the start, then dark grey, overflowed",
    fontsize=9,
)
fig.tight_layout()
plt.show()
print(
    f"LR {LRS[0]:.0e} after {STEPS} steps: excess {mse[-1, 0] - lsq_mse:.3f} (at the start {start_mse - lsq_mse:.3f})"
)
assert mse[-1, 0] - lsq_mse > 0.1 and worse.any() and LRS[worse].max() < LRS[overflowed].min()

best_ex = mse[np.arange(len(CHECKPOINTS)), best_k] - lsq_mse
rises = np.flatnonzero(np.diff(best_ex) > 0)  # budgets after which a longer budget's best is worse
top = int(rises[np.argmax(best_ex[rises + 1] / best_ex[rises])])
top_rise = best_ex[top + 1] / best_ex[top] - 1
print(
    f"best excess: {best_ex[0]:.3g} at {CHECKPOINTS[0]} steps, {best_ex[-1]:.3g} at {STEPS}; it rises from one "
    f"budget to the next {rises.size} times, most from {CHECKPOINTS[top]} to {CHECKPOINTS[top + 1]} steps "
    f"({100 * top_rise:+.0f}%)"
)
print("the best LR, budget by budget:", np.array2string(LRS[best_k], precision=4, max_line_width=110))
assert best_ex[-1] < 1e-2 * best_ex[0] and rises.size >= 2 and top_rise > 0.2

# The pink systems (finite, worse than the start at 4,096 steps): run on to 65,536 steps and ask the cycle map.
LONG = 1 << 16
pink = np.flatnonzero(worse)
later = sweep(LONG - STEPS, view_in=final.final_pages[pink])
grows = ~np.isfinite(later.params).all(axis=1) | (mse_all(later.params) > 2 * mse[-1, pink])
unstable = np.array([radius(float(lr)) > 1 for lr in LRS[pink]])
right = LRS[pink] > lr_crit
print(
    f"{pink.size} pink systems: {(~grows).sum()} converge(s), {grows.sum()} grow (overflow or twice the MSE by "
    f"{LONG:,} steps), {(grows & right).sum()} of those right of the red line; "
    f"the cycle map calls the same ones unstable: {bool((grows == unstable).all())}"
)
loop_mse = lsq_mse + excess(fixed_point(LRS[pink]))  # where a converging run's pass ends settle (float64)
settles = ~grows & (np.abs(mse_all(later.params) / loop_mse - 1) < 1e-3)
assert (grows == unstable).all() and grows.sum() > (~grows).sum() and (settles == ~grows).all()

# %%
display(
    Markdown(
        "**What the heatmap shows.** Read a row to compare LRs at one step budget, a column to follow one "
        "LR through the run. The colour is the MSE over all samples minus the least-squares MSE, the part a "
        "better training could still remove. The smallest LRs have not got far in 4,096 steps (yellow at "
        "the top left); the valley of good fits moves to smaller LRs as the budget grows (white dots). "
        f"Along it the best excess falls by a factor of {best_ex[0] / best_ex[-1]:,.0f} from {CHECKPOINTS[0]} "
        f"to {STEPS:,} steps, but not at every budget: it rises {rises.size} times from one budget to the "
        f"next (most from {CHECKPOINTS[top]} to {CHECKPOINTS[top + 1]} steps, {100 * top_rise:+.0f}%), and the "
        "best LR jumps back and forth between neighbouring budgets (the list printed above). The pink band "
        f"is mostly not convergence: of its {pink.size} systems "
        f"{(~grows).sum()} {'converges' if (~grows).sum() == 1 else 'converge'}, to the wide loop whose pass "
        f"end the cycle map's fixed point predicts (to 0.1%); the other {grows.sum()} are growing runs that have not "
        f"overflowed yet ({(grows & right).sum()} of them right of the red line), exactly those whose cycle "
        "map is unstable. Right of the red line the error grows every pass until a param overflows (dark "
        "grey), the later the closer the LR is to the line (section 5.4)."
    )
)

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
assert LRS[k_final] < 0.5 < LRS[k_batch]  # the two yardsticks disagree, by a factor of several
assert mse[-1, k_batch] > 1.01 * best_mse[-1]

SHORT = 32  # budgets up to this many steps
short = CHECKPOINTS <= SHORT
first_over = float(LRS[overflowed].min())  # the 4,096-step divergence threshold, on this grid
print(
    f"budgets {CHECKPOINTS[short].tolist()} steps: best LR {np.array2string(LRS[best_k[short]], precision=4)}, "
    f"all above the LR that overflows within {STEPS:,} steps ({first_over:.5g}) and the stability line "
    f"({line[1]:.5g})"
)
below = int(CHECKPOINTS[np.argmax(LRS[best_k] < line[1])])  # the first budget whose best LR is below the line
back = CHECKPOINTS[~short & (LRS[best_k] > line[1])]  # longer budgets whose best LR is past the line again
print(f"the first budget whose best LR is below the line: {below} steps; later budgets past it: {back.tolist()}")
assert (LRS[best_k[short]] > max(first_over, line[1])).all() and below > SHORT
assert (LRS[best_k[~short]] < first_over).all() and back.size <= 1

# %% [markdown]
# **A model of the best LR.** The excess loss of a run is its distance from the loop, measured by
# `A`, plus the loop's own excess. Along the eigenvectors `v_i` of `A` the distance decays like
# `(1 - lr lambda_i)^t` from the start's `c_i = v_i . (p0 - p*)`; the loop's excess `E_loop(lr)` is
# that of the cycle map's fixed point, and is O(lr^2) (notebook 06). So
#
# `excess(lr, t) ~ sum_i lambda_i c_i^2 (1 - lr lambda_i)^(2 t) + E_loop(lr)`,
#
# and the model's best LR for a budget `t` is the one that minimises it. The fast mode's `c_i` is
# tiny (the data are odd, the least-squares `a` and `c` are almost 0, and the start is 0), so for
# short budgets the growing fast mode costs nothing yet and the best LR lies *beyond* the divergence
# line; the slow mode's term (`lambda_min`) is the one that sets the trade-off for long budgets.

# %%
c0 = evec.T @ (np.zeros(4) - lsq)  # the start's error along A's eigenvectors (slow first)
# The model's own LR grid, wider than the sweep's (1e-4 .. 2) on both sides, so that its best LR is a minimum
# and not the grid's end: for the shortest budgets the model's best lies past LR 2, where the sweep has no run.
MODEL_LRS = np.geomspace(1e-5, 4.0, 8192)
E_loop = excess(fixed_point(MODEL_LRS))
small = MODEL_LRS < 0.05
loop_slope = np.polyfit(np.log(MODEL_LRS[small]), np.log(E_loop[small]), 1)[0]
with np.errstate(all="ignore"):
    decay = (1 - MODEL_LRS[None, :, None] * eig) ** (2 * CHECKPOINTS[:, None, None])
    model = (eig * c0**2 * decay).sum(axis=2) + E_loop
model_k = np.nanargmin(model, axis=1)
model_best = MODEL_LRS[model_k]
in_sweep = model_best < LRS[-1]  # the budgets whose model best the sweep's LRs reach
lr_resid = LRS[best_k] / model_best - 1
ex_resid = best_ex / (model[np.arange(len(CHECKPOINTS)), model_k]) - 1
LONG_BUDGET = CHECKPOINTS >= 512
print(f"start's error along A's eigenvectors (slow .. fast): {np.array2string(np.abs(c0), precision=3)}")
print(f"the loop's excess against LR: slope {loop_slope:.2f} (log-log, LR < 0.05)")
print(
    f"the model's best LR on its grid ({MODEL_LRS[0]:.0e} .. {MODEL_LRS[-1]:g}): {model_best.min():.4g} .. "
    f"{model_best.max():.4g}, at grid index {model_k.min()} .. {model_k.max()} of {len(MODEL_LRS) - 1} (interior); "
    f"past the sweep's last LR {LRS[-1]:g} for the budgets {CHECKPOINTS[~in_sweep].tolist()} steps"
)
print(
    f"model against measurement, budgets from 512 steps: best LR within "
    f"{100 * np.abs(lr_resid[LONG_BUDGET]).max():.1f}%, "
    f"best excess within {100 * np.abs(ex_resid[LONG_BUDGET]).max():.1f}%"
)
print(
    f"all budgets: best LR within {100 * np.abs(lr_resid).max():.0f}%, "
    f"best excess within {100 * np.abs(ex_resid).max():.0f}%"
)
assert model_k.min() > 0 and model_k.max() < len(MODEL_LRS) - 1  # a minimum of the model, not its grid's end
assert 1.9 < loop_slope < 2.1 and (model_best[short] > line[1]).all() and in_sweep[LONG_BUDGET].all()
# Whose is the residual? The exact float64 run (powers of the cycle map, 5.1) against the same model:
# if meshnb's best agrees with it, what is left is what the model leaves out (A's full-batch decay in place
# of the cycle map's transient, and no cross term between the transient and the loop), not float32.
rows = np.arange(len(CHECKPOINTS))
best64_k = np.array([np.nanargmin(np.where(np.isfinite(mse64[i]), mse64[i], np.nan)) for i in rows])
grid_steps = int(np.abs(best_k - best64_k)[LONG_BUDGET].max())
lr64_resid = LRS[best64_k] / model_best - 1
ex64_resid = (mse64[rows, best64_k] - lsq_mse) / model[rows, model_k] - 1
print(
    f"budgets from 512 steps: meshnb's best LR is the float64 run's to {grid_steps} grid step(s) "
    f"(one step: {100 * (LRS[1] / LRS[0] - 1):.3f}%); the model against the float64 run: best LR within "
    f"{100 * np.abs(lr64_resid[LONG_BUDGET]).max():.2f}%, "
    f"best excess within {100 * np.abs(ex64_resid[LONG_BUDGET]).max():.2f}%; meshnb's residuals minus "
    f"the float64 run's: at most {np.abs(ex_resid - ex64_resid)[LONG_BUDGET].max():.1e} (excess)"
)
assert grid_steps <= 3 and np.abs(ex_resid - ex64_resid)[LONG_BUDGET].max() < 1e-3
assert np.abs(lr_resid[LONG_BUDGET]).max() < 0.1 and np.abs(ex_resid[LONG_BUDGET]).max() < 0.1

fig, (ax0, ax1, ax2) = plt.subplots(1, 3, figsize=(13, 4))
for t, colour in zip((16, 64, 256, 1024, STEPS), plt.rcParams["axes.prop_cycle"].by_key()["color"]):
    i = int(np.argmin(abs(CHECKPOINTS - t)))
    ax0.loglog(LRS[ok[i]], mse[i, ok[i]] - lsq_mse, lw=1, color=colour, label=f"{CHECKPOINTS[i]} steps")
    ax0.loglog(MODEL_LRS, model[i], ":", lw=1.5, color=colour)
ax0.axvline(lr_crit, color="tab:red", lw=1, label="2 / lambda_max(A)")
ax0.set(
    ylim=(1e-7, 2 * start_mse),
    xlabel="learning rate",
    ylabel="MSE - least-squares MSE (y units^2)",
    title="Excess by LR (solid: meshnb; dotted: model)",
)
ax0.legend(fontsize=7, loc="lower left")
ax1.loglog(CHECKPOINTS, LRS[best_k], "o-", ms=3, label="best LR, measured")
ax1.loglog(CHECKPOINTS, model_best, "k:", label="best LR, model")
ax1.axhline(LRS[-1], color="0.5", lw=0.8, ls="--", label="the sweep's last LR")
ax1.loglog(CHECKPOINTS, best_ex, "s-", ms=3, color="tab:orange", label="its excess, measured")
ax1.loglog(CHECKPOINTS, model[np.arange(len(CHECKPOINTS)), model_k], "--", color="tab:brown", label="model")
ax1.axhline(lr_crit, color="tab:red", lw=1)
ax1.set(
    xlabel="step budget (steps)",
    ylabel="best LR; its excess (MSE, y units^2)",
    title="The best LR and its excess, by budget",
)
ax1.legend(fontsize=7)
ax2.semilogx(CHECKPOINTS, 100 * lr_resid, "o-", ms=3, label="best LR")
ax2.semilogx(CHECKPOINTS, 100 * ex_resid, "s-", ms=3, color="tab:orange", label="best excess")
ax2.set(xlabel="step budget (steps)", ylabel="measured / model - 1 (%)", title="Residual")
ax2.legend(fontsize=7)
fig.suptitle(
    "What to see: the excess by LR, meshnb (solid) beside the model (dotted), for 5 budgets "
    "(left); the best LR falls as the\n"
    "budget grows, on the model's line from 512 steps on (middle), where the residual stays within 10% (right)",
    fontsize=9,
)
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
        f"the loop of notebook 01. For budgets up to {SHORT} steps the best LR lies *above* the divergence "
        f"line (above the stability line {line[1]:.4f} and the LR that overflows within {STEPS:,} steps, "
        f"{first_over:.4f}): the unstable mode starts with almost no error and has not grown yet. From "
        f"{below} steps on the best LR is below the line (but for {back.size} budget, {back.tolist()} steps, just past "
        "it and still below the overflow LR) and moves left as the budget grows: the slow "
        "mode's transient against the loop's excess, which grows as "
        f"lr^{loop_slope:.2f}. The model (transient plus loop) gives the best LR and its excess within "
        f"{100 * max(np.abs(lr_resid[LONG_BUDGET]).max(), np.abs(ex_resid[LONG_BUDGET]).max()):.1f}% from "
        f"512 steps on. That residual is the model's, not float32's: the exact float64 run (the cycle map's "
        f"powers) has its best LR within {grid_steps} grid steps of meshnb's and the same excess residual to "
        f"{np.abs(ex_resid - ex64_resid)[LONG_BUDGET].max():.0e}; what the model leaves out is the cycle map's "
        "own transient (it decays along A's eigenvectors, as full-batch descent would) and the cross term between "
        "the transient and the loop, so the claim asserted is the weaker one, within 10% from 512 steps. "
        "Its best LR is a minimum on its own LR grid (1e-5 to 4, asserted interior), which for "
        f"budgets up to {CHECKPOINTS[~in_sweep].max()} steps lies past the sweep's last LR 2 (up to "
        f"{model_best.max():.2f} at {CHECKPOINTS[0]} steps), where the sweep has no run to compare: there the "
        "residual is the grid's, not the model's. In between, where the runs near the edge swing with their fast "
        "mode, the measured "
        "best jumps about it (the residual panel)."
    )
)

# %% [markdown]
# ## 5.3 Steps to settle
#
# How many steps does an LR need before its fit stops improving? Every 64th LR of the sweep that
# converges is run from the start to 65,536 steps, from three start pages at once (`view_in` and
# `lrs` together: one system per page and LR): `init` (params 0), the least-squares params halved,
# and params `[1, -1, 1, -1]`. The fit is read at the end of *every* pass up to half the run
# (4,096 reads, each a `sweep` of 8 steps continuing the last one's pages) and at the run's end. An
# LR has *settled* at the first pass end from which its MSE over all samples stays within 1% of its
# value at 65,536 steps; it counts as settled if that happens within half the run (so the last
# read is its limit, to 1% of 1%). Read so, a run is seen settled at most one pass (8 steps) late:
# the constant below is the run's, not the read grid's.
#
# **The closed form.** Near the end only the slowest mode is left:
# `MSE(t) - MSE(inf) ~ lambda_min c_s^2 (1 - lr lambda_min)^(2t)`, with `c_s` the start's error along
# the slowest eigenvector of `A`. The 1% rule is reached at
#
# `t = ln(0.01 MSE(inf) / (lambda_min c_s^2)) / (2 ln(1 - lr lambda_min))`, so
# `t lr lambda_min ~ (1/2) ln(lambda_min c_s^2 / (0.01 MSE(inf)))`
#
# for small LRs: halve the LR, double the steps, with a constant that depends on the start's slow
# error and the rule, and that the reads can only round up (to the next pass end).

# %%
sub = np.arange(0, len(LRS), 64)
sub = sub[conv[-1, sub]]  # finite and better than the start at 4,096 steps
START_PARAMS = np.array([[0, 0, 0, 0], lsq / 2, [1, -1, 1, -1]], dtype=np.float32)
start_pages = np.repeat(np.frombuffer(init.page, dtype=np.uint8)[None], len(START_PARAMS), axis=0)
start_pages[:, :16] = START_PARAMS.view(np.uint8)  # PARAMS: bytes 0..15 (SPEC 7)
GEOMETRIC = np.unique(np.r_[CHECKPOINTS, 8 * np.geomspace(STEPS // 8, LONG // 8, 17).round().astype(int)])
FINE = np.r_[8 * np.arange(1, LONG // 16 + 1), LONG]  # every pass end up to half the run, and the run's end
GEO_READS = np.r_[GEOMETRIC[GEOMETRIC <= LONG // 2], LONG]  # the geometric checkpoints alone (a variant below)
# Every system's page with its LR set (0 steps), and the init page's systems 4 steps on: read at the same
# reads, these are 4 steps past each pass end (the middle of the cycle). The pages carry their LRs.
pages = np.concatenate(
    [
        sweep(0, view_in=start_pages, lrs=LRS[sub], keep_pages=True).final_pages,
        sweep(4, view_in=start_pages[:1], lrs=LRS[sub], keep_pages=True).final_pages,
    ]
)
fine_mse = np.empty((len(FINE), len(pages)))
done = 0
for i, t in enumerate(FINE):
    part = sweep(int(t) - done, view_in=pages, keep_pages=True)
    pages, done = part.final_pages, int(t)
    fine_mse[i] = mse_all(part.params)
fine_mse = fine_mse.reshape(len(FINE), len(START_PARAMS) + 1, len(sub))
assert np.array_equal(fine_mse[np.searchsorted(FINE, CHECKPOINTS), 0], mse[:, sub])  # the same runs as 5.1's


def settle_steps(steps: np.ndarray, m: np.ndarray, rule: float) -> np.ndarray:
    """The first read from which `m` stays within `rule` of its last read, per column; 0 where that is past half."""
    outside = np.abs(m / m[-1] - 1) > rule
    last_out = np.where(outside.any(axis=0), len(steps) - 1 - outside[::-1].argmax(axis=0), -1)
    t = steps[np.minimum(last_out + 1, len(steps) - 1)]
    return np.where(t <= steps[-1] // 2, t, 0)


def closed_form(rule: float, start: int, limit: np.ndarray) -> np.ndarray:
    """The steps to settle of the closed form, per LR of `sub`."""
    c_s = evec[:, 0] @ (START_PARAMS[start].astype(np.float64) - lsq)
    lr = LRS[sub].astype(np.float64)
    return np.log(rule * limit / (lam_min * c_s**2)) / (2 * np.log(1 - lr * lam_min))


def constant(t: np.ndarray) -> np.ndarray:
    return t * LRS[sub] * lam_min


settle = settle_steps(FINE, fine_mse[:, 0], 0.01)
settled = settle > 0
predicted = closed_form(0.01, 0, fine_mse[-1, 0])
resid = settle[settled] / predicted[settled] - 1
late = settle[settled] - predicted[settled]  # steps: the read is at a pass end, at most 8 steps after the crossing
K, K_closed = constant(settle)[settled], constant(predicted)[settled]
q25, q75 = np.percentile(K, [25, 75])
print(
    f"{settled.sum()} of {len(sub)} LRs settle within {LONG // 2:,} steps; the smallest that does: "
    f"{LRS[sub][settled].min():.3g}"
)
print(
    f"read at every pass end ({len(FINE) - 1:,} reads to half the run): steps x lr x lambda_min median "
    f"{np.median(K):.3f}, middle half {q25:.3f} .. {q75:.3f} (q75/q25 {q75 / q25:.4f}), all {K.min():.3f} .. "
    f"{K.max():.3f}; the closed form's at the same LRs: median {np.median(K_closed):.3f}, "
    f"{K_closed.min():.3f} .. {K_closed.max():.3f}"
)
print(
    f"measured / closed form - 1: median {100 * np.median(resid):+.2f}%, "
    f"{100 * resid.min():+.2f}% .. {100 * resid.max():+.2f}%"
)
SMALL_LR = 0.5
near = LRS[sub][settled] < SMALL_LR
print(
    f"below LR {SMALL_LR}: {100 * resid[near].min():+.2f}% .. {100 * resid[near].max():+.2f}%; measured - closed "
    f"form {late[near].min():+.1f} .. {late[near].max():+.1f} steps (a read is late by 0 to 8)"
)
# Read every pass, a run is seen settled 0 to 8 steps after it crosses the rule; what is left beside that is
# the closed form's neglect (the faster modes and the loop's excess): under 1% of the steps below LR 0.5.
assert (~settled).any() and np.abs(resid[near]).max() < 0.01 and abs(np.median(K) / np.median(K_closed) - 1) < 0.01

fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4.2))
lr_s = LRS[sub]
ax0.loglog(lr_s, predicted, "k-", lw=1, zorder=1, label="closed form")
ax0.loglog(
    lr_s[settled],
    settle[settled],
    "o",
    ms=4,
    mfc="none",
    zorder=3,
    label="steps to settle within 1% (read at every pass end)",
)
ax0.loglog(lr_s, 1 / (lr_s * lam_min), "k:", label="1 / (lr lambda_min)")
ax0.axhline(LONG // 2, color="gray", lw=0.8, ls="--", label=f"half the run ({LONG // 2:,} steps)")
ax0.axvline(lr_crit, color="tab:red", lw=1, label="2 / lambda_max(A)")
ax0.set(xlabel="learning rate", ylabel="steps", title="Steps until the fit to all samples stops improving")
ax0.legend(fontsize=7)
ax1.semilogx(lr_s[settled], 100 * resid, ".", ms=4)
ax1.set(xlabel="learning rate", ylabel="measured / closed form - 1 (%)", title="Residual")
fig.suptitle(
    "What to see: the steps to settle on the closed form (black) at every settled LR; the residual within 1% below\n"
    "LR 0.5 (right), larger only near 2 / lambda_max (the red line, left)",
    fontsize=9,
)
fig.tight_layout()
plt.show()

# %% [markdown]
# **What moves it.** The same measurement with one choice changed at a time: the grid of reads (the
# geometric checkpoints this notebook used before, up to twice apart), the rule (0.1% and
# 10%), the start page, and where in the cycle the fit is read (4 steps past each pass end).

# %%
variants = {
    "pass ends, 1%, init": (FINE, fine_mse[:, 0], 0.01, 0),
    "geometric reads": (GEO_READS, fine_mse[np.searchsorted(FINE, GEO_READS), 0], 0.01, 0),
    "rule 0.1%": (FINE, fine_mse[:, 0], 0.001, 0),
    "rule 10%": (FINE, fine_mse[:, 0], 0.1, 0),
    "start lsq / 2": (FINE, fine_mse[:, 1], 0.01, 1),
    "start [1, -1, 1, -1]": (FINE, fine_mse[:, 2], 0.01, 2),
    "4 steps past pass ends": (FINE + 4, fine_mse[:, 3], 0.01, 0),
}
table = {}
print(f"{'variant':24} {'settled':>7} {'K median':>9} {'q75/q25':>8} {'closed form':>11} {'residual':>17}")
for name, (steps_read, m, rule, start) in variants.items():
    t = settle_steps(steps_read, m, rule)
    s = t > 0
    k, kp = constant(t)[s], constant(closed_form(rule, start, m[-1]))[s]
    r = t[s] / closed_form(rule, start, m[-1])[s] - 1
    table[name] = (np.median(k), np.median(kp), np.percentile(k, 75) / np.percentile(k, 25), r)
    print(
        f"{name:24} {s.sum():7} {np.median(k):9.3f} {table[name][2]:8.3f} {np.median(kp):11.3f} "
        f"{100 * r.min():+7.2f} .. {100 * r.max():+.2f}%"
    )
base = table["pass ends, 1%, init"]
geo = table["geometric reads"]
assert (
    geo[0] > 1.05 * base[0] and geo[2] > base[2] + 0.03 and geo[3].max() > 0.15
)  # coarse reads: a larger, spread constant
for name in ("rule 0.1%", "rule 10%", "start lsq / 2", "start [1, -1, 1, -1]"):
    assert np.abs(table[name][0] / table[name][1] - 1) < 0.03, name  # each moves as the closed form says
assert abs(table["rule 10%"][0] - base[0] + np.log(10) / 2) < 0.05  # a factor 10 in the rule: ln(10) / 2
cycle_shift = table["4 steps past pass ends"][0] / base[0] - 1
assert abs(cycle_shift) < 0.02

# %%
display(
    Markdown(
        "**What the plot and the table show.** Read at every pass end, the steps "
        "to settle are the "
        f"closed form's to {100 * resid[near].min():+.1f}% .. {100 * resid[near].max():+.1f}% below LR {SMALL_LR} "
        f"(median {100 * np.median(resid):+.2f}% over all {settled.sum()} LRs that settle; near the divergence "
        f"line the other modes and the loop add up to {100 * np.abs(resid).max():.0f}%): "
        f"`t lr lambda_min` = {base[0]:.2f} (the middle half of the LRs within a factor "
        f"{base[2]:.3f}, all from {K.min():.2f} to {K.max():.2f}, where the closed form's own constant runs from "
        f"{K_closed.min():.2f} to {K_closed.max():.2f}: the spread is the LRs' near the line, not the reads'), "
        "for the init page and the 1% rule; halve the LR, double the steps. The "
        f"constant is no property of the LR: it is `(1/2) ln(lambda_min c_s^2 / (rule MSE(inf)))`. A "
        f"factor 10 in the rule moves it by `ln(10) / 2` = {np.log(10) / 2:.2f} "
        f"({table['rule 0.1%'][0]:.2f} at 0.1%, {table['rule 10%'][0]:.2f} at 10%), and the start page "
        f"moves it with its slow error (lsq / 2: {table['start lsq / 2'][0]:.2f}; [1, -1, 1, -1]: "
        f"{table['start [1, -1, 1, -1]'][0]:.2f}, closed form {table['start [1, -1, 1, -1]'][1]:.2f}). "
        f"The geometric reads gave a larger constant ({geo[0]:.2f}) and a spread (q75/q25 {geo[2]:.2f}) "
        "that are the grid's alone: a run is seen settled only at the next read, up to twice as late. "
        f"Where in the cycle the fit is read moves the constant by {100 * cycle_shift:+.2f}%, half a pass "
        "of steps: the loop's excess is far below 1% of the MSE at these "
        "LRs. The LRs that do not settle within half the run are the smallest."
    )
)

# %% [markdown]
# **Where float32 stops: the stall radius.** In float64 a settled run's pass ends sit on the
# cycle map's fixed point `p_loop(lr)` (5.1's theory). float32 stops short of it, at a distance
# that depends on the LR. Near the loop a whole cycle moves the params by `8 lr A (p - p_loop)`
# to first order (the fixed point is where the steps' swings cancel over a cycle), a drift of
# `lr u` per step with `u = A (p - p_loop)`, the mean gradient's part that points away from the loop.
# Every step rounds its result to a float32 word: once that drift is below half an ulp of a
# param, `|lr u_j| < ulp(p_j) / 2`, the roundings of the steps outweigh it and the run locks onto
# a float32 orbit instead of closing in. For `b` and `d` (about 2.7 and -2.9, ulp 2.4e-7) that
# is a slab around the loop, `|u_j| < h_j = ulp(p_j) / (2 lr)`; `a` and `c` sit near 0, where the
# ulps are of order 1e-15, so they keep moving and their components of `u` go to (nearly) 0. The
# excess over the loop is `(p - p_loop)^T A (p - p_loop) = u^T A^-1 u`, at most, over the slab,
#
# `E_stall(lr) = max over s = +-1 of (h_b, s h_d) [A^-1]_bd (h_b, s h_d)^T`, proportional to `1 / lr^2`
#
# (`[A^-1]_bd` the b, d block of `A^-1`): the stall radius in excess, against the loop's own
# excess, which grows as `lr^2`. The measurement: 64 LRs from 0.003 to 0.5, 2^17 steps in mode Z,
# read at a pass end; `p - p_loop` is float64 (the f32 params widened, the fixed point solved in
# float64). An LR counts as settled where 5.3's constant gives a settle time within half the run.
# A smaller set is the literal one, where *every* step's update rounds away: at the least-squares
# params each batch's gradient is small (every batch spans the interval), and below
# `lr_freeze = min over b, d of (ulp(p_j) / 2) / max over batches |g_B,j|` no step moves `b` or `d`.

# %%
STALL_STEPS = 1 << 17
HALF = 0.5  # the fraction of an ulp below which a step's drift is rounded away
LRS_STALL = np.geomspace(0.003, 0.5, 64).astype(np.float32)
stall = sweep(STALL_STEPS, lrs=LRS_STALL)
lr_st = LRS_STALL.astype(np.float64)
dev = stall.params.astype(np.float64) - fixed_point(LRS_STALL)  # float32's pass end - the float64 loop's
drift = np.abs(lr_st[:, None] * (dev @ A)) / (HALF * np.spacing(np.abs(stall.params)))  # |lr u_j| / (ulp / 2)
dev_excess = excess(dev + lsq)  # (p - p_loop)^T A (p - p_loop)
bd = [1, 3]
h = HALF * np.spacing(np.abs(stall.params[:, bd])).astype(np.float64) / lr_st[:, None]
A_inv_bd = np.linalg.inv(A)[np.ix_(bd, bd)]
e_stall = np.max([np.einsum("ki,ij,kj->k", h * s, A_inv_bd, h * s) for s in ([1, 1], [1, -1])], axis=0)
stall_resid = dev_excess / e_stall
e_loop_st = excess(fixed_point(LRS_STALL))
in_time = base[0] / (lr_st * lam_min) < STALL_STEPS // 2  # settled by 5.3's constant
cross = float(np.exp(np.interp(0.0, np.log(e_stall / e_loop_st)[::-1], np.log(lr_st)[::-1])))
print(
    f"{in_time.sum()} of {len(LRS_STALL)} LRs settle within {STALL_STEPS // 2:,} steps (LR >= "
    f"{LRS_STALL[in_time].min():.3g}); below: {(~in_time).sum()}"
)
print(
    f"settled: |lr u_j| / (ulp(p_j) / 2) at most {drift[in_time][:, bd].max():.2f} for b and d "
    f"(median {np.median(drift[in_time][:, bd]):.2f}); for a and c median {np.median(drift[in_time][:, [0, 2]]):.0f}"
)
print(
    f"float32's excess over the loop / E_stall(lr): median {np.median(stall_resid[in_time]):.3f}, "
    f"{stall_resid[in_time].min():.1e} .. {stall_resid[in_time].max():.3f}; unsettled: "
    f"{np.array2string(stall_resid[~in_time], precision=2)}"
)
print(f"E_stall = E_loop at LR {cross:.4g}; E_stall x lr^2 = {np.median(e_stall * lr_st**2):.3g}")
assert (drift[in_time][:, bd] < 1).all() and np.median(drift[in_time][:, [0, 2]]) > 10
assert (stall_resid[in_time] <= 1).all() and (stall_resid[~in_time] > 1).any()

# The literal stall set: from the least-squares params (as f32), every step's update of b and d rounds away.
g_batch = np.abs(np.einsum("gij,j->gi", A_g, lsq) - b_g).max(axis=0)  # each param's largest batch gradient
lr_freeze = float((HALF * np.spacing(np.abs(lsq.astype(np.float32))) / g_batch)[bd].min())
lsq_words = lsq.astype(np.float32).view(np.uint32)
lsq_page = np.frombuffer(init.page, dtype=np.uint8).copy()
lsq_page[:16] = lsq_words.view(np.uint8)  # PARAMS: bytes 0..15 (SPEC 7)
part = sweep(0, view_in=lsq_page[None], lrs=np.array([lr_freeze / 2, 2 * lr_freeze], dtype=np.float32), keep_pages=True)
steps_moving = np.zeros(2, dtype=int)  # over the first 16 steps (two cycles), step by step
for _ in range(16):
    part = sweep(1, view_in=part.final_pages, keep_pages=True)
    steps_moving += (part.params_words[:, bd] != lsq_words[bd]).any(axis=1)
later_bd = sweep(8192, view_in=part.final_pages).params_words[:, bd] != lsq_words[bd]
print(
    f"lr_freeze = {lr_freeze:.3g}; from the least-squares params (f32), of the first 16 steps at LR "
    f"{lr_freeze / 2:.3g} {steps_moving[0]} leave b or d off their words, at {2 * lr_freeze:.3g} {steps_moving[1]}; "
    f"8,192 steps later b or d off their words: {later_bd.any(axis=1).tolist()}"
)
assert steps_moving[0] == 0 and steps_moving[1] > 0 and not later_bd.any()

fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4.2))
ax0.axvspan(lr_st[0], LRS_STALL[in_time].min(), color="0.9", label=f"not settled in {STALL_STEPS // 2:,} steps")
ax0.loglog(lr_st, e_loop_st, "k-", lw=1, zorder=1, label="the float64 loop's excess (~ lr^2)")
ax0.loglog(lr_st, excess(stall.params.astype(np.float64)), "o", ms=4, mfc="none", label="meshnb (float32): excess")
ax0.loglog(lr_st, dev_excess, ".", color="tab:orange", label="float32's part: (p - p_loop)^T A (p - p_loop)")
ax0.loglog(lr_st, e_stall, "--", color="tab:red", label="the stall radius E_stall (~ 1 / lr^2)")
ax0.set(
    xlabel="learning rate",
    ylabel="excess over least squares (MSE, y units^2)",
    title=f"After {STALL_STEPS:,} steps (pass end)",
)
ax0.legend(fontsize=7, loc="lower left")
ax1.axvspan(lr_st[0], LRS_STALL[in_time].min(), color="0.9")
ax1.loglog(lr_st, drift[:, 1], "o", ms=3, label="b: |lr u_b| / (ulp(b) / 2)")
ax1.loglog(lr_st, drift[:, 3], "s", ms=3, color="tab:green", label="d: |lr u_d| / (ulp(d) / 2)")
ax1.loglog(lr_st, stall_resid, ".", color="tab:orange", label="float32's part / E_stall")
ax1.axhline(1, color="tab:red", lw=1)
ax1.set(
    xlabel="learning rate",
    ylabel="drift / half an ulp; part / E_stall (ratio)",
    title="Residual: inside the stall set below the red line",
)
ax1.legend(fontsize=7, loc="lower left")
fig.suptitle(
    "What to see: at every settled LR (outside the grey band) float32's part (orange) lies "
    "under the stall radius (red dashed)\n"
    "while the loop's excess (black) grows as lr^2; b's and d's drift stays under half an ulp "
    "(right: below the red line)",
    fontsize=9,
)
fig.tight_layout()
plt.show()

# %%
display(
    Markdown(
        f"**What the plots show.** Every LR that has settled (from {LRS_STALL[in_time].min():.3g}) ends inside "
        f"the stall set: the drift `lr u` of `b` and `d` is at most {drift[in_time][:, bd].max():.2f} of half "
        f"an ulp (median {np.median(drift[in_time][:, bd]):.2f}), and float32's excess over the loop is below "
        f"the stall radius `E_stall` at every one of them ({stall_resid[in_time].min():.1e} to "
        f"{stall_resid[in_time].max():.2f} of it, median {np.median(stall_resid[in_time]):.3f}). Where the model "
        "holds: as a bound, for `b` and `d`, once a run has settled. Where it does not: it says where float32 "
        "*can* stop, not where in the slab a run locks, so the excess scatters over "
        f"{np.log10(stall_resid[in_time].max() / stall_resid[in_time].min()):.0f} decades below the line rather "
        "than following it; `a` and `c` never stall (their drift is a median "
        f"{np.median(drift[in_time][:, [0, 2]]):.0f} half-ulps of their tiny words: they keep moving); and below "
        f"{LRS_STALL[in_time].min():.3g} the runs have not settled, so their excess is the slow mode's "
        f"transient (up to {stall_resid[~in_time].max():.1f} times `E_stall`), not a stall. `E_stall` falls as "
        f"`1 / lr^2` ({np.median(e_stall * lr_st**2):.2g} / lr^2) and the loop's excess grows as `lr^2`: they "
        f"cross at LR {cross:.3g}: above it float32's part of a settled run's excess is below the loop's (it is "
        "below `E_stall`), below it float32 may decide the fit. The literal stall set, where every step's update "
        f"rounds away, starts far lower, at `lr_freeze` = {lr_freeze:.3g}: from the least-squares params, no "
        f"step at half of it moves `b` or `d`, while at twice it {steps_moving[1]} of the first 16 steps do "
        "(and the run still passes the same words at its pass ends: the float32 loop). Reaching it from the "
        f"init page would take about {base[0] / (lr_freeze * lam_min):,.0f} steps: not measured here."
    )
)

# %% [markdown]
# ## 5.4 The stability of cyclic SGD per cluster size
#
# Gradient descent on the full-sample matrix `A` is stable while `lr < 2 / lambda_max(A)`. meshnb
# does not run that: it cycles through batches (5.1's theory), and what decides stability is the
# product of the steps' linear maps over one cycle, `C(lr)`: the runs converge while its spectral
# radius is below 1. Its *stability line* (radius = 1, bisection in float64) is computed for
# clusters of N = 1, 2, 4 and 8, beside two simpler bounds: `2 / lambda_max(A)`, and the per-step
# bound `min over the steps of 2 / lambda_max(A_step)` (every step's map then shrinks every
# vector, which is sufficient for stability but not necessary).

# %%
per_step = {n: min(2 / np.linalg.eigvalsh(A_g[b].mean(axis=0))[-1] for b in step_batches(n)) for n in CLUSTERS}
print(f"2 / lambda_max(A) = {lr_crit:.6g}")
for n in CLUSTERS:
    print(
        f"N = {n}: cycle of {8 // n} step(s); stability line {line[n]:.6g} "
        f"({100 * (line[n] / lr_crit - 1):+.3f}% from 2 / lambda_max(A)); per-step bound {per_step[n]:.6g}"
    )
mirror = max(np.abs(x[g::8] + x[7 - g :: 8][::-1]).max() for g in range(8))  # batch 7 - g is batch g at -x
print(
    f"batches g and 7 - g are mirror images to {mirror:.1g}; A's top eigenvector: |b|, |d| <= "
    f"{np.abs(evec[[1, 3], -1]).max():.1g} (the even mode)"
)
assert mirror < 1e-6 and np.abs(evec[[1, 3], -1]).max() < 1e-5
assert line[1] < lr_crit < line[2] < line[4] and abs(line[8] / lr_crit - 1) < 1e-12
assert (
    all(per_step[n] <= line[n] * (1 + 1e-9) for n in CLUSTERS) and per_step[1] < per_step[2] < per_step[4] < per_step[8]
)

# %% [markdown]
# **Checked by running.** Bisection on LR *words* (the positive float32 words are ordered as their
# values, so bisecting the integer finds the first float32 LR that overflows, to the last bit)
# with a run of 2^17 steps for each probe: `meshnb.train` for N = 1 and the `fused` cluster backend
# (`meshnb.train(..., systems=N, backend="fused")`, the whole cluster in one loop) for N = 2, 4, 8;
# about 23 probes each. Past the line the error grows by the cycle's radius each step from the start's
# error along the unstable eigenvector, `c_u`, so a run of T steps overflows where
# `T ln(radius) = ln(R / c_u)`; R = 2^121 is where a param's gradient sum overflows (32 lanes of
# `e x^3`, `e` up to 4 times a param: 2^128 / 2^7). That gives the *finite-budget threshold* of
# each budget, from the cycle map alone.

# %%
T_LONG = 1 << 17
R_OVER = 2.0**121


def steps_to_overflow(lr: float, n: int = 1) -> float:
    """Steps until the unstable mode of a cluster of n reaches R_OVER from the init page (float64)."""
    m = cycle_map(np.array([lr]), n)[0]
    p_loop = np.linalg.solve(np.eye(4) - m[:4, :4], m[:4, 4])
    w, vr = np.linalg.eig(m[:4, :4])
    k = int(np.argmax(np.abs(w)))
    c_u = abs((np.linalg.inv(vr) @ -p_loop)[k]) * np.linalg.norm(vr[:, k])
    return (8 // n) * np.log(R_OVER / c_u) / np.log(abs(w[k]))


def budget_threshold(steps: int, n: int = 1) -> float:
    """The LR whose run of `steps` steps just reaches R_OVER (float64 bisection)."""
    lo, hi = line[n] * (1 + 1e-9), 2.5
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if steps_to_overflow(mid, n) > steps else (lo, mid)
    return hi


def overflows(word: int, steps: int, n: int = 1) -> bool:
    if n == 1:
        return not np.isfinite(meshnb.train(steps, set_lr={0: np.uint32(word)}).params).all()
    return not np.isfinite(
        meshnb.train(steps, set_lr={0: np.uint32(word)}, systems=n, backend="fused").systems[0].params
    ).all()


def bisect(steps: int, n: int = 1) -> int:
    """The first word that overflows within `steps` (bisection between the words of 1.7 and 2.5)."""
    lo, hi = f32_word(1.7), f32_word(2.5)
    assert not overflows(lo, steps, n) and overflows(hi, steps, n)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if overflows(mid, steps, n) else (mid, hi)
    return hi


measured = {n: bisect(T_LONG, n) for n in (1, 2, 4)}  # N = 8 has no single edge: scanned and bisected below
theory = {n: budget_threshold(T_LONG, n) for n in CLUSTERS}
for n in (1, 2, 4):
    lr_w = word_f32(measured[n])
    print(
        f"N = {n}: first LR that overflows within 2^17 steps: word {measured[n]:08x} = {lr_w:.6g} "
        f"({100 * (lr_w / line[n] - 1):+.4f}% from the line); the finite-budget theory {theory[n]:.6g} "
        f"({100 * (theory[n] / line[n] - 1):+.4f}%)"
    )
for n in (1, 2, 4):  # past the line by what the growth rate needs in 2^17 steps, to 10% of that distance
    assert abs(word_f32(measured[n]) - theory[n]) < 0.1 * (theory[n] - line[n])
print(f"N = 8: the finite-budget theory {theory[8]:.6g} ({100 * (theory[8] / line[8] - 1):+.4f}%); its edge: below")

# %% [markdown]
# **Finite budgets, N = 1.** The same bisection for budgets from 2^10 to 2^17 steps, beside the
# theory's threshold for each budget.

# %%
BUDGETS = [1 << k for k in (10, 12, 14, 16, 17)]
thr_meas = np.array([word_f32(bisect(t) if t != T_LONG else measured[1]) for t in BUDGETS])
thr_theory = np.array([budget_threshold(t) for t in BUDGETS])
thr_resid = (thr_meas - thr_theory) / (thr_theory - line[1])
print("budget   measured    theory    (measured - theory) / (theory - line)")
for t, m_, th, r in zip(BUDGETS, thr_meas, thr_theory, thr_resid):
    print(f"{t:>7} {m_:10.6g} {th:10.6g}   {100 * r:+.2f}%")
assert np.abs(thr_resid).max() < 0.05 and (np.diff(thr_meas) < 0).all()
assert abs(thr_meas[BUDGETS.index(STEPS)] / first_over - 1) < 2e-3  # 5.1's grid saw the 4,096-step threshold too

fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4))
ax0.loglog(BUDGETS, thr_meas / line[1] - 1, "o", label="meshnb (bisection on words)")
ax0.loglog(BUDGETS, thr_theory / line[1] - 1, "k-", lw=1, label="cycle's growth rate: T ln(radius) = ln(R / c_u)")
ax0.set(
    xlabel="budget (steps)", ylabel="threshold / stability line - 1 (ratio)", title="Finite-budget divergence, N = 1"
)
ax0.legend(fontsize=8)
ax1.semilogx(BUDGETS, 100 * thr_resid, "o-")
ax1.set(xlabel="budget (steps)", ylabel="(measured - theory) / (theory - line) (%)", title="Residual")
fig.suptitle(
    "What to see: the LR that overflows within T steps nears the stability line as T grows, on "
    "the theory's line (left);\n"
    "measured - theory stays within 5% of the theory's distance from the line at every budget (right)",
    fontsize=9,
)
fig.tight_layout()
plt.show()

# %% [markdown]
# **The edge itself.** For N = 1 the 2^17-step edge is checked with a sweep of the 128 words on
# either side; for N = 2 and 4 with 8 fused runs on either side. For N = 8, full-batch descent, the
# runs do not go from finite to overflowing at one word: 96 words spaced evenly from the line to LR
# 1.80 (one fused run each) find where the first scanned word overflows and where the last scanned
# word stays finite, and a bisection on the words between each of those and its scanned neighbour
# finds a word that overflows next to one that does not (the bracket: two adjacent words).

# %%
EDGE = 128
near = sweep(T_LONG, lrs=np.arange(measured[1] - EDGE, measured[1] + EDGE, dtype=np.uint32))
over = ~np.isfinite(near.params).all(axis=1)
clean = {1: bool(not over[:EDGE].any() and over[EDGE:].all())}
for n in (2, 4):
    words = range(measured[n] - 8, measured[n] + 8)
    clean[n] = [overflows(w, T_LONG, n) for w in words] == [False] * 8 + [True] * 8
print("clean edge (every word below finite, every word from it on overflowing):", clean)
assert all(clean.values())


def run8(word: int) -> meshnb.SystemResult:
    return meshnb.train(T_LONG, set_lr={0: np.uint32(word)}, systems=8, backend="fused").systems[0]


def bisect_between(lo: int, hi: int) -> tuple[int, int]:
    """Adjacent words (finite, overflowing) between a finite word `lo` and an overflowing word `hi` (N = 8)."""
    assert not overflows(lo, T_LONG, 8) and overflows(hi, T_LONG, 8)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if overflows(mid, T_LONG, 8) else (mid, hi)
    return lo, hi


band = np.linspace(f32_word(line[8]), f32_word(1.80), 96).round().astype(np.int64)
band_runs = [run8(int(w)) for w in band]
band_over = np.array([not np.isfinite(r.params).all() for r in band_runs])
first_k, last_k = int(np.argmax(band_over)), int(np.flatnonzero(~band_over)[-1])
lower = bisect_between(int(band[first_k - 1]), int(band[first_k]))  # the first overflow of the scan, to a word
upper = bisect_between(int(band[last_k]), int(band[last_k + 1]))  # the last finite run of the scan, to a word
window = 9  # the half point: where 9 neighbouring scanned words first overflow more often than not
share = np.convolve(band_over, np.ones(window) / window, mode="valid")
half_k = int(np.argmax(share > 0.5)) + window // 2
mixed = slice(first_k, last_k + 1)
even = np.array([np.abs(r.params[[0, 2]]).max() if np.isfinite(r.params).all() else np.nan for r in band_runs])
ulp1 = float(np.spacing(np.float32(1)))
for name, (lo, hi) in (("first overflow", lower), ("last finite run", upper)):
    print(
        f"N = 8, {name}: bracket {lo:08x} .. {hi:08x} = {word_f32(lo):.9g} .. {word_f32(hi):.9g} "
        f"({100 * (word_f32(hi) / line[8] - 1):+.4f}% from the line)"
    )
print(
    f"N = 8, {len(band)} words from the line {line[8]:.6g} to 1.80: the first {first_k} finite, then "
    f"{band_over[mixed].sum()} of {last_k + 1 - first_k} overflow up to {word_f32(int(band[last_k])):.6g}, "
    f"more than half from {word_f32(int(band[half_k])):.6g}, and every one after it; the theory "
    f"{theory[8]:.6g} is {100 * (theory[8] / line[8] - 1):.4f}% past the line"
)
print(
    f"the finite ones: |a|, |c| at most {np.nanmax(even):.2g} = {np.nanmax(even) / ulp1:.1f} ulp(1) "
    f"(median {np.nanmedian(even) / ulp1:.1f} ulp(1)); b, d at the least-squares values"
)
odd = np.array([r.params[[1, 3]] for r in band_runs if np.isfinite(r.params).all()])
assert not band_over[:first_k].any() and band_over[last_k + 1 :].all() and 0 < first_k < half_k < last_k
assert band_over[mixed].any() and (~band_over[mixed]).any()  # mixed between the two edges
assert (
    lower[1] - lower[0] == 1 and upper[1] - upper[0] == 1 and word_f32(lower[1]) > line[8] + 10 * (theory[8] - line[8])
)
assert np.nanmax(even) < 32 * ulp1 and np.abs(odd - lsq[[1, 3]]).max() < 1e-5

fig, ax = plt.subplots(figsize=(10, 3.6))
lr_band = np.array([word_f32(int(w)) for w in band])
ax.axvspan(
    word_f32(lower[1]), word_f32(upper[0]), color="tab:orange", alpha=0.15, label="mixed: finite and overflowing"
)
ax.semilogy(
    lr_band[~band_over], even[~band_over] / ulp1, "o", ms=6, mfc="none", mew=1.2, label="finite: max(|a|, |c|) (ulp(1))"
)
ax.plot(lr_band[band_over], np.full(band_over.sum(), 40.0), "x", ms=7, mew=1.5, color="tab:red", label="overflowed")
ax.axvline(line[8], color="k", lw=1, label="stability line (2 / lambda_max(A))")
ax.axvline(theory[8], color="k", ls=":", lw=1.5, label="finite-budget theory, 2^17 steps")
for _lo, hi in (lower, upper):
    ax.axvline(word_f32(hi), color="tab:orange", lw=1.5)
ax.set(xlabel="learning rate", ylabel="max(|a|, |c|) (ulp(1))", title="N = 8 at its edge, 2^17 steps, one run per word")
ax.legend(fontsize=7, loc="center right")
fig.suptitle(
    "What to see: finite up to the first orange line (far past the dotted theory), mixed in the band, "
    "every run overflowing past the second",
    fontsize=9,
)
fig.tight_layout()
plt.show()

# %%
display(
    Markdown(
        f"**What the numbers show.** The stability lines are {', '.join(f'{line[n]:.6g}' for n in CLUSTERS)} "
        f"for N = 1, 2, 4, 8: only N = 8 (full-batch descent) has `2 / lambda_max(A)` = {lr_crit:.6g}. "
        f"One system's cycle of 8 steps turns unstable {100 * (1 - line[1] / lr_crit):.3f}% below it; the "
        f"clusters of 2 and 4 stay stable {100 * (line[2] / lr_crit - 1):.3f}% and "
        f"{100 * (line[4] / lr_crit - 1):.3f}% above it, and above their per-step bounds "
        f"({per_step[2]:.6g}, {per_step[4]:.6g}): past a step's own bound that step stretches its top "
        "eigenvector, but the next step's top eigenvector points elsewhere (batches g and 7 - g are mirror "
        "images, x to -x) and takes part of the stretch back, so the cycle's radius, a property of the "
        "product, is neither the mean matrix's nor any one step's. The bisected thresholds at 2^17 steps "
        f"of N = 1, 2, 4 ({', '.join(f'{word_f32(measured[n]):.6g}' for n in (1, 2, 4))}) "
        "lie past the lines by what the "
        "growth rate needs to reach overflow in 2^17 steps, as the finite-budget theory says to within "
        f"{100 * np.abs(thr_resid).max():.1f}% of that distance (N = 1, from 2^10 to 2^17 steps), and for "
        "N = 1, 2, 4 the edge is clean. **N = 8 is different**, and float32 is why: its unstable mode is "
        "the even one (`a`, `c`), whose least-squares value is almost 0 and which the init page starts at "
        "0, so its error is nothing but rounding. A few ulps of `a` added to predictions of order 1 are "
        "mostly rounded away, so the even params see no consistent gradient and stay on a bounded orbit "
        f"(at most {np.nanmax(even) / ulp1:.0f} ulp(1)) instead of growing. Every scanned word stays finite "
        f"up to the first overflow, bisected to the words {word_f32(lower[0]):.9g} .. {word_f32(lower[1]):.9g} "
        f"({100 * (word_f32(lower[1]) / line[8] - 1):.3f}% past the line, where the theory expects "
        f"{100 * (theory[8] / line[8] - 1):.4f}%); from there overflow and no overflow alternate (more than half "
        f"overflow from {word_f32(int(band[half_k])):.6g}) up to the last finite run, bisected to "
        f"{word_f32(upper[0]):.9g} .. {word_f32(upper[1]):.9g} ({100 * (word_f32(upper[1]) / line[8] - 1):.3f}%); "
        "past it every scanned word overflows. Between the scan's words other finite words may hide: the "
        "brackets are adjacent words where the runs change, found from the scan, not proofs that none lies beyond."
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
axes[0].set_ylabel("|param| (param units; 0 at the bottom)")
axes[3].legend(fontsize=7, loc="lower right")  # d's lower right is empty: the red ticks are at the top
fig.suptitle(
    "What to see: below 2^-126 (grey: mode Z reads the LR as 0) mode Z's params stay 0 while "
    "IEEE's move; above it the two\n"
    "are one line but where an update underflows (red ticks: the words differ). Blue band: subnormal params",
    fontsize=9,
)
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
alone = meshnb.train(STEPS, set_lr={0: np.uint32(one_call.lr_words[k_final])})
assert alone.digest == one_call.digests[k_final] and alone.page == one_call.page(k_final)
print(f"system {k_final} (the best LR) run alone by meshnb.train: same digest and same page")
print(json.dumps(records[k_final])[:160], "...")
