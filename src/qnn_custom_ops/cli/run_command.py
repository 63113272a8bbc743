"""``run``: a program on the host, the QNN x86 simulator or a device, compared with goldens."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..quiet import native_noise_filtered
from .arguments import add_binding_arguments, add_progress_flags, command_progress
from .inputs import host_library_of
from .process import EXIT_MISMATCH, EXIT_OK

if TYPE_CHECKING:
    from ..runtime.raw_io import TensorSpec


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


def _runner(args: argparse.Namespace):
    from ..runtime import DeviceRunner, HostRunner, X86Runner

    progress = command_progress(args)
    if args.target == "host":
        libraries = [Path(p) for p in args.library]
        if args.package:
            libraries.append(host_library_of(args.package, args.bind, args.imports, progress))
        return HostRunner(libraries, isolated=args.isolated, progress=progress)
    if args.target == "x86":
        if args.build_folder:
            return X86Runner(Path(args.build_folder))
        from ..runtime.simulator import SimulatorRunner

        return SimulatorRunner(progress=progress)
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
    from ..lowering.program import encodings_file, read_output_encodings
    from ..runtime import Tolerance, compare_outputs, method_specs

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


def add_commands(commands: Any) -> None:
    """``run`` under the CLI's subcommands."""
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
    add_binding_arguments(run)
    add_progress_flags(run)
    run.set_defaults(handler=_cmd_run)
