"""An executor for ``meshnb check PACK --exec``, made from the fault models: ``python fault_executor.py
MODE CASE_DIR OUT_DIR``.

MODE is a fault model's name (``mode-z``: none), or ``OP:ALT`` a single-op fault
(:func:`meshnb.conformance.faults.single_op`), run by :func:`meshnb.conformance.faults.run` as the
case says, or a way to misbehave: ``crash`` (a message on stderr, exit 3), ``hang`` (starts a child
that sleeps too, writes the child's pid to ``$FAULT_EXECUTOR_PIDS`` and sleeps), ``nothing`` (exit 0,
no output), ``short`` (a 100-byte page), ``garbage`` (a text page and a 7-byte trace), ``no-trace``
(mode Z's pages without the trace), ``setsid`` (a child in its own session, its pid written to
``$FAULT_EXECUTOR_PIDS``; exit 3, or hang with ``$FAULT_EXECUTOR_HANG``), ``listing`` (the names in
CASE_DIR on stderr, exit 3), ``socket`` (a Unix socket as ``out-0.page``).
``loss-at=+S``, ``loss-at=mod128`` and ``loss-at=unwrapped``: mode Z, each step's loss written where a page
rule of :data:`meshnb.conformance.experiment.PAGE_RULES` says (the ring index shifted by S, a ring of 128,
LOSS[t mod 256 + 1]); ``lr-from=WORD``: LR read from page word WORD (``PARAMS[0]`` .. ``PARAMS[3]``,
``STEPS_PER_TASK`` or ``INV_BATCH``) once a task. Both are written here apart from the check's own rules
(:mod:`meshnb.conformance.experiment`), so that they test it.
``$FAULT_EXECUTOR_OUTPUTS`` = ``symlink`` or ``hardlink`` puts the
right bits in OUT_DIR as links to files beside it; ``scribble`` also overwrites CASE_DIR's files.
``$FAULT_EXECUTOR_STUCK=FILE`` leaves an immutable file (``chattr +i``) in OUT_DIR, named in FILE.
Two attacks on the other cases: ``siblings`` (the first one to run writes mode Z's outputs for every
case it can find under the check's directory, in any layout the checker had; the later ones write
nothing) and ``lingering`` (mode Z's outputs, then a ``setsid`` grandchild that keeps writing garbage
into every other ``out-0.page`` under the check's directory for a while; its pid to
``$FAULT_EXECUTOR_PIDS``). Both record what they found in ``$FAULT_EXECUTOR_SEEN``.
Run with the page and trace of system 0 as the pack has them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def run(mode: str, case_dir: Path, out: Path) -> int:
    if mode == "crash":
        print("executor: device lost", file=sys.stderr)
        return 3
    if mode == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        with open(os.environ["FAULT_EXECUTOR_PIDS"], "a") as f:
            f.write(f"{os.getpid()} {child.pid}\n")
        time.sleep(600)
        return 0
    if mode == "nothing":
        return 0
    if mode == "setsid":  # a child in a session of its own (out of the executor's process group)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        with open(os.environ["FAULT_EXECUTOR_PIDS"], "a") as f:
            f.write(f"{os.getpid()} {child.pid}\n")
        return 3 if os.environ.get("FAULT_EXECUTOR_HANG") is None else int(time.sleep(600) or 0)
    if mode == "listing":  # what the executor is given: the names in CASE_DIR, on stderr, then exit 3
        print(" ".join(sorted(p.name for p in case_dir.iterdir())), file=sys.stderr)
        return 3
    if mode == "socket":  # a Unix socket where the page should be (its open gives ENXIO)
        import socket

        socket.socket(socket.AF_UNIX).bind(str(out / "out-0.page"))
        return 0
    if mode == "short":
        (out / "out-0.page").write_bytes(bytes(100))
        return 0
    if mode == "garbage":
        (out / "out-0.page").write_text("not a page\n")
        (out / "trace.bin").write_bytes(b"garbage")
        return 0
    if mode == "siblings":
        return _siblings(case_dir, out)
    if mode == "lingering":
        code = run("mode-z", case_dir, out)
        grandchild = subprocess.Popen(
            [sys.executable, __file__, "scribbler", str(case_dir), str(out)],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        with open(os.environ["FAULT_EXECUTOR_PIDS"], "a") as f:
            f.write(f"{os.getpid()} {grandchild.pid}\n")
        return code
    if mode == "scribbler":  # the lingering one's grandchild: garbage into the other cases' pages, 20 s
        work = _check_dir(out)
        end = time.monotonic() + 20
        while time.monotonic() < end:
            for page in work.rglob("out-0.page"):
                if page.parent != out:
                    with open(os.environ["FAULT_EXECUTOR_SEEN"], "a") as f:
                        f.write(f"scribbled {page}\n")
                    page.write_bytes(bytes(4096))
            time.sleep(0.02)
        return 0
    from meshnb.conformance import faults  # here: the misbehaving modes start at once

    cj = json.loads((case_dir / "case.json").read_text())
    loss_at = mode.split("=", 1)[1] if mode.startswith("loss-at=") else None
    if loss_at is not None:
        mode = "mode-z"
    lr_from = mode.split("=", 1)[1] if mode.startswith("lr-from=") else None
    if lr_from is not None:
        mode = "mode-z"
    if ":" in mode:  # OP:ALT, a single-op fault (meshnb.conformance.mutants)
        m = faults.single_op(*mode.split(":", 1))
    else:
        m = faults.model("mode-z" if mode == "no-trace" else mode)
    pages = [(case_dir / f"in-{k}.page").read_bytes() for k in range(cj["systems"])]
    r = faults.run(
        pages,
        cj["steps"],
        grouped=cj["group"],
        set_lr={e["before_step"]: int(e["word"], 16) for e in cj["set_lr"]},
        m=m,
        from_init=cj["start"] == "init",
    )
    if loss_at is not None:
        r = _loss_at(loss_at, pages, r, cj)
    if lr_from is not None:
        r = _lr_from(lr_from, pages, r, cj)
    how = os.environ.get("FAULT_EXECUTOR_OUTPUTS", "files")  # files, symlink, hardlink; or scribble
    aside = out.parent / f"{out.name}-aside"
    aside.mkdir(exist_ok=True)
    outputs = {f"out-{k}.page": page for k, page in enumerate(_timed_out(r.pages, cj))}
    if mode != "no-trace":
        outputs["trace.bin"] = r.trace.astype("<u4").tobytes()
    for name, data in outputs.items():
        if how == "files" or how == "scribble":
            (out / name).write_bytes(data)
        else:  # the right bits, but in a file of another name, linked into OUT_DIR
            (aside / name).write_bytes(data)
            (os.symlink if how == "symlink" else os.link)(aside / name, out / name)
    if os.environ.get("FAULT_EXECUTOR_STUCK"):  # a file left in OUT_DIR that cannot be removed (immutable)
        (out / "stuck").write_bytes(b"x")
        r = subprocess.run(["chattr", "+i", str(out / "stuck")], check=False, capture_output=True)
        with open(os.environ["FAULT_EXECUTOR_STUCK"], "a") as f:
            f.write(f"{out / 'stuck'} {r.returncode}\n")
    if how == "scribble":  # writes into CASE_DIR: it must be a copy, the pack untouched
        for p in case_dir.iterdir():
            p.write_bytes(b"scribbled")
        (case_dir / "new-file").write_bytes(b"x")
    return 0


_LR, _NEXT, _STEP_HI, _LOSS = 4, 7, 11, 528  # SPEC 7's words: LR, the step (low, high), LOSS[0]
_LR_WORDS = {"PARAMS[0]": 0, "PARAMS[1]": 1, "PARAMS[2]": 2, "PARAMS[3]": 3, "STEPS_PER_TASK": 5, "INV_BATCH": 6}


def _words(page: bytes) -> Any:
    import numpy as np

    return np.frombuffer(page, dtype="<u4").astype(np.uint32)


def _start(pages: list[bytes], r: Any, cj: dict[str, Any]) -> list[Any]:
    """The pages the run starts from, as words: the case's, or for a case from init init's (SPEC 8: a zero
    loss ring and step 0; the rest as mode Z's first task found it, which the callers do not read)."""
    if cj["start"] != "init":
        return [_words(p) for p in pages]
    out = []
    for p in r.pages:
        w = _words(p).copy()
        w[_LOSS : _LOSS + 256] = 0
        w[_NEXT] = w[_STEP_HI] = 0
        out.append(w)
    return out


def _loss_at(rule: str, pages: list[bytes], r: Any, cj: dict[str, Any]) -> Any:
    """Run ``r`` (mode Z's from ``pages``) with each step's loss written elsewhere: ``+S`` at LOSS[(t + S) mod
    256], ``mod128`` at LOSS[t mod 128], ``unwrapped`` at LOSS[t mod 256 + 1] (past the ring at 255)."""
    import dataclasses

    where = {
        "mod128": lambda t: _LOSS + t % 128,
        "unwrapped": lambda t: _LOSS + t % 256 + 1,
    }.get(rule, lambda t: _LOSS + (t + int(rule.lstrip("+"))) % 256)
    out = []
    for start, page in zip(_start(pages, r, cj), r.pages, strict=True):
        want = _words(page)
        w = want.copy()
        w[_LOSS : _LOSS + 256] = start[_LOSS : _LOSS + 256]
        first = (int(start[_STEP_HI]) << 32 | int(start[_NEXT])) % 256
        for s in range(max(0, cj["steps"] - 256), cj["steps"]):
            w[where(first + s)] = want[_LOSS + (first + s) % 256]
        out.append(w.astype("<u4").tobytes())
    return dataclasses.replace(r, pages=out)


def _lr_from(word: str, pages: list[bytes], r: Any, cj: dict[str, Any]) -> Any:
    """The case run by an executor that reads its LR from page word ``word`` (PARAMS[0..3], STEPS_PER_TASK or
    INV_BATCH), once a task, as the host's tasks run (STEPS_PER_TASK steps, a SET_LR ends a task)."""
    import dataclasses

    import numpy as np

    from meshnb.conformance import faults

    set_lr = {e["before_step"]: int(e["word"], 16) for e in cj["set_lr"]}
    if cj["start"] == "init":
        pages = list(faults.run(pages, 0, grouped=cj["group"], from_init=True).pages)
    steps, at = cj["steps"], _LR_WORDS[word]
    ends, done = [], 0
    for stop in sorted({s for s in set_lr if 0 < s < steps} | {steps}):
        while done < stop:
            done = min(stop, done + max(1, cj["steps_per_task"]))
            ends.append(done)
    cur, traces, done = [_words(p).copy() for p in pages], [], 0
    for end in ends:
        kept = []
        for w in cur:
            w[_LR] = set_lr.get(done, w[_LR])
            kept.append(int(w[_LR]))
            w[_LR] = w[at]
        t = faults.run([w.astype("<u4").tobytes() for w in cur], end - done, grouped=cj["group"])
        cur = [_words(p).copy() for p in t.pages]
        for w, lr in zip(cur, kept, strict=True):
            w[_LR] = lr
        traces.append(np.asarray(t.trace, dtype=np.uint32))
        done = end
    for w in cur:
        w[_LR] = set_lr.get(steps, w[_LR])
    trace = np.concatenate(traces) if traces else np.zeros((0, 5), np.uint32)
    return dataclasses.replace(r, pages=[w.astype("<u4").tobytes() for w in cur], trace=trace)


def _timed_out(pages: list[bytes], cj: dict[str, object]) -> list[bytes]:
    """The pages as the case's injected timeouts leave them: the model runs the rounds without them, and a
    timed-out round resumed changes no bit but ROUND (the low half of each system's last such round)."""
    out = [bytearray(p) for p in pages]
    entries = cj.get("inject_timeouts", [])
    assert isinstance(entries, list)
    for e in sorted(entries, key=lambda e: e["before_step"]):
        out[e["system"]][40:44] = (int(e["round"]) & 0xFFFFFFFF).to_bytes(4, "little")
    return [bytes(p) for p in out]


def _check_dir(out: Path) -> Path:
    """The checker's temporary directory (``meshnb-check-*``) above OUT_DIR."""
    return next(p for p in out.parents if p.name.startswith("meshnb-check-"))


def _siblings(case_dir: Path, out: Path) -> int:
    """The first executor of the check writes every case's outputs it can reach; the rest nothing."""
    work = _check_dir(out)
    marker = work / ".siblings-done"  # inside the check's directory, removed with it
    if marker.exists():
        return 0
    marker.write_text("")
    for cj in sorted(work.rglob("case.json")):
        other = cj.parent
        if other.parent.name.startswith("case-"):  # work/case-I/NAME -> work/I
            other_out = work / other.parent.name.removeprefix("case-")
        else:  # work/I-XXXX/case/NAME -> work/I-XXXX/out
            other_out = other.parent.parent / "out"
        with open(os.environ["FAULT_EXECUTOR_SEEN"], "a") as f:
            f.write(f"found {other} {other_out.is_dir()}\n")
        if other_out.is_dir():
            run("mode-z", other, other_out)
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])))
