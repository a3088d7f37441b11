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
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Checking an executor
#
# An executor (a GPU kernel, the wasm runtime, a C port) must give meshnb's bits. When its digest
# differs, three questions follow: which op rules does its FPU mode break, at which step and word do
# the bits part, and what in the implementation causes it. `meshnb.conformance` answers them:
#
# - **op vectors** (`meshnb ops gen / verify`): TestFloat-style lines `A B RESULT` for the five ops;
# - **the conformance pack** (`meshnb pack DIR`): cases with start pages, end pages, traces, digests;
# - **`meshnb check`**: a diff of the pages, the first differing step, and a diagnosis that replays
#   it under fault models and names those that reproduce the executor's bits.
#
# Here the "executor" is meshnb's own simulated executor with a fault switched on
# (`meshnb.conformance.faults`), standing in for a real one.

# %%
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
# %matplotlib inline
import matplotlib.pyplot as plt

from meshnb.cli import main  # the `meshnb` command, callable
from meshnb.conformance import check, faults, ops

work = Path(tempfile.mkdtemp(prefix="meshnb-nb04-"))

# %% [markdown]
# ## 1. Op vectors: which rule does the FPU mode break?
#
# The first two level-1 vectors of `mul` are the *tininess probes*. Mode Z rounds first and flushes a
# result only if the rounded value is subnormal, so both give `00800000`. A flush that judges
# tininess before rounding gives 0 for both; x86's FTZ (tininess after rounding at unbounded
# exponent) gives 0 for the first only.

# %%
print(ops.gen_lines("mul", level=1).decode().splitlines()[:2])

# %% [markdown]
# An executor on x86 with FTZ on writes its results; `ops verify` finds the wrong lines and classes them.

# %%
from meshnb.conformance.fpu import Ops, Rules

a, b = ops.generate("mul", level=1)
x86 = Ops(Rules(underflow="after")).mul(a, b)  # what an x86 FPU with FTZ (and DAZ) computes
(work / "mul-x86.txt").write_bytes(ops.format_lines(a, b, x86))
code = main(["ops", "verify", "mul", str(work / "mul-x86.txt"), "--show", "4"])
print("exit code", code)

# %% [markdown]
# ## 2. The conformance pack
#
# `meshnb pack DIR --quick` writes every case (shorter runs, no long run); without `--quick`, the
# full pack. Each case holds `case.json` (what the host does), `in-K.page`, `out-K.page`,
# `trace.bin` and `expected.json`; `manifest.json` guards every byte.

# %%
root = work / "pack"
assert main(["pack", str(root), "--quick"]) == 0
print(sorted(p.name for p in (root / "lr-changes").iterdir()))
print((root / "lr-changes" / "case.json").read_text()[:600])

# %% [markdown]
# ## 3. A faulty executor, and what `check` says
#
# Our executor contracts the Horner polynomial into fused multiply-adds (a C compiler with
# `-ffp-contract=fast`, or a GPU compiler's default). It runs the `default` case and dumps its page
# and trace.

# %%
case = check.load_case(root / "default")
run = check.executor_run(case, faults.model("fma-horner"))
(work / "out.page").write_bytes(run.pages[0])
(work / "trace.bin").write_bytes(run.trace.astype("<u4").tobytes())
code = main(["check", str(root / "default"), "--page", str(work / "out.page"), "--trace", str(work / "trace.bin")])
print("exit code", code)

# %% [markdown]
# The verdict comes first, then the page diff (LOSS entries with the step that wrote them), the
# first differing step of the trace and which sums differ, and the diagnosis: the fault models whose
# replay of that step (from meshnb's state just before it) gives the executor's bits.
#
# Two flush rules can agree on one step and part on the next, so a model must reproduce the rows
# after the first differing one too. On the tininess probe case, an executor with x86 FTZ is told
# apart from one that flushes before rounding:

# %%
probe = check.load_case(root / "probe-tininess")
for name in ("x86-ftz", "ftz-before-rounding"):
    r = faults.run(probe.in_pages, probe.case.steps, grouped=False, m=faults.model(name))
    rep = check.check(probe, r.pages[0], got_trace=r.trace)
    print(f"executor with {name}: named {[m['name'] for m in rep.diagnosis['models']]}")

# %% [markdown]
# When no model reproduces the bits (here: one stray bit in a sum), `check` prints meshnb's lane
# values of the first differing step, to hold against the executor's own.

# %%
stray = case.trace.copy()
stray[7, 1] ^= 1
rep = check.check(case, case.expected[0], got_trace=stray)
print("\n".join(rep.text().splitlines()[:14]))

# %% [markdown]
# ## 4. Where each fault first shows
#
# The step at which each model first computes other bits than meshnb on a case (evaluated for all
# steps at once on meshnb's trajectory). On `lr-tiny-updates` the params are of order 1e-35, so the
# flush rules matter from the first updates; most models never part from meshnb on the ordinary
# trajectory, which is why the pack carries the hard pages.

# %%
tiny = check.load_case(root / "lr-tiny-updates")
names = [m.name for m in faults.MODELS]
first = [check.first_divergence(tiny, m) for m in faults.MODELS]
fig, ax = plt.subplots(figsize=(7, 3.2))
ax.barh(
    names,
    [tiny.case.steps if f is None else f for f in first],
    color=["lightgray" if f is None else "tab:red" for f in first],
)
ax.set_xlabel("first step whose bits differ (gray: never, in this run)")
ax.set_title("lr-tiny-updates: where each fault model parts from mode Z")
fig.tight_layout()
plt.show()
print(dict(zip(names, first)))
