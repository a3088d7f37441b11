"""Start-up (issue 5, item 4): wall time of ``meshnb train --steps 64`` in a new process.

- cold: numba's cache empty (``NUMBA_CACHE_DIR`` a new empty directory each round), so every
  kernel is compiled;
- warm: numba's usual cache (beside the package, or wherever ``NUMBA_CACHE_DIR`` already
  points), filled by an earlier run: the usual case after the first run;
- cold-avx2 (x86 only): cold, with the code compiled for an AVX2 CPU (``NUMBA_CPU_NAME=haswell``),
  as on the many machines without AVX-512 (the compile differs with the target's vector ISA).

Each run's JSON output is checked against ``meshnb.train(64)`` in this process, bit for bit.
The same figures from a shell, with hyperfine::

    hyperfine -N --warmup 2 'env NUMBA_CACHE_DIR=/tmp/nbwarm meshnb train --steps 64'
    hyperfine -N --runs 3 --prepare 'bash -c "rm -rf /tmp/nbcold && mkdir /tmp/nbcold"' \\
        'env NUMBA_CACHE_DIR=/tmp/nbcold meshnb train --steps 64'
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import meshnb
from meshnb import cpu


def _command() -> list[str]:
    script = Path(sys.executable).with_name("meshnb")
    prefix = [str(script)] if script.exists() else [sys.executable, "-m", "meshnb"]
    return prefix + ["train", "--steps", "64", "--json", "--no-progress"]


def _run(cache_dir: Path | None, cpu_name: str | None = None) -> dict:
    env = dict(os.environ)
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = str(cache_dir)
    if cpu_name is not None:
        env["NUMBA_CPU_NAME"] = cpu_name
    out = subprocess.run(_command(), env=env, capture_output=True, text=True, check=True, timeout=300)
    return json.loads(out.stdout)


@pytest.mark.parametrize("cache", ["warm", "cold", "cold-avx2"])
def test_startup(benchmark, record, short, tmp_path, cache):
    if cache == "cold-avx2" and not cpu.IS_X86_64:
        pytest.skip("AVX2 is an x86 ISA")
    want = meshnb.train(64).to_json()
    fresh = iter(range(10**6))

    def setup():
        if cache == "warm":
            return (None,), {}
        d = tmp_path / f"cold{next(fresh)}"
        d.mkdir()
        return (d, "haswell" if cache == "cold-avx2" else None), {}

    if cache == "warm":
        assert _run(None) == want  # fills the usual cache if it is not yet; the bits match
    record(benchmark, f"startup-{cache}", 1, unit="process")
    benchmark.group = "start-up"
    rounds = 1 if short else (10 if cache == "warm" else 5)
    got = benchmark.pedantic(_run, setup=setup, rounds=rounds, iterations=1)
    assert got == want
