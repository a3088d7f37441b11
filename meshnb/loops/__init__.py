"""The step loops: SPEC 5-8's steps many at a time in njit, bit-equal to the literal kernels.

:mod:`~meshnb.loops.single` runs one system's tasks (and a fused cluster's), its names served
here; :mod:`~meshnb.loops.grouped` a cluster member's steps on an exchange page in memory, the
GIL released; :mod:`~meshnb.loops.sweep` many independent systems, one per vector lane. Every loop
runs in one of three modes, fixed when it compiles: ``Z_DAZ`` (mode Z with the CPU's DAZ bit, x86
only: only words leaving the loop are flushed), ``Z`` (a flush after every op, any CPU) and
``IEEE`` (plain float32, for comparison).
"""

from .single import IEEE, Z_DAZ, Z, loop_mode, own_sums, run_fused, run_tasks, warm_up

__all__ = ["IEEE", "Z_DAZ", "Z", "loop_mode", "own_sums", "run_fused", "run_tasks", "warm_up"]
