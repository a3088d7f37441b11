"""meshnb.samebits: the one "same bits?" comparison the harnesses share."""

from __future__ import annotations

from types import SimpleNamespace

from meshnb.samebits import differences, disagreements, run_bits


def _run(*digests: tuple[str, str]) -> SimpleNamespace:
    systems = [SimpleNamespace(system=k, digest=d, trace_digest=t) for k, (d, t) in enumerate(digests)]
    return SimpleNamespace(systems=systems)


def test_equal_bits_have_no_differences_and_each_difference_is_a_line():
    a = run_bits(_run(("p0", "t"), ("p1", "t")))
    assert a == {
        "system 0": {"page digest": "p0", "trace digest": "t"},
        "system 1": {"page digest": "p1", "trace digest": "t"},
    }
    assert differences(a, a) == [] and disagreements({"x": a, "y": a}) == []
    b = run_bits(_run(("p0", "t"), ("p1", "u")))
    assert differences(b, a) == ["system 1 trace digest: u != t (expected)"]
    assert differences(run_bits(_run(("p0", "t"))), a) == ["system 1: missing"]
    assert differences(a, run_bits(_run(("p0", "t")))) == ["system 1: not expected"]
    assert disagreements({"fused": a, "threads": b}) == [
        "threads system 1 trace digest: u != t (expected) (against fused)"
    ]
    long = differences({"page": b"\x01" * 100}, {"page": b"\x02" * 100})
    assert long == ["page: 0101010101010101...(200 chars) != 0202020202020202...(200 chars) (expected)"]


def test_array_bits_names_each_system_and_compares_a_row_as_its_bytes():
    import numpy as np

    from meshnb.samebits import array_bits

    pages = np.array([[1], [2]], np.uint32)  # two (very short) pages
    got = array_bits([3, 7], page=pages, trace_digest=["ab", "cd"])
    assert got["system 7"] == {"page": b"\x02\x00\x00\x00", "trace digest": "cd"}
    assert differences(got, array_bits([3, 7], page=pages, trace_digest=["ab", "ce"])) == [
        "system 7 trace digest: cd != ce (expected)"
    ]
    assert disagreements({"cpu": {"digest": "aa"}, "threads": {"digest": "aa"}, "cuda": {"digest": "ab"}}) == [
        "cuda digest: ab != aa (expected) (against cpu)"
    ]
