"""The step loops: SPEC 5-8's steps run many at a time in njit, each bit-equal to the literal kernels.

- :mod:`meshnb.loops.single`: one system's tasks (and a fused cluster's) as 8-lane vectors;
  its names are served here (``meshnb.loops.run_tasks`` ...).
- :mod:`meshnb.loops.grouped`: a cluster member's grouped steps on an exchange page in memory,
  the GIL released (SPEC 9's round in njit).
- :mod:`meshnb.loops.sweep`: many independent systems, one per vector lane.

Every loop runs in one of three modes, fixed when it compiles: ``Z_DAZ`` (float mode Z with the
CPU's DAZ bit on, x86 only), ``Z`` (a flush after every op, any CPU) and ``IEEE`` (comparison).
"""

from .single import IEEE, Z_DAZ, Z, loop_mode, own_sums, run_fused, run_tasks, warm_up

__all__ = ["IEEE", "Z_DAZ", "Z", "loop_mode", "own_sums", "run_fused", "run_tasks", "warm_up"]
