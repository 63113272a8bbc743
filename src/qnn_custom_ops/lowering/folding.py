"""Fold a quantized program's weights for the host: dequantize and lay out each once, at lowering.

A PT2E-converted model keeps its weights as integer codes with a dequantize (and, before a
matmul, a transpose) in the graph. On the HTP those fold into the weight's encoding; on the
host's portable kernels they ran on every call -- every weight dequantized and copied at every
decode step, 12x the float program's time at 256 hidden, most of it in ``permute_copy``. Folding
is exact: a dequantize is one multiply of an exact integer, and layout ops move values.
"""

from __future__ import annotations

from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from executorch.exir.passes.constant_prop_pass import constant_prop_pass
from torch.export import ExportedProgram

#: Ops that only move values (their output's elements are some of their input's): exact on a
#: weight's codes as on its floats.
VALUE_MOVING_OPS = frozenset(
    {
        exir_ops.edge.aten.view_copy.default,
        exir_ops.edge.aten.permute_copy.default,
        exir_ops.edge.aten.slice_copy.Tensor,
        exir_ops.edge.aten.repeat.default,
        exir_ops.edge.aten.expand_copy.default,
        exir_ops.edge.aten.unsqueeze_copy.default,
        exir_ops.edge.aten.squeeze_copy.dims,
        exir_ops.edge.aten.t_copy.default,
        exir_ops.edge.aten.transpose_copy.int,
        exir_ops.edge.dim_order_ops._clone_dim_order.default,
    }
)
#: The ops a weight's constant chain may be folded through: a dequantize, and ops that only move
#: values. Anything computing (a cos, an exp) is left to the kernels, whose bits may differ from torch's.
FOLDABLE = VALUE_MOVING_OPS | {
    exir_ops.edge.quantized_decomposed.dequantize_per_tensor.default,
    exir_ops.edge.quantized_decomposed.dequantize_per_channel.default,
    exir_ops.edge.torchao.dequantize_affine.default,
}


class FoldQuantizedWeights(ExportedProgramPassBase):
    """Replace each constant chain of ``FOLDABLE`` ops by its float result (a new constant)."""

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        targets = {n.target for n in exported_program.graph.nodes if n.op == "call_function"}
        folded = constant_prop_pass(exported_program, custom_skip_targets=set(targets - FOLDABLE))
        return ExportedProgramPassResult(folded, True)
