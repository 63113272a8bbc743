"""Preflight: every problem of a graph with custom ops, before any QNN call or host lowering.

An op of a bound namespace with no binding, a bound op whose arguments do not map, a
datatype at a node that the OpDef does not allow on the backend: all are collected and
raised together.
"""

from __future__ import annotations

import torch
from executorch.backends.qualcomm.utils.constants import QCOM_QUANT_ATTRS

from ..errors import ReportedError
from ..opdef import Datatype
from ..opdef.datatypes import plain_datatype
from ..torch_bridge import OpBinding, OpMappingError, OpPackageBinding, output_carrier, target_op_name
from ..torch_bridge.quantized import is_dequantize, is_quantize, quantized_datatype


class PreflightError(ReportedError, ValueError):
    """Every problem the preflight found in the graph."""

    def __init__(self, problems: list[str]):
        self.problems = tuple(problems)
        super().__init__(f"{len(problems)} problem(s) before QNN lowering:\n" + "\n".join(f"  {p}" for p in problems))


def _quant_datatype(node: torch.fx.Node) -> Datatype | None:
    """The fixed-point datatype of a tensor, from QNN's quant attrs or a Q/DQ node's range."""
    attrs = node.meta.get(QCOM_QUANT_ATTRS)
    if attrs:
        return Datatype.fixed_point(attrs["quant_min"], attrs["quant_max"])
    if is_dequantize(node) or is_quantize(node):
        return quantized_datatype(node)
    return None


def input_datatype(source: torch.fx.Node) -> Datatype | None:
    """The QNN datatype of a tensor flowing into an op."""
    quant = _quant_datatype(source)
    if quant is not None:
        return quant
    value = source.meta.get("val")
    return plain_datatype(value.dtype) if isinstance(value, torch.Tensor) else None


def output_datatype(node: torch.fx.Node, index: int, multi: bool) -> Datatype | None:
    """The QNN datatype of output ``index`` of ``node``: quantized if it is annotated or quantized."""
    carrier = output_carrier(node, index, multi)
    if carrier is not None:
        quantizer = next((u for u in carrier.users if is_quantize(u)), None)
        quant = _quant_datatype(carrier) or (_quant_datatype(quantizer) if quantizer is not None else None)
        if quant is not None:
            return quant
    value = node.meta["val"][index] if multi else node.meta["val"]
    return plain_datatype(value.dtype)


def preflight(graph_module: torch.fx.GraphModule, binding: OpPackageBinding, backend: str = "HTP") -> list[str]:
    """Problems of the graph's nodes in the binding's namespaces (an empty list when all is well).

    An op of a bound op's namespace that is not bound itself is a mistake (a forgotten
    binding); ops of other namespaces are not ours to judge.
    """
    problems: list[str] = []
    for node in graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        name = target_op_name(node.target)
        if name is None or name.split(".")[0] not in binding.namespaces:
            continue
        binding_of_node = binding.op_for(node)
        if binding_of_node is None:
            problems.append(
                f"node {node.name} calls custom op {name}, which has no binding (bind it to a QNN op "
                f"of {binding.package.name}: bind(package, {{'<QnnOpType>': torch.ops.{name}}}))"
            )
            continue
        try:
            spec = binding.qnn_op_spec(node)
        except OpMappingError as exc:
            problems.append(str(exc))
            continue
        problems += _datatype_problems(node, binding_of_node, spec.inputs, backend)
    return problems


def _datatype_problems(
    node: torch.fx.Node, binding_of_node: OpBinding, inputs: tuple[torch.fx.Node, ...], backend: str
) -> list[str]:
    op = binding_of_node.opdef
    found = [(arg.tensor, input_datatype(source)) for arg, source in zip(binding_of_node.inputs, inputs)]
    multi = len(op.outputs) > 1
    found += [(out, output_datatype(node, i, multi)) for i, out in enumerate(op.outputs)]
    problems = []
    for tensor, datatype in found:
        allowed = op.datatypes(tensor, backend)
        if datatype is not None and datatype not in allowed:
            problems.append(
                f"node {node.name} ({binding_of_node.custom_op_name}): {tensor.kind} '{tensor.name}' is "
                f"{datatype.short_name}, but {binding_of_node.package_name}::{op.name} allows only "
                f"{', '.join(d.short_name for d in allowed)} on {backend} (quantize the model to one of those, or "
                "add the datatype to the OpDef and the kernel)"
            )
    return problems
