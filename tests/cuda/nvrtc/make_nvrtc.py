"""Compile the NVRTC fixtures of tests/cuda/test_audit.py (output committed beside the sources).

    python tests/cuda/nvrtc/make_nvrtc.py

variants.cu for compute_80 and compute_90 (NVRTC's defaults), fast.cu with --use_fast_math for
compute_80, packed.cu (f32x2) for compute_100a, unnamed.cu (violations of no named class: half, bf16,
atomics, textures, wmma ...; the headers from the wheel's include folder) for compute_80.  Needs
the nvidia-cuda-nvrtc wheel (a cuda-toolkit[nvrtc] install), no GPU.  The findings each kernel must
give are written by hand in the test; a new NVRTC may change these files, and the tests then say
what moved.  The tests also compile the sources again at test time when NVRTC is there
(:func:`compile_cuda`)."""

from __future__ import annotations

import ctypes
import glob
import os
import sys
from pathlib import Path

HERE = Path(__file__).parent
BUILDS = (
    ("variants.cu", "variants_sm80.ptx", ["--gpu-architecture=compute_80"]),
    ("variants.cu", "variants_sm90.ptx", ["--gpu-architecture=compute_90"]),
    ("fast.cu", "fast_sm80.ptx", ["--gpu-architecture=compute_80", "--use_fast_math"]),
    ("packed.cu", "packed_sm100a.ptx", ["--gpu-architecture=compute_100a"]),
    ("unnamed.cu", "unnamed_sm80.ptx", ["--gpu-architecture=compute_80"]),
)


def libnvrtc() -> ctypes.CDLL | None:
    """The NVRTC library of the nvidia-cuda-nvrtc wheel (or the system's), or None."""
    roots = [p for p in sys.path if os.path.isdir(os.path.join(p, "nvidia"))]
    for root in roots:
        for name in sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib", "libnvrtc.so*")), reverse=True):
            if "builtins" not in name:
                return ctypes.CDLL(name)
    try:
        return ctypes.CDLL("libnvrtc.so")
    except OSError:
        return None


def include_dirs() -> list[str]:
    """The CUDA headers of the nvidia wheels (cuda_fp16.h, mma.h), for NVRTC's -I."""
    roots = [p for p in sys.path if os.path.isdir(os.path.join(p, "nvidia"))]
    return sorted({d for root in roots for d in glob.glob(os.path.join(root, "nvidia", "*", "include"))})


def compile_cuda(lib: ctypes.CDLL, source: str, name: str, options: list[str]) -> str:
    """PTX of CUDA C++ ``source`` by NVRTC (RuntimeError with the log if it does not compile)."""
    options = options + [f"-I{d}" for d in include_dirs()]  # cuda_fp16.h, mma.h: the wheel's headers
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None):
        raise RuntimeError("nvrtcCreateProgram failed")
    try:
        opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        rc = lib.nvrtcCompileProgram(prog, len(options), opts)
        size = ctypes.c_size_t()
        if rc:
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, log)
            raise RuntimeError(log.value.decode(errors="replace"))
        lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
        ptx = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetPTX(prog, ptx)
        return ptx.value.decode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


if __name__ == "__main__":
    lib = libnvrtc()
    if lib is None:
        raise SystemExit("no NVRTC: pip install 'cuda-toolkit[nvrtc]'")
    for src, out, options in BUILDS:
        (HERE / out).write_text(compile_cuda(lib, (HERE / src).read_text(), src, options))
        print(out)
