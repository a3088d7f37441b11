"""meshnb.backend_table: one row per backend, and everything that lists backends reads it."""

from __future__ import annotations

from meshnb import backend_table as table
from meshnb.backend_table import BY_NAME, TABLE


def test_the_registry_the_options_and_the_tests_read_the_table():
    from meshnb import bench, options
    from meshnb.backends import BACKENDS, info
    from meshnb.checkpoint import MAX_SYSTEMS

    assert list(BACKENDS) == [b.name for b in TABLE] and info("fused") is BY_NAME["fused"]
    assert options.CLUSTER_BACKENDS == ("threads", "processes", "fused", "mpi", "cuda")
    assert options.ALONE_BACKENDS == ("cuda",)
    assert table.local_cluster_backends() == ("threads", "processes", "fused")
    assert table.MAX_LOCAL_SYSTEMS == MAX_SYSTEMS
    paths = [p.name for p in bench.default_paths()]
    assert {"fused-8", "threads-2", "processes-2"} <= set(paths) and not any("mpi" in p or "cuda" in p for p in paths)


def test_capabilities():
    assert [b.name for b in TABLE if not b.exchange and b.clusters] == ["fused", "cuda"]
    assert [b.name for b in TABLE if b.max_systems is None] == ["mpi"] and BY_NAME["mpi"].mpi
    assert BY_NAME["cuda"].device == "cuda" and BY_NAME["cuda"].alone and BY_NAME["cuda"].max_systems == 32
    assert not BY_NAME["single"].clusters and BY_NAME["single"].alone and not BY_NAME["single"].runs_here


def test_the_fused_row_and_mpi_running_elsewhere():
    fused = BY_NAME["fused"]
    assert (fused.clusters, fused.alone, fused.exchange, fused.max_systems) == (True, False, False, 64)
    assert not BY_NAME["mpi"].runs_here
