"""Make a program for the host do to each bound op what QNN does to it on the phone.

- ``cast_int64_inputs``: executorch's QNN lowering (``I64toI32``) casts every int64 graph
  input and constant to int32, so a custom op fed one receives INT_32; the host casts too.
- ``emulate_quantized``: QNN folds each dequantize -> op -> quantize into tensor encodings and
  the op's kernel computes on the quantized tensors. The host replaces the pattern with one
  call of the op's quantized variant (``torch_bridge.quantized``), carrying the encodings QNN's op
  wrapper gets: the kernel's quantized branch runs, as on the HTP.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import torch

from ..torch_bridge import OpBinding, OpPackageBinding, node_arguments, output_carrier
from ..torch_bridge.quantized import (
    Encoding,
    QuantizedEmulationError,
    assert_finite,
    encoding_lists,
    encoding_of,
    is_dequantize,
    is_quantize,
    plain_encoding,
    quantized_variant,
    storage_dtype,
)


@dataclass(frozen=True)
class EmulatedOp:
    """One bound op node that runs on its quantized tensors: which encodings the kernel sees."""

    node: str
    qnn_op_type: str
    tensors: tuple[tuple[str, Encoding], ...]  # (OpDef tensor name, encoding): inputs, then outputs

    def __str__(self) -> str:
        shown = ", ".join(f"{name} {encoding}" for name, encoding in self.tensors)
        return f"{self.node} ({self.qnn_op_type}): {shown}"


def cast_int64_inputs(program: torch.export.ExportedProgram, binding: OpPackageBinding) -> int:
    """Cast int64 graph inputs and constants feeding a bound op to int32, as QNN's lowering
    does; returns how many casts were inserted."""
    graph = program.graph_module.graph
    casts = 0
    for node in list(graph.nodes):
        op = binding.op_for(node)
        if op is None:
            continue
        for source in list(node.all_input_nodes):
            value = source.meta.get("val")
            if (
                source.op in ("placeholder", "get_attr")
                and isinstance(value, torch.Tensor)
                and value.dtype == torch.int64
            ):
                with graph.inserting_before(node):
                    cast = graph.call_function(torch.ops.aten._to_copy.default, (source,), {"dtype": torch.int32})
                cast.meta["val"] = value.to(torch.int32)
                node.replace_input_with(source, cast)
                casts += 1
    program.graph_module.recompile()
    return casts


def emulate_quantized(program: torch.export.ExportedProgram, binding: OpPackageBinding) -> list[EmulatedOp]:
    """Fold the dequantize/quantize nodes around every quantized bound op into its
    quantized variant; returns what each folded op computes on."""
    graph = program.graph_module.graph
    emulated = []
    for node in list(graph.nodes):
        op = binding.op_for(node)
        if op is not None:
            folded = _fold(graph, node, op)
            if folded is not None:
                emulated.append(folded)
    graph.lint()
    program.graph_module.recompile()
    return emulated


def _fold(graph: torch.fx.Graph, node: torch.fx.Node, binding: OpBinding) -> EmulatedOp | None:
    values = node_arguments(binding, node)
    where = f"node {node.name} ({binding.custom_op_name})"
    input_encodings = []
    for arg in binding.inputs:
        source = values[arg.schema_index]
        if source is None:
            input_encodings.append(Encoding(binding.opdef.datatypes(arg.tensor)[0]))  # absent: never read
        elif is_dequantize(source):
            input_encodings.append(encoding_of(source))
            values[arg.schema_index] = source.args[0]
        else:
            input_encodings.append(plain_encoding(source.meta["val"].dtype))
    multi = len(binding.opdef.outputs) > 1
    carriers = [output_carrier(node, i, multi) for i in range(len(binding.opdef.outputs))]
    quantizers = [_quantizer_of(carrier) for carrier in carriers]
    output_encodings = [
        encoding_of(q) if q is not None else plain_encoding(_value(node, i, multi).dtype)
        for i, q in enumerate(quantizers)
    ]
    encodings = input_encodings + output_encodings
    if not any(e.is_quantized for e in encodings):
        return None
    for encoding, tensor in zip(encodings, binding.opdef.inputs + binding.opdef.outputs):
        assert_finite(encoding, f"{where}, {tensor.kind} '{tensor.name}'")
    emulated = _insert(graph, node, binding, values, encodings, quantizers, carriers, multi)
    _remove_folded(graph, node, quantizers, carriers, multi, emulated)
    names = [t.name for t in binding.opdef.inputs + binding.opdef.outputs]
    return EmulatedOp(node.name, binding.qnn_op_type, tuple(zip(names, encodings)))


def _quantizer_of(carrier: torch.fx.Node | None) -> torch.fx.Node | None:
    """The quantize node the output feeds, if the output is quantized (all its users are
    quantize nodes of one encoding); None for a float output."""
    if carrier is None or not carrier.users:
        return None
    users = list(carrier.users)
    if not all(is_quantize(u) for u in users):
        return None
    if len({encoding_of(u) for u in users}) > 1:
        raise QuantizedEmulationError(
            f"node {carrier.name} is quantized with {len(users)} different encodings; "
            "a kernel writes one (share one quantize node)"
        )
    return users[0]


def _value(node: torch.fx.Node, index: int, multi: bool) -> Any:
    return node.meta["val"][index] if multi else node.meta["val"]


def _insert(
    graph: torch.fx.Graph,
    node: torch.fx.Node,
    binding: OpBinding,
    values: list[Any],
    encodings: list[Encoding],
    quantizers: list,
    carriers: list,
    multi: bool,
) -> list[torch.fx.Node]:
    """The quantized variant's node (and its getitems); returns the node of each output."""
    variant = quantized_variant(binding)
    schema_args = binding.overload._schema.arguments
    positional = [v for v, a in zip(values, schema_args) if not a.kwarg_only]
    keywords = {a.name: v for v, a in zip(values, schema_args) if a.kwarg_only}
    lists = encoding_lists(encodings)
    output_values = []
    for index, (quantizer, encoding) in enumerate(zip(quantizers, encodings[len(binding.inputs) :])):
        value = quantizer.meta["val"] if quantizer is not None else _value(node, index, multi)
        if value.dtype != storage_dtype(encoding, value.dtype):
            raise QuantizedEmulationError(
                f"node {node.name}: output {index} is stored as {value.dtype}, "
                f"not {storage_dtype(encoding, value.dtype)} as PT2E stores "
                f"{encoding.datatype.short_name}"
            )
        output_values.append(value)
    with graph.inserting_before(node):
        call = graph.call_function(variant, (*lists, *positional), keywords)
        call.meta.update({k: v for k, v in node.meta.items() if k != "val"})
        call.meta["val"] = tuple(output_values) if multi else output_values[0]
        if not multi:
            return [call]
        outputs = []
        for index, value in enumerate(output_values):
            item = graph.call_function(operator.getitem, (call, index))
            item.meta["val"] = value
            outputs.append(item)
        return outputs


def _remove_folded(
    graph: torch.fx.Graph,
    node: torch.fx.Node,
    quantizers: list,
    carriers: list,
    multi: bool,
    outputs: list[torch.fx.Node],
) -> None:
    """Route every use to the new outputs, then drop the op, its quantize nodes and any
    dequantize node left without users."""
    dequantized = [s for s in node.all_input_nodes if is_dequantize(s)]
    for quantizer, carrier, output in zip(quantizers, carriers, outputs):
        if quantizer is not None:
            for user in list(carrier.users):
                user.replace_all_uses_with(output)
                graph.erase_node(user)
        elif carrier is not None:
            carrier.replace_all_uses_with(output)
    if multi:
        for carrier in carriers:
            if carrier is not None:
                graph.erase_node(carrier)
    graph.erase_node(node)
    for source in dequantized:
        if not source.users:
            graph.erase_node(source)
