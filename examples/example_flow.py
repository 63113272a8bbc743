"""The flow both examples share: quantize with the derived annotation, lower, run, compare.

Each example only defines its op, its model and its inputs.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from qnn_custom_ops.quiet import native_noise_filtered, quiet_third_party

quiet_third_party(verbose="--verbose" in sys.argv)  # after torch set its loggers, before the rest speaks
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e  # noqa: E402

import qnn_custom_ops as qco  # noqa: E402
from qnn_custom_ops.lowering import compile_spec, device_libraries, makefile_builds  # noqa: E402
from qnn_custom_ops.runtime import DeviceRunner, HostRunner, Tolerance, compare_outputs  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
OP_PACKAGES = REPO / "op_packages"


def parse_args(description: str, argv: Sequence[str] | None = None, default_quant: str = "8a8w") -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--target", choices=("host", "qnn"), default="host",
                        help="host: ExecuTorch on this machine; qnn: the QNN backend on a phone (QNN SDK needed)")
    parser.add_argument("--quant", choices=("8a8w", "16a8w", "16a16w", "none"), default=default_quant)
    parser.add_argument("--soc", default="SM8650", help="SoC of the phone (qnn target)")
    parser.add_argument("--device", help="adb serial of the phone (qnn target)")
    parser.add_argument("--adb-host", help="adb server host (qnn target)")
    parser.add_argument("--build-folder", type=Path, help="ExecuTorch built for Android with QNN (qnn target)")
    parser.add_argument("--output-dir", type=Path, default=REPO / "build" / "examples")
    parser.add_argument("--verbose", action="store_true", help="show third-party log lines and warnings too")
    return parser.parse_args(argv)


def quantize(model: torch.nn.Module, samples: Sequence[tuple], binding, quant_dtype: str,
             overrides=None) -> torch.nn.Module:
    """PT2E with QnnQuantizer and the OpDef-derived annotation; calibrated on ``samples``."""
    if quant_dtype == "none":
        return model
    quantizer = qco.make_quantizer(binding, quant_dtype, overrides)
    prepared = prepare_pt2e(torch.export.export(model, samples[0]).module(), quantizer)
    for sample in samples:
        prepared(*sample)
    return convert_pt2e(prepared)


def run_on_target(args: argparse.Namespace, name: str, binding, package_dir: Path, model: torch.nn.Module,
                  inputs: tuple) -> tuple[list[torch.Tensor], tuple]:
    """Lower ``model`` for the target, write the .pte, run it once on ``inputs``; returns the
    outputs and each output's quantization scale."""
    args.output_dir.mkdir(parents=True, exist_ok=True)
    pte = args.output_dir / f"{name}_{args.target}.pte"
    if args.target == "host":
        library = qco.build_host_library(package_dir, binding)
        program = qco.lower(model, inputs, binding, target="host", output=pte)
        print(f"lowered for the host: {pte} (kernels from {library.name})")
        for emulated in program.emulated:
            print(f"  kernel runs on quantized tensors, as on the HTP: {emulated}")
        if not program.emulated:
            print("  kernel runs on float tensors")
        with native_noise_filtered(args.verbose):
            outputs = HostRunner([library]).run(program.buffer, [inputs])[0]
        return outputs, program.output_encodings
    from executorch.backends.qualcomm.utils.utils import get_soc_to_htp_arch_map

    if not args.device or not args.build_folder:
        sys.exit("--target qnn needs --device SERIAL and --build-folder (ExecuTorch built for Android with QNN)")
    arch = int(get_soc_to_htp_arch_map()[args.soc].value)
    builds = makefile_builds(package_dir, binding.package.name, arch)
    program = qco.lower(model, inputs, binding, target="qnn", output=pte,
                        compile_spec=compile_spec(args.soc, binding, builds, quant=args.quant != "none"))
    print(f"lowered for QNN ({args.soc}, HTP v{arch}): {pte}")
    runner = DeviceRunner(args.device, args.soc, args.build_folder, device_libraries(binding.package.name, builds),
                          adb_host=args.adb_host)
    return runner.run(program.buffer, [inputs])[0], program.output_encodings


def as_list(value) -> list[torch.Tensor]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


@dataclass(frozen=True)
class FlowResult:
    outputs: list  # the target's
    reference: list  # the converted (or float) model's, in PyTorch
    eager: list  # float eager PyTorch's
    encodings: tuple  # each output's quantization encoding, None if unquantized


def quantize_and_run(args: argparse.Namespace, name: str, binding, package_dir: Path, model: torch.nn.Module,
                     samples: Sequence[tuple]) -> FlowResult:
    """Target, converted-model and float eager outputs for ``samples[0]``."""
    model = model.eval()
    reference = quantize(model, samples, binding, args.quant)
    inputs = samples[0]
    outputs, encodings = run_on_target(args, name, binding, package_dir, reference, inputs)
    with torch.no_grad():
        return FlowResult(outputs, as_list(reference(*inputs)), as_list(model(*inputs)), encodings)


def report(result: FlowResult, names: Sequence[str]) -> int:
    """Compare with the reference model (within one quantization step of each output, or
    1e-5 for float outputs) and print the error against float eager; ``names`` say what each
    model output is, so its encoding and steps are not read as the kernel's."""
    for index, (name, encoding) in enumerate(zip(names, result.encodings)):
        print(f"  model output {index} ({name}): {encoding or 'float'}")
    print("against the converted (reference) model, within one step of each output's encoding:")
    reports = compare_outputs(result.outputs, result.reference, Tolerance(atol=1e-5, lsb=1), result.encodings, names)
    for line in reports:
        print(f"  {line}")
    print("against float eager PyTorch (quantization error, for information):")
    for line in compare_outputs(result.outputs, result.eager, Tolerance(atol=float("inf")), names=names):
        print(f"  {line}")
    ok = all(r.passed for r in reports)
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1
