"""The flow both examples share: quantize with the derived annotation, lower, run, compare.

Each example only defines its op, its model and its inputs.
"""

from __future__ import annotations

import argparse
import copy
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
from qnn_custom_ops.runtime.simulator_sdk import reexecute_in_simulator_environment  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
OP_PACKAGES = REPO / "op_packages"


def parse_args(description: str, argv: Sequence[str] | None = None, default_quant: str = "8a8w") -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--target", choices=("host", "x86", "qnn"), default="host",
                        help="host: ExecuTorch on this machine; x86: ExecuTorch's QNN backend on QAIRT's x86 HTP "
                        "simulator (no SDK: installed from PyPI once); qnn: the QNN backend on a phone (QNN SDK needed)")
    parser.add_argument("--quant", choices=("8a8w", "16a8w", "16a16w", "none"), default=default_quant)
    parser.add_argument("--soc", default="SM8650", help="SoC of the phone (qnn target)")
    parser.add_argument("--device", help="adb serial of the phone (qnn target)")
    parser.add_argument("--adb-host", help="adb server host (qnn target)")
    parser.add_argument("--build-folder", type=Path, help="ExecuTorch built for Android with QNN (qnn target)")
    parser.add_argument("--output-dir", type=Path, default=REPO / "build" / "examples")
    parser.add_argument("--verbose", action="store_true", help="show third-party log lines and warnings too")
    args = parser.parse_args(argv)
    if args.target == "x86":  # the loader reads LD_LIBRARY_PATH only at start: restart with the simulator's
        reexecute_in_simulator_environment(sys.argv)
    return args


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
    if args.target == "x86":
        return run_on_simulator(args, pte, binding, package_dir, model, inputs)
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


def run_on_simulator(args: argparse.Namespace, pte: Path, binding, package_dir: Path, model: torch.nn.Module,
                     inputs: tuple) -> tuple[list[torch.Tensor], tuple]:
    """ExecuTorch's own QNN partitioner and compiler, with the package built as QHPI for x86 (registered
    as CPU), then ExecuTorch's runtime on QAIRT's x86 HTP simulator."""
    from qnn_custom_ops.lowering import OpPackageBuild
    from qnn_custom_ops.runtime.htp import build_qhpi_package
    from qnn_custom_ops.runtime.simulator import SimulatorRunner

    library = build_qhpi_package(package_dir, binding.package)
    spec = compile_spec(args.soc, binding, [OpPackageBuild("CPU", "x86_64", library)], quant=args.quant != "none")
    with native_noise_filtered(args.verbose):
        program = qco.lower(model, inputs, binding, target="qnn", output=pte, compile_spec=spec)
    print(f"lowered for QNN ({args.soc}) by ExecuTorch's QnnPartitioner, {binding.package.name} as QHPI: {pte}")
    return SimulatorRunner().run(program.buffer, [inputs])[0], program.output_encodings


_QDQ = ("quantize_per_tensor", "dequantize_per_tensor")


def custom_op_probe(model: torch.fx.GraphModule, binding) -> tuple[torch.fx.GraphModule, list[str]]:
    """A copy of the converted ``model`` returning what each bound op produces (as the next op reads
    it, after its quantize/dequantize), and the names of the other ops that follow the first of them:
    QNN's built-ins, which round and approximate as QNN does, not as PyTorch."""
    probe = copy.deepcopy(model)
    graph = probe.graph
    produced, after, seen = [], [], False
    for node in list(graph.nodes):
        if binding.op_for(node) is not None:
            seen = True
            read = node
            while len(read.users) == 1 and any(q in str(next(iter(read.users)).target) for q in _QDQ):
                read = next(iter(read.users))
            produced.append(read)
        elif seen and node.op == "call_function" and not any(q in str(node.target) for q in _QDQ):
            after.append(str(node.target).split(".")[-2] if "." in str(node.target) else str(node.target))
    graph.output_node().args = (tuple(produced),)
    graph.eliminate_dead_code()
    probe.recompile()
    return probe, sorted(set(after))


def as_list(value) -> list[torch.Tensor]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


@dataclass(frozen=True)
class Probe:
    """What the bound ops produce inside the program, on the target and in the converted model."""

    outputs: list
    reference: list
    encodings: tuple
    builtins_after: list  # QNN's built-in ops that follow the bound ops


@dataclass(frozen=True)
class FlowResult:
    outputs: list  # the target's
    reference: list  # the converted (or float) model's, in PyTorch
    eager: list  # float eager PyTorch's
    encodings: tuple  # each output's quantization encoding, None if unquantized
    probe: Probe | None = None  # x86: the bound ops' own outputs, to tell them from QNN's built-ins


def quantize_and_run(args: argparse.Namespace, name: str, binding, package_dir: Path, model: torch.nn.Module,
                     samples: Sequence[tuple]) -> FlowResult:
    """Target, converted-model and float eager outputs for ``samples[0]``."""
    model = model.eval()
    reference = quantize(model, samples, binding, args.quant)
    inputs = samples[0]
    outputs, encodings = run_on_target(args, name, binding, package_dir, reference, inputs)
    probe = None
    if args.target == "x86" and isinstance(reference, torch.fx.GraphModule):
        probed, builtins = custom_op_probe(reference, binding)
        probe_outputs, probe_encodings = run_on_target(args, f"{name}_probe", binding, package_dir, probed, inputs)
        probe = Probe(probe_outputs, as_list(probed(*inputs)), probe_encodings, builtins)
    with torch.no_grad():
        return FlowResult(outputs, as_list(reference(*inputs)), as_list(model(*inputs)), encodings, probe)


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
    if result.probe is not None and not ok:
        ok = explained(result.probe)
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


def explained(probe: Probe) -> bool:
    """True when the bound ops' own outputs are within one step on the target, so what the model's
    outputs differ by more comes from QNN's built-in ops after them (named)."""
    print("the bound ops' own outputs in the program, against the converted model, within one step:")
    reports = compare_outputs(probe.outputs, probe.reference, Tolerance(atol=1e-5, lsb=1), probe.encodings)
    for line in reports:
        print(f"  {line}")
    if not all(r.passed for r in reports):
        return False
    print(f"  the outputs' larger differences come after them, from QNN's built-in {', '.join(probe.builtins_after)}: "
          "QNN's built-ins round and approximate as QNN does, not as PyTorch")
    return True
