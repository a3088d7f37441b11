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
import contextlib
import io
import shutil
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
# %matplotlib inline
import matplotlib.pyplot as plt
from IPython.display import Markdown, display

from meshnb.cli import main  # the `meshnb` command, callable
from meshnb.conformance import check, faults, ops
from meshnb.conformance.check import diagnosis

# check's single-op search stops after 1 s of wall clock; here it runs to its end (~240 changes, well
# under 60 s), so that the report, and every number this notebook prints, is the same on any machine.
diagnosis.BUDGET = 60.0


def run_command(args: list[str], head: int = 12) -> tuple[int, str]:
    """Runs `meshnb ARGS`, prints the first `head` lines of its output and how many more there are."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(args)
    lines = out.getvalue().splitlines()
    print("\n".join(lines[:head]) + (f"\n... ({len(lines) - head} more lines)" if len(lines) > head else ""))
    return code, out.getvalue()


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
code, _ = run_command(["ops", "verify", "mul", str(work / "mul-x86.txt"), "--show", "4"])
print("exit code", code)
assert code != 0

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
code, report = run_command(
    ["check", str(root / "default"), "--page", str(work / "out.page"), "--trace", str(work / "trace.bin")], head=14
)
print("exit code", code)
named = [m["name"] for m in check.check(case, run.pages[0], got_trace=run.trace).diagnosis["models"]]
print("the diagnosis names:", named)
assert code != 0 and "fma-horner" in named

# %% [markdown]
# The verdict comes first, then the page diff (LOSS entries with the step that wrote them), the
# first differing step of the trace and which sums differ, and the diagnosis: the fault models whose
# replay of that step (from meshnb's state just before it) gives the executor's bits. The cell shows
# the report's first lines and prints the models the diagnosis names (the full report runs on: every
# differing word of the page).
#
# Two flush rules can agree on one step and part on the next, so a model must reproduce the rows
# after the first differing one too. On the tininess probe case, an executor with x86 FTZ is told
# apart from one that flushes before rounding:

# %%
probe = check.load_case(root / "probe-tininess")
for name in ("x86-ftz", "ftz-before-rounding"):
    r = faults.run(probe.in_pages, probe.case.steps, grouped=False, m=faults.model(name))
    rep = check.check(probe, r.pages[0], got_trace=r.trace)
    named = [m["name"] for m in rep.diagnosis["models"]]
    print(f"executor with {name}: named {named}")
    assert named == [name]

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
# steps at once on meshnb's trajectory). On `lr-tiny-updates` the params are of order 1e-35, where
# the updates are subnormal: which rules does that run tell apart?

# %%
tiny = check.load_case(root / "lr-tiny-updates")
names = [m.name for m in faults.MODELS]
first = [check.first_divergence(tiny, m) for m in faults.MODELS]
steps = tiny.case.steps
fig, ax = plt.subplots(figsize=(8, 3.6))
parted = [f is not None for f in first]
ax.scatter(
    [f + 1 if ok else steps for f, ok in zip(first, parted)],
    names,
    c=["tab:red" if ok else "lightgray" for ok in parted],
    s=40,
    zorder=3,
)
for i, (f, ok) in enumerate(zip(first, parted)):
    ax.annotate(
        f"step {f}" if ok else "never",
        (f + 1 if ok else steps, i),
        xytext=(6, -3),
        textcoords="offset points",
        fontsize=8,
    )
ax.set(
    xscale="log",
    xlim=(0.7, steps * 4),
    xlabel=f"first differing step + 1 (steps, log axis; gray: never in {steps} steps)",
    ylabel="fault model",
)
ax.set_title("lr-tiny-updates: where each fault model parts from mode Z")
fig.suptitle(
    "What to see: the red dots are the models this case catches, at the step where their bits first differ;\n"
    "the gray ones it never tells apart from mode Z, the flush rules among them (the probe cases are built for them)",
    fontsize=9,
)
fig.tight_layout()
plt.show()
first_by = dict(zip(names, first))
print(first_by)

# %%
never = [n for n, f in first_by.items() if f is None]
at_once = [n for n, f in first_by.items() if f == 0]
later = [n for n, f in first_by.items() if f not in (None, 0)]
assert {"x86-ftz", "ftz-before-rounding", "no-daz"} <= set(never) and "gradual-underflow" in at_once
display(
    Markdown(
        f"**What the plot shows.** On this run {', '.join(f'`{n}`' for n in at_once)} part from mode Z at the "
        f"first step{', ' + ', '.join(f'`{n}` at step {first_by[n]}' for n in later) if later else ''}; "
        f"{', '.join(f'`{n}`' for n in never)} never part from it. Subnormal updates are not enough to tell "
        "the flush rules apart: `x86-ftz` and `ftz-before-rounding` differ from mode Z only on a result that "
        "rounds up to the smallest normal, and `no-daz` only on a subnormal *input*, and this run makes "
        "neither. That is why the pack carries the probe pages (`probe-tininess` above) built to make them."
    )
)

# %%
shutil.rmtree(work)  # the scratch folder (the pack, the executor's outputs) goes with the notebook's end
