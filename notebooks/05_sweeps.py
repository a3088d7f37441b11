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
# # 5. Sweeps: many systems at once
#
# A reference in a notebook is rarely asked about one system: how does the training behave
# across learning rates, start pages and float modes? `meshnb.sweep` runs M independent systems
# in one call, each exactly the system `meshnb.train` would run alone (same page, params, digest
# and trace digest, bit for bit). Because the systems share nothing, the loop puts one system in
# each lane of a 16-float vector and runs groups of them on every core: a step of one system costs
# a fraction of what the single loop, bound by one step's dependency chain, needs.
#
# This notebook sweeps the learning rate over 45 decades, in float mode Z and in plain IEEE
# float32, and looks at:
#
# 1. the final loss against the learning rate, and where training diverges;
# 2. loss curves of a few learning rates;
# 3. where the two float modes part bit-wise, and why;
# 4. each point's digest, for checking an executor;
# 5. the speed of a sweep against the single loop.

# %%
# %matplotlib inline
import json
import time

import matplotlib.pyplot as plt
import numpy as np

import meshnb
from meshnb import sweep

plt.rcParams.update({"figure.figsize": (10, 4.2), "figure.dpi": 90, "axes.grid": True, "grid.alpha": 0.3})

# %% [markdown]
# ## 5.1 One call, 400 learning rates, two float modes
#
# `sweep(steps, lrs=...)` starts every system from `init` and sets its learning rate with SET_LR
# before the first step (the program reads it through the mode-Z flush, as `train` does). The
# learning rates run from `1e-44` (below the smallest normal float32, about `1.2e-38`) to 4.
# `loss_every=8` keeps the loss of every 8th step of every system.

# %%
STEPS = 4096
lrs = np.geomspace(1e-44, 4.0, 400).astype(np.float32)
z = sweep(STEPS, lrs=lrs, loss_every=8)
ieee = sweep(STEPS, lrs=lrs, z=False, loss_every=8)
print(
    f"{len(z)} systems x {STEPS} steps per mode; the mode-Z sweep's loop took {z.seconds:.3f} s "
    f"({z.system_steps_per_second / 1e6:.0f} million system-steps per second)"
)
print("params of the system with LR 0.5:", z.params_hex[int(np.argmin(abs(lrs - 0.5)))])

# %% [markdown]
# ## 5.2 Final loss against the learning rate

# %%
initial = z.loss_history[0, 0]  # the loss of step 7 at a negligible LR: the start's loss
finite_z = np.isfinite(z.last_loss)
fig, ax = plt.subplots()
ax.loglog(lrs[finite_z], z.last_loss[finite_z], ".", ms=4, label="float mode Z")
finite_i = np.isfinite(ieee.last_loss)
ax.loglog(lrs[finite_i], ieee.last_loss[finite_i], "x", ms=3, alpha=0.6, label="IEEE float32")
diverged = lrs[~finite_z]
if diverged.size:
    ax.axvspan(diverged.min(), lrs.max(), color="tab:red", alpha=0.12, label="diverged (loss NaN)")
ax.axhline(initial, color="gray", lw=0.8, ls="--", label="loss at the start")
ax.set_xlabel("learning rate")
ax.set_ylabel(f"loss of the last step ({STEPS} steps)")
ax.legend()
plt.show()
best = int(np.nanargmin(np.where(finite_z, z.last_loss, np.nan)))
print(
    f"lowest final loss {z.last_loss[best]:.5f} at LR {lrs[best]:.3g}; "
    f"first LR that diverges: {diverged.min() if diverged.size else None:.3g}"
)

# %% [markdown]
# **What the plot shows.** Below about `1e-6` the params hardly move in 4096 steps and the loss
# stays at its starting value. It falls as the learning rate grows, down to about 0.0047 (the
# gap to the least-squares cubic that notebook 1 explains). Past a threshold (about 1.8) the step is
# too long for the curvature of the loss (SGD is stable while `lr` times the largest eigenvalue of
# the batch Hessian stays below 2): the params oscillate with growing amplitude, overflow to
# infinity, and `inf - inf` makes NaN, which then fills everything.

# %%
fig, ax = plt.subplots()
steps = z.loss_steps
for lr_wanted in (1e-4, 1e-2, 0.1, 0.5, 1.5, 2.2):
    k = int(np.argmin(abs(np.log(lrs) - np.log(lr_wanted))))
    curve = z.loss_history[k]
    shown = np.isfinite(curve)
    ax.semilogy(steps[shown], curve[shown], lw=1, label=f"LR {lrs[k]:.3g}")
ax.set_xlabel("step")
ax.set_ylabel("loss (every 8th step)")
ax.legend(ncol=3)
plt.show()

# %% [markdown]
# ## 5.3 Where float mode Z and IEEE part, bit for bit
#
# The digest covers PARAMS and the loss ring, so two equal digests mean bit-equal runs. Below,
# each learning rate is marked where the two modes' digests differ, with the page words that
# differ for a few of them.

# %%
same = np.array([a == b for a, b in zip(z.digests, ieee.digests)])
fig, ax = plt.subplots(figsize=(10, 1.8))
ax.semilogx(lrs, ~same, ".", ms=3)
ax.set_yticks([0, 1], ["same bits", "differ"])
ax.set_xlabel("learning rate")
plt.show()
print(
    f"bit-equal for LR {lrs[same].min():.3g} .. {lrs[same].max():.3g}; "
    f"they differ for {np.count_nonzero(~same & (lrs < 1e-20))} tiny LRs "
    f"and {np.count_nonzero(~same & (lrs > 1))} large ones"
)
names = {0: "a", 1: "b", 2: "c", 3: "d", 4: "LR"}
for lr_wanted in (1e-44, 1e-40, 3e-37, 1e-32, 0.5, 3.0):
    k = int(np.argmin(abs(np.log(lrs) - np.log(lr_wanted))))
    dz, di = np.frombuffer(z.page(k), "<u4"), np.frombuffer(ieee.page(k), "<u4")  # made again on request
    diff = np.flatnonzero(dz != di)
    shown = ", ".join(
        f"{names.get(int(i), 'LOSS' if i >= 528 else i)}: {dz[i]:08x} (Z) / {di[i]:08x} (IEEE)" for i in diff[:3]
    )
    print(f"LR {lrs[k]:.3g}: {len(diff)} words differ" + (f"; {shown}" if len(diff) else ""))

# %% [markdown]
# **Why.** In the middle of the range no operation ever produces a subnormal or a NaN, and there
# mode Z *is* IEEE float32: same bits. The modes part at both ends:
#
# - **Subnormal learning rates** (below `1.18e-38`): SET_LR reads the word through the mode-Z
#   flush, so in mode Z the learning rate is 0 and nothing moves; in IEEE the tiny rate is used,
#   and `lr * g` gives subnormal updates, so the params become subnormal numbers.
# - **Tiny normal learning rates** (up to about `1e-31`): the learning rate is kept, but the update
#   `lr * (sum * inv)` underflows into the subnormal range. Mode Z writes it as zero (params stay
#   zero), IEEE keeps the gradual underflow (params become tiny subnormals). The losses still agree
#   to all printed digits, but not the bits.
# - **Diverged runs**: both end in NaN, but mode Z writes the canonical NaN `0x7FFFFFFF` (what
#   the GPUs produce) where an x86 CPU produces `0xFFC00000`, and their paths to NaN can differ.
#
# That is why executors are checked in mode Z: the IEEE bits depend on the hardware's subnormal
# and NaN behaviour, the mode-Z bits do not.

# %% [markdown]
# ## 5.4 Every point's digest, for checking an executor
#
# Each system's result is its own: `z.digests[k]`, `z.trace_digests[k]` (with `trace=True`),
# `z.page(k)` (the final page, to continue elsewhere with `view_in`). An executor that runs
# `init`, `SET_LR` with the word `z.lr_words[k]` and 4096 steps must produce the digest
# `z.digests[k]`. `z.to_records()` (or `z.to_frame()` with pandas) gives a table; the command line
# writes the same as CSV or JSON: `meshnb sweep --lr 1e-44:4:400:log --steps 4096 --csv sweep.csv`.

# %%
for rec in z.to_records()[::80]:
    print(f"LR word {rec['lr_word']}  last loss {rec['last_loss']:<12.6g} digest {rec['digest']}")
k = 330
alone = meshnb.train(STEPS, set_lr={0: int(z.lr_words[k])})
print(
    "system",
    k,
    "against meshnb.train alone:",
    "same digest" if alone.digest == z.digests[k] else "DIFFERENT",
    "and same page" if alone.page == z.page(k) else "but a different page",
)
print(json.dumps(z.to_records()[k])[:160], "...")

# %% [markdown]
# ## 5.5 Speed: a sweep against the single loop
#
# One system's step is a chain of dependent operations (about 25 ns here); independent systems
# are bound by the machine's throughput instead. Wall time of one call each (other programs on
# the machine change these figures; the README gives the benchmark's).

# %%
many = np.geomspace(1e-3, 1.0, 1024).astype(np.float32)
start = time.perf_counter()
big = sweep(STEPS, lrs=many)
sweep_s = time.perf_counter() - start
start = time.perf_counter()
single = meshnb.train(1 << 20)
single_s = time.perf_counter() - start
per_system_step = sweep_s / (len(big) * STEPS) * 1e9
per_step = single_s / (1 << 20) * 1e9
print(
    f"sweep of {len(big)} x {STEPS}: {per_system_step:.2f} ns per system-step (whole call; "
    f"the loop alone {big.seconds / (len(big) * STEPS) * 1e9:.2f} ns)"
)
print(
    f"single loop: {per_step:.2f} ns per step -> the sweep does {per_step / per_system_step:.1f}x the steps per second"
)
