"""Per-block 4-bit linear layers as the 1x1 convolutions QNN computes them right.

Measured on QAIRT 2.51's x86 HTP through ExecuTorch 1.5.1's QNN builder: a FullyConnected whose
weights are in QNN's block-wise expansion encoding (``16a4w_block``) is right up to 64 output
channels and wrong past them (relative error 0.38 at 72, 1.58 at 256), while the same weights in
a 1x1 Conv2d are within one step at every width. ExecuTorch's own LLM recipes convert their
linears to convolutions before quantizing; ours are quantized as linears (the host programs keep
them so), and each is rewritten here, for QNN only, after conversion: ``x [..., in]`` laid out as
``[1, in, 1, tokens]``, the codes and block scales viewed as ``[out, in, 1, 1]`` and
``[out, blocks, 1, 1]`` (no copy), the result laid back. Every layout op added carries the
encoding of what it moves (a quantize/dequantize pair), as QNN's partitioner expects.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.fx import GraphModule, Node

from ..torch_bridge.quantized import is_dequantize, is_quantize

_ATEN = torch.ops.aten


def _is_dequantize_affine(node: object) -> bool:
    import torchao.quantization.quant_primitives  # noqa: F401  (registers torch.ops.torchao.*)

    dequantize = torch.ops.torchao.dequantize_affine
    return isinstance(node, Node) and node.target in (dequantize, dequantize.default)


@dataclass(frozen=True)
class _BlockWeight:
    """A linear's per-block weight, read once from its ``dequantize_affine(codes, (1, block),
    scale, zero_point, *rest)``: the codes and scales are attributes of the module."""

    dequantize: Callable[..., Any]
    codes: Node
    block: int
    scale: Node
    zero_point: Any
    rest: tuple


def _block_weight(linear: Node) -> _BlockWeight | None:
    """``linear``'s per-block weight, when ``linear`` reads a dequantized input, has no bias and
    only its output's quantize reads it; else None."""
    if linear.op != "call_function" or linear.target is not _ATEN.linear.default:
        return None
    source, weight = linear.args[:2]
    if not (is_dequantize(source) and _is_dequantize_affine(weight)) or len(linear.args) > 2:
        return None
    assert isinstance(weight, Node)
    codes, block_size, scale, zero_point, *rest = weight.args
    blocked = isinstance(block_size, (tuple, list)) and len(block_size) == 2 and block_size[0] == 1
    held = all(isinstance(n, Node) and n.op == "get_attr" for n in (codes, scale))
    quantized_once = len(linear.users) == 1 and is_quantize(next(iter(linear.users)))
    if not (blocked and held and quantized_once and callable(weight.target)):
        return None
    assert isinstance(codes, Node) and isinstance(scale, Node) and isinstance(block_size, (tuple, list))
    block = block_size[1]
    assert isinstance(block, int)
    return _BlockWeight(weight.target, codes, block, scale, zero_point, tuple(rest))


def _view_attribute(module: GraphModule, node: Node, shape: tuple[int, ...]) -> Node:
    """A ``get_attr`` of ``node``'s tensor viewed as ``shape`` (a new attribute, the same storage)."""
    name = f"{node.target}_as_convolution"
    setattr(module, name, getattr(module, str(node.target)).reshape(shape))
    return module.graph.get_attr(name)


def _requantized(graph: torch.fx.Graph, value: Node, like: Node) -> Node:
    """``value`` through the quantize/dequantize pair that ends in ``like`` (a dequantize)."""
    quantize = like.args[0]
    assert isinstance(quantize, Node) and callable(quantize.target) and callable(like.target)
    requantized = graph.call_function(quantize.target, (value, *quantize.args[1:]))
    return graph.call_function(like.target, (requantized, *like.args[1:]))


def _encoded(graph: torch.fx.Graph, op: Callable[..., Any], value: Node, args: tuple, like: Node) -> Node:
    """``op(value, *args)`` keeping the encoding of ``like``: a layout op moves codes, it does not
    change them."""
    return _requantized(graph, graph.call_function(op, (value, *args)), like)


def _convolution_weight(module: GraphModule, weight: _BlockWeight) -> Node:
    """The per-block dequantize of ``weight``'s codes and scales viewed as a 1x1 kernel."""
    out_channels, in_channels = getattr(module, str(weight.codes.target)).shape
    blocks = (out_channels, in_channels // weight.block, 1, 1)
    kernel = _view_attribute(module, weight.codes, (out_channels, in_channels, 1, 1))
    scales = _view_attribute(module, weight.scale, blocks)
    zero_point = weight.zero_point
    if isinstance(zero_point, Node):
        zero_point = _view_attribute(module, zero_point, blocks)
    arguments = (kernel, (1, weight.block, 1, 1), scales, zero_point, *weight.rest)
    return module.graph.call_function(weight.dequantize, arguments)


def _as_convolution(module: GraphModule, linear: Node, weight: _BlockWeight) -> None:
    """``linear`` replaced by a 1x1 convolution on the same codes, block scales and encodings:
    ``x [..., in]`` as ``[1, in, 1, tokens]``, the result laid back as ``[..., out]``."""
    graph = module.graph
    source = linear.args[0]
    assert isinstance(source, Node)
    lead = list(linear.meta["val"].shape[:-1])  # the exported node keeps its value; an added dequantize has none
    (output_quantize,) = linear.users
    output = next(u for u in output_quantize.users if is_dequantize(u))
    with graph.inserting_before(linear):
        kernel = _convolution_weight(module, weight)
        rows = _encoded(graph, _ATEN.reshape.default, source, ([1, 1, math.prod(lead), -1],), source)
        image = _encoded(graph, _ATEN.permute.default, rows, ([0, 3, 1, 2],), source)
        convolved = _requantized(graph, graph.call_function(_ATEN.conv2d.default, (image, kernel)), output)
        columns = _encoded(graph, _ATEN.permute.default, convolved, ([0, 2, 3, 1],), output)
        result = graph.call_function(_ATEN.reshape.default, (columns, [*lead, -1]))
    linear.replace_all_uses_with(result)
    graph.erase_node(linear)


def block_linears_as_convolutions(module: GraphModule) -> GraphModule:
    """``module`` (converted by PT2E) with each per-block 4-bit linear as a 1x1 convolution, in a
    new graph module sharing ``module``'s tensors; ``module`` itself unchanged."""
    rewritten = GraphModule(module, copy.deepcopy(module.graph))
    for node in list(rewritten.graph.nodes):
        weight = _block_weight(node)
        if weight is not None:
            _as_convolution(rewritten, node, weight)
    rewritten.graph.eliminate_dead_code()
    rewritten.graph.lint()
    rewritten.recompile()
    return rewritten
