"""Faster kernels for a quantized program on the host, computing the same bits.

A quantized program runs its standard ops on ExecuTorch's kernels between quantize and
dequantize nodes (XNNPACK would compute something else). Profiled (ETDump, perf) on a trained
2-layer model's 32-token prefill, 16a8w: ``mm`` and ``bmm`` (one thread) and
``quantize_per_tensor`` (``std::nearbyint`` called per element) took 64% of the program.
``UseHostSpeedKernels`` moves them to ``qco_host::mm``, ``qco_host::bmm`` and
``qco_host::quantize_per_tensor``, whose kernels (``runtime/speed_kernels``) compute ExecuTorch's
bits: each output summed over k in order, every product rounded, over register tiles; the
rounding in vector lanes. The runtime loads them when a program names them.
"""

from __future__ import annotations

import torch
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from torch.export import ExportedProgram

from ..torch_bridge.define import out_fake_of, out_kernel_of

NAMESPACE = "qco_host"
_LIBRARY = torch.library.Library(NAMESPACE, "DEF")
_LIBRARY.define("mm(Tensor self, Tensor mat2) -> Tensor")
_LIBRARY.define("mm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) -> Tensor(a!)")
_LIBRARY.define("bmm(Tensor self, Tensor mat2) -> Tensor")
_LIBRARY.define("bmm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) -> Tensor(a!)")
_QUANTIZE = "Tensor input, float scale, int zero_point, int quant_min, int quant_max, ScalarType dtype"
_LIBRARY.define(f"quantize_per_tensor({_QUANTIZE}) -> Tensor")
_LIBRARY.define(f"quantize_per_tensor.out({_QUANTIZE}, *, Tensor(a!) out) -> Tensor(a!)")


def _mm(self: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    """Eagerly, torch's mm (the same sums, in torch's order)."""
    return torch.mm(self, mat2)


def _bmm(self: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    """Eagerly, torch's bmm."""
    return torch.bmm(self, mat2)


def _quantize(
    input: torch.Tensor, scale: float, zero_point: int, quant_min: int, quant_max: int, dtype: torch.dtype
) -> torch.Tensor:
    return torch.ops.quantized_decomposed.quantize_per_tensor(input, scale, zero_point, quant_min, quant_max, dtype)


for _name, _reference in (("mm", _mm), ("bmm", _bmm), ("quantize_per_tensor", _quantize)):
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


def _float32(node: object) -> bool:
    """A graph node producing a float32 tensor."""
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return isinstance(value, torch.Tensor) and value.dtype == torch.float32


def _speed_target(node: torch.fx.Node):
    """The speed op standing in for ``node``, or None where its kernel is not the same."""
    if node.op != "call_function":
        return None
    if node.target in _PRODUCTS and all(_float32(a) for a in node.args):
        return _PRODUCTS[node.target]
    if node.target == exir_ops.edge.quantized_decomposed.quantize_per_tensor.default:
        source, _, _, low, high, dtype = node.args
        in_range = isinstance(low, int) and isinstance(high, int) and -_CODE_RANGE <= low <= high <= _CODE_RANGE
        if _float32(source) and dtype in _CODES and in_range:
            return exir_ops.edge.qco_host.quantize_per_tensor.default
    return None


class UseHostSpeedKernels(ExportedProgramPassBase):
    """Retarget every float32 ``mm`` and ``bmm`` and every 16-bit-range ``quantize_per_tensor`` of float32
    to the ``qco_host`` op of the same arguments (for the host's portable kernels only: run it
    after the partitioners' choices, on a program nothing delegates)."""

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        changed = False
        for node in exported_program.graph.nodes:
            target = _speed_target(node)
            if target is not None:
                node.target = target
                changed = True
        exported_program.graph_module.recompile()
        return ExportedProgramPassResult(exported_program, changed)
