"""A weight two ops read (an LLM's tied embedding: the gather and the ``lm_head``) quantized once.

``QnnQuantizer`` annotates each use of a weight on its own: the embedding's gather takes its table
at the activations' encoding (16 bits per tensor in the 16-bit modes), the ``lm_head`` the same
tensor at the weights' (8 bits per output channel), so a tied table is observed, quantized and
stored twice -- for Llama-3.2-1B a 262 M-parameter table held as 16-bit and 8-bit codes both.

The gather also accepts the linear's encoding when it is per tensor or per row (axis 0: a row of
the table is an output channel of the ``lm_head``) and has fewer bits than the activations (the
16-bit-activation modes, whose ``lm_head`` has 8-bit weights), which is ExecuTorch's own per-channel
embedding (``is_embedding_per_channel``: the table at the weights' spec, the gathered rows
quantized at the activations'). The two uses of the table are then annotated with the linear's
spec, one sharing the other's: one observer, one encoding, one set of codes both read.
"""

from __future__ import annotations

import torch
from torchao.quantization.pt2e.quantizer import QuantizationSpec, SharedQuantizationSpec
from torchao.quantization.pt2e.quantizer.quantizer import Q_ANNOTATION_KEY

_PER_TENSOR = (torch.per_tensor_affine, torch.per_tensor_symmetric)
_PER_CHANNEL = (torch.per_channel_affine, torch.per_channel_symmetric)


def gather_accepts(spec: object, rows: object) -> bool:
    """Whether a gather's table can take ``spec`` (per tensor, or per row of the table) and give
    rows quantized at ``rows`` for a cost too small to see: the gathered rows are quantized again,
    which costs little only if ``rows`` has more bits than ``spec``. At equal bits that second
    rounding is as coarse as the first (8a8w: -1.0 point of top-1 agreement with float on the
    accuracy benchmark's tiny trained model), so 8a8w and 16a16w keep a table for each."""
    if not (isinstance(spec, QuantizationSpec) and isinstance(rows, QuantizationSpec)):
        return False
    per_row = spec.qscheme in _PER_TENSOR or (spec.qscheme in _PER_CHANNEL and spec.ch_axis == 0)
    return per_row and _bits(rows) > _bits(spec)


def _bits(spec: QuantizationSpec) -> int:
    """The bits a spec's codes take (``quant_min``/``quant_max``, else its dtype's)."""
    if spec.quant_min is not None and spec.quant_max is not None:
        return (spec.quant_max - spec.quant_min).bit_length()
    return torch.iinfo(spec.dtype).bits


def annotate_tied_tables(model: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Each embedding whose table a linear also reads as its weight takes that linear's weight
    spec (where ``gather_accepts`` it), its gathered rows quantized at the spec its table had.
    The first of the two in the graph holds the spec, the other shares its edge: PT2E makes a
    shared observer from the edge it names, which must come first."""
    order = {node: index for index, node in enumerate(model.graph.nodes)}
    for node in model.graph.nodes:
        if node.target is not torch.ops.aten.embedding.default:
            continue
        table = node.args[0]
        gather = node.meta.get(Q_ANNOTATION_KEY)
        linear = _linear_reading(table)
        if gather is None or linear is None or table not in gather.input_qspec_map:
            continue
        spec = linear.meta[Q_ANNOTATION_KEY].input_qspec_map.get(table)
        if not gather_accepts(spec, gather.input_qspec_map[table]):
            continue
        gather.output_qspec = gather.input_qspec_map[table]
        first, second = sorted((node, linear), key=order.__getitem__)
        first.meta[Q_ANNOTATION_KEY].input_qspec_map[table] = spec
        second.meta[Q_ANNOTATION_KEY].input_qspec_map[table] = SharedQuantizationSpec((table, first))
    return model


def _linear_reading(table: object) -> torch.fx.Node | None:
    """The annotated linear layer that reads ``table`` as its weight, if one does."""
    if not isinstance(table, torch.fx.Node):
        return None
    for user in table.users:
        if (
            user.target is torch.ops.aten.linear.default
            and len(user.args) > 1
            and user.args[1] is table
            and Q_ANNOTATION_KEY in user.meta
        ):
            return user
    return None
