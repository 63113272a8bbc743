"""``build-host``, ``cost``, ``hexagon-check`` and ``htp-check``: a generated package's kernels built
for this machine, measured, and checked against their Hexagon and QAIRT builds."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from ..opdef import Datatype, OpPackage
from ..qairt import QAIRT_VERSIONS
from ..runtime.cost import KernelCase
from .arguments import add_binding_arguments, add_progress_flags, command_progress, seconds_up_to
from .inputs import generated_package, host_library_of
from .process import EXIT_MISMATCH, EXIT_OK


def _cmd_build_host(args: argparse.Namespace) -> int:
    print(host_library_of(args.package_dir, args.bind, args.imports, command_progress(args)))
    return EXIT_OK


def _shipped_cases(package: OpPackage):
    """The cases a shipped package brings (``shipped_cases``), or None."""
    from .shipped_cases import shipped_cases

    return shipped_cases(package)


def _cmd_cost(args: argparse.Namespace) -> int:
    """Per op and shape: host seconds per call, bytes moved, GB/s, beside the copy bandwidth."""
    from ..runtime import build_host_kernels
    from ..runtime.cost import cases_from_shapes, measure_package
    from ..runtime.dtype_cases import dtype_cases

    package = generated_package(args.package_dir)
    opdef = package.opdef
    own = None if args.shape else _shipped_cases(opdef)
    if args.dtype and not args.shape:
        raise UsageError(f"{args.package_dir}: --dtype needs --shape (the shapes to measure each datatype on)")
    if args.shape and (args.dtype or args.hexagon):  # every declared datatype, as hexagon-check
        cases = dtype_cases(opdef, args.shape, only=_datatypes(args.dtype))
    elif args.shape:
        cases = cases_from_shapes(opdef, args.shape)
    elif own is not None:
        cases = own.cost(opdef)
    else:
        raise UsageError(
            f"{args.package_dir}: say what to measure with --shape OP:TENSOR=DIMS,... "
            "(every input and output of the op, e.g. --shape MyOp:x=1x4096,y=1x4096)"
        )
    progress = command_progress(args)
    library = build_host_kernels(package, progress=progress)
    # always isolated (0.4 s): a kernel that crashes, exits or never returns is reported, not fatal
    measured = measure_package(library, package.name, cases, args.min_seconds, isolated=True, limit=args.time_limit)
    packets = [""] * len(cases)
    if args.hexagon:
        from ..runtime.hexagon import hexagon_packets

        counted = hexagon_packets(package, cases, args.time_limit, progress)
        packets = [f"{call:>14}" for _, call in counted]  # the call's: what it prepares ahead is apart
    print(
        f"{package.name} on one core (cpu {measured.core}); copy bandwidth {measured.copy_bandwidth / 1e9:.2f} GB/s"
        + (
            "; Hexagon: executed VLIW packets per call on qemu-hexagon (a functional emulator: not cycles)"
            if args.hexagon
            else ""
        )
    )
    print(f"{'op':<16}{'input shapes':<36}{'time':>12}{'bytes':>12}{'GB/s':>8}" + (f"{'packets':>14}" * args.hexagon))
    for cost, count in zip(measured.costs, packets):
        print(
            f"{cost.op:<16}{cost.label:<36}{cost.seconds * 1e6:>10.1f}us{cost.nbytes:>12}"
            f"{cost.bandwidth / 1e9:>8.2f}{count}"
        )
    return EXIT_OK


def _datatypes(texts: Sequence[str]) -> list[Datatype]:
    """``--dtype FLOAT_32,UFIXED_POINT_8 ...`` -> datatypes; ``all`` (or none given) -> []: every one."""
    names = [name for text in texts for name in text.split(",") if name.strip().lower() != "all"]
    parsed = [(name, Datatype.parse(name)) for name in names]
    unknown = [name for name, datatype in parsed if datatype is None]
    if unknown:
        raise UsageError(f"--dtype {unknown[0]!r} is not a datatype (write e.g. FLOAT_32 or UFIXED_POINT_8, or all)")
    return [datatype for _, datatype in parsed if datatype is not None]


def _check_cases(package: OpPackage, shapes: Sequence[str]) -> list[KernelCase]:
    """The cases a check runs: at ``shapes`` (``--shape``) every declared datatype, else those a
    shipped package brings, else each op at default dims."""
    from ..runtime.dtype_cases import dtype_cases

    own = None if shapes else _shipped_cases(package)
    return own.check(package) if own is not None else dtype_cases(package, shapes)


def _cmd_hexagon_check(args: argparse.Namespace) -> int:
    """Each op and datatype: host and Hexagon (emulated) outputs bit for bit, executed packets."""
    from ..runtime.hexagon import HEXAGON_CPU, QEMU_CPU, hexagon_check

    package = generated_package(args.package_dir)
    cases = _check_cases(package.opdef, args.shape)
    results = hexagon_check(package, cases, args.time_limit, command_progress(args))
    for result in results:
        print(result)
    checked = [r for r in results if not r.not_applicable]
    if not checked:
        raise UsageError(
            f"{args.package_dir}: nothing was checked: the default dims are no shape its ops take "
            "(give shapes with --shape OP:TENSOR=DIMS,...)"
        )
    failed = sum(not r.passed for r in checked)
    skipped = f", {len(results) - len(checked)} not applicable" if len(checked) < len(results) else ""
    print(
        f"{len(checked) - failed} of {len(checked)} case(s) bit-exact between the host and Hexagon ({HEXAGON_CPU}, "
        f"qemu-hexagon -cpu {QEMU_CPU}){skipped}; packets are executed VLIW packets on a functional emulator, "
        "not cycles"
    )
    return EXIT_OK if not failed else EXIT_MISMATCH


def _cmd_htp_check(args: argparse.Namespace) -> int:
    """Each op and datatype: the host kernel and the QHPI package in QAIRT's x86 HTP backend, bit for bit."""
    from ..runtime.htp import htp_check

    package = generated_package(args.package_dir)
    versions = args.qairt or list(QAIRT_VERSIONS)
    cases = _check_cases(package.opdef, args.shape)
    library, results = htp_check(package, cases, versions, command_progress(args))
    for result in results:
        print(result)
    checked = [r for r in results if not r.not_applicable]
    failed = sum(not r.passed for r in checked)
    print(
        f"{len(checked) - failed} of {len(checked)} case run(s) bit-exact between the host and QAIRT's x86 HTP "
        f"backend ({', '.join(versions)}), all with one build: {library}"
    )
    return EXIT_OK if not failed else EXIT_MISMATCH


def _add_shape_argument(parser: argparse.ArgumentParser, help_text: str) -> None:
    """``--shape OP:TENSOR=DIMS,...`` (repeatable): the cases ``cost`` and the checks run."""
    parser.add_argument("--shape", action="append", default=[], metavar="OP:TENSOR=DIMS,...", help=help_text)


def add_commands(commands: Any) -> None:
    """``build-host``, ``cost``, ``hexagon-check`` and ``htp-check`` under the CLI's subcommands."""
    build_host = commands.add_parser(
        "build-host", help="build (cached) a package's host kernel library; print its path"
    )
    build_host.add_argument("package_dir", metavar="PACKAGE_DIR")
    add_binding_arguments(build_host)
    add_progress_flags(build_host)
    build_host.set_defaults(handler=_cmd_build_host)
    cost = commands.add_parser("cost", help="time each op's host kernel per shape; bytes moved and GB/s")
    cost.add_argument("package_dir", metavar="PACKAGE_DIR")
    _add_shape_argument(
        cost,
        "an op and the shape of each of its inputs and outputs, e.g. "
        "MyOp:x=1x4096,y=1x4096 (repeatable; a shipped package such as LlmOpPackage brings its own)",
    )
    cost.add_argument(
        "--min-seconds",
        type=seconds_up_to(60),
        default=0.2,
        help="length of each timing round (0 < S <= 60, default 0.2)",
    )
    cost.add_argument(  # measuring in a child is the default now: accepted so scripts written for it run
        "--isolated", action="store_true", help=argparse.SUPPRESS
    )
    cost.add_argument(
        "--time-limit",
        type=seconds_up_to(86400),
        metavar="SECONDS",
        help="seconds measuring one case may take before its kernel is taken for one that never returns "
        "(default: 6 timing rounds plus 2 s per call)",
    )
    cost.add_argument(
        "--hexagon",
        action="store_true",
        help="also count each call's executed packets on Hexagon (qemu-hexagon; slow for big shapes), "
        "at every datatype the op declares unless --dtype says",
    )
    cost.add_argument(
        "--dtype",
        action="append",
        default=[],
        metavar="DT[,DT...]",
        help="measure the --shape cases at these datatypes of the op's output (e.g. UFIXED_POINT_8, or all; "
        "default: FLOAT_32, or every declared one with --hexagon)",
    )
    add_progress_flags(cost)
    cost.set_defaults(handler=_cmd_cost)
    hexagon = commands.add_parser(
        "hexagon-check",
        help="run each op's kernel for Hexagon under qemu-hexagon; compare "
        "with the host bit for bit; count executed packets",
    )
    hexagon.add_argument("package_dir", metavar="PACKAGE_DIR")
    _add_shape_argument(
        hexagon,
        "an op and the shape of each of its inputs and outputs, checked at every datatype "
        "it declares (repeatable; default: each op with dims 2x3x5x9 cut to each rank; "
        "a shipped package such as LlmOpPackage brings its own)",
    )
    hexagon.add_argument(
        "--time-limit",
        type=seconds_up_to(86400),
        metavar="SECONDS",
        help="seconds each case may run under the emulator before it is taken for a kernel that never "
        "returns (default: 30 s plus 2 ms per element of its tensors)",
    )
    add_progress_flags(hexagon)
    hexagon.set_defaults(handler=_cmd_hexagon_check)
    htp = commands.add_parser(
        "htp-check",
        help="build the package as QHPI for x86 and run each op's kernel in QAIRT's own HTP backend (its x86 "
        "simulator, from onnxruntime-qnn's wheels, installed once); compare with the host bit for bit",
    )
    htp.add_argument("package_dir", metavar="PACKAGE_DIR")
    htp.add_argument(
        "--qairt",
        action="append",
        default=[],
        choices=QAIRT_VERSIONS,
        metavar="VERSION",
        help=f"a QAIRT release to run in (repeatable; default: all of {', '.join(QAIRT_VERSIONS)})",
    )
    _add_shape_argument(
        htp,
        "as for hexagon-check (default: each op with dims 2x3x5x9 cut to each rank, or the cases a "
        "shipped package brings)",
    )
    add_progress_flags(htp)
    htp.set_defaults(handler=_cmd_htp_check)
