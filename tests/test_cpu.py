"""meshnb.cpu: the target's vector ISA read as numba reads NUMBA_CPU_NAME and NUMBA_CPU_FEATURES."""

from __future__ import annotations

import pytest

from meshnb import cpu


@pytest.mark.parametrize(
    ("name", "features", "isa"),
    [
        ("haswell", "", "avx2"),  # real AVX2 code: the name's own features only
        ("haswell", "+avx512f,+avx512bw", "avx512"),
        ("skylake-avx512", "-avx512f", "avx2"),
        ("znver4", "", "avx512"),
        ("generic", None, "sse"),
    ],
)
def test_named_targets(monkeypatch: pytest.MonkeyPatch, name: str, features: str | None, isa: str) -> None:
    if cpu.IS_X86 is False and isa == "sse":
        pytest.skip("the SSE fallback is x86's")
    monkeypatch.setenv("NUMBA_CPU_NAME", name)
    if features is None:
        monkeypatch.delenv("NUMBA_CPU_FEATURES", raising=False)
    else:
        monkeypatch.setenv("NUMBA_CPU_FEATURES", features)
    assert cpu.target_shape().isa == isa


def test_a_name_without_features_keeps_the_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    """numba keeps the host's features when only NUMBA_CPU_NAME is set (``haswell`` alone is
    AVX-512 code on an AVX-512 host): the shape says what numba compiles."""
    if "avx2" not in cpu.host_features():
        pytest.skip("a host with AVX2 at least")
    monkeypatch.setenv("NUMBA_CPU_NAME", "haswell")
    monkeypatch.delenv("NUMBA_CPU_FEATURES", raising=False)
    assert cpu.target_shape().isa == ("avx512" if "avx512f" in cpu.host_features() else "avx2")
