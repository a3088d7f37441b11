"""Compile the audit's measured cases (tests/cuda/test_audit_cases.py) with NVRTC, PTX committed beside them.

    python tests/cuda/cases/make_cases.py

Each ``NAME.cu`` here is CUDA C++ written as an executor team writes it; ``manifest.json`` gives its
verdict (``clean``: keeps float mode Z; ``violating``: breaks it), the reason, and NVRTC options beyond
the common ones (``--gpu-architecture=compute_80 -lineinfo``, so the PTX carries ``.loc`` lines).
The cases were written before the audit was changed for them; they are kept apart from the project's
kernels so that they stay a fair test of it."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).parent
COMMON = ["--gpu-architecture=compute_80", "-lineinfo", f"-I{HERE}"]
# cooperative groups include <nv/target> (CCCL), which the nvrtc wheel lacks: a CUDA toolkit's copy
CCCL = [f"-I{d}" for d in ("/usr/local/cuda/include/cccl", "/usr/local/cuda-13.0/include/cccl") if Path(d).is_dir()][:1]


def manifest() -> dict[str, dict[str, object]]:
    """name -> {"verdict", "options", "why"}."""
    return json.loads((HERE / "manifest.json").read_text())


def _make_nvrtc():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("make_nvrtc", HERE.parent / "nvrtc" / "make_nvrtc.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_nvrtc", mod)
    spec.loader.exec_module(mod)
    return mod


def compile_case(lib, name: str, options: list[str]) -> str:  # type: ignore[no-untyped-def]
    """The PTX of case ``name`` (its source read from here)."""
    src = (HERE / f"{name}.cu").read_text()
    ptx: str = _make_nvrtc().compile_cuda(lib, src, f"{name}.cu", COMMON + CCCL + options)
    return ptx.replace(f'"{os.getcwd()}/', '"')  # NVRTC's .file names the working directory: left out


if __name__ == "__main__":
    mod = _make_nvrtc()
    lib = mod.libnvrtc()
    if lib is None:
        raise SystemExit("no NVRTC: pip install 'cuda-toolkit[nvrtc]'")
    for name, case in manifest().items():
        (HERE / f"{name}.ptx").write_text(compile_case(lib, name, list(case["options"])))  # type: ignore[call-overload]
        print(name)
