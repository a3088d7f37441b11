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


# --- where a cluster's members run (cpu.member_cpu, pin_member) ------------------------------------


@pytest.mark.parametrize(
    ("n", "cpus", "want"),
    [
        (2, [0, 1], [0, 1]),
        (2, [3, 5, 7], [3, 5]),  # the first n of the process's CPUs, in order
        (1, [6], [6]),
        (3, [0, 1], [None, None, None]),  # members outnumber the CPUs: the scheduler's
        (4, [0, 1], [None, None, None, None]),
    ],
)
def test_each_member_has_a_cpu_of_its_own_where_there_are_enough(monkeypatch, n, cpus, want) -> None:
    if not hasattr(cpu.os, "sched_setaffinity"):
        pytest.skip("Linux's thread affinity")
    monkeypatch.delenv(cpu.PIN_ENV, raising=False)
    assert [cpu.member_cpu(k, n, cpus) for k in range(n)] == want


def test_pinning_is_off_with_the_environment_word(monkeypatch) -> None:
    monkeypatch.setenv(cpu.PIN_ENV, "0")
    assert cpu.member_cpu(0, 2, [0, 1]) is None
    monkeypatch.setenv(cpu.PIN_ENV, "1")
    assert cpu.member_cpu(0, 2, [0, 1]) == (0 if hasattr(cpu.os, "sched_setaffinity") else None)


def test_a_pinned_thread_runs_on_its_cpu_and_no_other_thread_moves(monkeypatch) -> None:
    import os
    import threading

    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("Linux's thread affinity")
    monkeypatch.delenv(cpu.PIN_ENV, raising=False)
    before = os.sched_getaffinity(0)
    got: list[tuple[int | None, set[int]]] = []
    t = threading.Thread(target=lambda: got.append((cpu.pin_member(0, 1), os.sched_getaffinity(0))))
    t.start()
    t.join()
    assert got == [(min(before), {min(before)})]
    assert os.sched_getaffinity(0) == before  # the calling thread's own, untouched


def test_target_features_are_the_environments_with_avx_implied(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NUMBA_CPU_NAME", "haswell")
    monkeypatch.setenv("NUMBA_CPU_FEATURES", "+avx2,+fma,-avx512f")
    assert sorted(cpu.target_features()) == ["avx", "avx2", "fma"] and cpu.target_name() == "haswell"
    assert str(cpu.target_shape()) == "avx2 (8 x f32, 16 registers)"
