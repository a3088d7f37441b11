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
# # 1. Training one system
#
# meshnb runs the mesh's `train` program: stochastic gradient descent (SGD) that fits a cubic
# `y = a + b x + c x^2 + d x^3` to 256 samples of `sin(pi x)` on `[-1, 1]`. Every float32
# operation follows *float mode Z* (notebook 02), so the result is the same bits on every machine.
#
# This notebook trains one system for 20,000 steps and looks at:
#
# 1. the loss of every step, over the whole run;
# 2. the loss ring, the page's record of the last 256 losses;
# 3. the fitted cubic against `sin(pi x)` and the samples;
# 4. the gap between the SGD params and the least-squares cubic, and where it comes from;
# 5. the limit cycle a constant learning rate converges to: a gap of order `lr`, an excess loss of
#    order `lr²`, measured and put beside the first-order theory of cyclic SGD;
# 6. the exact float32 cycle the run ends on.
#
# It uses only the public API described in the README. Run it top to bottom; it takes a few seconds
# (the first call of a kernel compiles it, later calls are fast).

# %%
# %matplotlib inline
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display

import meshnb

plt.rcParams.update({"figure.figsize": (10, 4.2), "figure.dpi": 90, "axes.grid": True, "grid.alpha": 0.3})

# %% [markdown]
# ## 1.1 One run
#
# `meshnb.train(steps)` starts a system from `init` (params zero, learning rate 0.5) and runs
# `steps` steps. Step `t` computes the error of the current cubic on one *batch* of 32 samples and
# moves the params against the mean gradient. The 256 samples are split into 8 batches, and
# batch `g` holds samples `g, g+8, g+16, ..., g+248`; step `t` uses batch `t mod 8`, so the batches
# come round in the same order every 8 steps.
#
# `keep_trace=True` keeps, for every step, the five sums that step applied: the sums over the batch
# of `e`, `e x`, `e x^2`, `e x^3` and `e^2`, where `e` is the error of the cubic on one sample.

# %%
STEPS = 20_000
r = meshnb.train(STEPS, keep_trace=True)

print("params a, b, c, d:", r.params)
print("as f32 words:     ", r.params_hex)
print("loss of the last step:", r.last_loss)
print("counters:", r.counters)
print("trace:", r.trace.shape, r.trace.dtype)

# %% [markdown]
# ## 1.2 The loss of every step
#
# A step's loss is the mean squared error on its batch, measured *before* the step's update:
# `loss = sum(e^2) * (1/32)`. The trace holds `sum(e^2)` in column 4 (as f32 words), and the page
# holds `1/32` as `INV_BATCH`. Multiplying by a power of two is exact in float32, so plain numpy gives
# the same bits as the program; the cell checks that against the page's loss ring for the last
# 256 steps.
#
# For reference we also need the best any cubic can do on these 256 samples: the least-squares fit,
# computed in float64 with numpy (section 1.5 looks at it closely).

# %%
inv_batch = r.view["INV_BATCH"]  # float32 1/32
sums = r.trace.view(np.float32)  # [steps, 5]: e, e x, e x^2, e x^3, e^2
loss = sums[:, 4] * inv_batch  # the loss of step t, t = 0 .. STEPS-1
steps = np.arange(r.steps)

last = steps[-256:]
assert np.array_equal(loss[last].view(np.uint32), r.loss[last % 256].view(np.uint32))
print("losses from the trace equal the page's loss ring bit for bit (last 256 steps)")

x = r.view["X"].astype(np.float64)  # the 256 samples, as the program holds them
y = r.view["Y"].astype(np.float64)
lsq = np.polynomial.polynomial.polyfit(x, y, 3)  # float64 least squares: a, b, c, d
lsq_mse = np.mean((np.polynomial.polynomial.polyval(x, lsq) - y) ** 2)

# One pass over all 8 batches sees every sample once: the mean of 8 consecutive step losses.
pass_loss = loss[: STEPS // 8 * 8].reshape(-1, 8).mean(axis=1)
print(f"least-squares MSE on the 256 samples: {lsq_mse:.6g}")
print(f"mean loss of the last pass of 8 steps: {pass_loss[-1]:.6g}")
below = steps[-48:][loss[-48:] < lsq_mse]
batches_below = sorted(set((below % 8).tolist()))
print(f"steps of the last 48 whose loss is below the least-squares MSE: {below.size}, of batches {batches_below}")
assert lsq_mse < pass_loss[-1] < 1.05 * lsq_mse and below.size > 0

# "Falls fast, then flattens out": the pass mean at a few step counts, over its final value.
settle = {s: pass_loss[s // 8 - 1] / pass_loss[-1] for s in (8, 400, 800)}
print("pass mean over its final value after 8, 400, 800 steps:", ", ".join(f"{v:.6g}" for v in settle.values()))
assert settle[8] > 10 and settle[400] < 1.1 and settle[800] < 1.001

# Is a step below the line because 32 samples can be fitted better than 256?  Score the fixed
# least-squares cubic of all 256 samples on each batch: no SGD, no fitting to the batch.
lsq_batch = np.array([np.mean((np.polynomial.polynomial.polyval(x[g::8], lsq) - y[g::8]) ** 2) for g in range(8)])
lsq_below = np.flatnonzero(lsq_batch < lsq_mse)
print(f"batches on which the least-squares cubic itself scores below its mean over all 256: {lsq_below.tolist()}")
assert lsq_below.tolist() == [2, 3, 4, 5] and set(batches_below) <= set(lsq_below)

# %%
fig, (ax0, ax1) = plt.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
ax0.plot(steps + 1, loss, lw=0.6, color="tab:blue", alpha=0.45, label="loss of each step (one batch)")
ax0.plot(8 * np.arange(1, len(pass_loss) + 1), pass_loss, color="tab:blue", label="mean over each pass of 8 steps")
ax0.axhline(lsq_mse, color="k", ls="--", lw=1, label="least-squares cubic (float64)")
ax0.set(
    xscale="log",
    yscale="log",
    xlabel="step + 1 (steps)",
    ylabel="loss (MSE, y units^2)",
    title=f"Loss per step, {STEPS:,} steps, learning rate 0.5",
)
ax0.legend()

tail = steps[-48:]
ax1.plot(tail, loss[tail], color="tab:blue", lw=0.8)
sc = ax1.scatter(tail, loss[tail], c=tail % 8, cmap="viridis", s=25, zorder=3)
ax1.axhline(lsq_mse, color="k", ls="--", lw=1)
ax1.set(yscale="log", xlabel="step", ylabel="loss (MSE, y units^2)", title="The last 48 steps: one level per batch")
fig.colorbar(sc, ax=ax1, label="batch (step mod 8)")
fig.suptitle(
    "What to see: the pass mean falls onto the dashed least-squares line within a few hundred steps and stays\n"
    "just above it (left); the steps keep a sawtooth of period 8, one level per batch (right)",
    fontsize=9,
)
fig.tight_layout()
plt.show()

# %% [markdown]
# **What the plot shows.** The loss falls fast for a few hundred steps, then flattens out. The mean
# over each pass of 8 steps (every sample once) ends just above the least-squares line (dashed), the
# best mean squared error any cubic reaches on all 256 samples. Single steps can go below that line,
# and not because SGD fits their 32 samples better: the fixed least-squares cubic scores below its
# mean on the middle batches 2-5 too (and above it on the outer ones, printed above). The steps below
# the line are steps of those batches: the levels are batch-to-batch variation of the data, which
# any cubic shows. And the loss never settles on one value: the right
# panel shows a sawtooth with period 8, one level per batch. In numbers (printed above): the first
# pass's mean is more than 10 times the final one, by step 400 it is within 10% of it and by step
# 800 within 0.1%. Each batch has its own error at the
# current params, and the params keep moving (section 1.5).

# %% [markdown]
# ## 1.3 The loss ring
#
# The page does not keep the whole history: its `LOSS` field is a ring of 256 entries, and step `t`
# writes its loss at index `t mod 256`. After 20,000 steps the ring holds steps 19,744 to 19,999;
# the newest entry is at index `(next step - 1) mod 256`. Because 256 is a multiple of 8, index `i`
# always holds a step of batch `i mod 8`, so the ring shows the batch pattern at fixed places.

# %%
ring = r.loss  # float32[256]
newest = (r.steps - 1) % 256
oldest_step = r.steps - 256
print(
    f"ring index {newest} holds the newest loss (step {r.steps - 1}); "
    f"steps {oldest_step}..{r.steps - 1} are in the ring"
)

fig, (ax0, ax1) = plt.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
idx = np.arange(256)
ax0.plot(idx, ring, color="0.6", lw=0.7)
sc = ax0.scatter(idx, ring, c=idx % 8, cmap="viridis", s=12, zorder=3)
ax0.axvline(newest, color="tab:red", lw=1, label=f"newest entry (step {r.steps - 1})")
lo, hi = ring.min(), ring.max()
ax0.set(
    xlabel="ring index (step mod 256)",
    ylabel="loss (MSE, y units^2)",
    ylim=(lo - 0.05 * (hi - lo), hi + 0.3 * (hi - lo)),
    title="r.loss: the page's loss ring after 20,000 steps",
)
ax0.legend(loc="upper right")
fig.colorbar(sc, ax=ax0, label="batch")

by_batch = ring.reshape(32, 8)  # row = one pass, column = batch
jitter = np.random.default_rng(0).uniform(-0.35, -0.05, by_batch.shape)  # left of each batch's bar
ax1.scatter(
    np.arange(8) + jitter, by_batch, c=np.broadcast_to(np.arange(8), by_batch.shape), cmap="viridis", s=12, zorder=3
)
ax1.hlines(lsq_batch, np.arange(8) + 0.05, np.arange(8) + 0.4, color="k", lw=2.5, label="least-squares cubic")
ax1.set(
    xlabel="batch g (samples g, g+8, ..., g+248)",
    ylabel="loss (MSE, y units^2)",
    xticks=range(8),
    title="The ring's 32 losses of each batch",
)
ax1.legend(fontsize=8, loc="upper center")
fig.suptitle(
    "What to see: 8 levels repeating 32 times around the ring (left); each batch's 32 losses on one level, the\n"
    "outer batches 0, 7 highest and the middle 3, 4 lowest, as for the least-squares cubic (right, black bars)",
    fontsize=9,
)
fig.tight_layout()
plt.show()

ring_order = np.argsort(by_batch.mean(axis=0))
lsq_order = np.argsort(lsq_batch)
print("batches from the smallest loss to the largest, SGD's ring:      ", ring_order)
print("                                        the least-squares cubic:", lsq_order)
print("least-squares cubic's loss on each batch:", np.array2string(np.array(lsq_batch), precision=5))
assert set(ring_order[:2]) == set(lsq_order[:2]) == {3, 4} and set(ring_order[-2:]) == set(lsq_order[-2:]) == {0, 7}
# "Nearly equal" and "8 levels": the spread of a batch's 32 ring losses against the gaps between the levels.
within = (by_batch.max(axis=0) - by_batch.min(axis=0)).max()
level_gap = np.diff(np.sort(by_batch.mean(axis=0))).min()
print(f"largest spread of one batch's 32 losses: {within:.1e}; smallest gap between batch levels: {level_gap:.1e}")
assert 1000 * within < level_gap

# %% [markdown]
# **What the plot shows.** Left: the ring as stored, with 8 loss levels repeating 32 times; the red
# line marks where the next step will write. Right: the 32 losses of each batch, spread
# sideways so that they do not hide each other, are nearly equal: over the whole ring, a batch's
# spread is more than 1000 times smaller than the smallest gap between two batches' levels
# (printed). The outer batches (0 and 7) have the largest loss and the middle ones (3 and 4) the
# smallest, and the fixed least-squares cubic
# (black bars, printed above) has the same largest and smallest: the order belongs to the batches
# themselves (which samples each holds), not to where the params are on their loop. The loop
# (section 1.5) moves each level a little around the least-squares one.

# %% [markdown]
# ## 1.4 The fitted cubic
#
# The params are float32; we evaluate both cubics in float64 to draw them.

# %%
sgd = r.params.astype(np.float64)
grid = np.linspace(-1, 1, 801)
poly = np.polynomial.polynomial.polyval

fig, (ax0, ax1) = plt.subplots(1, 2)
ax0.plot(grid, np.sin(np.pi * grid), color="k", lw=2.5, alpha=0.25, label="sin(pi x)")
ax0.plot(x, y, ".", color="k", ms=3, label="the 256 samples")
ax0.plot(grid, poly(grid, sgd), color="tab:blue", label="SGD cubic (meshnb)")
ax0.plot(grid, poly(grid, lsq), color="tab:orange", ls="--", label="least-squares cubic")
ax0.set(xlabel="x (sample units)", ylabel="y (y units)", title="The cubic fitted to sin(pi x)")
ax0.legend()

ax1.plot(grid, poly(grid, lsq) - np.sin(np.pi * grid), color="tab:orange", ls="--", label="least squares - sin(pi x)")
ax1.plot(grid, poly(grid, sgd) - np.sin(np.pi * grid), color="tab:blue", lw=1, label="SGD cubic - sin(pi x)")
ax1.plot(grid, 10 * (poly(grid, sgd) - poly(grid, lsq)), color="tab:red", label="10 x (SGD cubic - least squares)")
ax1.axhline(0, color="k", lw=0.8)
ax1.set(
    xlabel="x (sample units)", ylabel="difference (y units)", title="Errors of the two cubics, and their difference"
)
ax1.legend(fontsize=8)
fig.suptitle(
    "What to see: the two cubics coincide and miss sin(pi x) most at x = ±1 (left); the SGD cubic sits above\n"
    "the least-squares one everywhere, by a small parabola (right, red, magnified 10x)",
    fontsize=9,
)
fig.tight_layout()
plt.show()

above = poly(grid, sgd) - poly(grid, lsq)
print(
    f"SGD cubic - least squares on [-1, 1]: from {above.min():.2e} (at x = {grid[above.argmin()]:+.2f}) "
    f"to {above.max():.2e} (at x = {grid[above.argmax()]:+.2f})"
)
assert above.min() > 0 and abs(grid[above.argmax()]) == 1 and sgd[0] > 0 and sgd[2] > 0
err_lsq, err_sgd = poly(grid, lsq) - np.sin(np.pi * grid), poly(grid, sgd) - np.sin(np.pi * grid)
inner = np.abs(grid) < 0.9
print(
    f"largest error against sin(pi x) on [-1, 1]: least squares {np.abs(err_lsq).max():.4f} at x = "
    f"{grid[np.abs(err_lsq).argmax()]:+.2f}, SGD {np.abs(err_sgd).max():.4f} "
    f"at x = {grid[np.abs(err_sgd).argmax()]:+.2f}; "
    f"on |x| < 0.9 at most {np.abs(err_lsq[inner]).max():.4f}"
)
even_part = np.abs(err_lsq + err_lsq[::-1]).max() / 2  # the even part of the least-squares error
print(
    f"even part of the least-squares error: {even_part:.1e}; "
    f"largest |SGD - least squares| over the largest error: {np.abs(above).max() / np.abs(err_lsq).max():.3f}"
)
assert all(abs(grid[np.abs(e).argmax()]) == 1 for e in (err_lsq, err_sgd))
assert np.abs(err_lsq[inner]).max() < 0.5 * np.abs(err_lsq).max() and np.abs(err_sgd).max() < 0.25
assert even_part < 1e-6 and np.abs(above).max() < 0.1 * np.abs(err_lsq).max()

# %% [markdown]
# **What the plot shows.** On the left the two cubics lie on top of each other and follow
# `sin(pi x)` closely (within 0.25 everywhere on `[-1, 1]`, printed above); a cubic cannot bend like a
# sine, so both miss it most at the ends, `x = ±1` (inside `|x| < 0.9` the error is less than half
# of that). On the right, their errors against `sin(pi x)` are nearly the same curve (they differ
# by less than a tenth of the largest error), odd like the data (the least-squares error's even part
# is below 1e-6; the SGD cubic's is its small parabola). The red
# curve magnifies their difference tenfold: the SGD cubic sits a little *above* the least-squares
# cubic everywhere (printed above), most at an end, a parabola `a + c x^2` with small positive `a` and `c` (plus a
# tiny odd part).

# %% [markdown]
# ## 1.5 SGD params against the least-squares optimum
#
# The least-squares cubic minimises the mean squared error over all 256 samples at once; computed in
# float64 it is the full-batch optimum. Because the data are odd (`sin(-pi x) = -sin(pi x)`, and the
# samples are symmetric about 0), its even coefficients `a` and `c` are zero up to rounding.

# %%
names = "abcd"
print(f"{'':2} {'SGD (f32 word)':>15} {'SGD':>14} {'least squares':>14} {'SGD - lsq':>12}")
for j in range(4):
    print(f"{names[j]:2} {r.params_hex[j]:>15} {sgd[j]:14.8f} {lsq[j]:14.8f} {sgd[j] - lsq[j]:12.3e}")
sgd_mse = np.mean((poly(x, sgd) - y) ** 2)
print(f"\nmean squared error on all 256 samples: SGD {sgd_mse:.7f}, least squares {lsq_mse:.7f}")
gap = np.abs(sgd - lsq)
assert gap[[1, 3]].max() < 3e-4 and gap[[0, 2]].min() > 3e-3 and gap[[0, 2]].max() < 5e-3

# %% [markdown]
# `b` and `d` agree to four or five significant digits, but `a` and `c` are about 0.004 where they
# should be 0. The reason is the algorithm, not float32:
#
# * **Each step sees one batch.** Batch `g` is samples `g, g+8, ..., g+248`: spread over the whole
#   interval but not symmetric about 0 (its mirror image is batch `7-g`). Each step pulls the params
#   toward *that batch's* best cubic, which has a nonzero `a` and `c`.
# * **A constant learning rate never lets go.** The batches come round in a fixed cycle, so the
#   params end up going round a fixed loop near the optimum instead of converging to it. The final
#   params are wherever the loop is after the last step (batch 7, where `a` and `c` are largest).
# * **The loop is the size of the steps.** Halving the learning rate halves the loop, so the gap
#   shrinks in proportion (section 1.6 measures it, with the first-order theory beside it).
#   Full-batch gradient descent (every sample in every step) has no loop and
#   reaches the optimum.
#
# We check each point. First the loop: continue the run one step at a time from its page
# (`view_in`, which resumes bit for bit) and record the params after each of the next 8 steps.

# %%
page = r.page
loop = []
for _ in range(8):
    page = meshnb.train(1, view_in=page).page
    loop.append(meshnb.View.from_bytes(page)["PARAMS"])
loop = np.array(loop, dtype=np.float64)  # params after steps 20000 .. 20007 (batches 0..7)

batch_opt = np.array([np.polynomial.polynomial.polyfit(x[g::8], y[g::8], 3) for g in range(8)])
print("params after each batch of one pass, and the pass mean:")
for g in range(8):
    print(f"  after batch {g}: a = {loop[g, 0]:+.5f}  c = {loop[g, 2]:+.5f}")
print(f"  mean of the pass: a = {loop[:, 0].mean():+.2e}  c = {loop[:, 2].mean():+.2e}")
print(f"after 8 steps the params are back within {np.abs(loop[-1] - sgd).max():.1e} of where they started")
print(
    f"spread in a, c: the 8 batches' own optima {np.ptp(batch_opt[:, 0]):.4f}, {np.ptp(batch_opt[:, 2]):.4f}; "
    f"the loop {np.ptp(loop[:, 0]):.4f}, {np.ptp(loop[:, 2]):.4f}"
)
assert loop[:, 0].argmax() == loop[:, 2].argmax() == 7 and np.abs(loop[-1] - sgd).max() < 1e-6
assert (np.ptp(batch_opt[:, [0, 2]], axis=0) > 2 * np.ptp(loop[:, [0, 2]], axis=0)).all()

# %% [markdown]
# Next, the same SGD in float64, written directly in numpy (same batches, same order, same learning
# rate), and full-batch gradient descent for comparison. Then the meshnb run at smaller learning
# rates: the page's learning rate is set with `set_lr={step: np.uint32(word)}` (SET_LR before that step),
# and a smaller rate needs proportionally more steps to settle.

# %%
V = np.vander(x, 4, increasing=True)  # columns 1, x, x^2, x^3


def gradient_descent(lr: float, steps: int, full_batch: bool = False) -> np.ndarray:
    """Cyclic SGD (batch t mod 8 at step t) or full-batch gradient descent, in float64, from zero."""
    p = np.zeros(4)
    for t in range(steps):
        rows = slice(None) if full_batch else slice(t % 8, None, 8)
        e = V[rows] @ p - y[rows]
        p -= lr * V[rows].T @ e / len(e)
    return p


sgd64 = gradient_descent(0.5, 4096)
gd64 = gradient_descent(0.5, 20_000, full_batch=True)
# Printed to 3 digits: the float64 run's last digits are the BLAS kernel's, not the claim's (below 1e-6).
print(f"float64 cyclic SGD - meshnb SGD: {np.abs(sgd64 - meshnb.train(4096).params).max():.2e}")
gd_gap = np.abs(gd64 - lsq).max()  # float64 rounding: its digits are the BLAS kernel's, so a bound is printed
print("float64 full-batch GD - least squares: below 1e-12" if gd_gap < 1e-12 else f"{gd_gap:.1e}")

rates = [0.5, 0.25, 0.125, 0.0625]
gaps = []
for lr in rates:
    word = int(np.float32(lr).view(np.uint32))
    run = meshnb.train(int(8192 / lr), set_lr={0: np.uint32(word)})
    gaps.append(np.abs(run.params.astype(np.float64) - lsq))
    print(
        f"lr {lr:<6} (word {word:08x}), {run.steps:6} steps: "
        f"|a - a_lsq| = {gaps[-1][0]:.2e}, |c - c_lsq| = {gaps[-1][2]:.2e}"
    )
gaps = np.array(gaps)

# %%
# The first-order theory of the loop (derived in section 1.6): the pass end sits at lr u_7 from p*.
A_g = np.array([V[g::8].T @ V[g::8] / 32 for g in range(8)])
c_g = np.array([V[g::8].T @ y[g::8] / 32 for g in range(8)])
A_full = A_g.mean(axis=0)
r_g = A_g @ lsq - c_g  # each batch's gradient at the least-squares point
u_end = np.linalg.solve(8 * A_full, sum(A_g[h] @ r_g[g] for g in range(8) for h in range(g + 1, 8)))

fig, (ax0, ax1) = plt.subplots(1, 2)
ax0.scatter(
    batch_opt[:, 0],
    batch_opt[:, 2],
    marker="s",
    c=range(8),
    cmap="viridis",
    s=40,
    label="each batch's own least-squares cubic",
)
ax0.plot(np.r_[sgd[0], loop[:, 0]], np.r_[sgd[2], loop[:, 2]], "-", color="tab:blue", lw=1)
ax0.scatter(
    loop[:, 0],
    loop[:, 2],
    c=range(8),
    cmap="viridis",
    s=40,
    edgecolors="tab:blue",
    zorder=3,
    label="SGD params after batch 0..7",
)
ax0.plot(*sgd[[0, 2]], "o", ms=12, mfc="none", mec="tab:red", mew=1.5, label="final params (after batch 7)")
ax0.plot(lsq[0], lsq[2], "+", color="k", ms=16, mew=1.5, zorder=4, label="least squares (all samples)")
ax0.set(xlabel="a (param units)", ylabel="c (param units)", title="One pass of SGD in the (a, c) plane")
ax0.xaxis.set_major_locator(plt.MaxNLocator(5))
ax0.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0, -0.2), ncol=2)  # below: the points fill the axes

ax1.loglog(rates, gaps[:, 0], "o", ms=9, mfc="none", mew=1.5, label="|a - a_lsq|, meshnb")
ax1.loglog(rates, gaps[:, 2], "s", ms=4, label="|c - c_lsq|, meshnb")
ax1.loglog(rates, np.array(rates) * abs(u_end[0]), ":", color="tab:blue", label="first order: lr |u_7| in a")
ax1.loglog(rates, np.array(rates) * abs(u_end[2]), "--", lw=0.8, color="tab:orange", label="first order, in c")
ax1.set(
    xlabel="learning rate (per step)",
    ylabel="gap to least squares (param units)",
    title="The gap shrinks with the learning rate",
)
ax1.set_xticks(rates, ["1/2", "1/4", "1/8", "1/16"])
ax1.xaxis.set_minor_locator(plt.NullLocator())
ax1.legend(fontsize=8)
fig.suptitle(
    "What to see: the SGD params (circles) go round a small loop about the least-squares point (+), far inside\n"
    "the batches' own optima (squares); the gap in a and c halves with the LR, on the first-order lines (right)",
    fontsize=9,
)
fig.tight_layout()
plt.show()
loop_mean_gap = np.abs(loop.mean(axis=0) - lsq)[[0, 2]].max()
print(f"the loop's mean is within {loop_mean_gap:.1e} of the least-squares point in (a, c)")
halving = gaps[:-1, [0, 2]] / gaps[1:, [0, 2]]
print("the gap in a and c when the learning rate halves: divided by", np.array2string(halving.ravel(), precision=2))
on_theory = gaps[:, [0, 2]] / (np.array(rates)[:, None] * np.abs(u_end[[0, 2]]))  # [rate, (a, c)]
print(
    "meshnb's gap in a, c over the first-order lr |u_7|, LR 1/2 .. 1/16:",
    np.array2string(on_theory.T, precision=3, separator=", ").replace("\n", ""),
)
assert loop_mean_gap < 3e-4 and ((halving > 1.5) & (halving < 2.5)).all()
assert (np.abs(on_theory - 1) < 0.1).all()
assert np.abs(sgd64 - meshnb.train(4096).params).max() < 1e-6 and gd_gap < 1e-10

# %% [markdown]
# **What the plots show.** Left: the squares are the 8 batches' own best cubics, far apart in `a`
# and `c` (their spread is more than twice the loop's in each, printed above). The SGD params
# (circles, colored by the batch just applied) go round a small loop around
# the least-squares point (black cross); the mean of the loop is close to it (printed above), but the run
# stops at one point of the loop (red ring): the point after batch 7, the end of a pass. Right:
# the gap in `a` and `c` halves each time the learning rate halves (roughly, printed above), on the
# first-order theory's lines `lr |u_7|` (section 1.6 derives `u_7`): from LR 1/16 to 1/2 the runs are
# within 10% of them (the ratios are printed; the largest miss is `a`'s at LR 1/2).
#
# The float64 SGD lands on the same params as meshnb to within the distance printed above (below
# 1e-6, asserted): float32
# and mode Z change the last bits, not the answer. Full-batch gradient descent in float64 reaches
# the least-squares cubic. In meshnb, a cluster of 8 systems does full-batch descent: each member
# computes one batch's sums and all members apply the total (notebook 03).

# %% [markdown]
# ## 1.6 The limit cycle: a gap of order lr, an excess loss of order lr²
#
# The loop is the object that a constant learning rate converges to, and first-order theory gives it.
# Write batch `g`'s mean gradient as `A_g p - c_g` (`A_g = V_g^T V_g / 32`, `c_g = V_g^T y_g / 32`
# over its 32 samples, `V` the matrix of `1, x, x^2, x^3`); the full-sample `A` and `c` are the
# means over the 8 batches, and the least-squares point `p*` solves `A p* = c`. At `p*` batch `g`'s
# gradient is its residual `r_g = A_g p* - c_g`, and the 8 residuals sum to zero. With
# `δ = p - p*`, a step on batch `g` is the affine map `δ <- (I - lr A_g) δ - lr r_g`.
#
# Let `δ_e` be the loop's point at the end of a pass (after batch 7). One pass maps it to itself:
# `δ_e = M δ_e - lr Σ_g P_g r_g`, with `M` the product of the 8 maps `I - lr A_g` and `P_g` the
# product of those after batch `g`. To first order, `I - M = 8 lr A + O(lr²)` and
# `P_g = I - lr Σ_{h>g} A_h + O(lr²)`; the zeroth-order sum `Σ_g r_g` vanishes, so
#
# `δ_e = lr u_7 + O(lr²)`,  `u_7 = (8 A)^-1 Σ_{g<h} A_h r_g`,
#
# and after batch `k` of a pass `δ_k = lr u_k + O(lr²)` with `u_k = u_7 - Σ_{g≤k} r_g`. So the gap
# to the least-squares cubic is of order `lr`. The excess loss over all 256 samples is exactly
# `L(p) - L(p*) = δ^T A δ` (the loss is quadratic and its gradient vanishes at `p*`), so along
# the loop it is `lr² u_k^T A u_k + O(lr³)`: one order more. Both the pass end and the cycle's
# mean follow these laws, with a ratio of excesses that tends to `u_7^T A u_7 / mean_k u_k^T A u_k`.
#
# The cell computes `u_k` in float64, the exact float64 loop (the fixed point of one pass's
# composed map, solved, no iteration) and meshnb's loop (a run of `8192 / lr` steps, a whole
# number of passes, then 8 single steps) for LR `1/2` to `1/64`, and fits the slopes on log-log axes.

# %%
RATES = 2.0 ** -np.arange(1, 7)  # 1/2 .. 1/64
u = u_end - np.cumsum(r_g, axis=0)  # u[k]: the first-order offset after batch k, per unit of lr


def excess(d: np.ndarray) -> np.ndarray:
    """L(p* + d) - L(p*) over the 256 samples, for each row d."""
    return np.einsum("ki,ij,kj->k", d, A_full, d)


def loop_float64(lr: float) -> np.ndarray:
    """The exact float64 limit loop: its points after batches 0..7, from the fixed point of one pass."""
    m, c = np.eye(4), np.zeros(4)
    for g in range(8):
        m, c = (np.eye(4) - lr * A_g[g]) @ m, (np.eye(4) - lr * A_g[g]) @ c + lr * c_g[g]
    p, points = np.linalg.solve(np.eye(4) - m, c), []
    for g in range(8):
        p = p - lr * (A_g[g] @ p - c_g[g])
        points.append(p)
    return np.array(points)


def loop_meshnb(lr: float) -> np.ndarray:
    """meshnb's loop at this LR: the params after batches 0..7 of the pass after 8192 / lr steps."""
    page, points = meshnb.train(int(8192 / lr), set_lr={0: np.float32(lr).view(np.uint32)}).page, []
    for _ in range(8):
        page = meshnb.train(1, view_in=page).page
        points.append(meshnb.View.from_bytes(page)["PARAMS"])
    return np.array(points, dtype=np.float64)


d32 = np.array([loop_meshnb(lr) - lsq for lr in RATES])  # [rate, batch k, param]
d64 = np.array([loop_float64(lr) - lsq for lr in RATES])
gap_end, gap_end64 = np.linalg.norm(d32[:, 7], axis=1), np.linalg.norm(d64[:, 7], axis=1)
ex_end, ex_mean = np.array([excess(d)[7] for d in d32]), np.array([excess(d).mean() for d in d32])
ex_end64 = np.array([excess(d)[7] for d in d64])
th_gap, th_end, th_mean = RATES * np.linalg.norm(u[7]), RATES**2 * excess(u)[7], RATES**2 * excess(u).mean()
th_ratio = excess(u)[7] / excess(u).mean()
theory_err = np.linalg.norm(d64[:, 7] - RATES[:, None] * u[7], axis=1) / gap_end64  # the O(lr) correction

head = ("LR", "|p-p*| end", "theory", "excess end", "theory", "cycle mean", "theory", "ratio")
print(" ".join(f"{h:>{w}}" for h, w in zip(head, (6, 11, 10, 11, 10, 11, 10, 6))))
for i, lr in enumerate(RATES):
    print(
        f"1/{round(1 / lr):<4} {gap_end[i]:11.4e} {th_gap[i]:10.4e} {ex_end[i]:11.4e} {th_end[i]:10.4e} "
        f"{ex_mean[i]:11.4e} {th_mean[i]:10.4e} {ex_end[i] / ex_mean[i]:6.3f}"
    )
slope_gap = np.polyfit(np.log(RATES), np.log(gap_end), 1)[0]
slope_end = np.polyfit(np.log(RATES), np.log(ex_end), 1)[0]
slope_mean = np.polyfit(np.log(RATES), np.log(ex_mean), 1)[0]
print(f"parameter gap at the pass end against LR: slope {slope_gap:.2f}")
print(f"excess loss at the pass end against LR:   slope {slope_end:.2f}; over the cycle (mean): slope {slope_mean:.2f}")
print(f"pass end / cycle mean of the excess: {ex_end[-1] / ex_mean[-1]:.3f} at LR 1/64, theory {th_ratio:.3f}")
print("float64 loop against first-order theory (relative):", np.array2string(theory_err, precision=4))
off_gap, off_excess = np.abs(gap_end / gap_end64 - 1).max(), np.abs(ex_end / ex_end64 - 1).max()
print(f"meshnb against the float64 loop (relative): gap {off_gap:.1e}, excess {off_excess:.1e}")
assert abs(slope_gap - 1) < 0.05 and abs(slope_end - 2) < 0.1 and abs(slope_mean - 2) < 0.1
assert (theory_err[:-1] / theory_err[1:] > 1.3).all() and theory_err[-1] < 0.02
assert abs(ex_end[-1] / ex_mean[-1] / th_ratio - 1) < 0.01 and all(excess(d).argmax() == 7 for d in d32)
assert off_gap < 0.01 and off_excess < 0.01

# %%
fig, (ax0, ax1) = plt.subplots(1, 2)
ax0.loglog(RATES, gap_end, "o", ms=9, mfc="none", mew=1.5, color="tab:blue", label="meshnb, pass end")
ax0.loglog(RATES, gap_end64, "-", color="tab:blue", lw=1, label="exact float64 loop")
ax0.loglog(RATES, th_gap, "k:", label="first order: lr |u_7|")
ax0.set(
    xlabel="learning rate (per step)",
    ylabel="|p - p*| over a, b, c, d (param units)",
    title=f"Parameter gap: slope {slope_gap:.2f}",
)
ax1.loglog(RATES, ex_end, "o", ms=9, mfc="none", mew=1.5, color="tab:red", label="meshnb, pass end")
ax1.loglog(RATES, ex_mean, "s", ms=8, mfc="none", mew=1.5, color="tab:green", label="meshnb, mean over the cycle")
ax1.loglog(RATES, th_end, "k:", label="first order: lr² u_k^T A u_k")
ax1.loglog(RATES, th_mean, "k:")
ax1.set(
    xlabel="learning rate (per step)",
    ylabel="L(p) - L(p*), 256 samples (MSE, y units^2)",
    title=f"Excess loss: slope {slope_end:.2f} (end), {slope_mean:.2f} (mean)",
)
for ax in (ax0, ax1):
    ax.set_xticks(RATES, [f"1/{round(1 / lr)}" for lr in RATES])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.legend(fontsize=8)
fig.suptitle(
    "What to see: meshnb's points on the exact float64 loop (line) and on the first-order lines (dotted):\n"
    "the gap goes as the LR, the excess loss as its square, the pass end above the cycle's mean",
    fontsize=9,
)
fig.tight_layout()
plt.show()
display(
    Markdown(
        f"**What the plots show.** The gap to the least-squares cubic falls in proportion to the LR (slope "
        f"{slope_gap:.2f}), the excess loss over all 256 samples with its square (slope {slope_end:.2f} at "
        f"the pass end, {slope_mean:.2f} over the cycle): halving the LR halves the loop and quarters what it "
        "costs in loss. The first-order theory (dotted) meets the exact float64 loop to "
        f"{100 * theory_err[-1]:.1f}% at LR 1/64 and {100 * theory_err[0]:.0f}% at LR 1/2 (the next order "
        "nearly halves with the LR), and meshnb's float32 loop lies on the float64 one (within "
        f"{100 * off_gap:.2f}% in the gap). The pass end, where a run stops, is the loop's worst point for "
        f"the loss at every LR here: {ex_end[-1] / ex_mean[-1]:.2f} times the cycle's mean excess "
        f"at LR 1/64 (theory {th_ratio:.2f}; {ex_end[0] / ex_mean[0]:.2f} at LR 1/2)."
    )
)

# %% [markdown]
# ## 1.7 The run ends in an exact cycle
#
# In float32 the loop is not only approximately periodic: after a while, the run repeats *bit for
# bit*. The trace shows it: find the shortest period `P` (a multiple of 8) such that the sums of step
# `t + P` equal those of step `t` up to the end of the run, and the first step from which they do.

# %%
tail_start = STEPS // 2
P = next(
    p
    for p in range(8, 4097, 8)
    if np.array_equal(r.trace[tail_start : tail_start + p], r.trace[tail_start + p : tail_start + 2 * p])
)
same = (r.trace[P:] == r.trace[:-P]).all(axis=1)
start = int(np.flatnonzero(~same)[-1]) + 1
print(f"from step {start} on, the applied sums repeat every {P} steps ({P // 8} passes)")

# The params can differ in a last bit that no sum feels: find where the params (the whole state
# but the loss ring) repeat too, running from init to step t and to step t + P.
t0 = next(t for t in range(start, start + P + 1) if meshnb.train(t).params_hex == meshnb.train(t + P).params_hex)
print(f"from step {t0} on, the params repeat every {P} steps too")

# The params repeat with that period; the digest (params + the 256-entry loss ring) repeats
# when both the params and the ring do: after lcm(P, 256) steps.
period = np.lcm(P, 256)
a, b = meshnb.train(4096), meshnb.train(4096 + period)
print(
    f"train(4096) and train({4096 + period}): "
    f"same params {a.params_hex == b.params_hex}, same digest {a.digest == b.digest}"
)

# %%
assert t0 - start in range(9) and a.params_hex == b.params_hex and a.digest == b.digest
display(
    Markdown(
        f"So from step {t0:,} on the system is on a closed orbit of {P} steps (the sums start repeating "
        f"{t0 - start} steps earlier, while a param still differs in a last bit that no sum feels). More steps "
        f"do not change where it goes: the digest after 4,096 steps equals the digest after 4,096 + {period:,} "
        "steps. This is also why the gap in section 1.5 cannot be trained away at a fixed learning rate "
        "(notebook 06 splits the gap into the loop's part and float32's)."
    )
)
