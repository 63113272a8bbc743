"""``lower``: a model with bound custom ops -> an ExecuTorch program, for the host or for QNN."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import torch
from executorch.exir import EdgeCompileConfig, ExecutorchProgramManager, to_edge_transform_and_lower

from ..builder import target_op_name
from .preflight import STANDARD_NAMESPACES, PreflightError

if TYPE_CHECKING:
    from ..binding import OpPackageBinding

TARGETS = ("host", "qnn")


def is_quantized(program: torch.export.ExportedProgram) -> bool:
    """True if the program carries PT2E quantize/dequantize nodes."""
    return any("quantized_decomposed" in str(n.target) for n in program.graph.nodes if n.op == "call_function")


def _unbound_custom_ops(program: torch.export.ExportedProgram, binding: "OpPackageBinding") -> list[str]:
    problems = []
    for node in program.graph.nodes:
        name = target_op_name(node.target) if node.op == "call_function" else None
        if name and name.split(".")[0] not in STANDARD_NAMESPACES and binding.op_for(node) is None:
            problems.append(f"node {node.name} calls custom op {name}, which has no binding and so no host kernel")
    return problems


def _lower_host(exported: torch.export.ExportedProgram, binding: "OpPackageBinding") -> Any:
    """XNNPACK for the standard ops of float models; nothing delegated for quantized models.

    A QnnQuantizer-quantized model delegated to XNNPACK runs but computes something else
    (QNN's int8 weight and int32 bias conventions differ from XNNPACK's); with portable
    kernels only, the program reproduces the converted model, which is what the host
    target is for.
    """
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    problems = _unbound_custom_ops(exported, binding)
    if problems:
        raise PreflightError(problems)
    partitioners = []
    if is_quantized(exported):
        import executorch.kernels.quantized  # noqa: F401  (out variants of quantize/dequantize)
    else:
        partitioners.append(XnnpackPartitioner())
    return to_edge_transform_and_lower(exported, partitioner=partitioners,
                                       compile_config=EdgeCompileConfig(_check_ir_validity=False))


def _lower_qnn(exported: torch.export.ExportedProgram, binding: "OpPackageBinding", compile_spec: list) -> Any:
    from executorch.backends.qualcomm._passes.qnn_pass_manager import get_qnn_pass_manager_cls
    from executorch.backends.qualcomm.serialization.qc_schema import QnnExecuTorchBackendType
    from executorch.backends.qualcomm.utils.utils import qnn_edge_config

    from .partitioner import QnnCustomOpPartitioner

    pass_manager = get_qnn_pass_manager_cls(QnnExecuTorchBackendType.kHtpBackend)()
    aten = pass_manager.transform_for_export_pipeline(exported)
    return to_edge_transform_and_lower(aten, transform_passes=pass_manager.get_to_edge_transform_passes(exported),
                                       partitioner=[QnnCustomOpPartitioner(compile_spec, binding)],
                                       compile_config=qnn_edge_config())


def lower(model: torch.nn.Module, example_inputs: Sequence[torch.Tensor], binding: "OpPackageBinding",
          target: str = "host", *, compile_spec: list | None = None,
          output: str | Path | None = None) -> ExecutorchProgramManager:
    """Export and lower ``model`` (float, or converted by PT2E) and return the program manager.

    ``target="host"``: standard ops to XNNPACK (float models only), the custom ops to the
    host kernel library (``build_host_library``). ``target="qnn"``: the QNN partitioner
    with ``compile_spec`` (``compile_spec(soc, binding, builds)``); needs the QNN SDK and
    says so in one line without it. ``output`` writes the .pte (atomically).
    """
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}: use one of {', '.join(TARGETS)}")
    if target == "qnn" and compile_spec is None:
        raise ValueError("target='qnn' needs compile_spec=qnn_custom_ops.compile_spec(soc, binding, builds)")
    exported = torch.export.export(model, tuple(example_inputs), strict=True)
    edge = _lower_host(exported, binding) if target == "host" else _lower_qnn(exported, binding, compile_spec)
    program = edge.to_executorch()
    if output is not None:
        from ..generator.writer import write_atomic

        write_atomic(Path(output), program.buffer)
    return program
