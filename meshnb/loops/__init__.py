"""The step loops: SPEC 5-8's steps many at a time in njit, bit-equal to the literal kernels.

:mod:`~meshnb.loops.single` runs one system's tasks (and a fused cluster's), its names served
here; :mod:`~meshnb.loops.grouped` a cluster member's steps on an exchange page in memory, the
GIL released; :mod:`~meshnb.loops.sweep` many independent systems, one per vector lane. A loop's
mode is fixed when it compiles: ``Z_DAZ`` (x86's DAZ bit), ``Z`` (a flush after every op), ``IEEE``.
"""

from .single import IEEE, Z_DAZ, Z, loop_mode, own_sums, run_fused, run_tasks, warm_up

__all__ = ["IEEE", "Z_DAZ", "Z", "loop_mode", "own_sums", "run_fused", "run_tasks", "warm_up"]
