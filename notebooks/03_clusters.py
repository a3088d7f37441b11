# ---
# jupyter:
#   jupytext:
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
axes[0, 0].set_ylabel("loss of the step")
axes[1, 0].set_ylabel("loss of the step")
axes[0, 0].plot([], [], "k--", lw=1, label="least-squares cubic")
axes[0, 0].legend(loc="upper right")
for ax in axes[0, 1:]:
    ax.sharex(axes[0, 0])  # one samples axis: the shift to the right is the cost of the larger batches
axes[0, 0].set_xlim(20, 1.5 * 32 * max(SIZES) * STEPS)
fig.suptitle(f"Loss per step, {STEPS:,} steps, learning rate 0.5")
fig.tight_layout()
plt.show()

reach = {}
for n, r in runs.items():
    loss = r.trace.view(np.float32)[:, 4] * r.view["INV_BATCH"]
    reach[n] = int(np.flatnonzero(loss < 2 * lsq_mse)[0]) + 1  # steps until a step's loss is below 2x the floor
    print(
        f"N = {n}: first loss below twice the least-squares MSE at step {reach[n]}, after {reach[n] * 32 * n:,} samples"
    )
assert max(reach.values()) <= 2 * min(reach.values())  # about the same number of steps
assert reach[8] * 8 > 4 * reach[1]  # so N = 8 reads several times the samples
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
# but not because each step sees more of the data: at equal `lr / N` it is nearly the same for
# N = 1, 2, 4 (section 3.2). Only N = 8, where every step sees every sample, has no loop: `a` and
# `c` are within about `1e-7` of zero instead of `4e-3`.
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
# times the *sum* of its N batches' mean gradients: to first order in the LR, one step of a cluster
# at LR `lr` does what N single-system steps at LR `lr / N` do. So the fair comparison holds the LR
# per batch, `lr / N`, fixed. We run N = 1, 2, 4, 8 at `lr / N` = 1/32, 1/16, 1/8 and 1/5, each
# for `1024 / lr` steps (the same number of the slow mode's time constants, a whole number of
# cycles), and read:
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


def float64_loop_end(lr: float, n: int) -> np.ndarray:
    """The exact float64 loop point at a cycle's end: the fixed point of the cycle's composed map."""
    m, c = np.eye(4), np.zeros(4)
    for a_t, c_t in cycle(n):
        m, c = (np.eye(4) - lr * a_t) @ m, (np.eye(4) - lr * a_t) @ c + lr * c_t
    return np.linalg.solve(np.eye(4) - m, c)


def radius(lr: float, n: int) -> float:
    m = np.eye(4)
    for a_t, _ in cycle(n):
        m = (np.eye(4) - lr * a_t) @ m
    return float(np.abs(np.linalg.eigvals(m)).max())


lr_grid = np.linspace(1.5, 2.0, 2001)
lr_max = {n: float(lr_grid[np.argmax([radius(lr, n) >= 1 for lr in lr_grid])]) for n in SIZES}
assert all(radius(1.5, n) < 1 for n in SIZES)  # stable below the scanned range
samples, gap, gap64, excess = {}, {}, {}, {}
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
        gap64[eta, n] = np.linalg.norm(float64_loop_end(lr, n) - lsq)

print(
    "stability ceiling (spectral radius of the cycle's map = 1): "
    + ", ".join(f"N = {n}: lr {lr_max[n]:.4f}, lr/N {lr_max[n] / n:.4f}" for n in SIZES)
)
print(f"2 / lambda_max(A) = {2 / np.linalg.eigvalsh(A_full)[-1]:.4f}")
print(f"{'lr/N':>6} {'N':>2} {'steps':>6} {'samples':>8} {'|p - p*|':>10} {'float64 loop':>12} {'excess':>10}")
for eta in ETAS:
    for n in SIZES:
        row = f"{eta:6.4f} {n:2} {samples[eta, n] // (32 * n):6} {samples[eta, n]:8} {gap[eta, n]:10.3e}"
        print(f"{row} {gap64[eta, n]:12.3e} {excess[eta, n]:10.3e}")
same_samples = max(max(samples[e, n] for n in SIZES) / min(samples[e, n] for n in SIZES) for e in ETAS)
excess_spread = max(max(excess[e, n] for n in (1, 2, 4)) / min(excess[e, n] for n in (1, 2, 4)) for e in ETAS)
loop_spread = max(max(gap64[e, n] for n in (1, 2, 4)) / min(gap64[e, n] for n in (1, 2, 4)) for e in ETAS)
n8_share = max(gap[e, 8] / gap[e, 1] for e in ETAS)
# samples x lr/N and gap / (lr/N), for N = 1: constant if samples go as 1 / (lr/N) and the gap as lr/N
samples_eta = [samples[e, 1] * e for e in ETAS]
gap_eta = [gap64[e, 1] / e for e in ETAS]
print(f"samples to converge: the same for every N to a factor {same_samples:.3f}")
print(
    "N = 1: samples x lr/N",
    ", ".join(f"{v:.0f}" for v in samples_eta),
    "; gap / (lr/N)",
    ", ".join(f"{v:.4f}" for v in gap_eta),
)
print(
    f"N = 1, 2, 4 at equal lr/N: loop gap (float64) the same to a factor {loop_spread:.2f}, excess {excess_spread:.2f}"
)
print(f"N = 8's whole gap (float32's stall): at most {100 * n8_share:.1f}% of N = 1's")
assert max(ETAS) < min(lr_max[n] / n for n in SIZES) == lr_max[8] / 8
assert same_samples < 1.1 and loop_spread < 1.4 and excess_spread < 1.8 and n8_share < 0.15
assert max(samples_eta) / min(samples_eta) < 1.1 and max(gap_eta) / min(gap_eta) < 1.2
assert all(abs(gap[e, n] / gap64[e, n] - 1) < 0.1 for e in ETAS[1:] for n in (1, 2, 4))

# %%
fig, (ax0, ax1) = plt.subplots(1, 2)
for i, n in enumerate(SIZES):
    ax0.loglog(ETAS, [samples[e, n] for e in ETAS], "o-", ms=8 - i, color=f"C{i}", label=f"N = {n}")
    ax1.loglog(ETAS, [gap[e, n] for e in ETAS], "o", color=f"C{i}", label=f"N = {n}, meshnb")
    if n < 8:
        ax1.loglog(ETAS, [gap64[e, n] for e in ETAS], "-", lw=1, color=f"C{i}")
ax1.plot([], [], "k-", lw=1, label="exact float64 loop")
ax0.set(xlabel="lr / N", ylabel="samples until converged", title="Samples to converge at equal lr/N")
ax1.set(xlabel="lr / N", ylabel="|p - p*| at a cycle's end", title="Parameter gap at equal lr/N")
for ax in (ax0, ax1):
    ax.set_xticks(ETAS, ["1/32", "1/16", "1/8", "1/5"])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
display(
    Markdown(
        f"**What a cluster buys, and what it does not.** At equal `lr / N` every N needs the same samples to "
        f"converge (to a factor {same_samples:.3f}), so N times fewer steps: the N members read their batches "
        "in parallel, and a step costs one batch plus the exchange. It does not buy fewer samples, and it does not "
        "buy a smaller loop: the gap of N = 1, 2, 4 is the same to a factor "
        f"{loop_spread:.2f}, the excess to a factor {excess_spread:.2f}. Whatever N, "
        "the samples to converge go as `1 / (lr / N)` "
        "and the gap as `lr / N` (printed for N = 1): a smaller loop costs samples, and a cluster does not "
        "change the price. Only N = 8, whose every step is the full gradient, has no loop (its gap, float32's stall, "
        f"is at most {100 * n8_share:.1f}% of N = 1's). And a cluster lowers the ceiling: the cycle is stable up "
        f"to about the same LR for every N ({min(lr_max.values()):.3f} to {max(lr_max.values()):.3f}, near "
        f"`2 / lambda_max(A)`), so `lr / N` can go N times less far: {lr_max[8] / 8:.3f} for N = 8 against "
        f"{lr_max[1]:.3f} for N = 1."
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
