"""meshnb.jit: the one decorator's door (``accepts``) and the per-mode table."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from meshnb.jit import Accepts, jit, per_mode


@jit(accepts={"a": "float32[::1] writeable", "x": "float32", "flag": "bool"})
def _scale(a, x, flag=True):
    for i in range(a.shape[0]):
        a[i] = a[i] * x if flag else a[i]
    return a.shape[0]


@njit
def _scale_from_njit(a, x):
    return _scale(a, x, True)  # njit to njit: typed by numba, not by the door


def test_the_door_admits_the_declared_types_and_names_the_argument_otherwise():
    a = np.ones(3, np.float32)
    assert _scale(a, np.float32(2)) == 3 and a.tolist() == [2, 2, 2]
    assert _scale(a, np.float32(2), False) == 3 and a.tolist() == [2, 2, 2]
    cases = [
        ((a, 2.0), "'x' must be a numpy float32 .np.float32., not a Python float"),
        ((a, np.float64(2)), "'x' must be a numpy float32 .np.float32., not a numpy float64"),
        ((a.astype(np.float64), np.float32(2)), "'a' must be a writeable C-contiguous float32 array of 1 dimension"),
        ((np.ones(6, np.float32)[::2], np.float32(2)), "not a non-contiguous float32 array"),
        ((a, np.float32(2), 1), "'flag' must be a Python bool"),
        (("abc", np.float32(2)), "'a' must be .*, not a Python str"),
    ]
    frozen = np.ones(3, np.float32)
    frozen.flags.writeable = False
    cases.append(((frozen, np.float32(2)), "not a read-only C-contiguous float32 array"))
    for args, message in cases:
        with pytest.raises(TypeError, match=message) as caught:
            _scale(*args)
        assert str(caught.value).startswith("tests.test_jit._scale: argument")
    assert len(_scale.signatures) == 2  # (flag omitted, flag given): no variant for what was refused


def test_calls_from_njit_code_are_numba_typed():
    a = np.ones(2, np.float32)
    assert _scale_from_njit(a, np.float32(3)) == 2 and a.tolist() == [3, 3]


def test_accepts_specs():
    assert Accepts.parse("uint32[:, ::1] writeable") == Accepts(
        "uint32[:, ::1] writeable", Accepts.parse("uint32").dtype, 2, True, True
    )
    assert Accepts.parse("float32[...]").ndim == -1
    for bad in ("float16", "float32 writeable", "uint32[::1, :]", "uint32[1:]"):
        with pytest.raises(ValueError, match="unknown"):
            Accepts.parse(bad)
    with pytest.raises(ValueError, match="accepts must list exactly its arguments"):
        jit(accepts={"a": "float32"})(lambda a, b: a)
    assert (Accepts.parse("uint32[:, ::1] writeable").wanted(), Accepts.parse("float32").wanted()) == (
        "a writeable C-contiguous uint32 array of 2 dimensions",
        "a numpy float32 (np.float32)",
    )


def test_every_njit_function_is_meshnbs_dispatcher_with_its_cache():
    from meshnb.floatz import flush_bits
    from meshnb.jit import Dispatcher

    assert isinstance(flush_bits, Dispatcher) and flush_bits.targetoptions["no_cfunc_wrapper"]
    assert type(flush_bits._cache).__module__ == "meshnb.jit"


def test_per_mode_builds_one_entry_per_mode():
    made: list[int] = []
    table = per_mode(lambda m: made.append(m) or m * 10, (0, 1, 2))
    assert table == {0: 0, 1: 10, 2: 20} and made == [0, 1, 2]


def test_numba_ir_inlining_is_refused():
    """The one inlining policy (plain njit helpers, inlined by LLVM) is the decorator's rule."""
    with pytest.raises(ValueError, match="no numba IR inlining"):
        jit(inline="always")


# --- start-up: a cached variant loads without numba's registries (issue 35, item 5) -------------

_LOAD = """
import json, sys
import numpy as np
from meshnb import kernels, loops
from meshnb.testing import reference
words = np.frombuffer(reference.init_page(), np.uint32).copy()
tab = kernels.batches(words, True)  # an array made in njit code (numba's runtime), returned
trace = np.zeros((16, kernels.NSUMS), np.uint32)
loops.run_tasks(words, 16, trace, loops.loop_mode(True))
bad = words.copy()
bad[kernels.W_STEPS_PER_TASK] = 0
try:
    loops.run_tasks(bad, 1, trace, loops.loop_mode(True))  # a raise inside loaded code
except ValueError as e:
    error = str(e)
# modules only numba's registry refresh imports (loaded code's environments do not name them)
refreshed = any(m in sys.modules for m in ("numba.misc.gdb_hook", "numba.np.polynomial.polynomial_core"))
print(json.dumps(dict(page=words.tobytes().hex(), trace=trace.tobytes().hex(), tab=tab.tobytes().hex(),
                      error=error, refreshed=refreshed)))
"""


@pytest.mark.slow
def test_a_cached_variant_loads_without_numba_s_registries(tmp_path):
    import json
    import os
    import subprocess
    import sys

    from meshnb import kernels
    from meshnb.testing import reference

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))

    def run() -> dict:
        out = subprocess.run([sys.executable, "-c", _LOAD], env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    cold, warm = run(), run()  # the first compiles (and refreshes), the second loads from the cache
    assert cold["refreshed"] and not warm["refreshed"]
    assert {k: v for k, v in warm.items() if k != "refreshed"} == {k: v for k, v in cold.items() if k != "refreshed"}
    pages, want = reference.run([reference.init_page()], 16, grouped=False)  # the oracle
    assert bytes.fromhex(warm["page"]) == pages[0] and bytes.fromhex(warm["trace"]) == want.tobytes()
    words = np.frombuffer(reference.init_page(), np.uint32).copy()
    assert warm["tab"] == kernels.batches(words, True).tobytes().hex()
    assert warm["error"] == "run_tasks: the page's STEPS_PER_TASK is 0: its tasks would never progress"


_HELPERS = """
import json, sys
import numpy as np
from meshnb import loops
from meshnb.loops import single
from meshnb.testing import reference
mode = loops.loop_mode(True)
if sys.argv[1] == "tasks":  # compiles the step's helpers and caches them
    loops.run_tasks(np.frombuffer(reference.init_page(), np.uint32).copy(), 16, np.zeros((0, 5), np.uint32), mode)
    print("{}")
else:  # compiles the fused loop, which calls the same _step: loaded from the cache
    start = reference.init_page(3, grouped=True)
    pages = np.stack([np.frombuffer(start, np.uint32)] * 3)
    trace = np.zeros((8, 5), np.uint32)
    loops.run_fused(pages, 8, trace, mode)
    print(json.dumps(dict(pages=pages.tobytes().hex(), trace=trace.tobytes().hex(),
                          hits=sum(single._step.stats.cache_hits.values()))))
"""


@pytest.mark.slow
def test_a_helper_without_cpython_wrapper_loads_from_the_cache_into_another_loop(tmp_path):
    # single._step and the other step helpers are made without numba's CPython wrapper (only njit
    # code calls them): a cached one is loaded, not compiled, by the next loop that calls it.
    import json
    import os
    import subprocess
    import sys

    from meshnb.testing import reference

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))

    def run(what: str) -> dict:
        out = subprocess.run(
            [sys.executable, "-c", _HELPERS, what], env=env, capture_output=True, text=True, timeout=600
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    run("tasks")
    fused = run("fused")
    assert fused["hits"] >= 1
    start = reference.init_page(3, grouped=True)
    want, want_trace = reference.run([start] * 3, 8, grouped=True)
    assert bytes.fromhex(fused["pages"]) == b"".join(want) and bytes.fromhex(fused["trace"]) == want_trace.tobytes()
