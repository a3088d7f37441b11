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
# # 6. Where the gap to the float64 answer comes from
#
# meshnb's SGD params end some distance from the float64 least-squares cubic. This notebook splits
# that distance into its causes and then asks how sensitive the bits are to the float rules:
#
# 1. [The SGD loop and the float32 stall](#61-the-sgd-loop-and-the-float32-stall): the loop's part,
#    solved exactly in float64, grows with the LR per batch, `lr / N` (at a fixed learning rate it
#    shrinks with the cluster size N because `lr / N` does); what is left is float32's;
# 2. [Float-mode sensitivity](#62-float-mode-sensitivity): the ulp distance over time between mode Z
#    and runs with IEEE gradual underflow, FMA contraction and other flush rules (the fault models of
#    `meshnb.conformance.faults`);
# 3. [One flipped bit](#63-one-flipped-bit-of-each-param): how a single flipped bit of each param
#    propagates, whether the run comes back to the same bits, and which of float32's attractors
#    (repeating orbits, and the run's phase on them) it ends on.
#
# Every number in the text is printed by a cell and asserted there.

# %%
# %matplotlib inline
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display

import meshnb
from meshnb import sweep
from meshnb.conformance import faults

plt.rcParams.update({"figure.figsize": (10, 4.2), "figure.dpi": 90, "axes.grid": True, "grid.alpha": 0.3})

init = meshnb.train(0)
x = init.view["X"].astype(np.float64)  # the samples as the program holds them (f32), widened
y = init.view["Y"].astype(np.float64)
V = np.vander(x, 4, increasing=True)
lsq = np.linalg.lstsq(V, y, rcond=None)[0]  # the float64 answer
OFF_LR = next(f.offset for f in meshnb.LAYOUT if f.name == "LR")


def f32_word(value: float) -> int:
    return int(np.float32(value).view(np.uint32))


def ordered(words: np.ndarray) -> np.ndarray:
    """f32 words as integers in the order of their values (one apart = one ulp apart; +0 and -0 equal)."""
    w = np.asarray(words, dtype=np.uint32).astype(np.int64)
    return np.where(w & 0x80000000, -(w & 0x7FFFFFFF), w)


def ulps(w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    """How many float32 values lie between two f32 words (0: the same number)."""
    return np.abs(ordered(w1) - ordered(w2))


# %% [markdown]
# ## 6.1 The SGD loop and the float32 stall
#
# With a constant LR, cyclic SGD does not converge to a point but to a loop (notebook 01): step `t`
# of a cluster of `N` systems uses the batches `(t N + k) mod 8`, `k < N`, so the batches come round
# every `8 / N` steps. Each step is the affine map `p <- (I - lr A_t) p + lr c_t`
# (`A_t = V_t^T V_t / (32 N)`, `c_t = V_t^T y_t / (32 N)` over the step's samples), so the loop's
# point at the end of a cycle is the fixed point of the composed map, which float64 solves directly:
# no iteration, no float32. That splits meshnb's gap in two:
#
# - **the loop's part**: float64 loop point - least squares (exact arithmetic would leave this);
# - **float32's part**: meshnb's params - float64 loop point.
#
# meshnb runs each (LR, N) for `8192 / lr` steps (a whole number of cycles, long past settling).


# %%
def loop_offset(lr: float, n: int) -> np.ndarray:
    """The float64 loop point of cyclic SGD after a whole cycle (cluster of n, from step 0), less the least squares.

    Solved for the offset d = p - p* itself: a step is d <- (I - lr A_t) d - lr r_t, r_t = A_t p* - c_t
    (centred, so that the r_t sum to zero as at the exact p*), and I - M is built as a sum, not as I minus
    M's rounded product. Solving for p and subtracting p* instead loses ~1e-11 to cancellation, digits that
    a small LR's residual against the first order would print as its own.
    """
    a, r = [], []
    for t in range(8 // n):
        rows = np.concatenate([np.arange((t * n + k) % 8, 256, 8) for k in range(n)])
        a.append(V[rows].T @ V[rows] / (32 * n))
        r.append(V[rows].T @ (V[rows] @ lsq - y[rows]) / (32 * n))
    r = np.array(r) - np.mean(r, axis=0)
    i_minus_m, c = np.zeros((4, 4)), np.zeros(4)
    for a_t, r_t in zip(a, r, strict=True):
        i_minus_m, c = i_minus_m + lr * a_t @ (np.eye(4) - i_minus_m), c - lr * (a_t @ c + r_t)
    return np.linalg.solve(i_minus_m, c)


RATES = [0.5, 0.25, 0.125, 0.0625]
SIZES = [1, 2, 4, 8]
loop_gap, f32_gap, f32_ulps, total, ulp_of = {}, {}, {}, {}, {}
for n in SIZES:
    for lr in RATES:
        steps = int(8192 / lr)
        r = meshnb.train(steps, systems=n, backend="fused", set_lr={0: np.uint32(f32_word(lr))})
        p32 = r.params.astype(np.float64)
        offset = loop_offset(lr, n)
        star = lsq + offset
        loop_gap[n, lr] = np.abs(offset)
        f32_gap[n, lr] = np.abs(p32 - star)
        ulp_of[n, lr] = np.spacing(np.abs(r.params)).astype(np.float64)
        f32_ulps[n, lr] = np.abs(p32 - star) / ulp_of[n, lr]
        total[n, lr] = np.abs(p32 - lsq)
# The float64 loop point is the meshnb loop's: at N = 1, LR 0.5, they agree to float32's precision.
assert np.abs(f32_gap[1, 0.5]).max() < 1e-5

print(f"{'N':>2} {'LR':>7} {'loop: max|p*-lsq|':>18} {'f32: max|p-p*|':>15} {'f32 in b (ulps)':>16}")
for n in SIZES:
    for lr in RATES:
        loop = f"{loop_gap[n, lr].max():18.3e}" if n < 8 else f"{'< 1e-12':>18}"  # N = 8: float64 rounding
        print(f"{n:>2} {lr:>7} {loop} {f32_gap[n, lr].max():15.3e} {f32_ulps[n, lr][1]:16.1f}")

# %% [markdown]
# **The loop's part to first order.** Notebook 03 (3.2.1) derives it: at a cycle's end the float64 loop
# sits `(lr / N) u_N + O(lr^2)` from the least squares, `u_N = (1/8) A^-1 sum A_h r_g` over the pairs of
# batches `g < h` that the cycle takes in *different* steps (`r_g`: batch g's gradient at the least
# squares; a cluster's step takes its N batches' gradients at the same params, so it drops the
# within-group pairs). The cell checks it against `loop_offset` over LR from `2^-12` to 1/2 (the first
# order must miss by a relative `O(lr)`), and reads what it says at equal `lr / N`.

# %%
A_mean = V.T @ V / 256
batch = [(V[g::8].T @ V[g::8] / 32, V[g::8].T @ (V[g::8] @ lsq - y[g::8]) / 32) for g in range(8)]  # (A_g, r_g)


def first_order(n: int) -> np.ndarray:
    """u_N: the loop's offset at a cycle's end per unit of lr / N, to first order."""
    pairs = [batch[h][0] @ batch[g][1] for h in range(8) for g in range(h) if h // n != g // n]
    return np.linalg.solve(8 * A_mean, np.sum(pairs, axis=0) if pairs else np.zeros(4))


u_n = {n: first_order(n) for n in SIZES}
LR_SCAN = np.geomspace(2.0**-12, 0.5, 34)
scan = {n: np.array([loop_offset(lr, n) for lr in LR_SCAN]) for n in (1, 2, 4)}
rel_resid, resid_slope = {}, {}
for n in (1, 2, 4):
    miss = np.abs(scan[n] - np.outer(LR_SCAN / n, u_n[n])).max(axis=1)
    rel_resid[n] = miss / np.abs(scan[n]).max(axis=1)
    low = LR_SCAN <= 1 / 16
    resid_slope[n] = np.polyfit(np.log(LR_SCAN[low]), np.log(rel_resid[n][low]), 1)[0]
    print(
        f"N = {n}: max|p* - lsq| = {np.abs(u_n[n]).max():.5f} x lr/N to first order; it misses the float64 loop "
        f"by {rel_resid[n][0]:.1e} (relative) at LR 2^-12, {rel_resid[n][-1]:.3f} at 1/2, as LR^{resid_slope[n]:.3f}"
    )
ratio_lr = [loop_gap[1, lr].max() / loop_gap[1, lr / 2].max() for lr in RATES[:-1]]
halving_small = np.abs(scan[1][0]).max() / np.abs(loop_offset(LR_SCAN[0] / 2, 1)).max()
by_n = [loop_gap[n, 0.5].max() for n in SIZES]
b_stall, b_ulps = f32_gap[8, 0.5][1], f32_ulps[8, 0.5][1]
d_stall, d_ulps = f32_gap[8, 0.5][3], f32_ulps[8, 0.5][3]
print(
    "loop gap (N = 1) when the LR halves: divided by",
    ", ".join(f"{q:.3f}" for q in ratio_lr),
    f"(from 1/2 down); at LR 2^-12 by {halving_small:.5f}",
)
print(
    "loop gap at LR 0.5 for N = 1, 2, 4, 8:",
    ", ".join(f"{g:.2e}" for g in by_n[:3]),
    "and below 1e-12 (float64 rounding)" if by_n[3] < 1e-12 else f"{by_n[3]:.2e}",
)
print(f"N = 8 (full batch), LR 0.5: b is {b_stall:.3g} from the float64 answer, {b_ulps:.0f} ulps of b")
print(f"                           d is {d_stall:.3g} from the float64 answer, {d_ulps:.0f} ulps of d")
# First order: proportional to the LR, with a relative error that falls as the LR (slope 1), so that halving
# the LR divides the gap by 2 in the limit; at the LRs run it is off 2 by about the first-order residual.
assert all(0.95 < q < 1.05 for q in resid_slope.values()) and abs(halving_small - 2) < 1e-3
assert by_n[0] > by_n[1] > by_n[2] > 1e4 * by_n[3]  # shrinks with N; none at N = 8 (full batch)
assert all(loop_gap[8, lr].max() < 1e-12 for lr in RATES)  # N = 8's loop is the least squares, to float64 rounding

# Why float32 stops there: at the stalled params, the updates of b and d are at most half an ulp of b and d,
# so p - lr * g rounds back to p; a and c (near 0, where the ulps are tiny) keep jittering.
T8 = int(8192 / 0.5)
n8 = meshnb.train(T8, systems=8, backend="fused", keep_trace=True)
sums = n8.trace[-1].view(np.float32)
update = np.float32(0.5) * (sums[:4] * n8.view["INV_BATCH"])
half_ulp = np.spacing(np.abs(n8.params)) / 2
later = meshnb.train(T8 + 1024, systems=8, backend="fused")
print("last step's updates lr * g:      ", np.array2string(update, precision=3))
print("half an ulp of each param:       ", np.array2string(half_ulp, precision=3))
print(
    "float64 gradient at those params:",
    np.array2string(V.T @ (V @ n8.params.astype(np.float64) - y) / 256, precision=3),
)
bd_fixed = later.params_hex[1::2] == n8.params_hex[1::2]
print(
    f"b and d after 1,024 more steps: the same words {bd_fixed}; "
    f"a and c: {later.params_hex[::2]} (were {n8.params_hex[::2]})"
)
assert (np.abs(update[1::2]) <= half_ulp[1::2]).all() and bd_fixed
stall_ratio = [f32_ulps[8, lr / 2][1] / f32_ulps[8, lr][1] for lr in RATES[:-1]]
print("float32's part in b (N = 8) when the LR halves: multiplied by", ", ".join(f"{q:.2f}" for q in stall_ratio))
# The stall set (N = 8): b and d stop once their updates round away, |lr g_j| <= ulp(p_j) / 2, while a and c
# (tiny ulps) go on until g_a = g_c = 0. So g = A (p - p*) has g_a = g_c = 0 and |g_b|, |g_d| <= ulp / (2 lr):
# |p_j - p*_j| <= (|A^-1_jb| ulp(b) + |A^-1_jd| ulp(d)) / (2 lr), a bound that doubles when the LR halves.
A_inv = np.linalg.inv(V.T @ V / 256)
stall_frac = np.array(
    [f32_gap[8, lr][[1, 3]] / ((np.abs(A_inv[[1, 3]][:, [1, 3]]) @ ulp_of[8, lr][[1, 3]]) / (2 * lr)) for lr in RATES]
)
print(
    "float32's part in b and d (N = 8) / the stall set's bound, LR 1/2 .. 1/16: "
    + "; ".join(f"{lr}: {fb:.3f}, {fd:.3f}" for lr, (fb, fd) in zip(RATES, stall_frac))
)
# Inside the set, and near its far corner: the runs come in along the slow mode, the set's long axis.
assert (stall_frac <= 1).all() and stall_frac.min() > 0.9

# %%
ETA_EQ = np.geomspace(2.0**-12, 1 / 8, 28)  # lr / N, for N = 1, 2, 4 at LR N x lr/N <= 1/2
eq_gap = {n: np.array([np.abs(loop_offset(n * e, n)).max() for e in ETA_EQ]) for n in (1, 2, 4)}
eq_ratio = {n: eq_gap[n] / eq_gap[1] for n in (2, 4)}
eq_limit = {n: np.abs(u_n[n]).max() / np.abs(u_n[1]).max() for n in (2, 4)}
fig, (ax0, ax1, ax2) = plt.subplots(1, 3, figsize=(14, 4.4))
for i, n in enumerate(SIZES):
    if n < 8:  # N = 8's loop is the least squares itself (below 1e-12, float64 rounding): not drawn
        g = [loop_gap[n, lr].max() for lr in RATES]
        ax0.loglog(RATES, g, "o", ms=8, mfc="none", mew=1.5, color=f"C{i}", label=f"loop, N = {n}")
        ax0.loglog(RATES, np.array(RATES) / n * np.abs(u_n[n]).max(), ":", lw=1.5, color=f"C{i}")
    ax0.loglog(RATES, [total[n, lr].max() for lr in RATES], "x", ms=9, mew=1.5, color=f"C{i}")
    ax1.semilogx(
        RATES,
        [f32_ulps[n, lr][1] for lr in RATES],
        "-" + "os^D"[i],
        ms=10 - 2 * i,
        mfc="none",
        mew=1.5,
        color=f"C{i}",
        label=f"N = {n}",
    )
ax0.plot([], [], "C3x", mew=1.5, label="N = 8: whole gap (its loop is 0)")
for i, n in ((1, 2), (2, 4)):
    ax2.semilogx(ETA_EQ, eq_ratio[n], "-", lw=1.5, color=f"C{i}", label=f"N = {n}: float64 loop")
    ax2.axhline(eq_limit[n], color=f"C{i}", ls=":", lw=1.5, label=f"N = {n}: first-order limit {eq_limit[n]:.3f}")
    at = [1 / 16, 1 / 8]
    ax2.semilogx(
        at,
        [total[n, n * e].max() / total[1, e].max() for e in at],
        "os"[i - 1],
        ms=8,
        mfc="none",
        mew=1.5,
        color=f"C{i}",
        label=f"N = {n}: meshnb's whole gap",
    )
ax2.axhline(1, color="k", lw=0.8)
ax0.plot([], [], "ko", mfc="none", label="float64 loop point")
ax0.set_ylim(3e-6, 3)
ax0.plot([], [], "kx", label="meshnb's whole gap (loop + float32)")
ax0.plot([], [], "k:", lw=1.5, label="first order: (lr/N) max|u_N|")
ax0.set(
    xlabel="learning rate", ylabel="max |p - least squares| (param units)", title="The loop's part and the whole gap"
)
ax0.legend(fontsize=7, loc="upper left")
ax1.set(
    xlabel="learning rate",
    ylabel="|b - b of the float64 loop| (ulps of b)",
    title="Float32's part, in b (N = 4 and 8 coincide)",
)
ax1.legend(fontsize=8)
for ax in (ax0, ax1):
    ax.set_xticks(RATES, ["1/2", "1/4", "1/8", "1/16"])
    ax.xaxis.set_minor_locator(plt.NullLocator())
ax2.set(
    xlabel="lr / N (per batch)", ylabel="max|p* - lsq| of N / of N = 1 (ratio)", title="Equal lr/N: N's loop / N = 1's"
)
ax2.set_xticks([2.0**-12, 2.0**-8, 2.0**-4, 1 / 8], ["2^-12", "2^-8", "1/16", "1/8"])
ax2.xaxis.set_minor_locator(plt.NullLocator())
ax2.legend(fontsize=7)
fig.suptitle(
    "What to see: the loop's part on its first-order line (left, dotted) and the crosses on it for N = 1, 2; "
    "float32's part grows as the LR falls (middle); at equal lr/N the loops differ, most as lr/N -> 0 (right)",
    fontsize=9,
)
fig.tight_layout()
plt.show()

# %%
share_12 = max(f32_gap[n, lr].max() / loop_gap[n, lr].max() for n in (1, 2) for lr in RATES)
assert share_12 < 0.15
# At equal lr / N (N = 1 at LR 1/8, N = 2 at 1/4, N = 4 at 1/2) the loop's part is nearly the same; at
# smaller lr / N the within-group pairs the cluster drops make it smaller (the first-order limits); at equal
# LR it falls with N: the cluster helps through lr / N, not through the data a step sees.
equal_lr_n = [loop_gap[n, 0.125 * n].max() for n in (1, 2, 4)]
print("loop gap at lr / N = 1/8 for N = 1, 2, 4:", ", ".join(f"{g:.3e}" for g in equal_lr_n))
print(
    "N / N = 1 at equal lr/N, from lr/N = 2^-12 to 1/8: "
    + "; ".join(f"N = {n}: {eq_ratio[n][0]:.4f} (limit {eq_limit[n]:.4f}) to {eq_ratio[n][-1]:.3f}" for n in (2, 4))
)
assert all(abs(eq_ratio[n][0] / eq_limit[n] - 1) < 1e-3 and (np.diff(eq_ratio[n]) > 0).all() for n in (2, 4))
assert abs(eq_ratio[4][-1] - equal_lr_n[2] / equal_lr_n[0]) < 1e-9 and by_n[0] / by_n[2] > 3
assert max(equal_lr_n) / min(equal_lr_n) < 1.1 and eq_limit[4] < 0.8  # close at 1/8 only
display(
    Markdown(
        "**What the plots show.** The loop's part (left, circles) is proportional to the LR to first order, "
        "`(lr / N) max|u_N|` (dotted), which misses the float64 loop by a relative error that falls as the LR, "
        f"from {max(rel_resid[n][-1] for n in (1, 2, 4)):.2f} at LR 1/2 to "
        f"{max(rel_resid[n][0] for n in (1, 2, 4)):.0e} at `2^-12`: halving the LR divides it by "
        f"{min(ratio_lr):.2f} to {max(ratio_lr):.2f} over the LRs run, "
        f"by 2 in the limit. At LR 0.5 it shrinks with N, from "
        f"{by_n[0]:.1e} (N = 1) to {by_n[1]:.1e} (N = 2) and {by_n[2]:.1e} (N = 4), but not because each step "
        "sees more of the data: it shrinks because `lr / N` does (notebook 03, section 3.2). At *equal* `lr / N` "
        "the loops are not the same: a cluster's step drops the within-group pairs, and N = 4's loop is "
        f"{eq_ratio[4][0]:.3f} of N = 1's as `lr / N -> 0` (the first-order limit {eq_limit[4]:.3f}; N = 2: "
        f"{eq_limit[2]:.3f}), rising to {eq_ratio[4][-1]:.3f} at `lr / N = 1/8` (right), where the three are "
        "within 5% (" + ", ".join(f"{g:.3e}" for g in equal_lr_n) + " for N = 1, 2, 4). "
        "With N = 8 every step is the full gradient and the loop is a point, the least-squares cubic itself "
        "(below `1e-12`, float64 rounding). Where the loop's part is large (N = 1, 2) it is nearly the whole "
        f"gap (the crosses sit on the circles; float32's part is at most {100 * share_12:.0f}% of it). "
        "With N = 8 what is left is float32's: `b` and `d` stall where their "
        "updates `lr * g` round away (at most half an ulp of the param, printed above) although the gradient "
        f"is not zero. For N = 8 at LR 0.5 that leaves `b` {b_stall:.2g} from the float64 answer, {b_ulps:.0f} "
        f"ulps of `b`, and `d` {d_stall:.2g}, {d_ulps:.0f} ulps of `d` (the whole gap of the N = 8 run, "
        "notebook 03's table). A smaller LR makes smaller updates, which round away at a larger gradient, so the stall "
        f"is farther out: halving the LR multiplies float32's part by {min(stall_ratio):.2f} to "
        f"{max(stall_ratio):.2f} (middle). The stall set says how far: with `g_a = g_c = 0` and `|lr g_b|`, "
        "`|lr g_d|` at most half an ulp, `|p_j - p*_j| <= (|A^-1_jb| ulp(b) + |A^-1_jd| ulp(d)) / (2 lr)`, and "
        f"from LR 1/2 to 1/16 the N = 8 runs end at {stall_frac.min():.2f} to {stall_frac.max():.3f} of that "
        "bound in `b` and `d`, near the set's far corner, where the slow mode brings them in."
    )
)

# %% [markdown]
# ## 6.2 Float-mode sensitivity
#
# How far do the bits move when one float rule changes? `meshnb.conformance.faults` runs the program
# as an executor with one rule changed (its fault models). We run five of them next to mode Z for
# 256 steps, at LR 0.1 (about the best LR of notebook 05; not a power of 2, so `lr * g` rounds) and at
# LR `2^-126` (the smallest normal float32, where the updates are subnormal), and measure after every
# 8 steps the ulp distance of each param to mode Z's. IEEE
# float32 (gradual underflow) is meshnb's own `z=False`.

# %%
MODELS = ["x86-ftz", "ftz-before-rounding", "no-daz", "fma-horner", "fma-apply"]
LR_WORDS = {"LR 0.1": f32_word(0.1), "LR 2^-126": 0x00800000}
HORIZON, EVERY = 256, 8


def with_lr(page: bytes, word: int) -> bytes:
    return page[:OFF_LR] + int(word).to_bytes(4, "little") + page[OFF_LR + 4 :]


start = [with_lr(init.page, w) for w in LR_WORDS.values()]
points = np.arange(EVERY, HORIZON + 1, EVERY)


def history(step_pages: list[bytes], advance) -> np.ndarray:
    """Params words [len(points), systems, 4], advancing the pages EVERY steps at a time."""
    out = []
    for _ in points:
        step_pages = advance(step_pages)
        out.append([np.frombuffer(pg[:16], "<u4") for pg in step_pages])
    return np.array(out, dtype=np.uint32)


def meshnb_advance(z: bool):
    return lambda pages: [meshnb.train(EVERY, view_in=pg, z=z).page for pg in pages]


def model_advance(name: str):
    m = faults.model(name)
    return lambda pages: faults.run(pages, EVERY, grouped=False, m=m, independent=True).pages


ref = history(start, meshnb_advance(True))
dist = {"IEEE (gradual underflow)": ulps(history(start, meshnb_advance(False)), ref)}
for name in MODELS:
    dist[name] = ulps(history(start, model_advance(name)), ref)
# faults' fault-free model is mode Z: the simulated executor and meshnb agree on every word.
assert np.array_equal(history(start, lambda p: faults.run(p, EVERY, grouped=False, independent=True).pages), ref)

first_part = {}
for name, d in dist.items():
    for s, lr_name in enumerate(LR_WORDS):
        parted = np.flatnonzero(d[:, s].max(axis=1) > 0)
        first_part[name, lr_name] = int(points[parted[0]]) if parted.size else None
    print(
        f"{name:26} parts from mode Z by step: "
        + ", ".join(f"{lr_name}: {first_part[name, lr_name] or 'never (256 steps)'}" for lr_name in LR_WORDS)
        + f"; max distance at LR 0.1: {d[:, 0].max():,} ulps"
    )

# %%
fig, axes = plt.subplots(1, 2, sharey=True)
for ax, (s, lr_name) in zip(axes, enumerate(LR_WORDS)):
    zero = [name for name, d in dist.items() if not d[:, s].any()]  # never part: named, not drawn on top of 1
    for i, (name, d) in enumerate(dist.items()):
        if name not in zero:
            ax.plot(points, d[:, s].max(axis=1) + 1, "o-", ms=3, color=f"C{i}", label=name)
    ax.text(0.03, 0.55, "distance 0 throughout:\n" + "\n".join(zero), transform=ax.transAxes, fontsize=8, va="center")
    ax.set(yscale="log", xlabel="step", title=f"{lr_name}: distance to mode Z")
    ax.legend(fontsize=8, loc="center right")
axes[0].set_ylabel("max ulp distance over a, b, c, d, + 1 (ulps)")
fma_most = max(d[:, 0].max() for name, d in dist.items() if name.startswith("fma"))
fig.suptitle(
    f"What to see: at LR 0.1 only the FMA contractions part from mode Z, within {fma_most} ulps (left); at LR "
    "2^-126 IEEE\nparts at once, by the whole subnormal updates (right); the flush rules part at neither (named in the "
    "panels)",
    fontsize=9,
)
fig.tight_layout()
plt.show()

# %%
never = [n for n in dist if first_part[n, "LR 0.1"] is None and first_part[n, "LR 2^-126"] is None]
fma = [n for n in dist if n.startswith("fma")]
ieee = "IEEE (gradual underflow)"
assert set(never) == {"x86-ftz", "ftz-before-rounding", "no-daz"}
assert all(first_part[n, "LR 0.1"] == EVERY for n in fma)
assert first_part[ieee, "LR 0.1"] is None and first_part[ieee, "LR 2^-126"] == EVERY
display(
    Markdown(
        "**What the plots show** (a model that never parts is named in the panel, not drawn). The FMA contractions "
        f"({', '.join(fma)}) part from mode Z within the first {EVERY} steps at LR 0.1: a fused multiply-add "
        "rounds once where mode Z rounds twice, a last-bit difference that the trajectory carries on. "
        f"The distance stays within {max(dist[n][:, 0].max() for n in fma):,} ulps over the 256 steps: the "
        "dynamics contract, so a difference does not grow; new roundings keep it alive. IEEE float32 agrees "
        "with mode Z bit for bit at LR 0.1 and parts at once at LR `2^-126`, where mode Z flushes the "
        "subnormal updates (large in ulps, because the mode-Z params stay exactly 0). "
        f"{', '.join(never)} never part in these 256 steps at either LR: they differ from mode Z only on "
        "results that round up to the smallest normal or on subnormal inputs, which these runs never "
        "produce (the conformance pack's probe pages do, notebook 04)."
    )
)
for n in fma:
    print(f"{n}: at LR 2^-126 parts by step {first_part[n, 'LR 2^-126'] or 'never (256 steps)'}")

# %% [markdown]
# ## 6.3 One flipped bit of each param
#
# Take the page after 4,096 steps (LR 0.5, on the exact 48-step cycle of notebook 01), flip one of the
# 32 bits of one param, and run on. All 128 flipped pages and the clean page run as one sweep
# (`view_in`: one system per page), in pieces, so that each is compared with the clean run at every
# piece's end. Once a flipped run's params equal the clean run's, it *is* the clean run from then on
# (the state that feeds back is the params, the LR and the step); its loss ring then catches up within
# 256 steps.

# %%
base = meshnb.train(4096)
flipped_pages = [base.page]
for j in range(4):
    for bit in range(32):
        page = bytearray(base.page)
        page[4 * j + bit // 8] ^= 1 << (bit % 8)
        flipped_pages.append(bytes(page))
cuts = 8 * np.unique(np.geomspace(1, 32768 // 8, 30).round().astype(int))
equal_at = np.full((4, 32), -1)  # first cut at which the params equal the clean run's (-1: not by the end)
final_ulps = np.zeros((4, 32), dtype=np.int64)
pages_now, done = np.frombuffer(b"".join(flipped_pages), np.uint8).reshape(len(flipped_pages), -1), 0
for t in cuts:
    part = sweep(int(t) - done, view_in=pages_now, keep_pages=True)
    pages_now, done = part.final_pages, int(t)
    same = (part.params_words[1:] == part.params_words[0]).all(axis=1).reshape(4, 32)
    equal_at[same & (equal_at < 0)] = t
    with np.errstate(invalid="ignore"):
        final_ulps = ulps(part.params_words[1:], part.params_words[0]).max(axis=1).reshape(4, 32)
finite = np.isfinite(part.params[1:]).all(axis=1).reshape(4, 32)
assert np.array_equal(part.params_words[0].view(np.float32), meshnb.train(4096 + done).params)
print(
    f"after {done:,} more steps: back on the clean run's bits: {(equal_at > 0).sum()} of 128 flips; "
    f"overflowed: {(~finite).sum()}; on other bits but finite: {((equal_at < 0) & finite).sum()}"
)
for j, name in enumerate("abcd"):
    back = equal_at[j][equal_at[j] > 0]
    print(
        f"  {name}: {len(back):2} of 32 come back, the last by step {back.max() if back.size else '-'}; "
        f"not back: bits {np.flatnonzero(equal_at[j] < 0).tolist()}"
    )

# %%
fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 3.8))
shown = np.where(equal_at > 0, equal_at, np.nan)
im = ax0.imshow(
    shown, aspect="auto", cmap="viridis", norm=plt.matplotlib.colors.LogNorm(8, done), interpolation="nearest"
)
ax0.imshow(np.where(equal_at < 0, 1.0, np.nan), aspect="auto", cmap="Reds", vmin=0, vmax=1.5, interpolation="nearest")
fig.colorbar(im, ax=ax0, label="steps until the bits equal the clean run's")
ax0.set(
    yticks=range(4),
    yticklabels=list("abcd"),
    xlabel="flipped bit (0: lowest mantissa bit, 23-30: exponent, 31: sign)",
    title=f"Steps until the run is back on the clean bits\n(red: not within {done:,} steps)",
)
ax0.grid(False)
for j in range(4):  # one column per bit, the params side by side in it: no line joins two bits
    ax1.semilogy(
        np.arange(32) + 0.2 * (j - 1.5),
        np.where(finite[j], final_ulps[j] + 1, np.nan),
        "osD^"[j],
        ms=4,
        mfc="none",
        label="abcd"[j],
    )
ax1.set(
    xlabel="flipped bit",
    ylabel="final ulp distance + 1 (ulps; overflowed left out)",
    title=f"After {done:,} more steps",
    ylim=(0.5, 5e3),  # room above the points for the legend
)
ax1.legend(fontsize=8, ncol=4, loc="upper center")
back_n, far = int((equal_at > 0).sum()), final_ulps[(equal_at < 0) & finite]
fig.suptitle(
    f"What to see: {back_n} of the 128 flipped runs come back to the clean run's bits (left, coloured); the others end "
    f"{far.min()} to {far.max()}\nulps away (right: one column per flipped bit, the four params side by side in it)",
    fontsize=9,
)
fig.tight_layout()
plt.show()

# %% [markdown]
# **Where the runs that are not back went.** A run is not back, but it is not lost either: float32
# has finitely many states, so every run ends on a repeating orbit, an *attractor*. We count them:
# each run's trace (the sums it applies) over 1,024 more steps gives its period (the shortest `P`,
# a multiple of 8, with which the second half of the trace repeats), and its orbit, written from a
# fixed step and turned round by a whole number of passes to one canonical order, says which orbit
# it is and where on it the run is (its phase, in steps, against the clean run).

# %%
W = 1024
traces = np.array([meshnb.train(W, view_in=bytes(pg), keep_trace=True).trace for pg in pages_now])


def period(trace: np.ndarray) -> int:
    """The shortest P (a multiple of 8) with which the trace's second half repeats; 0 if none up to W / 2."""
    return next((p for p in range(8, W // 2 + 1, 8) if np.array_equal(trace[W // 2 :], trace[W // 2 - p : W - p])), 0)


def orbit(trace: np.ndarray, p: int) -> tuple[bytes, int]:
    """The orbit's canonical bytes (the rotation by whole passes that sorts first) and the run's rotation."""
    turns = [np.roll(trace[W // 2 : W // 2 + p], -s, axis=0).tobytes() for s in range(0, p, 8)]
    key = min(turns)
    return key, 8 * turns.index(key)


periods = [period(t) for t in traces]
assert all(periods), "a run is not yet on a repeating orbit"
orbits = [orbit(t, p) for t, p in zip(traces, periods)]
(clean_orbit, clean_turn), clean_period = orbits[0], periods[0]
params_back = (part.params_words[1:] == part.params_words[0]).all(axis=1)
sums_back = np.array([np.array_equal(t, traces[0]) for t in traces[1:]])
on_clean = np.array([key == clean_orbit for key, _ in orbits[1:]])
phase = np.array([(turn - clean_turn) % clean_period for _, turn in orbits[1:]])
# The params repeat with the trace's period too (a run is on an orbit of its whole state, not only of its sums).
params_repeat = [
    np.array_equal(meshnb.train(p, view_in=bytes(pg)).params.view(np.uint32), np.frombuffer(bytes(pg)[:16], "<u4"))
    for pg, p in zip(pages_now, periods)
]
exact = int(params_back.sum())
words_off = sums_back & ~params_back
out_of_phase = on_clean & ~sums_back
other_runs = ~on_clean
other_orbits = {key: p for (key, _), p, oc in zip(orbits[1:], periods[1:], on_clean) if not oc}
off_by = ulps(part.params_words[1:][words_off], part.params_words[0]).max(axis=1)
# The clean orbit's params at each pass: a run out of phase holds one of them (up to a last bit or two).
clean_passes = np.array(
    [meshnb.train(k, view_in=bytes(pages_now[0])).params.view(np.uint32) for k in range(0, clean_period, 8)]
)
to_a_pass = np.array(
    [ulps(clean_passes, part.params_words[1:][i]).max(axis=1).min() for i in np.flatnonzero(out_of_phase)]
)
print(f"the clean run: a {clean_period}-step orbit; its params repeat: {params_repeat[0]}")
print(f"exactly back: {exact}")
print(f"the clean run's sums, in phase, params off by {off_by.min()}-{off_by.max()} ulps: {words_off.sum()}")
print(
    f"on the clean orbit, out of phase: {out_of_phase.sum()}, by {sorted(set(phase[out_of_phase].tolist()))} steps "
    f"(median ulp distance to the clean params {np.median(final_ulps.ravel()[out_of_phase]):.0f})"
)
print(
    f"on other orbits: {other_runs.sum()} runs on {len(other_orbits)} orbits of periods {sorted(other_orbits.values())}"
)
print(f"runs whose params repeat with their trace's period: {sum(params_repeat)} of {len(params_repeat)}")
print(
    f"runs out of phase whose params are the clean run's at another pass: exactly {(to_a_pass == 0).sum()}, "
    f"the others up to {to_a_pass.max()} ulps"
)
assert (exact, words_off.sum(), out_of_phase.sum(), other_runs.sum()) == (6, 7, 61, 54)  # the re-run
assert clean_period == 48 and set(phase[out_of_phase].tolist()) <= set(range(8, 48, 8)) and not (~finite).any()
assert all(params_repeat) and to_a_pass.max() <= 2 and 8 <= len(other_orbits) <= 12
assert min(other_orbits.values()) >= 16 and max(other_orbits.values()) <= 264
display(
    Markdown(
        f"**What the count shows.** After {done:,} steps the 128 flipped runs sit on "
        f"{1 + len(other_orbits)} orbits of the sums they apply (and of their params: each repeats with its "
        f"trace's period). {exact} are exactly back. {words_off.sum()} apply the clean run's sums at the clean "
        f"run's phase with params up to {off_by.max()} ulps off (a last bit no sum feels: an orbit of its own "
        f"in the params, the clean one in the sums). {out_of_phase.sum()} are on the clean {clean_period}-step "
        "orbit itself, "
        f"{min(phase[out_of_phase])}-{max(phase[out_of_phase])} steps out of phase: their distance to the "
        f"clean params (median {np.median(final_ulps.ravel()[out_of_phase]):.0f} ulps, right panel) is the "
        "distance between passes of that orbit (each holds the clean params of another pass: "
        f"{(to_a_pass == 0).sum()} exactly, the others up to {to_a_pass.max()} ulps off), not a perturbation "
        "left over. The other "
        f"{other_runs.sum()} ended on {len(other_orbits)} other repeating cycles, of periods "
        f"{min(other_orbits.values())} to {max(other_orbits.values())} steps. The contracting dynamics forget "
        "the flip; float32's rounding decides which of its finitely many orbits, and where on it, the run "
        "ends: a different orbit or phase is a different digest for good. No flip overflows at LR 0.5."
    )
)
