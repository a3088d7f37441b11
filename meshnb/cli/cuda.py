"""``meshnb ptx audit`` and ``meshnb gpu-check``: the CUDA image's commands.

    meshnb ptx audit FILE... [--json] [--meshnb] [--allow-f64 NAME] [--sass]
    meshnb gpu-check [--systems M] [--steps S] [--sample K] [--json]

``ptx audit`` runs :mod:`meshnb.conformance.audit` (and :mod:`meshnb.conformance.sass` with
``--sass``) on PTX files and, with ``--meshnb``, on meshnb's kernels compiled for sm_80 and sm_90:
exit 0 clean, 1 findings, 2 bad input.  ``gpu-check`` (on a GPU) runs the quick pack, the hard
pages in IEEE mode and a sweep through the CUDA image, bit-compared with the CPU: exit 0 all equal,
1 a difference, 2 no numba-cuda or no device.  Both: docs/guide/gpu.md.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from ..options import arg_type, parse_count
from .base import EXIT_FAILED, EXIT_OK, error

# -- ptx audit ---------------------------------------------------------------------------------


def _audit(args: argparse.Namespace) -> int:
    from ..conformance import audit

    if not args.files and not args.meshnb:
        return error("ptx audit: give PTX files, or --meshnb")
    found: list[tuple[str, audit.Violation]] = []
    sources: list[tuple[str, str, list[str]]] = []  # (name, text, its allowed functions) of every module
    allow = args.allow_f64 or []
    known: set[str] = set()

    def add(label: str, text: str) -> None:
        mine = sorted(set(allow) & audit.functions(text)) if allow else []
        known.update(mine)
        found.extend((label, v) for v in audit.audit_text(text, mine))
        sources.append((label, text, mine))

    try:
        if args.sass:  # the tools first: no compile or read before saying they are missing
            from ..conformance import sass

            sass.find_tools()
        for name in args.files:
            text = audit.read_ptx(name)
            try:
                add(name, text)
            except audit.PtxError as e:
                raise audit.PtxError(f"{name!r}: {e}") from None
        if args.meshnb:
            from ..cuda import ptx

            for cc in ptx.TARGETS:
                for kernel, text in ptx.compile_meshnb(cc).items():
                    add(f"meshnb:{kernel}:sm_{cc[0]}{cc[1]}", text)
        unknown = sorted(set(allow) - known)
        if unknown:  # a typo would allow nothing
            return error(
                f"ptx audit: --allow-f64 names no function of the audited modules: {', '.join(map(repr, unknown))}"
            )
        sass_found: list[tuple[str, Any]] = []
        if args.sass:
            for label, text, mine in sources:  # meshnb's own modules are compiled for sm_80 and sm_90
                sass_found += [(label, f) for f in sass.audit_sass(text, sass.arch_of(text), mine)]
    except (OSError, ValueError, RuntimeError) as e:  # unreadable, not PTX, no numba-cuda, no ptxas
        return error(str(e) if not isinstance(e, OSError) else f"cannot read: {e.strerror or e}")
    modules = len(sources)
    if args.json:
        doc: dict[str, Any] = {"violations": [{"file": f, **v.to_json()} for f, v in found]}
        if args.sass:
            doc["sass"] = [{"file": f, **s.to_json()} for f, s in sass_found]
        print(json.dumps(doc))
    else:
        for f, v in found:
            why = f" ({v.why})" if v.why else ""  # the rule that decided it
            source = f" [{v.source}]" if v.source else ""  # the CUDA source line (.loc)
            print(f"{audit.shown(f)}:{v.line}: {v.function}: {v.instruction}: {v.kind}{why}{source}")
        for f, s in sass_found:
            print(f"{audit.shown(f)}:{s.line}: {s.function}: {s.sass} <- {s.ptx}: {s.kind}")
        total = len(found) + len(sass_found)
        what = " (PTX and SASS)" if args.sass else ""
        print(f"{total} finding{'s' * (total != 1)}{what} in {modules} PTX module{'s' * (modules != 1)}")
    return EXIT_FAILED if found or sass_found else EXIT_OK


# -- gpu-check: the checks are meshnb.conformance.gpu's, the command parses and prints ----------


def _gpu_check(args: argparse.Namespace) -> int:
    from ..conformance import gpu
    from ..cuda import host

    for flag, value in (("--systems", args.systems), ("--steps", args.steps), ("--sample", args.sample)):
        if value < 1:  # refused before the device and the pack (--steps 0 divided by zero after them)
            return error(f"gpu-check: {flag} must be at least 1, got {value}")
    if args.steps >= 1 << 63:
        return error(f"gpu-check: --steps must be at most 2^63 - 1, got {args.steps}")
    from ..runspec import check_fits

    try:  # the host holds every system's page (and its LR and step base): refused before the device's minutes
        check_fits((4096 + 32) * args.systems, f"--systems {args.systems}", "check fewer systems")
    except ValueError as e:
        return error(f"gpu-check: {e}")
    try:
        if host.simulated():
            return error("gpu-check needs a device: unset NUMBA_ENABLE_CUDASIM (the simulator is for the tests)")
        device = host.device_name()
    except RuntimeError as e:
        return error(str(e))
    began = time.perf_counter()
    print(f"device: {device}", flush=True)
    cases = gpu.pack_check()
    for name, verdict in cases:
        print(f"pack {name}: {verdict}", flush=True)
    ieee = gpu.ieee_check()
    failed = [n for n, v in ieee if v != "PASS"]
    verdict = "PASS" if not failed else "FAIL " + " ".join(failed)
    print(f"ieee mode, {len(ieee)} hard pages, NaN words as any NaN: {verdict}", flush=True)
    sw = gpu.sweep_check(args.systems, args.steps, args.sample)
    ok = gpu.passed(cases, ieee, sw)
    if args.json:
        doc = {
            "device": device,
            "pack": dict(cases),
            "ieee": dict(ieee),
            "sweep": sw,
            "ok": ok,
            "seconds": time.perf_counter() - began,
        }
        print(json.dumps(doc))
    else:
        gpu, cpu = sw["gpu_system_steps_per_s"], sw["cpu_system_steps_per_s"]
        print(
            f"sweep: {sw['systems']} systems x {sw['steps']} steps; {sw['sampled']} sampled: pages "
            f"{'equal' if sw['pages_equal'] else 'DIFFER'}, trace digests "
            f"{'equal' if sw['trace_digests_equal'] else 'DIFFER'}"
        )
        for line in sw["differences"]:
            print(f"  {line}")
        print("speed (system-steps per second):")
        print(f"  gpu sweep  {sw['systems']:>9} systems x {sw['steps']} steps  {gpu:>10.4g}")
        print(f"  cpu sweep  {sw['cpu_systems_timed']:>9} systems x {sw['steps']} steps  {cpu:>10.4g}")
        print(f"  gpu / cpu  {gpu / cpu:.1f}x")
        print(f"gpu-check: {'PASS' if ok else 'FAIL'} in {time.perf_counter() - began:.1f} s")
    return EXIT_OK if ok else EXIT_FAILED


# -- wiring ------------------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Adds ``ptx`` (``ptx audit``) and ``gpu-check`` to an argparse sub-parser set (handler in
    ``args.handler``)."""
    p = subparsers.add_parser("ptx", help="PTX tools: audit PTX for float mode Z (exit 0 clean, 1 findings)")
    sub = p.add_subparsers(dest="ptx_command", required=True, metavar="COMMAND")
    a = sub.add_parser(
        "audit",
        help="list every float instruction that can break float mode Z",
        description=(
            "List every instruction of PTX files that can break float mode Z (exit 0 clean, 1 findings, 2 bad"
            " input).  Default-deny: an instruction of a float type (any width: f16, bf16, f32, f64, packed) that"
            " no row of mode Z's table allows, or an opcode the table does not know on a float register, is a"
            " finding of class 'unverified', with the reason; the classes contraction, unrounded, flush,"
            " approximate, directed-rounding and double-rounding name what they cover.  To allow a new form,"
            " add a row to MODE_Z in meshnb/conformance/audit.py (and to docs/guide/gpu.md) with why it keeps mode Z's"
            " bits, and a test."
        ),
    )
    a.add_argument("files", nargs="*", metavar="FILE", help="PTX files")
    a.add_argument("--json", action="store_true", help='print {"violations": [...]}')
    a.add_argument("--meshnb", action="store_true", help="also compile meshnb's kernels (sm_80, sm_90) and audit them")
    a.add_argument(
        "--allow-f64",
        action="append",
        metavar="NAME",
        help="a function whose f64 arithmetic is declared legitimate (no rule can decide it); repeatable",
    )
    a.add_argument(
        "--sass",
        action="store_true",
        help="also assemble with ptxas and audit the machine code (the [cuda] extra's ptxas and nvdisasm)",
    )
    a.set_defaults(handler=_audit)
    g = subparsers.add_parser(
        "gpu-check", help="on a GPU: the quick pack and a sweep through the CUDA image, bit-checked"
    )
    g.add_argument("--systems", type=arg_type(parse_count), default=100_000, metavar="M", help="default 10^5")
    g.add_argument("--steps", type=arg_type(parse_count), default=1024, metavar="S", help="default 1024")
    g.add_argument("--sample", type=arg_type(parse_count), default=256, metavar="K", help="systems compared (256)")
    g.add_argument("--json", action="store_true", help="print one JSON document")
    g.set_defaults(handler=_gpu_check)
