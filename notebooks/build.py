"""Build the notebooks in this folder from the cell sources below, execute them, save them.

The cells of every notebook live here as plain strings, so a change is one reviewable diff; the
committed ``.ipynb`` files are this script's output *with* their outputs (plots visible on GitHub
or in Jupyter without running anything).  Regenerate after editing a cell::

    python notebooks/build.py              # every notebook
    python notebooks/build.py 02           # the notebooks whose names start with 02

Execution is headless on a real Jupyter kernel (nbclient, the ``python3`` kernel of the running
interpreter), with Jupyter's, IPython's and matplotlib's state directories in a temporary folder,
so nothing is written under ``~``.  ``tests/test_notebooks.py`` re-executes the committed files
and checks that their cells still match :func:`build`.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
KERNEL = "python3"
STATE_DIRS = ("JUPYTER_DATA_DIR", "JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR", "MPLCONFIGDIR")


def md(text: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_markdown_cell(text.strip("\n"))


def code(text: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_code_cell(text.strip("\n"))


# --------------------------------------------------------------------------------------------
# 01_training
# --------------------------------------------------------------------------------------------

TRAINING = [
    md("""
# 1. Training one system

meshnb runs the mesh's `train` program: stochastic gradient descent (SGD) that fits a cubic
`y = a + b x + c x^2 + d x^3` to 256 samples of `sin(pi x)` on `[-1, 1]`. Every float32
operation follows *float mode Z* (notebook 02), so the result is the same bits on every machine.

This notebook trains one system for 20,000 steps and looks at:

1. the loss of every step, over the whole run;
2. the loss ring, the page's record of the last 256 losses;
3. the fitted cubic against `sin(pi x)` and the samples;
4. the gap between the SGD params and the least-squares cubic, and where it comes from.

It uses only the public API described in the README. Run it top to bottom; it takes a few seconds
(the first call of a kernel compiles it, later calls are fast).
"""),
    code("""
%matplotlib inline
import matplotlib.pyplot as plt
import numpy as np

import meshnb

plt.rcParams.update({"figure.figsize": (10, 4.2), "figure.dpi": 90, "axes.grid": True, "grid.alpha": 0.3})
"""),
    md("""
## 1.1 One run

`meshnb.train(steps)` starts a system from `init` (params zero, learning rate 0.5) and runs
`steps` steps. Step `t` computes the error of the current cubic on one *batch* of 32 samples and
moves the params against the mean gradient. The 256 samples are split into 8 batches, and
batch `g` holds samples `g, g+8, g+16, ..., g+248`; step `t` uses batch `t mod 8`, so the batches
come round in the same order every 8 steps.

`keep_trace=True` keeps, for every step, the five sums that step applied: the sums over the batch
of `e`, `e x`, `e x^2`, `e x^3` and `e^2`, where `e` is the error of the cubic on one sample.
"""),
    code("""
STEPS = 20_000
r = meshnb.train(STEPS, keep_trace=True)

print("params a, b, c, d:", r.params)
print("as f32 words:     ", r.params_hex)
print("loss of the last step:", r.last_loss)
print("counters:", r.counters)
print("trace:", r.trace.shape, r.trace.dtype)
"""),
    md("""
## 1.2 The loss of every step

A step's loss is the mean squared error on its batch, measured *before* the step's update:
`loss = sum(e^2) * (1/32)`. The trace holds `sum(e^2)` in column 4 (as f32 words), and the page
holds `1/32` as `INV_BATCH`. Multiplying by a power of two is exact in float32, so plain numpy gives
the same bits as the program; the cell checks that against the page's loss ring for the last
256 steps.

For reference we also need the best any cubic can do on these 256 samples: the least-squares fit,
computed in float64 with numpy (section 1.5 looks at it closely).
"""),
    code("""
inv_batch = r.view["INV_BATCH"]                    # float32 1/32
sums = r.trace.view(np.float32)                     # [steps, 5]: e, e x, e x^2, e x^3, e^2
loss = sums[:, 4] * inv_batch                       # the loss of step t, t = 0 .. STEPS-1
steps = np.arange(r.steps)

last = steps[-256:]
assert np.array_equal(loss[last].view(np.uint32), r.loss[last % 256].view(np.uint32))
print("losses from the trace equal the page's loss ring bit for bit (last 256 steps)")

x = r.view["X"].astype(np.float64)                  # the 256 samples, as the program holds them
y = r.view["Y"].astype(np.float64)
lsq = np.polynomial.polynomial.polyfit(x, y, 3)     # float64 least squares: a, b, c, d
lsq_mse = np.mean((np.polynomial.polynomial.polyval(x, lsq) - y) ** 2)

# One pass over all 8 batches sees every sample once: the mean of 8 consecutive step losses.
pass_loss = loss[: STEPS // 8 * 8].reshape(-1, 8).mean(axis=1)
print(f"least-squares MSE on the 256 samples: {lsq_mse:.6g}")
print(f"mean loss of the last pass of 8 steps: {pass_loss[-1]:.6g}")
"""),
    code("""
fig, (ax0, ax1) = plt.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
ax0.plot(steps + 1, loss, lw=0.6, color="tab:blue", alpha=0.45, label="loss of each step (one batch)")
ax0.plot(8 * np.arange(1, len(pass_loss) + 1), pass_loss, color="tab:blue", label="mean over each pass of 8 steps")
ax0.axhline(lsq_mse, color="k", ls="--", lw=1, label="least-squares cubic (float64)")
ax0.set(xscale="log", yscale="log", xlabel="step + 1", ylabel="loss (mean squared error)",
        title=f"Loss per step, {STEPS:,} steps, learning rate 0.5")
ax0.legend()

tail = steps[-48:]
ax1.plot(tail, loss[tail], color="tab:blue", lw=0.8)
sc = ax1.scatter(tail, loss[tail], c=tail % 8, cmap="viridis", s=25, zorder=3)
ax1.axhline(lsq_mse, color="k", ls="--", lw=1)
ax1.set(yscale="log", xlabel="step", ylabel="loss", title="The last 48 steps: one level per batch")
fig.colorbar(sc, ax=ax1, label="batch (step mod 8)")
fig.tight_layout()
plt.show()
"""),
    md("""
**What the plot shows.** The loss falls fast for a few hundred steps, then flattens out. The mean
over each pass of 8 steps (every sample once) ends just above the least-squares line (dashed), the
best mean squared error any cubic reaches on all 256 samples. Single steps can go below that line,
since 32 samples can be fitted better than 256. And the loss never settles on one value: the right
panel shows a sawtooth with period 8, one level per batch. Each batch has its own error at the
current params, and the params keep moving (section 1.5).
"""),
    md("""
## 1.3 The loss ring

The page does not keep the whole history: its `LOSS` field is a ring of 256 entries, and step `t`
writes its loss at index `t mod 256`. After 20,000 steps the ring holds steps 19,744 to 19,999;
the newest entry is at index `(next step - 1) mod 256`. Because 256 is a multiple of 8, index `i`
always holds a step of batch `i mod 8`, so the ring shows the batch pattern at fixed places.
"""),
    code("""
ring = r.loss                                         # float32[256]
newest = (r.steps - 1) % 256
oldest_step = r.steps - 256
print(f"ring index {newest} holds the newest loss (step {r.steps - 1}); steps {oldest_step}..{r.steps - 1} are in the ring")

fig, (ax0, ax1) = plt.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
idx = np.arange(256)
ax0.plot(idx, ring, color="0.6", lw=0.7)
sc = ax0.scatter(idx, ring, c=idx % 8, cmap="viridis", s=12, zorder=3)
ax0.axvline(newest, color="tab:red", lw=1, label=f"newest entry (step {r.steps - 1})")
lo, hi = ring.min(), ring.max()
ax0.set(xlabel="ring index (step mod 256)", ylabel="loss", ylim=(lo - 0.05 * (hi - lo), hi + 0.3 * (hi - lo)),
        title="r.loss: the page's loss ring after 20,000 steps")
ax0.legend(loc="upper right")
fig.colorbar(sc, ax=ax0, label="batch")

by_batch = ring.reshape(32, 8)                        # row = one pass, column = batch
jitter = np.random.default_rng(0).uniform(-0.2, 0.2, by_batch.shape)
ax1.scatter(np.arange(8) + jitter, by_batch, c=np.broadcast_to(np.arange(8), by_batch.shape), cmap="viridis", s=10)
ax1.set(xlabel="batch g (samples g, g+8, ..., g+248)", ylabel="loss", xticks=range(8),
        title="The ring's 32 losses of each batch")
fig.tight_layout()
plt.show()
"""),
    md("""
**What the plot shows.** Left: the ring as stored, with 8 loss levels repeating 32 times; the red
line marks where the next step will write. Right: the 32 losses of each batch, spread
sideways so that they do not hide each other, are nearly equal.
The outer batches (0 and 7) have the largest loss and the middle ones (3 and 4) the smallest: each
batch's loss depends on where the params are when its turn comes (section 1.5).
"""),
    md("""
## 1.4 The fitted cubic

The params are float32; we evaluate both cubics in float64 to draw them.
"""),
    code("""
sgd = r.params.astype(np.float64)
grid = np.linspace(-1, 1, 801)
poly = np.polynomial.polynomial.polyval

fig, (ax0, ax1) = plt.subplots(1, 2)
ax0.plot(grid, np.sin(np.pi * grid), color="k", lw=2.5, alpha=0.25, label="sin(pi x)")
ax0.plot(x, y, ".", color="k", ms=3, label="the 256 samples")
ax0.plot(grid, poly(grid, sgd), color="tab:blue", label="SGD cubic (meshnb)")
ax0.plot(grid, poly(grid, lsq), color="tab:orange", ls="--", label="least-squares cubic")
ax0.set(xlabel="x", ylabel="y", title="The cubic fitted to sin(pi x)")
ax0.legend()

ax1.plot(grid, poly(grid, lsq) - np.sin(np.pi * grid), color="tab:orange", ls="--", label="least squares - sin(pi x)")
ax1.plot(grid, poly(grid, sgd) - np.sin(np.pi * grid), color="tab:blue", lw=1, label="SGD cubic - sin(pi x)")
ax1.plot(grid, 10 * (poly(grid, sgd) - poly(grid, lsq)), color="tab:red", label="10 x (SGD cubic - least squares)")
ax1.axhline(0, color="k", lw=0.8)
ax1.set(xlabel="x", ylabel="difference", title="Errors of the two cubics, and their difference")
ax1.legend(fontsize=8)
fig.tight_layout()
plt.show()
"""),
    md("""
**What the plot shows.** On the left the two cubics lie on top of each other and follow
`sin(pi x)` closely; a cubic cannot bend like a sine, so both miss it most near the ends. On the
right, their errors against `sin(pi x)` are nearly the same curve, odd like the data. The red
curve magnifies their difference tenfold: the SGD cubic sits a little *above* the least-squares
cubic everywhere, more at the ends, a parabola `a + c x^2` with small positive `a` and `c` (plus a
tiny odd part).
"""),
    md("""
## 1.5 SGD params against the least-squares optimum

The least-squares cubic minimises the mean squared error over all 256 samples at once; computed in
float64 it is the full-batch optimum. Because the data are odd (`sin(-pi x) = -sin(pi x)`, and the
samples are symmetric about 0), its even coefficients `a` and `c` are zero up to rounding.
"""),
    code("""
names = "abcd"
print(f"{'':2} {'SGD (f32 word)':>15} {'SGD':>14} {'least squares':>14} {'SGD - lsq':>12}")
for j in range(4):
    print(f"{names[j]:2} {r.params_hex[j]:>15} {sgd[j]:14.8f} {lsq[j]:14.8f} {sgd[j] - lsq[j]:12.3e}")
sgd_mse = np.mean((poly(x, sgd) - y) ** 2)
print(f"\\nmean squared error on all 256 samples: SGD {sgd_mse:.7f}, least squares {lsq_mse:.7f}")
"""),
    md("""
`b` and `d` agree to four or five significant digits, but `a` and `c` are about 0.004 where they
should be 0. The reason is the algorithm, not float32:

* **Each step sees one batch.** Batch `g` is samples `g, g+8, ..., g+248`: spread over the whole
  interval but not symmetric about 0 (its mirror image is batch `7-g`). Each step pulls the params
  toward *that batch's* best cubic, which has a nonzero `a` and `c`.
* **A constant learning rate never lets go.** The batches come round in a fixed cycle, so the
  params end up going round a fixed loop near the optimum instead of converging to it. The final
  params are wherever the loop is after the last step (batch 7, where `a` and `c` are largest).
* **The loop is the size of the steps.** Halving the learning rate halves the loop, so the gap
  shrinks in proportion. Full-batch gradient descent (every sample in every step) has no loop and
  reaches the optimum.

We check each point. First the loop: continue the run one step at a time from its page
(`view_in`, which resumes bit for bit) and record the params after each of the next 8 steps.
"""),
    code("""
page = r.page
loop = []
for _ in range(8):
    page = meshnb.train(1, view_in=page).page
    loop.append(meshnb.View.from_bytes(page)["PARAMS"])
loop = np.array(loop, dtype=np.float64)               # params after steps 20000 .. 20007 (batches 0..7)

batch_opt = np.array([np.polynomial.polynomial.polyfit(x[g::8], y[g::8], 3) for g in range(8)])
print("params after each batch of one pass, and the pass mean:")
for g in range(8):
    print(f"  after batch {g}: a = {loop[g, 0]:+.5f}  c = {loop[g, 2]:+.5f}")
print(f"  mean of the pass: a = {loop[:, 0].mean():+.2e}  c = {loop[:, 2].mean():+.2e}")
print(f"after 8 steps the params are back within {np.abs(loop[-1] - sgd).max():.1e} of where they started")
"""),
    md("""
Next, the same SGD in float64, written directly in numpy (same batches, same order, same learning
rate), and full-batch gradient descent for comparison. Then the meshnb run at smaller learning
rates: the page's learning rate is set with `set_lr={step: f32 word}` (SET_LR before that step),
and a smaller rate needs proportionally more steps to settle.
"""),
    code("""
V = np.vander(x, 4, increasing=True)                 # columns 1, x, x^2, x^3

def gradient_descent(lr, steps, full_batch=False):
    p = np.zeros(4)
    for t in range(steps):
        rows = slice(None) if full_batch else slice(t % 8, None, 8)
        e = V[rows] @ p - y[rows]
        p -= lr * V[rows].T @ e / len(e)
    return p

sgd64 = gradient_descent(0.5, 4096)
gd64 = gradient_descent(0.5, 20_000, full_batch=True)
print("float64 cyclic SGD - meshnb SGD:", np.abs(sgd64 - meshnb.train(4096).params).max())
print("float64 full-batch GD - least squares:", np.abs(gd64 - lsq).max())

rates = [0.5, 0.25, 0.125, 0.0625]
gaps = []
for lr in rates:
    word = int(np.float32(lr).view(np.uint32))
    run = meshnb.train(int(8192 / lr), set_lr={0: word})
    gaps.append(np.abs(run.params.astype(np.float64) - lsq))
    print(f"lr {lr:<6} (word {word:08x}), {run.steps:6} steps: |a - a_lsq| = {gaps[-1][0]:.2e}, |c - c_lsq| = {gaps[-1][2]:.2e}")
gaps = np.array(gaps)
"""),
    code("""
fig, (ax0, ax1) = plt.subplots(1, 2)
ax0.scatter(batch_opt[:, 0], batch_opt[:, 2], marker="s", c=range(8), cmap="viridis", s=40,
            label="each batch's own least-squares cubic")
ax0.plot(np.r_[sgd[0], loop[:, 0]], np.r_[sgd[2], loop[:, 2]], "-", color="tab:blue", lw=1)
ax0.scatter(loop[:, 0], loop[:, 2], c=range(8), cmap="viridis", s=40, edgecolors="tab:blue", zorder=3,
            label="SGD params after batch 0..7")
ax0.plot(*sgd[[0, 2]], "o", ms=12, mfc="none", mec="tab:red", label="final params (after batch 7)")
ax0.plot(lsq[0], lsq[2], "*", color="k", ms=14, label="least squares (all samples)")
ax0.set(xlabel="a", ylabel="c", title="One pass of SGD in the (a, c) plane")
ax0.xaxis.set_major_locator(plt.MaxNLocator(5))
ax0.legend(fontsize=8, loc="upper left")

ax1.loglog(rates, gaps[:, 0], "o-", label="|a - a_lsq|")
ax1.loglog(rates, gaps[:, 2], "s-", label="|c - c_lsq|")
ax1.loglog(rates, gaps[2, 0] * np.array(rates) / rates[2], "k:", label="proportional to the learning rate")
ax1.set(xlabel="learning rate", ylabel="gap to the least-squares cubic", title="The gap shrinks with the learning rate")
ax1.set_xticks(rates, ["1/2", "1/4", "1/8", "1/16"])
ax1.xaxis.set_minor_locator(plt.NullLocator())
ax1.legend()
fig.tight_layout()
plt.show()
"""),
    md("""
**What the plots show.** Left: the squares are the 8 batches' own best cubics, far apart in `a`
and `c`. The SGD params (circles, colored by the batch just applied) go round a small loop around
the least-squares point (star); the mean of the loop is within about 1e-4 of it, but the run
stops at one point of the loop (red ring): the point after batch 7, the end of a pass. Right: the gap in `a` and `c` halves each time the
learning rate halves (roughly: the dotted line has the slope of exact proportion).

The float64 SGD lands on the same params as meshnb to within a few 1e-7 (printed above): float32
and mode Z change the last bits, not the answer. Full-batch gradient descent in float64 reaches the least-squares cubic.
In meshnb, a cluster of 8 systems does full-batch descent: each member computes one batch's sums
and all members apply the total (notebook 03).
"""),
    md("""
## 1.6 The run ends in an exact cycle

In float32 the loop is not only approximately periodic: after a while, the run repeats *bit for
bit*. The trace shows it: find the shortest period `P` (a multiple of 8) such that the sums of step
`t + P` equal those of step `t` up to the end of the run, and the first step from which they do.
"""),
    code("""
tail_start = STEPS // 2
P = next(p for p in range(8, 4097, 8) if np.array_equal(r.trace[tail_start:tail_start + p], r.trace[tail_start + p:tail_start + 2 * p]))
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
print(f"train(4096) and train({4096 + period}): same params {a.params_hex == b.params_hex}, same digest {a.digest == b.digest}")
"""),
    md("""
So from step 1,768 on the system is on a closed orbit of 48 steps (the sums start repeating three
steps earlier, while a param still differs in a last bit that no sum feels). More steps do not
change where it goes: the digest after 4,096 steps equals the digest after 4,096 + 768 steps. This is also
why the gap in section 1.5 cannot be trained away at a fixed learning rate.
"""),
]


# --------------------------------------------------------------------------------------------
# 02_float_mode_z
# --------------------------------------------------------------------------------------------

FLOAT_MODE_Z = [
    md("""
# 2. What float mode Z changes

Every float32 operation in meshnb (add, sub, mul, div, u32 to f32) is an ordinary IEEE float32
operation, rounded to nearest even, with three extra rules:

1. **Subnormal inputs are read as zero.** A word whose exponent bits are all zero (a subnormal,
   a number below `2^-126`, about `1.18e-38`) is read as a zero of the same sign.
2. **Subnormal results are written as zero**, again keeping the sign. The test is made on the
   *rounded* result.
3. **Every NaN result is the canonical NaN `0x7FFFFFFF`**, the word the GPUs produce. CPUs differ:
   x86 gives `0xFFC00000`, ARM `0x7FC00000`.

No fused multiply-add either: every operation rounds on its own. The rules make the program give
the same bits on a GPU, in the wasm runtime and here. This notebook shows the rules on concrete
words, then runs the same training in mode Z and in plain IEEE float32
(`meshnb.train(..., z=False)`, a switch that exists only for this comparison; the default and the
product is `z=True`) and shows where the bits part. Last, the digest: the one-line check that two
machines computed the same thing.
"""),
    code("""
%matplotlib inline
import json
import platform
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display

import meshnb
from meshnb import floatz as fz                     # the mode Z operations, callable from Python

plt.rcParams.update({"figure.figsize": (10, 4.2), "figure.dpi": 90, "axes.grid": True, "grid.alpha": 0.3})


def f32(word):
    \"\"\"The float32 whose bits are `word`.\"\"\"
    return np.uint32(word).view(np.float32)


def word(value):
    \"\"\"The bits of a float32 (a Python float is rounded to float32 first) as an int.\"\"\"
    return int(np.float32(value).view(np.uint32))


print("this machine:", platform.machine())
"""),
    md("""
## 2.1 The rules on concrete words

Each row applies one operation to float32 words, once in plain IEEE float32 (numpy on this CPU)
and once in mode Z (`meshnb.floatz`). `from_bits` is how the program reads a word from its page:
through the same flush and NaN rule.
"""),
    code("""
IEEE = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
}
Z = {"add": fz.add, "sub": fz.sub, "mul": fz.mul, "div": fz.div}

cases = [  # (operation, input words, what it shows)
    ("from_bits", [0x00000001], "the smallest subnormal is read as +0"),
    ("from_bits", [0x807FFFFF], "the largest negative subnormal is read as -0"),
    ("from_bits", [0x00800000], "the smallest normal number is kept"),
    ("from_bits", [0xFFC00000], "any NaN word is read as the canonical NaN"),
    ("add", [0x00000001, 0x00000000], "a subnormal input counts as zero"),
    ("mul", [0x1E000000, 0x21000000], "2^-67 * 2^-61 = 2^-128 is subnormal: written as +0"),
    ("mul", [0x9E000000, 0x21000000], "the same with a negative factor: -0, sign kept"),
    ("sub", [0x00C00000, 0x00800000], "x - y = 0 although x != y (the difference is 2^-127)"),
    ("mul", [0x00800000, 0x3F7FFFFF], "rounds up to the smallest normal: kept (a CPU's FTZ flag would give 0)"),
    ("mul", [0x7E967699, 0x41200000], "overflow is unchanged: +inf"),
    ("sub", [0x7F800000, 0x7F800000], "inf - inf: NaN"),
    ("div", [0x00000000, 0x00000000], "0 / 0: NaN"),
    ("add", [0x7FC00001, 0x3F800000], "a NaN with a payload: IEEE keeps it, Z canonicalises"),
]

rows = ["| operation | input words | IEEE float32 | mode Z | what it shows |", "|---|---|---|---|---|"]
with np.errstate(all="ignore"):
    for op, words, note in cases:
        args = [f32(w) for w in words]
        if op == "from_bits":
            ieee, z = words[0], fz.flush_bits(np.uint32(words[0]))
        else:
            ieee, z = word(IEEE[op](*args)), word(Z[op](*args))
        mark = "" if ieee == z else " **≠**"
        ins = ", ".join(f"`{w:08x}`" for w in words)
        rows.append(f"| {op} | {ins} | `{ieee:08x}` | `{z:08x}`{mark} | {note} |")
display(Markdown("\\n".join(rows)))
"""),
    md("""
The IEEE column is what this CPU does: on an ARM machine the rows that make a new NaN
(`inf - inf`, `0 / 0`) would read `7fc00000`. The mode Z column is the same on every machine. Note the row `sub 00c00000, 00800000`: in mode Z two
different numbers can have a difference of zero, since the difference is below the smallest
normal.

The plot below shows rule 2 on one multiplication, `1.5 * 2^-60` times `2^k`, for exact products
from `2^-156` to `2^-116`. IEEE float32 has *gradual underflow*: below `2^-126` it keeps fewer and
fewer bits until the smallest subnormal, `2^-149`. Mode Z cuts straight to zero at `2^-126`.
"""),
    code("""
a = np.float32(1.5 * 2.0**-60)
ks = np.arange(-156, -115)
exact = 1.5 * 2.0**ks                               # the exact products, in float64
ieee_vals = np.array([a * np.float32(2.0 ** (k + 60)) for k in ks], dtype=np.float64)
z_vals = np.array([fz.mul(a, np.float32(2.0 ** (k + 60))) for k in ks], dtype=np.float64)

floor = 2.0**-160                                    # where zeros are drawn on the log axis
fig, ax = plt.subplots(figsize=(10, 4))
ax.axvspan(2.0**-160, 2.0**-126, color="0.9", label="subnormal range (below 2^-126)")
ax.plot(exact, exact, color="k", lw=0.8, ls=":", label="exact product")
ax.plot(exact, np.where(ieee_vals > 0, ieee_vals, floor), "o-", ms=4, label="IEEE float32 (gradual underflow)")
ax.plot(exact, np.where(z_vals > 0, z_vals, floor), "s--", ms=4, label="float mode Z (flush to zero)")
ax.set(xscale="log", yscale="log", xlim=(2.0**-157, 2.0**-115), ylim=(floor / 4, 2.0**-112),
       xlabel="exact product 1.5 * 2^-60 * 2^k", ylabel="float32 result (zero drawn at the bottom)",
       title="One multiply near the bottom of float32")
ax.text(2.0**-156.5, floor * 1.8, "result 0", fontsize=9)
ax.legend(loc="upper left")
plt.show()
"""),
    md("""
**What the plot shows.** Above `2^-126` both modes give the correctly rounded product (on the
dotted line). In the grey band IEEE keeps a subnormal result, less and less precise, until it
rounds to zero at `2^-150` and below; mode Z writes zero for the whole band.
"""),
    md("""
## 2.2 The same training in both modes

At the default learning rate, no operation of a normal run comes near the subnormal range or
produces a NaN, so the two modes give the same bits: same params, same loss ring, same digest.
"""),
    code("""
rz = meshnb.train(4096)             # float mode Z: the default
ri = meshnb.train(4096, z=False)    # plain IEEE float32
print("mode Z:", rz.params_hex)
print("IEEE:  ", ri.params_hex)
print("same page:", rz.page == ri.page, "  same digest:", rz.digest == ri.digest)
"""),
    md("""
### A tiny learning rate: the updates underflow

Set the learning rate to `2^-126`, the smallest normal float32 (word `00800000`, so it is not
itself flushed when the program reads it). Each update is `lr * (sum * 1/32)`; with every
gradient component below 1 in size, the update is a subnormal. Mode Z writes it as zero: the params
never leave zero. IEEE keeps the subnormal updates, and they add up step after step.

To follow the params step by step we run one step at a time, each run continuing from the last
one's page (`view_in`); the cell checks that this gives the same bits as one long run.
"""),
    code("""
TINY = 0x00800000                                     # 2^-126
STEPS = 4096

def param_history(z):
    run = meshnb.train(1, set_lr={0: TINY}, z=z)
    history = [run.params]
    for _ in range(STEPS - 1):
        run = meshnb.train(1, view_in=run.page, z=z)
        history.append(run.params)
    assert run.page == meshnb.train(STEPS, set_lr={0: TINY}, z=z).page   # same bits as one run
    return run, np.array(history)

tz, hist_z = param_history(True)
ti, hist_i = param_history(False)
print("mode Z params:", tz.params_hex, "  all zero at every step:", not hist_z.any())
print("IEEE params:  ", ti.params_hex)
print("last losses:   Z", tz.last_loss, "  IEEE", ti.last_loss, "  same bits:", np.array_equal(tz.loss.view(np.uint32), ti.loss.view(np.uint32)))
print("digests equal:", tz.digest == ti.digest)
"""),
    code("""
fig, ax = plt.subplots(figsize=(10, 4))
steps = np.arange(1, STEPS + 1)
ax.axhspan(2.0**-150, 2.0**-126, color="0.9", label="subnormal range")
for j, name in enumerate("abcd"):
    v = np.abs(hist_i[:, j].astype(np.float64))
    ax.plot(steps[v > 0], v[v > 0], label=f"|{name}|, IEEE float32")
ax.set(xscale="log", yscale="log", ylim=(2.0**-150, 2.0**-110), xlabel="step", ylabel="|param|",
       title="Learning rate 2^-126: the IEEE params grow out of the subnormals\\n(in mode Z all four stay exactly 0)")
ax.legend(loc="upper left")
plt.show()
"""),
    md("""
**What the plot shows.** In IEEE float32 the first updates are subnormal, but they are kept and
add up: within the first ten steps `b` and `d` cross into the normal range, and they keep
growing in proportion to the step count. `a` and `c`, whose gradients are much smaller (the data
are odd, and at params near zero the even terms nearly cancel), wander about in the subnormal
range and change sign. In mode Z every one of those updates is written as zero, so all four params are exactly zero
at every step (nothing to draw on a log axis).

The loss is the same to the last bit in both modes (params of `1e-35` do not change any prediction
in float32), but the digest covers the params too, so it tells the two runs apart.
"""),
    md("""
### A divergent learning rate: the run ends in NaN

At learning rate 4 (word `40800000`) each step overshoots and the params grow without bound.
The squared errors overflow first (the loss becomes infinite), the params keep growing until the
errors themselves overflow, and as soon as a sum adds `+inf` and `-inf` it is NaN. From then on
every value is NaN. The modes agree on every bit until the first NaN; then mode Z writes `7fffffff` and IEEE
writes whatever this CPU makes.
"""),
    code("""
BIG = 0x40800000                                      # 4.0
dz = meshnb.train(100, set_lr={0: BIG}, keep_trace=True)
di = meshnb.train(100, set_lr={0: BIG}, z=False, keep_trace=True)

def step_losses(run):
    return run.trace.view(np.float32)[:, 4] * run.view["INV_BATCH"]

lz, li = step_losses(dz), step_losses(di)
first_inf = int(np.flatnonzero(np.isinf(lz))[0])
first_nan = int(np.flatnonzero(np.isnan(dz.trace.view(np.float32)).any(axis=1))[0])   # any of the 5 sums
first_diff = int(np.flatnonzero((dz.trace != di.trace).any(axis=1))[0])
print(f"first infinite loss: step {first_inf}; first NaN in the sums: step {first_nan}; first step whose sums differ: {first_diff}")
print(f"sums applied at step {first_diff}:")
print("  mode Z:", [f"{w:08x}" for w in dz.trace[first_diff]])
print("  IEEE:  ", [f"{w:08x}" for w in di.trace[first_diff]])
print("final params, mode Z:", dz.params_hex)
print("final params, IEEE:  ", di.params_hex)
"""),
    code("""
fig, ax = plt.subplots(figsize=(10, 4))
t = np.arange(len(lz))
ax.plot(t, np.where(np.isfinite(lz), lz, np.nan), lw=3, alpha=0.5, label="mode Z")
ax.plot(t, np.where(np.isfinite(li), li, np.nan), "k--", lw=1, label="IEEE float32")
ax.axvspan(first_inf, first_nan, color="tab:orange", alpha=0.15, label=f"loss is inf (from step {first_inf})")
ax.axvspan(first_nan, len(lz), color="tab:red", alpha=0.15, label=f"NaN (from step {first_nan}): the modes differ")
ax.set(yscale="log", xlim=(0, len(lz)), xlabel="step", ylabel="loss", title="Learning rate 4: the loss explodes, then NaN")
ax.legend(loc="lower right")
plt.show()
"""),
    md("""
**What the plot shows.** The loss grows by an order of magnitude or more every step, and the two curves are the
same bits all the way. Once the loss is infinite there is nothing to draw, and the modes still
agree on every word (`inf` is `inf` in both). From the first NaN on, the words differ: mode Z stores the canonical NaN `7fffffff`, IEEE on this CPU stores
its own NaN (`ffc00000` on x86, `7fc00000` on ARM), so the IEEE page would not even agree with
itself across CPUs.
"""),
    md("""
## 2.3 The digest: the cross-architecture check

A system's digest is the SHA-256 of its params (16 bytes) followed by its loss ring (1024 bytes).
Two executors that ran the same steps from the same page agree on the digest if and only if they
agree on every bit of the final params and of the last 256 losses (up to a SHA-256 collision).
The trace digest hashes the five sums of *every* step, so it also catches a difference that the run
later forgot.

The spec publishes vectors that every faithful implementation (GPU, wasm, this one) must match;
`tests/data/vectors.json` holds them. Here is the 4,096-step run of one system:
"""),
    code("""
vectors = json.loads((Path("..") / "tests" / "data" / "vectors.json").read_text())
ref = next(v for v in vectors["runs"] if v["systems"] == 1 and v["steps"] == 4096)
print("published digest:      ", ref["digest"])
print("meshnb digest:         ", rz.digest)
print("published trace digest:", ref["trace_digest"])
print("meshnb trace digest:   ", rz.trace_digest)
assert rz.digest == ref["digest"] and rz.trace_digest == ref["trace_digest"] and rz.params_hex == ref["params"]
print("params, digest and trace digest all match the published vector")
"""),
    md("""
The divergent run shows why mode Z is needed for this check. Its mode Z digest is the same on
every machine. Its IEEE digest depends on the CPU: on an ARM CPU the NaN words would be `7fc00000`
instead of `ffc00000`. We can build that page by replacing the words and hash it:
"""),
    code("""
arm_page = bytearray(di.page)
words = np.frombuffer(arm_page, dtype="<u4")
words[words == 0xFFC00000] = 0x7FC00000               # x86's NaN word -> ARM's
print("mode Z, any machine:      ", dz.digest)
print(f"IEEE on this CPU ({platform.machine()}):", di.digest)
print("IEEE with ARM's NaN words: ", meshnb.View.from_bytes(bytes(arm_page)).digest())
"""),
    md("""
### What one flipped bit does

Flip the lowest bit of `a` in the 4,096-step page: `a` changes by one unit in the last place (about
`2e-10`). The digest changes completely: about half of its 256 bits flip, as they would for any
change. The histogram repeats this for every one of the 128 bits of the params and 128 bits of the
loss ring.
"""),
    code("""
def flipped(page, byte, bit):
    p = bytearray(page)
    p[byte] ^= 1 << bit
    return bytes(p)

def digest_bits_changed(d1, d2):
    return bin(int(d1, 16) ^ int(d2, 16)).count("1")

one = flipped(rz.page, 0, 0)                         # byte 0 bit 0: the lowest bit of a
d1 = meshnb.View.from_bytes(one).digest()
print("a before:", rz.params[0], " after the flip:", meshnb.View.from_bytes(one)["PARAMS"][0])
print("digest before:", rz.digest)
print("digest after: ", d1, f"({digest_bits_changed(rz.digest, d1)} of 256 bits differ)")

LOSS_BYTE = 2112                                     # the LOSS field's offset in the page
changes = [digest_bits_changed(rz.digest, meshnb.View.from_bytes(flipped(rz.page, byte, bit)).digest())
           for byte in [*range(16), *range(LOSS_BYTE, LOSS_BYTE + 16)] for bit in range(8)]

fig, ax = plt.subplots(figsize=(8, 3.5))
ax.hist(changes, bins=np.arange(90, 170, 4), color="tab:blue", edgecolor="white")
ax.axvline(128, color="k", ls="--", lw=1, label="128: half the bits")
ax.set(xlabel="digest bits that change (of 256)", ylabel="flipped page bits",
       title="Flipping any one bit of the params or the loss ring changes about half the digest")
ax.legend()
plt.show()
"""),
    md("""
A digest compares the state at the end of a run. What if the flip happens on the way, and the
run continues? We continue 4,096 steps from the page with and without a flipped bit, and compare
the final digests and the sums of every step:
"""),
    code("""
flips = {
    "lowest bit of a (PARAMS[0])": (0, 0),
    "lowest bit of d (PARAMS[3])": (12, 0),
    "lowest bit of LOSS[5]": (LOSS_BYTE + 4 * 5, 0),
}
clean = meshnb.train(4096, view_in=rz.page, keep_trace=True)
def same(x, y):
    return "same" if x == y else "differs"

rows = ["| flipped bit | steps whose sums differ (of 4096) | digest after 4096 more steps | trace digest |", "|---|---|---|---|"]
for name, (byte, bit) in flips.items():
    run = meshnb.train(4096, view_in=flipped(rz.page, byte, bit), keep_trace=True)
    n = int((run.trace != clean.trace).any(axis=1).sum())
    rows.append(f"| {name} | {n} | {same(run.digest, clean.digest)} | {same(run.trace_digest, clean.trace_digest)} |")
display(Markdown("\\n".join(rows)))
"""),
    md("""
**What the table shows.** A flipped loss entry does not feed back into training: the ring
overwrites it within 256 steps and the digest is the same again, so only the moment it was made
could catch it. A flipped bit of a param feeds back: the sums differ for a few steps (for `a`) or
for every step (for `d`), and both digests differ. That is why the mesh compares *both*: the digest
checks the final state, the trace digest every step on the way.
"""),
]


# --------------------------------------------------------------------------------------------
# 03_clusters
# --------------------------------------------------------------------------------------------

CLUSTERS = [
    md("""
# 3. Clusters: N systems in lockstep

A *cluster* is N systems that train one cubic together. At every step each member computes the
five sums on its own batch, publishes them on a shared exchange page, waits for every other
member's, adds all N up in member order, and applies that total. Every member applies the same
total, so every member's params stay bitwise identical.

Member `k` of `N` at step `t` uses batch `(t N + k) mod 8`, and the page's `INV_BATCH` is
`1 / (32 N)`, so one step of a cluster is one step of SGD on `32 N` samples:

| N | batches in one step | what it is |
|---|---|---|
| 1 | one batch of 32 samples | the SGD of notebook 01 |
| 2 | batches `{0,1}`, `{2,3}`, `{4,5}`, `{6,7}` in turn | SGD on 64 samples a step |
| 4 | batches `{0..3}`, `{4..7}` in turn | SGD on 128 samples a step |
| 8 | all 8 batches, every step | full-batch gradient descent |

meshnb runs a cluster on one machine with one of three backends: `fused` (the whole cluster in one
compiled loop, no exchange: the fastest), `threads` (one thread per member, a real exchange page
with timeouts) and `processes` (one OS process per member, the page in shared memory). All three
give the same bits. This notebook uses only the public API described in the README.
"""),
    code("""
%matplotlib inline
import json
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display

import meshnb

plt.rcParams.update({"figure.figsize": (10, 4.2), "figure.dpi": 90, "axes.grid": True, "grid.alpha": 0.3})
"""),
    md("""
## 3.1 Loss curves for N = 1, 2, 4, 8

We run 4,096 steps of each cluster size with the fused backend and keep the trace: with a cluster,
row `t` of the trace holds the *total* that step `t` applied, so the step's loss is
`total(e^2) * INV_BATCH`, the mean squared error over the step's `32 N` samples.
"""),
    code("""
STEPS = 4096
SIZES = [1, 2, 4, 8]
runs = {n: meshnb.train(STEPS, systems=n, backend="fused", keep_trace=True) for n in SIZES}

for n, r in runs.items():
    assert len({s.digest for s in r.systems}) == 1 and len({s.trace_digest for s in r.systems}) == 1
    print(f"N = {n}: INV_BATCH = 1/{round(1 / float(r.view['INV_BATCH']))}, params {r.params_hex}, "
          f"every member has digest {r.digest[:16]}...")

vectors = json.loads((Path("..") / "tests" / "data" / "vectors.json").read_text())
for v in vectors["runs"]:
    if v["steps"] == STEPS and v["systems"] in runs:
        r = runs[v["systems"]]
        assert (r.digest, r.trace_digest, r.params_hex) == (v["digest"], v["trace_digest"], v["params"])
        print(f"N = {v['systems']}: digest, trace digest and params match the published vector")
"""),
    code("""
x = runs[1].view["X"].astype(np.float64)
y = runs[1].view["Y"].astype(np.float64)
lsq = np.polynomial.polynomial.polyfit(x, y, 3)                 # float64 least squares
lsq_mse = np.mean((np.polynomial.polynomial.polyval(x, lsq) - y) ** 2)

fig, axes = plt.subplots(2, len(SIZES), figsize=(12, 6.5), sharey="row")
steps = np.arange(STEPS)
tail = steps[-48:]
for i, (n, r) in enumerate(runs.items()):
    loss = r.trace.view(np.float32)[:, 4] * r.view["INV_BATCH"]   # the loss of each step
    top, bottom = axes[0, i], axes[1, i]
    top.plot(steps + 1, loss, lw=0.7, color=f"C{i}")
    top.set(xscale="log", yscale="log", xlabel="step + 1", title=f"N = {n}" + (" (full batch)" if n == 8 else ""))
    bottom.plot(tail, loss[tail], "o-", ms=3, lw=0.8, color=f"C{i}")
    bottom.set(xlabel="step", title=f"N = {n}: the last 48 steps")
    for ax in (top, bottom):
        ax.axhline(lsq_mse, color="k", ls="--", lw=1)
axes[0, 0].set_ylabel("loss of the step")
axes[1, 0].set_ylabel("loss of the step")
axes[0, 0].plot([], [], "k--", lw=1, label="least-squares cubic")
axes[0, 0].legend(loc="lower left")
fig.suptitle(f"Loss per step, {STEPS:,} steps, learning rate 0.5")
fig.tight_layout()
plt.show()
"""),
    md("""
**What the plots show.** Top: the whole run. All four fall at about the same pace (same learning
rate, and each step's gradient is a mean over its samples), and all flatten out at the
least-squares line (dashed). Bottom: the last 48 steps. With N = 1 the loss keeps the sawtooth of
notebook 01, 8 levels, one per batch; N = 2 has 4 levels, one per pair of batches. With N = 4 the
steps alternate between two halves of the data that mirror each other, and their losses come out
equal to six digits: a flat line, but a little above the least-squares line, since the params
still swing between the halves (the table below). With N = 8 every step sees all 256 samples: a
flat line at the least-squares value.
"""),
    code("""
print(f"{'N':>2} {'a':>12} {'c':>12} {'max |p - p_lsq|':>16}")
for n, r in runs.items():
    p = r.params.astype(np.float64)
    print(f"{n:>2} {p[0]:12.3e} {p[2]:12.3e} {np.abs(p - lsq).max():16.3e}")
"""),
    md("""
The gap of notebook 01 comes from seeing one batch at a time, and it shrinks as each step sees
more of the data. With N = 8, `a` and `c` are within about `1e-7` of zero instead of `4e-3`.
`b` and `d` stop about `1e-5` short of the least-squares values: there, along the direction where
`b` and `d` trade off against each other, the float32 steps stop making progress (running longer
changes nothing; float64 gradient descent, sketched in notebook 01, gets within `1e-13`).
"""),
    md("""
## 3.2 A stalled member

The `threads` backend runs each member on its own thread, with a real exchange page: a member
that has published waits for the others for at most `timeout_ms`. If the wait times out, the task
stops with the round still pending (the page's `ERR = 1`, and the `timeouts` counter goes up), and
the host calls the task again, which waits again for the same round. Nothing is recomputed, so a
timeout changes no bits.

`stalls=[(k, task, ms)]` makes member `k` sleep `ms` milliseconds at the start of its task number
`task` (counted from 0, retries included). We stall member 2 of a 4-member cluster for 300 ms, with
a 20 ms timeout, and compare with the fault-free fused run.
"""),
    code("""
clean = meshnb.train(1024, systems=4, backend="fused")
stalled = meshnb.train(1024, systems=4, backend="threads", timeout_ms=20, stalls=[(2, 3, 300)])

rows = ["| member | timeouts | steps | digest | same as fault-free |", "|---|---|---|---|---|"]
for s, c in zip(stalled.systems, clean.systems):
    rows.append(f"| {s.system} | {s.counters['timeouts']} | {s.counters['steps']} | `{s.digest[:16]}...` | "
                f"{s.digest == c.digest and s.trace_digest == c.trace_digest} |")
display(Markdown("\\n".join(rows)))
assert all(s.digest == clean.digest and s.trace_digest == clean.trace_digest for s in stalled.systems)
assert sum(s.counters["timeouts"] for s in stalled.systems) > 0
"""),
    md("""
**What the table shows.** While member 2 sleeps, the other three publish their sums for the next
round and wait; every 20 ms their wait times out and is retried, so each counts about 300 / 20
timeouts. Member 2 itself never waits for long: when it wakes, the others' sums are already there.
Once it publishes, the round completes and the run goes on. The final digest and trace digest of
every member equal those of the fault-free run: the stall cost time, not bits.
"""),
    md("""
## 3.3 Steps per second per backend

The same cluster, timed with each backend (`r.steps_per_second`). The fused backend does the work
of N members in one loop with no exchange; threads and processes pay for the exchange at every
step: publish, wait, read. Timings depend on the machine and its load; the bits do not.
"""),
    code("""
BACKENDS = {"fused": 100_000, "threads": 2_000, "processes": 2_000}   # steps: well under a second each
speed = {}
for backend, steps in BACKENDS.items():
    for n in (2, 4):
        meshnb.train(64, systems=n, backend=backend)                     # warm up (compile, caches)
        speed[backend, n] = max(meshnb.train(steps, systems=n, backend=backend).steps_per_second for _ in range(2))
        print(f"{backend:>9}, N = {n}: {speed[backend, n]:12,.0f} steps/s (best of 2)")

fig, ax = plt.subplots(figsize=(8, 4))
width = 0.38
for i, n in enumerate((2, 4)):
    xs = np.arange(len(BACKENDS)) + (i - 0.5) * width
    bars = ax.bar(xs, [speed[b, n] for b in BACKENDS], width, label=f"N = {n}")
    ax.bar_label(bars, fmt="{:,.0f}", fontsize=8)
ax.set_xticks(range(len(BACKENDS)), list(BACKENDS))
ax.set(yscale="log", ylabel="steps per second (log scale)",
       title=f"Cluster steps per second by backend ({os.cpu_count()} cores)")
ax.legend()
plt.show()
"""),
    md("""
**What the plot shows.** The fused backend is hundreds of times faster than the others: a step
there is a few hundred nanoseconds of arithmetic. With threads or processes every step waits for
every member to publish, and that synchronisation costs tens to hundreds of microseconds a step,
the more so when the members outnumber the cores. Those two backends exist to exercise the
exchange and its timeouts the way a real mesh does, which the fused loop cannot.
"""),
]


def percent_cells(path: Path) -> list[nbformat.NotebookNode]:
    """The cells of a jupytext ``py:percent`` file (``# %%`` code cells, ``# %% [markdown]`` cells
    of ``# ``-prefixed lines, magics written ``# %magic``), so a notebook can live as a script."""
    cells: list[nbformat.NotebookNode] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    if lines and lines[0] == "# ---":  # the jupytext header
        lines = lines[lines.index("# ---", 1) + 1:]
    kind, body = None, []

    def flush() -> None:
        if kind is not None:
            text = "\n".join(body).strip("\n")
            cells.append(md(text) if kind == "markdown" else code(text))

    for line in lines:
        if line.startswith("# %%"):
            flush()
            kind, body = ("markdown" if "[markdown]" in line else "code"), []
        elif kind == "markdown":
            body.append(line[2:] if line.startswith("# ") else line.lstrip("#"))
        else:
            body.append(line[2:] if line.startswith("# %") and not line.startswith("# %%") else line)
    flush()
    return cells


NOTEBOOKS: dict[str, list[nbformat.NotebookNode]] = {
    "01_training": TRAINING,
    "02_float_mode_z": FLOAT_MODE_Z,
    "03_clusters": CLUSTERS,
    "05_sweeps": percent_cells(HERE / "05_sweeps.py"),  # a jupytext py:percent file
}


def build(name: str) -> nbformat.NotebookNode:
    """The notebook ``name`` (without ``.ipynb``), not executed."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.from_dict(dict(c)) for c in NOTEBOOKS[name]]
    for i, cell in enumerate(nb.cells):
        cell.id = f"{name[:2]}-{i:02d}"  # stable ids: a rebuild changes only what changed
    nb.metadata = nbformat.from_dict({
        "kernelspec": {"name": KERNEL, "display_name": "Python 3 (ipykernel)", "language": "python"},
        "language_info": {"name": "python"},
    })
    return nb


@contextmanager
def headless_jupyter() -> Iterator[None]:
    """Point Jupyter's, IPython's and matplotlib's state at a temporary folder; Agg backend."""
    saved = {k: os.environ.get(k) for k in (*STATE_DIRS, "MPLBACKEND", "JUPYTER_PLATFORM_DIRS", "PYDEVD_DISABLE_FILE_VALIDATION")}
    with tempfile.TemporaryDirectory(prefix="meshnb-jupyter-") as tmp:
        for k in STATE_DIRS:
            os.environ[k] = os.path.join(tmp, k.lower())
        os.environ["MPLBACKEND"] = "Agg"
        os.environ["JUPYTER_PLATFORM_DIRS"] = "1"
        os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def execute(nb: nbformat.NotebookNode, timeout: int = 300) -> nbformat.NotebookNode:
    """Run every cell of ``nb`` in place on a fresh kernel, in this folder; raises on an error."""
    from nbclient import NotebookClient

    with headless_jupyter():
        NotebookClient(nb, timeout=timeout, kernel_name=KERNEL, record_timing=False,
                       resources={"metadata": {"path": str(HERE)}}).execute()
    return nb


def main(argv: list[str]) -> int:
    names = [n for n in NOTEBOOKS if not argv or any(n.startswith(a) for a in argv)]
    for name in names:
        start = time.perf_counter()
        nb = execute(build(name))
        nbformat.validate(nb)
        nbformat.write(nb, HERE / f"{name}.ipynb")
        print(f"{name}.ipynb: executed in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
