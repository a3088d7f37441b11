"""The CUDA image of the train program (numba-cuda): the library's GPU backend.

- :mod:`meshnb.cuda.image`: the kernels (one warp per system), needs numba-cuda;
- :mod:`meshnb.cuda.host`: pages in and out, launches, :func:`~meshnb.cuda.host.run_systems` and
  :func:`~meshnb.cuda.host.run_cluster`;
- :mod:`meshnb.cuda.ptx`: the image's kernels as PTX, compiled without a GPU (what
  ``meshnb ptx audit --meshnb`` audits);
- :mod:`meshnb.cuda.compare`: the device's words against the CPU's (IEEE mode: NaN as any NaN).

The audits of PTX and of the machine code ptxas makes of it are the executor-checking tools'
(:mod:`meshnb.conformance.audit`, :mod:`meshnb.conformance.sass`). Importing this package imports
nothing of numba-cuda.
"""
