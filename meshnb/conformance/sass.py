"""The SASS audit (``meshnb ptx audit --sass``): what the hardware will run, after ptxas.

The PTX is assembled by ``ptxas`` for its ``.target`` and disassembled by ``nvdisasm``, a ``.loc``
before each PTX line mapping SASS back to it.  Findings: ``contraction`` (``FFMA`` on an unrounded
f32 line), ``flush`` (``.FTZ``), ``approximate`` (``MUFU``), ``double-rounding`` (an f64 unit on a
line the PTX audit found so); the rules and exceptions: docs/guide/gpu.md ("--sass").
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from . import audit

TOOLS = ("ptxas", "nvdisasm")
TIMEOUT_S = 600
_LOC = re.compile(r"\s*\.(?:loc|file)\b")
_FILE_AT = re.compile(r"\s*\.(?:address_size|target)\b")
_LINE_INFO = re.compile(r'//## File "[^"]*", line (\d+)')
_SASS = re.compile(r"/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
_SECTION = re.compile(r"^\.text\.([\w$.]+):")
_CORRECTLY_ROUNDED = {"div", "rcp", "sqrt"}
_F64_UNITS = {"DADD", "DMUL", "DFMA"}
_FLOAT_TYPES = {"f16", "f16x2", "bf16", "bf16x2", "f32", "f32x2", "f64"}


class SassUnavailable(RuntimeError):
    """ptxas or nvdisasm is missing (one line: what, and how to get it).

    Examples
    --------
    >>> from meshnb.conformance.sass import SassUnavailable
    >>> issubclass(SassUnavailable, RuntimeError)
    True
    """


@dataclass(frozen=True)
class SassFinding:
    """One machine-code finding of the SASS audit.

    Parameters
    ----------
    line : int
        The PTX line the SASS instruction was made from (1-based).
    function : str
        The function it sits in.
    sass : str
        The SASS instruction's opcode and modifiers (``FFMA``, ``MUFU.RCP``).
    ptx : str
        The PTX instructions of that line.
    kind : str
        Its class (``contraction``, ``flush``, ``approximate``, ``double-rounding``); ``"class"`` in JSON.

    Examples
    --------
    >>> from meshnb.conformance.sass import SassFinding
    >>> SassFinding(12, "k", "FFMA", "mul.f32 %f3, %f1, %f2; add.f32 %f4, %f3, %f0;", "contraction").to_json()
    ... # doctest: +NORMALIZE_WHITESPACE
    {'line': 12, 'function': 'k', 'sass': 'FFMA',
     'ptx': 'mul.f32 %f3, %f1, %f2; add.f32 %f4, %f3, %f0;', 'class': 'contraction'}
    """

    line: int
    function: str
    sass: str
    ptx: str
    kind: str

    def to_json(self) -> dict[str, object]:
        """The finding as ``meshnb ptx audit --json`` writes it: ``kind`` under ``"class"``.

        Returns
        -------
        dict
            ``line``, ``function``, ``sass``, ``ptx`` and ``class``.

        Examples
        --------
        >>> from meshnb.conformance.sass import SassFinding
        >>> sorted(SassFinding(5, "k", "MUFU.RCP", "rcp.approx.f32 %f2, %f1;", "approximate").to_json())
        ['class', 'function', 'line', 'ptx', 'sass']
        """
        d = asdict(self)
        d["class"] = d.pop("kind")
        return d


def find_tools() -> dict[str, str]:
    """``{"ptxas": path, "nvdisasm": path}``; :class:`SassUnavailable` naming what is missing."""
    found: dict[str, str] = {}
    dirs = [d for p in sys.path if p for d in sorted(glob.glob(os.path.join(p, "nvidia", "cu*", "bin")), reverse=True)]
    for tool in TOOLS:  # the wheels' first (the newest toolkit), then PATH
        paths = (os.path.join(d, tool) for d in dirs)
        path = next((p for p in paths if os.access(p, os.X_OK)), None) or shutil.which(tool)
        if path:
            found[tool] = path
    missing = [t for t in TOOLS if t not in found]
    if missing:
        raise SassUnavailable(
            f"the SASS audit needs {' and '.join(missing)} (CUDA toolkit): "
            "pip install 'meshnb[cuda]' (nvidia-cuda-nvcc, nvidia-cuda-nvdisasm)"
        )
    return found


def arch_of(text: str) -> str:
    """The PTX's own ``.target`` (``sm_80``, ``sm_90a`` ...); ValueError if it names none."""
    m = re.search(r"^\s*\.target\s+(sm_\w+)", text, re.M)
    if m is None:
        raise ValueError("no .target sm_XX in the PTX: ptxas needs an architecture")
    return m.group(1)


def with_locs(text: str, module: audit.Module) -> str:
    """``text`` with ``.loc 1 N 0`` before every line N that starts a PTX instruction."""
    starts = {ins.line for ins in module.instructions}
    out: list[str] = []
    filed = False
    for n, line in enumerate(text.split("\n"), 1):
        if _LOC.match(line):
            out.append("")
            continue
        if n in starts and filed:
            out.append(f"\t.loc 1 {n} 0")
        out.append(line)
        if not filed and _FILE_AT.match(line) and ".address_size" in line:
            out.append('.file 1 "ptx"')
            filed = True
    if not filed:  # no .address_size: after .target
        return with_locs(re.sub(r"^(\s*\.target[^\n]*)", r"\1\n.address_size 64", text, count=1, flags=re.M), module)
    return "\n".join(out)


def disassemble(text: str, arch: str, tools: dict[str, str] | None = None) -> list[tuple[str, int, str]]:
    """``(function, PTX line, SASS opcode)`` for every SASS instruction ptxas makes of ``text``
    for ``arch`` that carries a line; RuntimeError with ptxas' first error line if it refuses."""
    tools = tools or find_tools()
    module = audit.parse(text)
    with tempfile.TemporaryDirectory(prefix="meshnb-sass-") as tmp:
        src, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        with open(src, "w", encoding="utf-8") as f:
            f.write(with_locs(text, module))
        try:
            done = subprocess.run(
                [tools["ptxas"], f"-arch={arch}", "-lineinfo", "-o", cubin, src],
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
            )
            if done.returncode:
                lines = [ln for ln in (done.stderr + done.stdout).splitlines() if ln.strip()]
                first = next((ln for ln in lines if "error" in ln), lines[0] if lines else f"exit {done.returncode}")
                raise RuntimeError(f"ptxas ({arch}) refused the PTX: {first.replace(src, 'ptx').strip()}")
            dis = subprocess.run(
                [tools["nvdisasm"], "-g", "-c", cubin], capture_output=True, text=True, timeout=TIMEOUT_S
            )
        except subprocess.TimeoutExpired as e:
            raise RuntimeError(f"{os.path.basename(str(e.cmd[0]))} ran over {TIMEOUT_S} s on this PTX") from None
        if dis.returncode:
            raise RuntimeError(f"nvdisasm failed: {(dis.stderr.strip().splitlines() or ['?'])[0]}")
    out: list[tuple[str, int, str]] = []
    function, line = "", 0
    for row in dis.stdout.splitlines():
        if m := _SECTION.match(row.strip()):
            function, line = m.group(1), 0
        elif m := _LINE_INFO.search(row):
            line = int(m.group(1))
        elif (m := _SASS.search(row)) and line:
            out.append((function, line, m.group(1)))
    return out


def audit_sass(text: str, arch: str | None = None, allow_f64: Iterable[str] = ()) -> list[SassFinding]:
    """The machine-code findings of a PTX module, assembled by ptxas and disassembled by nvdisasm.

    Parameters
    ----------
    text : str
        The PTX module's text.
    arch : str, optional
        The GPU architecture to assemble for (``sm_90``); default the module's ``.target``.
    allow_f64 : iterable of str, default ()
        Functions that may compute in f64, as :func:`meshnb.conformance.audit.audit_text` takes them.

    Returns
    -------
    list of SassFinding
        A finding per SASS instruction and class, in the disassembly's order.

    Raises
    ------
    SassUnavailable
        When ptxas or nvdisasm is missing.
    meshnb.conformance.audit.PtxError
        When ``text`` is not PTX.
    ValueError
        When ``allow_f64`` names a function the module neither declares nor defines.

    Examples
    --------
    >>> from meshnb.conformance.audit import PtxError
    >>> from meshnb.conformance.sass import audit_sass
    >>> try:  # the PTX is read before ptxas is looked for
    ...     audit_sass("hello")
    ... except PtxError as e:
    ...     print(e)
    not PTX: no .version, .target, .entry or .func directive
    """
    module = audit.parse(text)
    by_line: dict[int, list[audit.Instruction]] = {}
    for ins in module.instructions:
        by_line.setdefault(ins.line, []).append(ins)
    promoted = {v.line for v in audit.audit_module(module, allow_f64) if v.kind == "double-rounding"}
    found: list[SassFinding] = []
    for function, line, sass in disassemble(text, arch or arch_of(text)):
        ptx = by_line.get(line, [])
        if not ptx:
            continue
        ops = [i.opcode for i in ptx if set(i.opcode.split(".")[1:]) & _FLOAT_TYPES]
        if not ops:
            continue  # integer division, control flow: ptxas' own exact code (its slow paths follow the ret)
        if all(
            o.split(".")[0] in _CORRECTLY_ROUNDED and "rn" in o.split(".") and "ftz" not in o.split(".") for o in ops
        ):
            continue  # a correctly rounded expansion: MUFU start, FFMA Newton steps
        parts = sass.split(".")
        said = " ".join(ops)
        kinds: list[str] = []
        if parts[0] in ("FFMA", "FFMA2") and any("unrounded" in audit.classes(o) for o in ops):
            kinds.append("contraction")
        if "FTZ" in parts[1:]:
            kinds.append("flush")
        if parts[0] == "MUFU":
            kinds.append("approximate")
        if parts[0] in _F64_UNITS and line in promoted:
            kinds.append("double-rounding")
        found += [SassFinding(line, function, sass, said, k) for k in kinds]
    return found
