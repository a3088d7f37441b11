"""The register budget of the 1024-thread cluster block, from ptxas' own report (no GPU needed).

steps_kernel runs a 32-system cluster as one block of 1024 threads, which an SM holds only at
<= 64 registers a thread; meshnb.cuda.image pins it with launch bounds (``.maxntid 1024``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from meshnb.conformance import sass

from .conftest import needs_numba_cuda


def _missing() -> str | None:
    try:
        sass.find_tools()
    except sass.SassUnavailable as e:
        return str(e)
    return None


@pytest.mark.slow
@needs_numba_cuda
@pytest.mark.skipif(_missing() is not None, reason=f"{_missing()}")
def test_steps_kernel_fits_a_1024_thread_block(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}  # compile for a device
    script = (
        "import json\nfrom meshnb.cuda import ptx, image\n"
        "print(json.dumps({'budget': image.REGISTER_BUDGET, 'ptx': {f'{a}{b}': ptx.compile_meshnb((a, b))"
        "['steps_kernel'] for a, b in ptx.TARGETS}}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    assert got["budget"] == 64
    ptxas = sass.find_tools()["ptxas"]
    for cc, text in got["ptx"].items():
        assert re.search(r"\.maxntid 1024, 1, 1", text), cc
        src = tmp_path / f"steps_{cc}.ptx"
        src.write_text(text)
        rep = subprocess.run(
            [ptxas, f"-arch=sm_{cc}", "-v", "-o", str(tmp_path / f"{cc}.cubin"), str(src)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert rep.returncode == 0, rep.stderr
        used = [int(n) for n in re.findall(r"Used (\d+) registers", rep.stderr)]
        assert used and max(used) <= got["budget"], (cc, rep.stderr)
        assert not re.search(r"[1-9]\d* bytes spill", rep.stderr), (cc, rep.stderr)  # kept under without spilling
