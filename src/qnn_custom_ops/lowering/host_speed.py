"""Faster kernels for a quantized program on the host, computing the same bits.

A quantized program runs its standard ops on ExecuTorch's kernels between quantize and
dequantize nodes (XNNPACK would compute something else). Profiled (ETDump, perf) on a trained
2-layer model's 32-token prefill, 16a8w: ``mm`` and ``bmm`` (one thread) and
``quantize_per_tensor`` (``std::nearbyint`` called per element) took 64% of the program, and
``permute_copy`` (an index computed per element) 4%; then, on the runner's inputs (masks hiding
most columns), ``_softmax`` a third of what was left, mostly glibc's ``expf`` underflow handler
(a masked column's exp is 0), and the attention mask's broadcast ``add`` and the grouped heads'
``expand_copy`` (an index per element) 0.05 and 0.03 ms of 0.65. ``UseHostSpeedKernels`` moves
them to ``qco_host`` ops of the same arguments, whose kernels (``runtime/speed_kernels``) compute
ExecuTorch's bits: each product summed over k in order, every product rounded, over register
tiles, a constant weight read as panels laid out once here (``mm_panels``); the same ``expf``,
once per value and not below its underflow; a sum per element, a row at a time; the rounding in
vector lanes; the same elements moved, a contiguous run at a time. The runtime loads them when a
program names them.
"""

from __future__ import annotations

import torch
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from torch.export import ExportedProgram

from ..torch_bridge.define import out_fake_of, out_kernel_of
from .folding import VALUE_MOVING_OPS

#: The namespace of the speed ops: a program naming one needs the runtime's speed kernels.
NAMESPACE = "qco_host"
_LIBRARY = torch.library.Library(NAMESPACE, "DEF")
_LIBRARY.define("mm(Tensor self, Tensor mat2) -> Tensor")
_LIBRARY.define("mm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) -> Tensor(a!)")
_LIBRARY.define("mm_panels(Tensor self, Tensor panels) -> Tensor")
_LIBRARY.define("mm_panels.out(Tensor self, Tensor panels, *, Tensor(a!) out) -> Tensor(a!)")
_LIBRARY.define("bmm(Tensor self, Tensor mat2) -> Tensor")
_LIBRARY.define("bmm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) -> Tensor(a!)")
_LIBRARY.define("permute_copy(Tensor self, int[] dims) -> Tensor")
_LIBRARY.define("permute_copy.out(Tensor self, int[] dims, *, Tensor(a!) out) -> Tensor(a!)")
_LIBRARY.define("expand_copy(Tensor self, int[] size) -> Tensor")
_LIBRARY.define("expand_copy.out(Tensor self, int[] size, *, Tensor(a!) out) -> Tensor(a!)")
_LIBRARY.define("add(Tensor self, Tensor other) -> Tensor")
_LIBRARY.define("add.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)")
_LIBRARY.define("_softmax(Tensor self, int dim, bool half_to_float) -> Tensor")
_LIBRARY.define("_softmax.out(Tensor self, int dim, bool half_to_float, *, Tensor(a!) out) -> Tensor(a!)")
_QUANTIZE_ARGS = "Tensor input, float scale, int zero_point, int quant_min, int quant_max, ScalarType dtype"
_LIBRARY.define(f"quantize_per_tensor({_QUANTIZE_ARGS}) -> Tensor")
_LIBRARY.define(f"quantize_per_tensor.out({_QUANTIZE_ARGS}, *, Tensor(a!) out) -> Tensor(a!)")


def _mm(self: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    """Eagerly, torch's mm (the same sums, in torch's order)."""
    return torch.mm(self, mat2)


#: Columns per panel: the speed kernels' vector of float32 (``kLanes``).
PANEL = 16


def _panels(weight: torch.Tensor) -> torch.Tensor:
    """``[k, n]`` -> ``[n / PANEL, k, PANEL]``: each block of PANEL columns, row after row."""
    k, n = weight.shape
    return weight.reshape(k, n // PANEL, PANEL).permute(1, 0, 2).contiguous()


def _mm_panels(self: torch.Tensor, panels: torch.Tensor) -> torch.Tensor:
    """Eagerly, torch's mm of the weight the panels hold."""
    return torch.mm(self, panels.permute(1, 0, 2).reshape(panels.shape[1], -1))


def _bmm(self: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    """Eagerly, torch's bmm."""
    return torch.bmm(self, mat2)


def _permute_copy(self: torch.Tensor, dims: list[int]) -> torch.Tensor:
    return torch.permute(self, dims).contiguous()


def _expand_copy(self: torch.Tensor, size: list[int]) -> torch.Tensor:
    return self.expand(size).clone()


def _add(self: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    return torch.add(self, other)


def _softmax(self: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    return torch.ops.aten._softmax(self, dim, half_to_float)


def _quantize(
    input: torch.Tensor, scale: float, zero_point: int, quant_min: int, quant_max: int, dtype: torch.dtype
) -> torch.Tensor:
    return torch.ops.quantized_decomposed.quantize_per_tensor(input, scale, zero_point, quant_min, quant_max, dtype)


for _name, _reference in (
    ("mm", _mm),
    ("mm_panels", _mm_panels),
    ("bmm", _bmm),
    ("permute_copy", _permute_copy),
    ("expand_copy", _expand_copy),
    ("add", _add),
    ("_softmax", _softmax),
    ("quantize_per_tensor", _quantize),
):
    _LIBRARY.impl(_name, _reference, "CompositeExplicitAutograd")
    _LIBRARY.impl(f"{_name}.out", out_kernel_of(_reference, 1), "CompositeExplicitAutograd")
    torch.library.register_fake(f"{NAMESPACE}::{_name}", _reference, lib=_LIBRARY)
    torch.library.register_fake(f"{NAMESPACE}::{_name}.out", out_fake_of(1), lib=_LIBRARY)

#: ExecuTorch's products and the speed ops of their bits.
_PRODUCTS = {
    exir_ops.edge.aten.mm.default: exir_ops.edge.qco_host.mm.default,
    exir_ops.edge.aten.bmm.default: exir_ops.edge.qco_host.bmm.default,
}
#: Code storage the speed quantize writes; its range must stay within 16 bits (exact in float).
_CODES = (torch.uint8, torch.int8, torch.int16, torch.int32)
_CODE_RANGE = 1 << 16


def _value(node: object) -> torch.Tensor | None:
    """The (fake) tensor a graph node produces, or None."""
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return value if isinstance(value, torch.Tensor) else None


def _float32(node: object) -> bool:
    """A graph node producing a float32 tensor."""
    value = _value(node)
    return value is not None and value.dtype == torch.float32


def _speed_target(node: torch.fx.Node):
    """The speed op standing in for ``node``, or None where its kernel is not the same."""
    if node.op != "call_function":
        return None
    if node.target in _PRODUCTS and all(_float32(a) for a in node.args):
        return _PRODUCTS[node.target]
    if node.target == exir_ops.edge.aten.permute_copy.default:
        return exir_ops.edge.qco_host.permute_copy.default
    if node.target == exir_ops.edge.aten.expand_copy.default:
        return exir_ops.edge.qco_host.expand_copy.default
    if node.target == exir_ops.edge.aten.add.Tensor and node.kwargs.get("alpha", 1) == 1:
        return exir_ops.edge.qco_host.add.default if all(_float32(a) for a in (*node.args, node)) else None
    if node.target == exir_ops.edge.aten._softmax.default and _float32(node.args[0]) and not node.args[2]:
        scores = _value(node.args[0])
        return exir_ops.edge.qco_host._softmax.default if scores is not None and scores.dim() > 0 else None
    if node.target == exir_ops.edge.quantized_decomposed.quantize_per_tensor.default:
        source, _, _, low, high, dtype = node.args
        in_range = isinstance(low, int) and isinstance(high, int) and -_CODE_RANGE <= low <= high <= _CODE_RANGE
        if _float32(source) and dtype in _CODES and in_range:
            return exir_ops.edge.qco_host.quantize_per_tensor.default
    return None


_QUANTIZE = exir_ops.edge.quantized_decomposed.quantize_per_tensor.default
_DEQUANTIZE = exir_ops.edge.quantized_decomposed.dequantize_per_tensor.default


def _layout_chain(quantize: torch.fx.Node) -> list[torch.fx.Node] | None:
    """The layout ops between ``quantize`` and a dequantize of the same encoding (each feeding only
    the next), first to last; None if ``quantize``'s input is not such a chain, or ``quantize`` is
    a program output (the program's signature names it)."""
    if any(user.op == "output" for user in quantize.users):
        return None
    chain: list[torch.fx.Node] = []
    node = quantize.args[0]
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in VALUE_MOVING_OPS:
        if len(node.users) != 1:
            return None
        chain.insert(0, node)
        node = node.args[0]
    if not chain or not isinstance(node, torch.fx.Node) or node.target != _DEQUANTIZE:
        return None
    same = node.args[1:] == quantize.args[1:] and not node.kwargs and not quantize.kwargs
    return chain if same else None


class LayoutOnCodes(ExportedProgramPassBase):
    """``quantize(layout(...(dequantize(codes))))`` of one encoding -> ``layout(...(codes))``."""

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        graph = exported_program.graph
        changed = False
        for quantize in [n for n in graph.nodes if n.op == "call_function" and n.target == _QUANTIZE]:
            chain = _layout_chain(quantize)
            if chain is None:
                continue
            dequantize, source = chain[0].args[0], chain[0].args[0].args[0]  # type: ignore[union-attr]
            assert isinstance(dequantize, torch.fx.Node) and isinstance(source, torch.fx.Node)
            chain[0].replace_input_with(dequantize, source)
            codes = quantize.meta["val"].dtype
            for node in chain:
                node.meta["val"] = node.meta["val"].to(codes)
            quantize.replace_all_uses_with(chain[-1])
            graph.erase_node(quantize)
            if not dequantize.users:
                graph.erase_node(dequantize)
            changed = True
        exported_program.graph_module.recompile()
        return ExportedProgramPassResult(exported_program, changed)


def _constant_entry(exported: ExportedProgram, node: torch.fx.Node) -> tuple[dict, str] | None:
    """The table and key of the constant a placeholder reads (a parameter, buffer or lifted
    tensor), or None."""
    signature = exported.graph_signature
    for names in (
        signature.inputs_to_parameters,
        signature.inputs_to_buffers,
        signature.inputs_to_lifted_tensor_constants,
    ):
        if node.op == "placeholder" and node.name in names:
            key = names[node.name]
            return (exported.state_dict if key in exported.state_dict else exported.constants), key
    return None


def _panel_weight(exported: ExportedProgram, node: torch.fx.Node) -> tuple[dict, str] | None:
    """Where the constant ``[k, n]`` float32 weight ``node`` reads is held, if every use of it is
    a speed ``mm``'s weight and n is whole panels; else None."""
    value = node.meta.get("val")
    if not (isinstance(value, torch.Tensor) and value.dim() == 2 and value.dtype == torch.float32):
        return None
    if value.shape[1] % PANEL or not node.users:
        return None
    mm = exir_ops.edge.qco_host.mm.default
    if any(user.target != mm or user.args[1] is not node or user.args[0] is node for user in node.users):
        return None
    return _constant_entry(exported, node)


def _weights_as_panels(exported: ExportedProgram) -> None:
    """Each constant weight ``[k, n]`` that only speed ``mm``s read -> the same values laid out as
    panels, read by ``mm_panels``: the same sums, each tile's weights from one contiguous block.
    Laid out now, once, in place: one weight at a time has a second copy."""
    for node in exported.graph.nodes:
        entry = _panel_weight(exported, node)
        if entry is None:
            continue
        table, key = entry
        old = table[key]
        panels = _panels(old.detach())
        table[key] = torch.nn.Parameter(panels, requires_grad=False) if isinstance(old, torch.nn.Parameter) else panels
        node.meta["val"] = _panels(node.meta["val"])
        for user in node.users:
            user.target = exir_ops.edge.qco_host.mm_panels.default


class UseHostSpeedKernels(ExportedProgramPassBase):
    """Retarget every float32 ``mm``, ``bmm``, ``_softmax`` and ``add`` (alpha 1), every
    ``permute_copy`` and ``expand_copy`` and every 16-bit-range ``quantize_per_tensor`` of float32
    to the ``qco_host`` op of the same arguments, and each constant weight only ``mm`` reads to
    panels for ``mm_panels`` (for the host's portable kernels only: on a program nothing
    delegates)."""

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        changed = False
        for node in exported_program.graph.nodes:
            target = _speed_target(node)
            if target is not None:
                node.target = target
                node.kwargs = {}  # expand_copy's implicit (how it was asked for), add's alpha (1)
                changed = True
        _weights_as_panels(exported_program)
        exported_program.graph_module.recompile()
        return ExportedProgramPassResult(exported_program, changed)
