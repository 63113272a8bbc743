"""Per-block weight scales as QNN stores them, so the host computes what the HTP does.

QNN takes 4-bit per-block weights (``16a4w_block``) in its block-wise expansion encoding:
ExecuTorch's QNN builder (``make_qnn_per_block_config``) keeps one float scale per output
channel, its largest block scale / 16, and each block's scale as a 4-bit multiple of it, 1 to
16, while the weights' codes stay those computed with the blocks' own scales. A block whose
scale is not such a multiple is then dequantized with another scale on the phone than in the
converted model (measured on QAIRT 2.51's x86 HTP: a one-layer Qwen3's greedy tokens differ from
the first). Moving each block scale onto that grid before the weights' codes are computed gives
both the same weights: up, never down, so no code leaves the 4-bit range.
"""

from __future__ import annotations

import torch

#: QNN's block-scale multiples: 4 bits, 1 to 16 (ExecuTorch's ``bitwidth_of_scale``).
BLOCK_SCALE_STEPS = 16


def block_scales_on_qnn_grid(scales: torch.Tensor) -> torch.Tensor:
    """``scales`` ``[channels, blocks, ...]`` each rounded up to a multiple of its channel's largest / 16."""
    per_channel = scales.reshape(scales.shape[0], -1)
    unit = per_channel.amax(dim=-1, keepdim=True) / BLOCK_SCALE_STEPS
    return (torch.ceil(per_channel / unit).clamp(1, BLOCK_SCALE_STEPS) * unit).reshape(scales.shape)


def _is_per_block(node: torch.fx.Node) -> bool:
    """A torchao affine quantize of a weight with blocks along its input channels (``16a4w_block``:
    block size ``(1, n)`` of a linear, ``(1, n, 1, 1)`` of a 1x1 convolution, n > 1)."""
    quantize = torch.ops.torchao.quantize_affine
    if node.op != "call_function" or node.target not in (quantize, quantize.default):
        return False
    block_size = node.args[1]
    ones = [b == 1 for b in block_size] if isinstance(block_size, (tuple, list)) else []
    return ones[:2] == [True, False] and all(ones[2:])


def move_block_scales_onto_qnn_grid(module: torch.fx.GraphModule) -> None:
    """Each per-block weight scale of ``module`` (converted, its weights' quantizes not yet folded)
    rounded up onto QNN's grid, in place: the codes folded next, and the dequantize reading the
    same scale, then compute with what the HTP computes."""
    for node in module.graph.nodes:
        scale_moved_onto_qnn_grid(module, node)


def scale_moved_onto_qnn_grid(module: torch.fx.GraphModule, node: torch.fx.Node) -> None:
    """``node``'s block scale onto QNN's grid, in place, where it is a per-block weight quantize."""
    if _is_per_block(node) and isinstance(node.args[2], torch.fx.Node) and node.args[2].op == "get_attr":
        owner_path, _, name = str(node.args[2].target).rpartition(".")
        owner = module.get_submodule(owner_path)
        setattr(owner, name, block_scales_on_qnn_grid(getattr(owner, name)))
