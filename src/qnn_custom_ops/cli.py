"""Command line: ``qnn-custom-ops SUBCOMMAND`` and ``generate-op-package``.

Exit codes: 0 success, 2 invalid input (one line per problem on stderr), 1 internal error,
3 outputs outside the tolerance (``run``).
No traceback reaches the user unless QCO_DEBUG=1.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

from .atomic_files import refusal_text
from .errors import ReportedError, UsageError
from .llm_cli import add_llm_commands
from .opdef import Datatype, OpDefError, OpDefWarning, OpPackage, load_package
from .progress import show_progress
from .qairt import QAIRT_VERSIONS
from .quiet import native_noise_filtered, quiet_third_party

if TYPE_CHECKING:
    from .runtime.raw_io import TensorSpec

EXIT_OK, EXIT_INTERNAL, EXIT_INVALID, EXIT_MISMATCH = 0, 1, 2, 3


def _load(configs: Sequence[str]) -> OpPackage:
    """Load configs, printing each tolerated oddity as its one-line warning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", OpDefWarning)
        package = load_package(*configs)
    for warning in caught:
        print(str(warning.message), file=sys.stderr)
    return package


def _cmd_validate(args: argparse.Namespace) -> int:
    package = _load(args.configs)
    ops = ", ".join(package.ops)
    print(f"{package.name}: {len(package.ops)} op(s) valid: {ops}")
    return EXIT_OK


def _cmd_generate(args: argparse.Namespace) -> int:
    from .generator import generate

    package = _load(args.configs)
    result = generate(package, args.output, force=args.force, dry_run=args.dry_run, api=args.api)
    for step in result.steps:
        if args.dry_run or step.action.value != "unchanged":
            print(step)
    print(result.summary())
    return EXIT_OK


def _resolve_op(spec: str) -> tuple[str | None, Any]:
    """``MODULE:ns.op[.overload][=QnnType]`` -> (QNN type or None, the torch overload)."""
    target, _, qnn_type = spec.partition("=")
    module, sep, op = target.rpartition(":")
    if not sep or not module or not op:
        raise UsageError(f"{spec!r}: expected MODULE:NAMESPACE.OP[.OVERLOAD][=QnnOpType]")
    _import_user_module(module, repr(spec))
    return qnn_type or None, _torch_overload(op, repr(spec), f"after importing {module}")


def _import_user_module(module: str, where: str) -> None:
    """Import a module of the user's, from the current directory too (as ``python -m`` would)."""
    import importlib

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise UsageError(f"{where}: cannot import {module} from the current directory or sys.path: {exc}") from exc
    except Exception as exc:  # the user's module failed while importing: their code, their error
        raise UsageError(f"{where}: importing {module} raised {type(exc).__name__}: {exc}") from exc
    except SystemExit as exc:  # would end the command with no word of what it did not do
        raise UsageError(
            f"{where}: importing {module} called sys.exit({exc.code!r}): a module given here must "
            "only register ops (put its script part under if __name__ == '__main__':)"
        ) from exc


def _torch_overload(name: str, where: str, hint: str):
    """``ns.op[.overload]`` or ``ns::op[.overload]`` -> the registered torch overload."""
    import torch

    parts = name.replace("::", ".").split(".")
    if len(parts) not in (2, 3):
        raise UsageError(f"{where}: name the op as NAMESPACE.OP or NAMESPACE.OP.OVERLOAD")
    namespace, op, overload = (*parts, "default")[:3]
    try:
        return getattr(getattr(getattr(torch.ops, namespace), op), overload)
    except (AttributeError, RuntimeError) as exc:
        raise UsageError(f"{where}: no torch op {namespace}::{op}.{overload} {hint}") from exc


def _cmd_opdef_from_torch(args: argparse.Namespace) -> int:
    from .torch_bridge.from_torch import opdefs_from_torch, qnn_type_for, tensor_choices

    ops: dict[str, Any] = {}
    for spec in args.ops:
        qnn_type, overload = _resolve_op(spec)
        qnn_type = qnn_type or qnn_type_for(overload)
        if qnn_type in ops:
            raise UsageError(
                f"{spec!r}: QNN op type {qnn_type} is already {ops[qnn_type]}'s: "
                f"give one of them another with ={qnn_type}2"
            )
        ops[qnn_type] = overload
    enums = {}
    for item in args.enum:
        name, _, values = item.partition("=")
        if not values:
            raise UsageError(f"--enum {item!r}: expected ARG=value1,value2,...")
        enums[name] = values.split(",")
    tensors = tensor_choices(args.dtype, args.static, args.activations)
    xml = opdefs_from_torch(ops, package=args.package, enums=enums, tensors=tensors)
    if args.output:
        from .atomic_files import write_atomic

        write_atomic(Path(args.output), xml.encode())
        print(f"wrote {args.output}: {', '.join(ops)}")
    else:
        sys.stdout.write(xml)
    return EXIT_OK


def _load_tensors(paths: Sequence[str], specs: Sequence[TensorSpec], what: str) -> list:
    """Tensors from .pt files (torch.save) or .raw files shaped by the program's metadata."""
    import torch

    if len(paths) != len(specs):
        raise UsageError(f"the program has {len(specs)} {what}(s), {len(paths)} file(s) given")
    tensors = []
    for path, spec in zip(map(Path, paths), specs):
        if not path.is_file():
            raise UsageError(f"{path}: no such {what} file")
        if path.suffix == ".pt":
            tensors.append(_load_pt(path, spec, what))
            continue
        data = path.read_bytes()
        if len(data) != spec.nbytes:
            raise UsageError(
                f"{path}: {len(data)} bytes, the program's {what} needs {spec.nbytes} "
                f"({spec.dtype}, shape {list(spec.shape)})"
            )
        tensors.append(torch.frombuffer(bytearray(data), dtype=spec.dtype).reshape(spec.shape))
    return tensors


def _load_pt(path: Path, spec: TensorSpec, what: str):
    """One tensor saved with torch.save, checked against the program's metadata."""
    import torch

    try:
        value = torch.load(path, weights_only=True)
    except Exception as exc:  # torch raises many kinds for a file that is not a tensor
        raise UsageError(
            f"{path}: not a tensor saved with torch.save ({type(exc).__name__}); save the {what} "
            "with torch.save(tensor, path)"
        ) from None
    if not isinstance(value, torch.Tensor):
        raise UsageError(f"{path}: holds a {type(value).__name__}, not a tensor; save the {what} itself")
    if tuple(value.shape) != tuple(spec.shape) or value.dtype != spec.dtype:
        raise UsageError(
            f"{path}: {str(value.dtype).replace('torch.', '')} {list(value.shape)}, the program's "
            f"{what} is {str(spec.dtype).replace('torch.', '')} {list(spec.shape)}"
        )
    return value.contiguous()


def _package_configs(package_dir: str) -> list[Path]:
    configs = sorted(Path(package_dir).glob("config/*.xml"))
    if not configs:
        raise UsageError(f"{package_dir}: no config/*.xml (is it a package made by generate-op-package?)")
    return configs


def _host_library(package_dir: str, binds: Sequence[str], modules: Sequence[str]) -> Path:
    """Build (cached) the host library of ``package_dir`` for ``QnnOp=ns::op`` bindings, after
    importing the modules that register the ops."""
    from .runtime import build_host_library
    from .torch_bridge import bind
    from .torch_bridge.binding import MissingOutVariantWarning

    for module in modules:
        _import_user_module(module, f"--import {module}")
    package = _load([str(c) for c in _package_configs(package_dir)])
    mapping = {}
    for item in binds:
        qnn_type, _, op = item.partition("=")
        if not qnn_type or not op:
            raise UsageError(f"--bind {item!r}: expected QnnOpType=NAMESPACE::OP[.OVERLOAD]")
        mapping[qnn_type] = _torch_overload(op, f"--bind {item!r}", "(--import the module that registers it)")
    with warnings.catch_warnings():  # the build refuses a missing .out variant with the same fix
        warnings.simplefilter("ignore", MissingOutVariantWarning)
        binding = bind(package, mapping)
    return build_host_library(package_dir, binding)


def _cmd_build_host(args: argparse.Namespace) -> int:
    print(_host_library(args.package_dir, args.bind, args.imports))
    return EXIT_OK


def _shipped_cases(package: OpPackage):
    """The cases a shipped package brings (``shipped_cases``), or None."""
    from .shipped_cases import shipped_cases

    return shipped_cases(package)


def _cmd_cost(args: argparse.Namespace) -> int:
    """Per op and shape: host seconds per call, bytes moved, GB/s, beside the copy bandwidth."""
    from .runtime import build_host_kernels
    from .runtime.cost import cases_from_shapes, measure_package
    from .runtime.dtype_cases import dtype_cases

    package = _load([str(c) for c in _package_configs(args.package_dir)])
    own = None if args.shape else _shipped_cases(package)
    if args.dtype and not args.shape:
        raise UsageError(f"{args.package_dir}: --dtype needs --shape (the shapes to measure each datatype on)")
    if args.shape and (args.dtype or args.hexagon):  # every declared datatype, as hexagon-check
        cases = dtype_cases(package, args.shape, only=_datatypes(args.dtype))
    elif args.shape:
        cases = cases_from_shapes(package, args.shape)
    elif own is not None:
        cases = own.cost(package)
    else:
        raise UsageError(
            f"{args.package_dir}: say what to measure with --shape OP:TENSOR=DIMS,... "
            "(every input and output of the op, e.g. --shape MyOp:x=1x4096,y=1x4096)"
        )
    library = build_host_kernels(args.package_dir)
    # always isolated (0.4 s): a kernel that crashes, exits or never returns is reported, not fatal
    measured = measure_package(library, package.name, cases, args.min_seconds, isolated=True, limit=args.time_limit)
    packets = [""] * len(cases)
    if args.hexagon:
        from .runtime.hexagon import hexagon_packets

        counted = hexagon_packets(args.package_dir, cases, args.time_limit)
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


def _cmd_hexagon_check(args: argparse.Namespace) -> int:
    """Each op and datatype: host and Hexagon (emulated) outputs bit for bit, executed packets."""
    from .runtime.dtype_cases import dtype_cases
    from .runtime.hexagon import HEXAGON_CPU, QEMU_CPU, hexagon_check

    package = _load([str(c) for c in _package_configs(args.package_dir)])
    own = None if args.shape else _shipped_cases(package)
    cases = own.check(package) if own is not None else dtype_cases(package, args.shape)
    results = hexagon_check(args.package_dir, cases, args.time_limit)
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
    from .runtime.dtype_cases import dtype_cases
    from .runtime.htp import htp_check

    package = _load([str(c) for c in _package_configs(args.package_dir)])
    own = None if args.shape else _shipped_cases(package)
    cases = own.check(package) if own is not None else dtype_cases(package, args.shape)
    versions = args.qairt or list(QAIRT_VERSIONS)
    library, results = htp_check(args.package_dir, package, cases, versions)
    for result in results:
        print(result)
    checked = [r for r in results if not r.not_applicable]
    failed = sum(not r.passed for r in checked)
    print(
        f"{len(checked) - failed} of {len(checked)} case run(s) bit-exact between the host and QAIRT's x86 HTP "
        f"backend ({', '.join(versions)}), all with one build: {library}"
    )
    return EXIT_OK if not failed else EXIT_MISMATCH


def _runner(args: argparse.Namespace):
    from .runtime import DeviceRunner, HostRunner, X86Runner

    if args.target == "host":
        libraries = [Path(p) for p in args.library]
        if args.package:
            libraries.append(_host_library(args.package, args.bind, args.imports))
        return HostRunner(libraries, isolated=args.isolated)
    if args.target == "x86":
        if args.build_folder:
            return X86Runner(Path(args.build_folder))
        from .runtime.simulator import SimulatorRunner

        return SimulatorRunner()
    if not args.build_folder:
        raise UsageError(f"--target {args.target} needs --build-folder (your ExecuTorch build with the QNN backend)")
    if not args.device or not args.soc:
        raise UsageError("--target device needs --device SERIAL and --soc (e.g. SM8650)")
    device_libraries: dict[str, Path] = {}
    for item in args.op_package_lib:
        remote, _, local = item.partition("=")
        if not local:
            raise UsageError(f"--op-package-lib {item!r}: expected DEVICE_PATH=LOCAL_LIBRARY")
        device_libraries[remote] = Path(local)
    return DeviceRunner(args.device, args.soc, Path(args.build_folder), device_libraries, adb_host=args.adb_host)


def _cmd_run(args: argparse.Namespace) -> int:
    from .lowering.program import encodings_file, read_output_encodings
    from .runtime import Tolerance, compare_outputs, method_specs

    pte_path = Path(args.model)
    if not pte_path.is_file():
        raise UsageError(f"{pte_path}: no such program")
    pte = pte_path.read_bytes()
    input_specs, output_specs = method_specs(pte, where=str(pte_path))
    inputs = _load_tensors(args.inputs, input_specs, "input")
    with native_noise_filtered(args.verbose):
        (outputs,) = _runner(args).run(pte, [inputs])
    if not args.golden:
        for index, output in enumerate(outputs):
            print(f"output {index}: {list(output.shape)} {str(output.dtype).replace('torch.', '')}")
        return EXIT_OK
    goldens = _load_tensors(args.golden, output_specs, "golden")
    encodings = read_output_encodings(pte_path)
    if encodings is None:
        print(
            f"note: no {encodings_file(pte_path).name} beside the program (written by lower(output=...)): "
            "errors are compared in absolute terms only",
            file=sys.stderr,
        )
    reports = compare_outputs(outputs, goldens, Tolerance(args.atol, args.min_sqnr, args.lsb), encodings=encodings)
    for report in reports:
        print(report)
    return EXIT_OK if all(r.passed for r in reports) else EXIT_MISMATCH


def _add_generate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("configs", nargs="+", metavar="CONFIG", help="OpDef XML config(s) of one package")
    parser.add_argument(
        "-o",
        "--output",
        default=".",
        metavar="OUT",
        help="directory that receives <PackageName>/ (default: current directory)",
    )
    parser.add_argument(
        "--force", action="store_true", help="overwrite src/ops/*.cpp and kernels/*.h even if you edited them"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    parser.add_argument(
        "--api",
        choices=("classic", "qhpi"),
        default="classic",
        help="the op package interface: classic (the HTP's C++ one, built against one QNN SDK's headers) or "
        "qhpi (QAIRT's C plugin interface: no SDK header, one x86 build for every QAIRT with QHPI)",
    )
    parser.set_defaults(handler=_cmd_generate)


def _add_binding_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bind",
        action="append",
        default=[],
        metavar="QnnOp=NS::OP",
        help="bind a QNN op of the package to a torch op (repeatable)",
    )
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="module that registers the torch ops (repeatable; the current directory is searched)",
    )


def _seconds_up_to(upper: float) -> Callable[[str], float]:
    """An argument type: a finite number of seconds in (0, upper]."""

    def seconds(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not 0 < value <= upper:  # false for nan too
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds in (0, {upper:g}]")
        return value

    return seconds


def _add_quiet_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quiet", action="store_true", help="no progress lines on stderr (shown only when it is a terminal)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="qnn-custom-ops", description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="show third-party log lines and warnings too")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    validate = commands.add_parser("validate", help="check OpDef configs; print every problem")
    validate.add_argument("configs", nargs="+", metavar="CONFIG")
    validate.set_defaults(handler=_cmd_validate)
    _add_generate_arguments(commands.add_parser("generate", help="generate the HTP op package"))
    from_torch = commands.add_parser("opdef-from-torch", help="write an OpDef config for existing torch ops")
    from_torch.add_argument(
        "ops",
        nargs="+",
        metavar="MODULE:OP[=QnnOpType]",
        help="module that registers the op, and the op, e.g. my_model.ops:my_ops.mul3.default",
    )
    from_torch.add_argument("--package", required=True, help="PackageName of the config")
    from_torch.add_argument(
        "--enum", action="append", default=[], metavar="ARG=V1,V2", help="allowed values of a str argument (repeatable)"
    )
    from_torch.add_argument(
        "--dtype",
        action="append",
        default=[],
        metavar="ARG=DT[,DT]",
        help="datatypes of a tensor argument or output, e.g. indices=INT_32 (repeatable)",
    )
    from_torch.add_argument(
        "--static",
        action="append",
        default=[],
        metavar="ARG",
        help="a weight input: IsStaticTensor, with each quant_dtype's weight datatypes",
    )
    from_torch.add_argument(
        "--activations",
        default="8",
        metavar="8,16",
        help="fixed-point widths of the other tensors besides FLOAT_32 (default 8)",
    )
    from_torch.add_argument("-o", "--output", help="config file to write (default: standard output)")
    from_torch.set_defaults(handler=_cmd_opdef_from_torch)
    run = commands.add_parser("run", help="run a .pte on the host, the QNN x86 simulator or a device; compare")
    run.add_argument("model", metavar="MODEL.pte")
    run.add_argument("--target", choices=("host", "x86", "device"), default="host")
    run.add_argument("--inputs", nargs="+", default=[], metavar="FILE", help=".pt (torch.save) or .raw, in order")
    run.add_argument("--golden", nargs="+", default=[], metavar="FILE", help="expected outputs, .pt or .raw")
    run.add_argument("--atol", type=float, default=1e-4, help="pass when max abs error <= ATOL (default 1e-4)")
    run.add_argument("--min-sqnr", type=float, default=float("inf"), help="... or SQNR >= this many dB")
    run.add_argument(
        "--lsb",
        type=float,
        default=1.0,
        help="... or, for a quantized output, within LSB steps of its scale (default 1)",
    )
    run.add_argument("--library", action="append", default=[], help="host kernel library to load (host target)")
    run.add_argument(
        "--build-folder",
        help="ExecuTorch build with the QNN backend (device target; x86: its qnn_executor_runner, else ExecuTorch's "
        "own runtime from its wheel on QAIRT's x86 HTP simulator, installed from PyPI once)",
    )
    run.add_argument("--device", help="adb serial (device target)")
    run.add_argument("--adb-host", help="adb server host (adb -H)")
    run.add_argument("--soc", help="SoC of the device, e.g. SM8650 (device target)")
    run.add_argument(
        "--op-package-lib",
        action="append",
        default=[],
        metavar="DEVICE_PATH=LOCAL",
        help="op package library to push (device target); the device path the compile spec baked in",
    )
    run.add_argument(
        "--package", metavar="PACKAGE_DIR", help="build this package's host library and load it (host target)"
    )
    run.add_argument(
        "--isolated",
        action="store_true",
        help="run in a child process: a kernel that crashes is reported, not fatal (host target)",
    )
    _add_binding_arguments(run)
    _add_quiet_flag(run)
    run.set_defaults(handler=_cmd_run)
    build_host = commands.add_parser(
        "build-host", help="build (cached) a package's host kernel library; print its path"
    )
    build_host.add_argument("package_dir", metavar="PACKAGE_DIR")
    _add_binding_arguments(build_host)
    _add_quiet_flag(build_host)
    build_host.set_defaults(handler=_cmd_build_host)
    cost = commands.add_parser("cost", help="time each op's host kernel per shape; bytes moved and GB/s")
    cost.add_argument("package_dir", metavar="PACKAGE_DIR")
    cost.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="OP:TENSOR=DIMS,...",
        help="an op and the shape of each of its inputs and outputs, e.g. "
        "MyOp:x=1x4096,y=1x4096 (repeatable; a shipped package such as LlmOpPackage brings its own)",
    )
    cost.add_argument(
        "--min-seconds",
        type=_seconds_up_to(60),
        default=0.2,
        help="length of each timing round (0 < S <= 60, default 0.2)",
    )
    cost.add_argument(  # measuring in a child is the default now: accepted so scripts written for it run
        "--isolated", action="store_true", help=argparse.SUPPRESS
    )
    cost.add_argument(
        "--time-limit",
        type=_seconds_up_to(86400),
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
    _add_quiet_flag(cost)
    cost.set_defaults(handler=_cmd_cost)
    hexagon = commands.add_parser(
        "hexagon-check",
        help="run each op's kernel for Hexagon under qemu-hexagon; compare "
        "with the host bit for bit; count executed packets",
    )
    hexagon.add_argument("package_dir", metavar="PACKAGE_DIR")
    hexagon.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="OP:TENSOR=DIMS,...",
        help="an op and the shape of each of its inputs and outputs, checked at every datatype "
        "it declares (repeatable; default: each op with dims 2x3x5x9 cut to each rank; "
        "a shipped package such as LlmOpPackage brings its own)",
    )
    hexagon.add_argument(
        "--time-limit",
        type=_seconds_up_to(86400),
        metavar="SECONDS",
        help="seconds each case may run under the emulator before it is taken for a kernel that never "
        "returns (default: 30 s plus 2 ms per element of its tensors)",
    )
    _add_quiet_flag(hexagon)
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
    htp.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="OP:TENSOR=DIMS,...",
        help="as for hexagon-check (default: each op with dims 2x3x5x9 cut to each rank, or the cases a "
        "shipped package brings)",
    )
    _add_quiet_flag(htp)
    htp.set_defaults(handler=_cmd_htp_check)
    add_llm_commands(commands)
    return parser


@contextlib.contextmanager
def _our_warnings_one_line() -> Iterator[None]:
    """Show our warnings as the one line each was written as (``warning: ...``), not with the
    file, line and source of the code that warned, which are ours, not the user's."""
    show = warnings.showwarning

    def show_ours_plainly(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        if category.__module__.split(".")[0] == __package__:
            print(f"warning: {message}", file=sys.stderr)
        else:
            show(message, category, *args, **kwargs)

    warnings.showwarning = show_ours_plainly
    try:
        yield
    finally:
        warnings.showwarning = show


class StdoutWriteError(ReportedError, OSError):
    """Standard output refused a write (``>/dev/full``, a full disk, a closed pipe)."""


class _RefusalsNamed:
    """Standard output whose refused writes say so (``StdoutWriteError``): print's bare OSError
    would read as an internal error."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._guarded(lambda: self._stream.write(text))

    def flush(self) -> None:
        self._guarded(self._stream.flush)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    @staticmethod
    def _guarded(call: Callable[[], Any]) -> Any:
        try:
            return call()
        except OSError as exc:
            raise StdoutWriteError(
                f"standard output: cannot be written: {refusal_text(exc)} (free some space, or send it elsewhere)"
            ) from exc


class _Closed:
    """Standard output of a command started with it closed (``>&-``), where Python has none:
    its first write says so."""

    def write(self, text: str) -> int:
        raise StdoutWriteError(
            "standard output: closed (started with >&-), so nothing can be printed; give it somewhere to write "
            "(> FILE, or > /dev/null)"
        )

    def flush(self) -> None:
        """Nothing is held."""


@contextlib.contextmanager
def _stdout_refusals_named() -> Iterator[None]:
    """Standard output as ``_RefusalsNamed`` inside the block, flushed before it ends: what is
    still buffered fails here, not in the interpreter's last flush."""
    stdout = sys.stdout
    sys.stdout = cast(TextIO, _RefusalsNamed(stdout) if stdout is not None else _Closed())
    try:
        yield
        sys.stdout.flush()
    finally:
        sys.stdout = stdout


def _discard_stdout() -> None:
    """Point file descriptor 1 at /dev/null, so the interpreter's exit flush of what stdout
    still holds cannot fail again with a second report."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # no descriptor (a captured or closed stream)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


class Terminated(BaseException):
    """A signal (SIGTERM, SIGHUP) asked the command to end: raised where it runs, as Ctrl-C's
    KeyboardInterrupt is, so every ``finally`` runs first (an emulator or an isolated child
    killed, temporary directories removed)."""

    def __init__(self, number: int) -> None:
        super().__init__(number)
        self.number = number


def _raise_terminated(number: int, frame: object) -> None:
    raise Terminated(number)


@contextlib.contextmanager
def _signals_end_the_command() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``Terminated`` inside the block (their default ends the process
    at once, leaving its children running and its temporary files behind)."""
    numbers = (signal.SIGTERM, signal.SIGHUP)
    previous = [signal.signal(number, _raise_terminated) for number in numbers]
    try:
        yield
    finally:
        for number, handler in zip(numbers, previous):
            signal.signal(number, handler)


def _hold_closed_stdout() -> None:
    """With standard output closed (``>&-``), descriptor 1 would be the next file opened -- a
    program being written, say -- and native code's prints would land in it: hold it on
    /dev/null (our own writes still say standard output is closed)."""
    if sys.stdout is not None:
        return
    try:
        os.fstat(1)
    except OSError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        if devnull != 1:
            os.dup2(devnull, 1)
            os.close(devnull)


def _run(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    _hold_closed_stdout()
    try:
        with _our_warnings_one_line(), _stdout_refusals_named():
            return handler(args)
    except StdoutWriteError as exc:
        if not isinstance(exc.__cause__, BrokenPipeError):  # a reader that stopped (| head) wants no more
            print(f"error: {exc}", file=sys.stderr)
        _discard_stdout()
        return EXIT_INVALID
    except OpDefError as exc:
        for diagnostic in exc.diagnostics:
            print(diagnostic, file=sys.stderr)
        return EXIT_INVALID
    except ReportedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:
        print("interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    except Terminated as exc:
        from .runtime.isolation import signal_name

        print(f"terminated ({signal_name(exc.number)})", file=sys.stderr)
        return 128 + exc.number
    except Exception as exc:  # the last line of defence: one line, not a traceback
        if os.environ.get("QCO_DEBUG"):
            raise
        print(f"internal error: {type(exc).__name__}: {exc} (rerun with QCO_DEBUG=1 and report it)", file=sys.stderr)
        return EXIT_INTERNAL


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # a command run again in another environment
    quiet_third_party(args.verbose)
    show_progress(sys.stderr.isatty() and not getattr(args, "quiet", False))
    with _signals_end_the_command():
        return _run(args.handler, args)


def generate_op_package_main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="generate-op-package", description="Generate an HTP op package from OpDef XML."
    )
    _add_generate_arguments(parser)
    args = parser.parse_args(argv)
    return _run(args.handler, args)
