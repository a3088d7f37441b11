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
# # 2. What float mode Z changes
#
# Every float32 operation in meshnb (add, sub, mul, div, u32 to f32) is an ordinary IEEE float32
# operation, rounded to nearest even, with three extra rules:
#
# 1. **Subnormal inputs are read as zero.** A word whose exponent bits are all zero (a subnormal,
#    a number below `2^-126`, about `1.18e-38`) is read as a zero of the same sign.
# 2. **Subnormal results are written as zero**, again keeping the sign. The test is made on the
#    *rounded* result.
# 3. **Every NaN result is the canonical NaN `0x7FFFFFFF`**, the word the GPUs produce. CPUs differ:
#    x86 gives `0xFFC00000`, ARM `0x7FC00000`.
#
# No fused multiply-add either: every operation rounds on its own. The rules make the program give
# the same bits on a GPU, in the wasm runtime and here. This notebook shows the rules on concrete
# words, then runs the same training in mode Z and in plain IEEE float32
# (`meshnb.train(..., z=False)`, a switch that exists only for this comparison; the default and the
# product is `z=True`) and shows where the bits part. Last, the digest: the one-line check that two
# machines computed the same thing.

# %%
# %matplotlib inline
import platform

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display

import meshnb
import meshnb.testing
from meshnb import floatz as fz  # the mode Z operations, callable from Python

plt.rcParams.update({"figure.figsize": (10, 4.2), "figure.dpi": 90, "axes.grid": True, "grid.alpha": 0.3})


def f32(word: int) -> np.float32:
    """The float32 whose bits are `word`."""
    return np.uint32(word).view(np.float32)


def word(value: float) -> int:
    """The bits of a float32 (a Python float is rounded to float32 first) as an int."""
    return int(np.float32(value).view(np.uint32))


print("this machine:", platform.machine())

# %% [markdown]
# ## 2.1 The rules on concrete words
#
# Each row applies one operation to float32 words, once in plain IEEE float32 (numpy on this CPU)
# and once in mode Z (`meshnb.floatz`). `from_bits` is how the program reads a word from its page:
# through the same flush and NaN rule.

# %%
IEEE = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
}
Z = {"add": fz.add, "sub": fz.sub, "mul": fz.mul, "div": fz.div}

cases = [  # (operation, input words, what it shows, the mode Z word that shows it)
    ("from_bits", [0x00000001], "the smallest subnormal is read as +0", 0x00000000),
    ("from_bits", [0x807FFFFF], "the largest negative subnormal is read as -0", 0x80000000),
    ("from_bits", [0x00800000], "the smallest normal number is kept", 0x00800000),
    ("from_bits", [0xFFC00000], "any NaN word is read as the canonical NaN", 0x7FFFFFFF),
    ("add", [0x00000001, 0x00000000], "a subnormal input counts as zero", 0x00000000),
    ("mul", [0x1E000000, 0x21000000], "2^-67 * 2^-61 = 2^-128 is subnormal: written as +0", 0x00000000),
    ("mul", [0x9E000000, 0x21000000], "the same with a negative factor: -0, sign kept", 0x80000000),
    ("sub", [0x00C00000, 0x00800000], "x - y = 0 although x != y (the difference is 2^-127)", 0x00000000),
    (
        "mul",
        [0x00800000, 0x3F7FFFFF],
        "rounds up to the smallest normal: kept (a CPU's FTZ flag would give 0)",
        0x00800000,
    ),
    ("mul", [0x7E967699, 0x41200000], "overflow is unchanged: +inf", 0x7F800000),
    ("sub", [0x7F800000, 0x7F800000], "inf - inf: NaN", 0x7FFFFFFF),
    ("div", [0x00000000, 0x00000000], "0 / 0: NaN", 0x7FFFFFFF),
    ("add", [0x7FC00001, 0x3F800000], "a NaN with a payload: IEEE keeps it, Z canonicalises", 0x7FFFFFFF),
]

rows = ["| operation | input words | IEEE float32 | mode Z | what it shows |", "|---|---|---|---|---|"]
with np.errstate(all="ignore"):
    for op, words, note, claimed in cases:
        args = [f32(w) for w in words]
        if op == "from_bits":
            ieee, z = words[0], fz.flush_bits(np.uint32(words[0]))
        else:
            ieee, z = word(IEEE[op](*args)), word(Z[op](*args))
        mark = "" if ieee == z else " **≠**"
        ins = ", ".join(f"`{w:08x}`" for w in words)
        rows.append(f"| {op} | {ins} | `{ieee:08x}` | `{z:08x}`{mark} | {note} |")
        assert z == claimed, f"{op} {ins}: mode Z gives {z:08x}, the row says {claimed:08x}"
        # IEEE parts from mode Z exactly on the rows of a flush or a NaN; the kept rows are the same bits.
        assert (ieee != z) == (claimed in (0x00000000, 0x80000000, 0x7FFFFFFF))
display(Markdown("\n".join(rows)))

# %% [markdown]
# The IEEE column is what this CPU does: on an ARM machine the rows that make a new NaN
# (`inf - inf`, `0 / 0`) would read `7fc00000`. The mode Z column is the same on every machine.
# Note the row `sub 00c00000, 00800000`: in mode Z two different numbers can have a difference of
# zero, since the difference is below the smallest normal.
#
# The plot below shows rule 2 on one multiplication, `1.5 * 2^-60` times `2^k`, for exact products
# from `2^-156` to `2^-116`. IEEE float32 has *gradual underflow*: below `2^-126` it keeps fewer and
# fewer bits until the smallest subnormal, `2^-149`. Mode Z cuts straight to zero at `2^-126`.

# %%
a = np.float32(1.5 * 2.0**-60)
ks = np.arange(-156, -115)
exact = 1.5 * 2.0**ks  # the exact products, in float64
ieee_vals = np.array([a * np.float32(2.0 ** (k + 60)) for k in ks], dtype=np.float64)
z_vals = np.array([fz.mul(a, np.float32(2.0 ** (k + 60))) for k in ks], dtype=np.float64)

floor = 2.0**-160  # where zeros are drawn on the log axis
fig, ax = plt.subplots(figsize=(10, 4))
ax.axvspan(2.0**-160, 2.0**-126, color="0.9", label="subnormal range (below 2^-126)")
ax.plot(exact, exact, color="k", lw=0.8, ls=":", label="exact product")
ax.plot(exact, np.where(ieee_vals > 0, ieee_vals, floor), "o-", ms=4, label="IEEE float32 (gradual underflow)")
ax.plot(exact, np.where(z_vals > 0, z_vals, floor), "s--", ms=7, mfc="none", label="float mode Z (flush to zero)")
ax.set_xscale("log", base=2)
ax.set_yscale("log", base=2)
ax.set_xticks(2.0 ** np.arange(-156, -115, 5))
ax.set_yticks(2.0 ** np.arange(-160, -111, 8))
ax.set(
    xlim=(2.0**-157, 2.0**-115),
    ylim=(floor / 4, 2.0**-112),
    xlabel="exact product 1.5 * 2^-60 * 2^k (value, log2 axis)",
    ylabel="float32 result (value; 0 at the bottom)",
    title="One multiply near the bottom of float32",
)
ax.text(2.0**-156.5, floor * 1.8, "result 0", fontsize=9)
ax.legend(loc="upper left")
fig.suptitle(
    "What to see: above 2^-126 both modes on the dotted exact line; in the grey band IEEE keeps fewer and fewer\n"
    "bits down to 2^-150, while mode Z (orange squares) drops straight to 0",
    fontsize=9,
)
fig.tight_layout()
plt.show()

normal_range = exact >= 2.0**-126
print(
    f"exact products from 2^{ks[0]} to 2^{ks[-1]} (times 1.5): mode Z zero for {int((z_vals == 0).sum())}, "
    f"IEEE zero for {int((ieee_vals == 0).sum())}, the largest IEEE zero {exact[ieee_vals == 0].max():.3g} "
    f"(2^-150 = {2.0**-150:.3g})"
)
assert (ieee_vals[normal_range] == exact[normal_range]).all() and (z_vals[normal_range] == exact[normal_range]).all()
assert (z_vals[~normal_range] == 0).all() and ((ieee_vals == 0) == (exact < 2.0**-150)).all()

# %% [markdown]
# **What the plot shows.** Above `2^-126` both modes give the correctly rounded product (on the
# dotted line). In the grey band IEEE keeps a subnormal result, less and less precise, until it
# rounds to zero at `2^-150` and below; mode Z writes zero for the whole band (checked for every
# product drawn, from `2^-156` to `2^-116`; the counts are printed).

# %% [markdown]
# ## 2.2 The same training in both modes
#
# At the default learning rate, no operation of a normal run comes near the subnormal range or
# produces a NaN, so the two modes give the same bits: same params, same loss ring, same digest.

# %%
rz = meshnb.train(4096)  # float mode Z: the default
ri = meshnb.train(4096, z=False)  # plain IEEE float32
print("mode Z:", rz.params_hex)
print("IEEE:  ", ri.params_hex)
print("same page:", rz.page == ri.page, "  same digest:", rz.digest == ri.digest)
assert rz.page == ri.page and rz.digest == ri.digest

# %% [markdown]
# ### A tiny learning rate: the updates underflow
#
# Set the learning rate to `2^-126`, the smallest normal float32 (word `00800000`, so it is not
# itself flushed when the program reads it). Each update is `lr * (sum * 1/32)`; with every
# gradient component below 1 in size, the update is a subnormal. Mode Z writes it as zero: the params
# never leave zero. IEEE keeps the subnormal updates, and they add up step after step.
#
# To follow the params step by step we run one step at a time, each run continuing from the last
# one's page (`view_in`); the cell checks that this gives the same bits as one long run.

# %%
TINY = np.uint32(0x00800000)  # 2^-126, as its f32 word
STEPS = 4096


def param_history(z: bool) -> tuple[meshnb.RunResult, np.ndarray]:
    """The run of STEPS steps at learning rate TINY, and the params after each of its steps."""
    run = meshnb.train(1, set_lr={0: TINY}, z=z)
    history = [run.params]
    for _ in range(STEPS - 1):
        run = meshnb.train(1, view_in=run.page, z=z)
        history.append(run.params)
    assert run.page == meshnb.train(STEPS, set_lr={0: TINY}, z=z).page  # same bits as one run
    return run, np.array(history)


tz, hist_z = param_history(True)
ti, hist_i = param_history(False)
print("mode Z params:", tz.params_hex, "  all zero at every step:", not hist_z.any())
print("IEEE params:  ", ti.params_hex)
print(
    "last losses:   Z",
    tz.last_loss,
    "  IEEE",
    ti.last_loss,
    "  same bits:",
    np.array_equal(tz.loss.view(np.uint32), ti.loss.view(np.uint32)),
)
print("digests equal:", tz.digest == ti.digest)

# %%
# Near zero a step's gradient is -c_g (the A_g p term is 2^-100 times smaller), so after t steps the
# params are lr * (c_0 + c_1 + ...): at a pass's end exactly lr * t * c, c = V^T y / 256, in b and d.
V = np.vander(ti.view["X"].astype(np.float64), 4, increasing=True)
c_full = V.T @ ti.view["Y"].astype(np.float64) / 256
lr_tiny = float(TINY.view(np.float32))  # 2^-126
steps = np.arange(1, STEPS + 1)
fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [3, 2]})
ax0.axhspan(2.0**-150, 2.0**-126, color="0.9", label="subnormal range")
for j, name, color in ((1, "b", "tab:orange"), (3, "d", "tab:red")):
    ax0.plot(steps, np.abs(hist_i[:, j].astype(np.float64)), color=color, lw=2, alpha=0.6, label=f"|{name}|, IEEE")
    ax0.plot(steps, lr_tiny * steps * abs(c_full[j]), "k:", lw=1)
ax0.plot([], [], "k:", lw=1, label="theory: lr t |c_j|")
ax0.set_yscale("log", base=2)
ax0.set_yticks(2.0 ** np.arange(-150, -109, 8))
ax0.set(
    xscale="log",
    ylim=(2.0**-150, 2.0**-110),
    xlabel="step",
    ylabel="|param| (param units)",
    title="b and d grow out of the subnormals",
)
ax0.legend(loc="lower right", fontsize=8)
sub = 2.0**-149  # the smallest subnormal: every subnormal is a whole multiple of it
last = steps > STEPS - 64
ax1.plot(steps[last], hist_i[last, 2].astype(np.float64) / sub, "s-", ms=5, lw=1, color="tab:green", label="c")
ax1.plot(steps[last], hist_i[last, 0].astype(np.float64) / sub, "o-", ms=3, lw=0.8, color="tab:blue", label="a")
ax1.axhline(0, color="k", lw=0.8)
ax1.set(xlabel="step", ylabel="param (multiples of 2^-149)", title="a and c stay subnormal (the last 64 steps)")
ax1.legend(loc="upper right", fontsize=8)
fig.suptitle(
    "What to see: learning rate 2^-126 in IEEE float32: b and d leave the grey subnormal band within 10 steps and\n"
    "grow on the theory's dotted line (left); a changes sign again and again, c keeps its sign (right). Mode Z: 0",
    fontsize=9,
)
fig.tight_layout()
plt.show()

pass_ends = steps % 8 == 0
on_line = np.abs(hist_i[pass_ends][:, [1, 3]] / (lr_tiny * steps[pass_ends, None] * np.abs(c_full[[1, 3]])) - 1).max()
print(f"|b|, |d| at every pass end against lr t |c_j|: within {on_line:.1e} (relative)")
assert on_line < 1e-3

normal = np.abs(hist_i) >= 2.0**-126
first_normal = [int(np.flatnonzero(normal[:, j])[0]) + 1 if normal[:, j].any() else None for j in range(4)]
sign_changes = [int((np.diff(np.sign(hist_i[:, j][hist_i[:, j] != 0])) != 0).sum()) for j in range(4)]
print("first step after which each param is normal (a, b, c, d):", first_normal)
print("the largest |a|, |c| over the run:", np.abs(hist_i[:, 0]).max(), np.abs(hist_i[:, 2]).max())
print("sign changes of a, c:", sign_changes[0], sign_changes[2])
assert first_normal[1] <= 10 and first_normal[3] <= 10 and first_normal[0] is None and first_normal[2] is None
growth = np.abs(hist_i[-1, [1, 3]] / hist_i[STEPS // 2 - 1, [1, 3]])
print("|b|, |d| from step 2048 to step 4096: multiplied by", growth, "; the largest |param|:", np.abs(hist_i).max())
assert sign_changes[0] > 100 and sign_changes[2] == 0 and ((growth > 1.8) & (growth < 2.2)).all()
assert np.abs(hist_i).max() < 1e-30 and np.array_equal(tz.loss.view(np.uint32), ti.loss.view(np.uint32))
assert not hist_z.any() and tz.digest != ti.digest

# %% [markdown]
# **What the plot shows.** In IEEE float32 the first updates are subnormal, but they are kept and
# add up: within the first ten steps `b` and `d` cross into the normal range, and they keep
# growing in proportion to the step count (twice the size at step 4096 as at step 2048: printed
# above). Near zero a step's gradient is just `-c_g`, batch `g`'s mean of `y` times `1, x, x^2, x^3`, so
# at the end of every pass the params are `lr t c`, `c` the mean over all 256 samples: the dotted lines,
# which `b` and `d` follow to 1e-3 at every pass end from step 8 to 4096 (the largest miss is printed).
# `a` and `c`, whose gradients are much smaller (the data are odd, and at params near zero
# the even terms nearly cancel), stay deep in the subnormal range: `a` changes sign again and again,
# `c` keeps its sign (the counts are printed). In mode Z every one of those updates is written as
# zero, so all four params are exactly zero
# at every step (nothing to draw on a log axis). The right panel counts `a` and `c` in multiples of the
# smallest subnormal `2^-149`, over the last 64 steps.
#
# The loss is the same to the last bit in both modes (params below `1e-30` do not change any prediction
# in float32), but the digest covers the params too, so it tells the two runs apart.

# %% [markdown]
# ### A divergent learning rate: the run ends in NaN
#
# At learning rate 4 (word `40800000`) each step overshoots and the params grow without bound.
# The squared errors overflow first (the loss becomes infinite), the params keep growing until the
# errors themselves overflow, and as soon as a sum adds `+inf` and `-inf` it is NaN. From then on
# every value is NaN. The modes agree on every bit until the first NaN; then mode Z writes `7fffffff` and IEEE
# writes whatever this CPU makes.

# %%
BIG = np.uint32(0x40800000)  # 4.0, as its f32 word
dz = meshnb.train(100, set_lr={0: BIG}, keep_trace=True)
di = meshnb.train(100, set_lr={0: BIG}, z=False, keep_trace=True)


def step_losses(run: meshnb.RunResult) -> np.ndarray:
    """The loss of every step of a run kept with its trace."""
    return run.trace.view(np.float32)[:, 4] * run.view["INV_BATCH"]


lz, li = step_losses(dz), step_losses(di)
first_inf = int(np.flatnonzero(np.isinf(lz))[0])
first_nan = int(np.flatnonzero(np.isnan(dz.trace.view(np.float32)).any(axis=1))[0])  # any of the 5 sums
first_diff = int(np.flatnonzero((dz.trace != di.trace).any(axis=1))[0])
print(
    f"first infinite loss: step {first_inf}; first NaN in the sums: step {first_nan}; "
    f"first step whose sums differ: {first_diff}"
)
print(f"sums applied at step {first_diff}:")
print("  mode Z:", [f"{w:08x}" for w in dz.trace[first_diff]])
print("  IEEE:  ", [f"{w:08x}" for w in di.trace[first_diff]])
print("final params, mode Z:", dz.params_hex)
print("final params, IEEE:  ", di.params_hex)
assert first_inf < first_nan == first_diff  # every bit agrees until the first NaN

# From which step on does every step multiply the loss by 10 or more, up to the first infinite one?
decades = np.log10(lz[1:first_inf] / lz[: first_inf - 1])  # decades gained by step t + 1 over step t
slow = np.flatnonzero(decades < 1)  # the steps that gained less than a decade
grow_from = int(slow[-1]) + 1 if slow.size else 0
print(
    f"from step {grow_from} to step {first_inf}, each step's loss is at least "
    f"{10 ** np.min(decades[grow_from:], initial=np.inf):.1f} "
    f"times the previous one (before: factors {np.array2string(10 ** decades[:grow_from], precision=2)})"
)
assert grow_from <= 5
assert decades[grow_from:].min() >= 1

# Theory: the same cyclic SGD in float64 (no overflow before step 38), and the growth rate of the
# cycle's map: the loss grows by rho^(2/8) a step, rho the spectral radius of the 8 steps' product.
V = np.vander(dz.view["X"].astype(np.float64), 4, increasing=True)
y64 = dz.view["Y"].astype(np.float64)
p64, loss64, cycle = np.zeros(4), [], np.eye(4)
for s in range(first_inf):
    rows = slice(s % 8, None, 8)
    e = V[rows] @ p64 - y64[rows]
    loss64.append(np.mean(e**2))
    p64 -= 4.0 * V[rows].T @ e / 32
    if s < 8:
        cycle = (np.eye(4) - 4.0 * V[rows].T @ V[rows] / 32) @ cycle
loss64 = np.array(loss64)
off64 = np.abs(loss64 / lz[:first_inf] - 1).max()
rate_theory = np.log10(np.abs(np.linalg.eigvals(cycle)).max()) / 4  # decades a step
rate_fit = np.polyfit(np.arange(8, first_inf), np.log10(lz[8:first_inf].astype(np.float64)), 1)[0]
print(
    f"the float64 run's losses within {'1e-5' if off64 < 1e-5 else f'{off64:.1e}'} (relative) of mode Z's up to "
    f"step {first_inf}; growth from step 8: {rate_fit:.4f} decades a step, the cycle's map {rate_theory:.4f}"
)
assert off64 < 1e-5 and abs(rate_fit / rate_theory - 1) < 1e-3


def nan_words(run: meshnb.RunResult) -> set[int]:
    """The distinct NaN words of a run's page."""
    w = np.frombuffer(run.page, dtype="<u4")
    return set(w[np.isnan(w.view(np.float32))].tolist())


cpu_nan = 0x7FC00000 if platform.machine().lower() in ("arm64", "aarch64") else 0xFFC00000
print(
    "NaN words of the page: mode Z", [f"{w:08x}" for w in nan_words(dz)], " IEEE", [f"{w:08x}" for w in nan_words(di)]
)
assert nan_words(dz) == {0x7FFFFFFF} and nan_words(di) == {cpu_nan}

# %%
fig, ax = plt.subplots(figsize=(10, 4))
t = np.arange(len(lz))
ax.plot(t, np.where(np.isfinite(lz), lz, np.nan), lw=3, alpha=0.5, label="mode Z")
ax.plot(t, np.where(np.isfinite(li), li, np.nan), "k--", lw=1, label="IEEE float32")
ax.axvspan(first_inf, first_nan, color="tab:orange", alpha=0.15, label=f"loss is inf (from step {first_inf})")
ax.axvspan(first_nan, len(lz), color="tab:red", alpha=0.15, label=f"NaN (from step {first_nan}): the modes differ")
ax.plot(t[:first_inf], loss64, "o", ms=5, mfc="none", color="tab:red", label="theory: the same SGD in float64")
ax.set(
    yscale="log",
    xlim=(0, len(lz)),
    xlabel="step",
    ylabel="loss (MSE, y units^2)",
    title="Learning rate 4: the loss explodes, then NaN",
)
ax.legend(loc="lower right", fontsize=8)
fig.suptitle(
    "What to see: the two modes' losses are one curve (light blue under black dashes) through the float64 run's\n"
    "circles, "
    f"x10^{rate_theory:.2f} a step as the cycle's map predicts, until inf (orange band); from the first NaN (red) "
    "the words differ",
    fontsize=9,
)
fig.tight_layout()
plt.show()

# %% [markdown]
# **What the plot shows.** After the first few steps (at most 5; printed above), the loss grows by
# an order of magnitude or more every step until it is infinite, and the two
# curves are the same bits all the way. The rate is the cycle's: the product of the 8 steps' maps
# `I - lr A_g` has spectral radius `rho`, and the loss grows by `rho^(2/8)` a step; a fit from step 8
# to the first infinite loss meets it to 1e-3 (both printed), and the same SGD run in float64 (the
# circles) gives mode Z's losses to 1e-5 up to there. Once the loss is infinite there is nothing to draw, and the
# modes still agree on every word (`inf` is `inf` in both). From the first NaN on, the words differ:
# mode Z stores the canonical NaN `7fffffff`, IEEE on this CPU stores its own NaN (`ffc00000` on
# x86, `7fc00000` on ARM), so the IEEE page would not even agree with itself across CPUs.

# %% [markdown]
# ## 2.3 The digest: the cross-architecture check
#
# A system's digest is the SHA-256 of its params (16 bytes) followed by its loss ring (1024 bytes).
# Two executors that ran the same steps from the same page agree on the digest if and only if they
# agree on every bit of the final params and of the last 256 losses (up to a SHA-256 collision).
# The trace digest hashes the five sums of *every* step, so it also catches a difference that the run
# later forgot.
#
# The spec publishes vectors that every faithful implementation (GPU, wasm, this one) must match;
# meshnb ships them, and `meshnb.testing.vectors()` returns them. Here is the 4,096-step run of one
# system:

# %%
vectors = meshnb.testing.vectors()
ref = next(v for v in vectors["runs"] if v["systems"] == 1 and v["steps"] == 4096)
print("published digest:      ", ref["digest"])
print("meshnb digest:         ", rz.digest)
print("published trace digest:", ref["trace_digest"])
print("meshnb trace digest:   ", rz.trace_digest)
assert rz.digest == ref["digest"] and rz.trace_digest == ref["trace_digest"] and rz.params_hex == ref["params"]
print("params, digest and trace digest all match the published vector")

# %% [markdown]
# The divergent run shows why mode Z is needed for this check. Its mode Z digest is the same on
# every machine. Its IEEE digest depends on the CPU: on an ARM CPU the NaN words would be `7fc00000`
# instead of `ffc00000`. We can build that page by replacing the words and hash it:

# %%
arm_page = bytearray(di.page)
words = np.frombuffer(arm_page, dtype="<u4")
words[words == 0xFFC00000] = 0x7FC00000  # x86's NaN word -> ARM's
print("mode Z, any machine:      ", dz.digest)
print(f"IEEE on this CPU ({platform.machine()}):", di.digest)
print("IEEE with ARM's NaN words: ", meshnb.View.from_bytes(bytes(arm_page)).digest())
assert len({dz.digest, di.digest, meshnb.View.from_bytes(bytes(arm_page)).digest()}) == 3


# %% [markdown]
# ### What one flipped bit does
#
# Flip the lowest bit of `a` in the 4,096-step page: `a` changes by one unit in the last place (about
# `2e-10`). The digest changes completely: about half of its 256 bits flip, as they would for any
# change. The cell repeats this for every one of the 128 bits of the params and 128 bits of the
# loss ring.


# %%
def flipped(page: bytes, byte: int, bit: int) -> bytes:
    """`page` with bit `bit` of byte `byte` flipped."""
    p = bytearray(page)
    p[byte] ^= 1 << bit
    return bytes(p)


def digest_bits_changed(d1: str, d2: str) -> int:
    """How many of the 256 bits differ between two hex digests."""
    return (int(d1, 16) ^ int(d2, 16)).bit_count()


one = flipped(rz.page, 0, 0)  # byte 0 bit 0: the lowest bit of a
d1 = meshnb.View.from_bytes(one).digest()
print("a before:", rz.params[0], " after the flip:", meshnb.View.from_bytes(one)["PARAMS"][0])
print("digest before:", rz.digest)
print("digest after: ", d1, f"({digest_bits_changed(rz.digest, d1)} of 256 bits differ)")

LOSS_BYTE = 2112  # the LOSS field's offset in the page
changes = [
    digest_bits_changed(rz.digest, meshnb.View.from_bytes(flipped(rz.page, byte, bit)).digest())
    for byte in [*range(16), *range(LOSS_BYTE, LOSS_BYTE + 16)]
    for bit in range(8)
]
print(
    f"flipping each of the 256 bits: the digest changes every time: {min(changes) > 0}; "
    f"digest bits that change: {min(changes)} to {max(changes)}, mean {np.mean(changes):.1f}"
)
print(f"fraction of the 256 digest bits that change: {min(changes) / 256:.2f} to {max(changes) / 256:.2f}")
assert min(changes) > 0 and min(changes) / 256 > 0.35 and max(changes) / 256 < 0.65

# %% [markdown]
# Every one of the 256 flips changes the digest, and about half of its bits each time (between 35%
# and 65% of them for every flip, printed above): that is
# SHA-256's doing, not meshnb's, and it is what makes a digest a fair summary of the bits. Which
# flips matter for training is the next question.

# %% [markdown]
# A digest compares the state at the end of a run. What if the flip happens on the way, and the
# run continues? We continue 4,096 steps from the page with and without a flipped bit, and compare
# the final digests and the sums of every step:

# %%
flips = {
    "lowest bit of a (PARAMS[0])": (0, 0),
    "lowest bit of d (PARAMS[3])": (12, 0),
    "lowest bit of LOSS[5]": (LOSS_BYTE + 4 * 5, 0),
}
clean = meshnb.train(4096, view_in=rz.page, keep_trace=True)


def same(x: str, y: str) -> str:
    return "same" if x == y else "differs"


outcome = {}
rows = [
    "| flipped bit | steps whose sums differ (of 4096) | digest after 4096 more steps | trace digest |",
    "|---|---|---|---|",
]
for name, (byte, bit) in flips.items():
    run = meshnb.train(4096, view_in=flipped(rz.page, byte, bit), keep_trace=True)
    n = int((run.trace != clean.trace).any(axis=1).sum())
    rows.append(f"| {name} | {n} | {same(run.digest, clean.digest)} | {same(run.trace_digest, clean.trace_digest)} |")
    outcome[name] = (n, run.digest == clean.digest, run.trace_digest == clean.trace_digest)
display(Markdown("\n".join(rows)))
loss_flip, a_flip, d_flip = (
    outcome["lowest bit of LOSS[5]"],
    outcome["lowest bit of a (PARAMS[0])"],
    outcome["lowest bit of d (PARAMS[3])"],
)
assert loss_flip == (0, True, True)
assert 0 < a_flip[0] < d_flip[0] and not any(a_flip[1:] + d_flip[1:])

# %% [markdown]
# **What the table shows.** A flipped loss entry does not feed back into training: the ring
# overwrites it within 256 steps and the digest is the same again, so only the moment it was made
# could catch it. A flipped bit of a param feeds back: the sums differ for some steps (for `a`) or
# for many more (for `d`; the table gives the counts), and both digests differ. That is why the mesh
# compares *both*: the digest
# checks the final state, the trace digest every step on the way.
