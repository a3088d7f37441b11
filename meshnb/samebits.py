"""Same bits? The one comparison of runs every harness shares (bench, the cluster tests, the GPU check).

A run's bits are named values (a page digest, a trace digest, a page's bytes): :func:`run_bits`
names a result's per system, :func:`differences` says where two sets part, a line each. Results
are read by attribute only, so this module imports nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def system_bits(s: Any) -> dict[str, str]:
    """One system's bits: its page's digest and its trace's digest (SPEC 11)."""
    return {"page digest": str(s.digest), "trace digest": str(s.trace_digest)}


def run_bits(result: Any) -> dict[str, dict[str, str]]:
    """A run's bits, ``{"system k": system_bits}`` for each of its systems."""
    return {f"system {s.system}": system_bits(s) for s in result.systems}


def array_bits(systems: Iterable[int], **columns: Any) -> dict[str, dict[str, Any]]:
    """Systems' bits from columns of arrays: ``{"system k": {name: value}}``, a row of an array as its bytes."""
    return {
        f"system {k}": {name.replace("_", " "): _value(column[i]) for name, column in columns.items()}
        for i, k in enumerate(systems)
    }


def _value(v: Any) -> Any:
    """A value as bits: an array row as its bytes (``==`` of two arrays is no yes or no)."""
    return v.tobytes() if hasattr(v, "tobytes") else v


def _short(value: object) -> str:
    text = value.hex() if isinstance(value, bytes) else str(value)
    return text if len(text) <= 24 else f"{text[:16]}...({len(text)} chars)"


def differences(got: Mapping[str, Any], want: Mapping[str, Any], where: str = "") -> list[str]:
    """Where ``got`` parts from ``want``, one line each (none: the same bits); mappings compared key by key."""
    lines = []
    for key in [*want, *(k for k in got if k not in want)]:
        at = f"{where}{key}"
        if key not in got or key not in want:
            lines.append(f"{at}: {'missing' if key not in got else 'not expected'}")
        elif isinstance(want[key], Mapping) and isinstance(got[key], Mapping):
            lines += differences(got[key], want[key], f"{at} ")
        elif got[key] != want[key]:
            lines.append(f"{at}: {_short(got[key])} != {_short(want[key])} (expected)")
    return lines


def disagreements(named: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Every entry of ``named`` (a label -> bits) against the first, one line a difference."""
    items = list(named.items())
    if not items:
        return []
    first_label, first = items[0]
    return [
        f"{line} (against {first_label})" for label, bits in items[1:] for line in differences(bits, first, f"{label} ")
    ]
