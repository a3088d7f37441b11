"""What the CPU can do, read once: the one place meshnb decides x86, DAZ, SHA-NI and vector shape.

The *host* is this process's CPU; the *target* is what numba compiles for (the host unless
``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES`` name another).  Vector shapes follow the target.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

_X86_MACHINES = frozenset({"x86_64", "amd64", "i386", "i686", "x86"})
_ARM_MACHINES = frozenset({"aarch64", "arm64"})

IS_X86: bool = platform.machine().lower() in _X86_MACHINES
"""The host is an x86 CPU (MXCSR, ``pause``, SHA-NI may exist)."""

IS_X86_64: bool = platform.machine().lower() in {"x86_64", "amd64"}
"""The host is 64-bit x86: every such CPU has SSE's MXCSR, so DAZ can be switched."""

IS_ARM64: bool = platform.machine().lower() in _ARM_MACHINES


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, asked each time; the machine's count where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


PIN_ENV = "MESHNB_PIN_MEMBERS"
"""Set to ``0`` to leave a cluster's members where the scheduler puts them (see :func:`member_cpu`)."""


def pins_members() -> bool:
    """Whether ``MESHNB_PIN_MEMBERS`` lets a cluster's members have a CPU each (``1`` or unset; ``0``: not);
    a ValueError naming the variable for anything else."""
    asked = os.environ.get(PIN_ENV, "").strip()
    if asked not in ("", "0", "1"):
        raise ValueError(
            f"{PIN_ENV}={asked!r}: expected '1' (a CPU for each member, the default) or '0' (the scheduler places them)"
        )
    return asked != "0"


def member_cpu(k: int, n: int, cpus: Sequence[int] | None = None) -> int | None:
    """The CPU for member ``k`` of ``n``: the ``k``-th of ``cpus`` (the affinity); None (the scheduler's)
    where the members outnumber the CPUs, off Linux, or with ``MESHNB_PIN_MEMBERS=0`` (docs/performance.md)."""
    if not pins_members() or not hasattr(os, "sched_setaffinity"):
        return None
    if cpus is None:
        cpus = sorted(os.sched_getaffinity(0))
    return cpus[k] if 0 <= k < n <= len(cpus) else None


def pin_member(k: int, n: int) -> int | None:
    """Run the calling thread on :func:`member_cpu`'s CPU, if any; returns it (None where the affinity forbids it)."""
    cpu = member_cpu(k, n)
    if cpu is not None:
        try:
            os.sched_setaffinity(0, {cpu})  # 0: the calling thread (Linux)
        except OSError:
            return None
    return cpu


# Named CPUs of LLVM whose vector ISA we know without asking the host (NUMBA_CPU_NAME targets).
_AVX512_CPUS = frozenset(
    {
        "skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client", "icelake-server",
        "tigerlake", "rocketlake", "sapphirerapids", "emeraldrapids", "graniterapids", "graniterapids-d",
        "znver4", "znver5", "x86-64-v4", "knl", "knm",
    }
)  # fmt: skip
_AVX2_CPUS = frozenset(
    {
        "haswell", "broadwell", "skylake", "kabylake", "coffeelake", "cometlake", "alderlake", "raptorlake",
        "meteorlake", "arrowlake", "lunarlake", "gracemont", "znver1", "znver2", "znver3", "x86-64-v3",
        "bdver4",
    }
)  # fmt: skip


@cache
def host_features() -> frozenset[str]:
    """The host CPU's LLVM feature names that are on (``avx2``, ``avx512f``, ``sha``, ``neon`` ...)."""
    try:
        import llvmlite.binding as llvm

        return frozenset(name for name, on in llvm.get_host_cpu_features().items() if on)
    except (ImportError, RuntimeError):  # llvmlite cannot read them here: assume none
        return frozenset()


@cache
def host_name() -> str:
    """LLVM's name of the host CPU (``znver4``, ``haswell``, ``neoverse-n1`` ...)."""
    try:
        import llvmlite.binding as llvm

        return str(llvm.get_host_cpu_name())
    except (ImportError, RuntimeError):
        return "generic"


@cache
def model_name() -> str:
    """The CPU's marketing name as the OS reports it (``AMD EPYC 9R14 ...``), for speed figures."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


HAS_DAZ: bool = IS_X86_64
"""The host has MXCSR's DAZ bit (every x86-64 CPU): the fast loops may run mode Z with DAZ on."""

HAS_SHA_NI: bool = IS_X86 and "sha" in host_features()
"""The host has the x86 SHA extensions (LLVM's feature ``sha``; other targets use the word otherwise)."""


@dataclass(frozen=True)
class VectorShape:
    """The vector ISA numba compiles for: its name, float32 lanes a register, registers.

    >>> str(VectorShape("avx2", 8, 16))
    'avx2 (8 x f32, 16 registers)'
    """

    isa: str  # "avx512", "avx2", "sse", "neon" or "scalar"
    floats: int  # float32 lanes in one vector register
    registers: int  # vector registers the ISA names

    def __str__(self) -> str:
        return f"{self.isa} ({self.floats} x f32, {self.registers} registers)"


_SHAPES = {
    "avx512": VectorShape("avx512", 16, 32),
    "avx2": VectorShape("avx2", 8, 16),
    "sse": VectorShape("sse", 4, 16),
    "neon": VectorShape("neon", 4, 32),
    "scalar": VectorShape("scalar", 1, 16),
}


def _isa_of(cpu_name: str, features: frozenset[str]) -> str:
    if "avx512f" in features or (not features and cpu_name in _AVX512_CPUS):
        return "avx512"
    if "avx2" in features or (not features and cpu_name in _AVX2_CPUS):
        return "avx2"
    if IS_ARM64 or "neon" in features:
        return "neon"
    if IS_X86:
        return "sse"
    return "scalar"


def target_name() -> str:
    """The CPU numba compiles for: ``NUMBA_CPU_NAME`` when set (``host`` means the host), else the host."""
    name = os.environ.get("NUMBA_CPU_NAME", "").strip()
    return host_name() if name in ("", "host") else name


def target_shape() -> VectorShape:
    """The vector shape of the target as numba reads ``NUMBA_CPU_NAME`` and ``NUMBA_CPU_FEATURES``.

    Features given (``""`` too) count on top of the named CPU's own (from a table of LLVM's names); a
    name given without features keeps the host's features (as numba 0.68 does), ``generic`` has none.
    """
    feats = os.environ.get("NUMBA_CPU_FEATURES")
    name = os.environ.get("NUMBA_CPU_NAME", "").strip()
    if name in ("", "host"):
        return _SHAPES[_isa_of(host_name(), host_features())]
    if feats is None:
        return _SHAPES[_isa_of(name, frozenset() if name == "generic" else host_features())]
    on, off = _given(feats, "+"), _given(feats, "-")
    named = _isa_of(name, frozenset())
    isa = max(named, _isa_of(name, on) if on else named, key=_RANK.__getitem__)
    return _SHAPES["avx2" if isa == "avx512" and "avx512f" in off else isa]


_RANK = {"scalar": 0, "sse": 1, "neon": 1, "avx2": 2, "avx512": 3}


def _given(feats: str, sign: str) -> frozenset[str]:
    """The features ``NUMBA_CPU_FEATURES`` turns on (``sign`` "+") or off ("-")."""
    return frozenset(f.strip()[1:] for f in feats.split(",") if f.strip().startswith(sign))


def target_features() -> frozenset[str]:
    """LLVM feature names of the target: those ``NUMBA_CPU_FEATURES`` gives (``avx`` with AVX2), else the host's."""
    feats = os.environ.get("NUMBA_CPU_FEATURES")
    name = os.environ.get("NUMBA_CPU_NAME", "").strip()
    if feats is None:
        return frozenset() if name == "generic" else host_features()
    return _given(feats, "+") | (frozenset({"avx"}) if target_shape().isa in ("avx2", "avx512") else frozenset())


def describe() -> dict[str, str]:
    """The CPU facts every speed figure carries: model, host and target names, the target's vector ISA.

    >>> sorted(describe())
    ['cpu', 'host_cpu', 'machine', 'target_cpu', 'vector_isa']
    """
    return {
        "cpu": model_name(),
        "machine": platform.machine(),
        "host_cpu": host_name(),
        "target_cpu": target_name(),
        "vector_isa": str(target_shape()),
    }
