"""The CUDA image of the train program (numba-cuda), the library's GPU backend: :mod:`.image` (the
kernels), :mod:`.host` (launches), :mod:`.ptx` (the kernels as PTX), :mod:`.compare` (device words
against the CPU's).  The PTX and SASS audits are :mod:`meshnb.conformance`'s.  Importing this
package imports nothing of numba-cuda."""
