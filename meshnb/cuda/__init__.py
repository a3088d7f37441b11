"""The CUDA image of the train program (numba-cuda) and the PTX audit.

- :mod:`meshnb.cuda.audit`: reads PTX and lists every f32 instruction that can break float mode Z
  (pure Python: no numba-cuda needed);
- :mod:`meshnb.cuda.image`: the kernels (one warp per system), needs numba-cuda;
- :mod:`meshnb.cuda.host`: pages in and out, launches, :func:`~meshnb.cuda.host.run_systems` and
  :func:`~meshnb.cuda.host.run_cluster`;
- :mod:`meshnb.cuda.ptx`: compiles meshnb's own kernels to PTX (no GPU needed) for the audit;
- :mod:`meshnb.cuda.sass`: assembles PTX with ptxas and audits the machine code (no GPU needed);
- :mod:`meshnb.cuda.compare`: the device's words against the CPU's (IEEE mode: NaN as any NaN).

Importing this package imports nothing of numba-cuda.
"""
