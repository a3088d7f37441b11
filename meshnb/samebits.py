"""Same bits? The one comparison of runs that every harness shares: ``meshnb bench``'s check
before it times a path, the benches, the cluster tests (every member of every backend), the
GPU check.

A run's bits are named values (a page digest, a trace digest, a page's bytes): :func:`run_bits`
names a result's, per system; :func:`differences` says, a line each, where two sets of bits
part; :func:`disagreements` holds many against the first.  It reads results by their attributes
only (``systems``, and each system's ``system``, ``digest`` and ``trace_digest``), so it imports
nothing and stands below every result type.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def system_bits(s: Any) -> dict[str, str]:
    """One system's bits: its page's digest and its trace's digest (SPEC 11).

    Examples
    --------
    >>> import meshnb
    >>> from meshnb.samebits import system_bits
    >>> bits = system_bits(meshnb.train(16).systems[0])
    >>> sorted(bits), bits["page digest"][:16]
    (['page digest', 'trace digest'], '86aa8e4d23286a6e')
    """
    return {"page digest": str(s.digest), "trace digest": str(s.trace_digest)}


def run_bits(result: Any) -> dict[str, dict[str, str]]:
    """A run's bits, ``{"system k": system_bits}`` for each of its systems.

    Examples
    --------
    >>> import meshnb
    >>> from meshnb.samebits import run_bits
    >>> bits = run_bits(meshnb.train(16, systems=2, backend="fused"))
    >>> list(bits), bits["system 0"] == bits["system 1"]  # the same start: the same bits
    (['system 0', 'system 1'], True)
    """
    return {f"system {s.system}": system_bits(s) for s in result.systems}


def array_bits(systems: Iterable[int], **columns: Any) -> dict[str, dict[str, Any]]:
    """Systems' bits from columns of arrays (a device's or a sweep's pages, trace digests):
    ``{"system k": {name: value}}`` for each ``k`` of ``systems`` with row ``i`` of each column,
    a row of an array (a page) as its bytes, the name's underscores as spaces.

    Parameters
    ----------
    systems : iterable of int
        The systems' numbers, one per row of the columns.
    **columns : sequence or numpy.ndarray
        A column of values a name, one per system: a page row (an array), a digest (text).

    Returns
    -------
    dict
        ``{"system k": {name: bits}}``, as :func:`differences` takes them.

    Examples
    --------
    >>> import numpy as np
    >>> pages = np.array([[1], [2]], np.uint32)  # two (very short) pages
    >>> got = array_bits([3, 7], page=pages, trace_digest=["ab", "cd"])
    >>> got["system 7"]
    {'page': b'\\x02\\x00\\x00\\x00', 'trace digest': 'cd'}
    >>> differences(got, array_bits([3, 7], page=pages, trace_digest=["ab", "ce"]))
    ['system 7 trace digest: cd != ce (expected)']
    """
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
    """Where ``got`` parts from ``want``, one line each (none: the same bits).  Values that are
    mappings are compared key by key, their lines prefixed with the key.

    Examples
    --------
    >>> from meshnb.samebits import differences
    >>> want = {"system 0": {"page digest": "86aa8e4d", "trace digest": "b9860950"}}
    >>> differences({"system 0": {"page digest": "86aa8e4d", "trace digest": "00000000"}}, want)
    ['system 0 trace digest: 00000000 != b9860950 (expected)']
    >>> differences({}, want), differences(want, want)
    (['system 0: missing'], [])
    """
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
    """Every entry of ``named`` (a label -> bits) against the first, one line a difference.

    Examples
    --------
    >>> from meshnb.samebits import disagreements
    >>> disagreements({"cpu": {"digest": "aa"}, "threads": {"digest": "aa"}, "cuda": {"digest": "ab"}})
    ['cuda digest: ab != aa (expected) (against cpu)']
    """
    items = list(named.items())
    if not items:
        return []
    first_label, first = items[0]
    return [
        f"{line} (against {first_label})" for label, bits in items[1:] for line in differences(bits, first, f"{label} ")
    ]
