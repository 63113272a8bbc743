"""``make_quantizer``: executorch's ``QnnQuantizer`` with our annotation, and no network."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from executorch.backends.qualcomm.quantizer.quantizer import (
    QUANT_CONFIG_DICT,
    ModuleQConfig,
    QnnQuantizer,
    QuantDtype,
)
from executorch.backends.qualcomm.serialization.qc_schema import QcomChipset
from torchao.quantization.pt2e.quantizer.quantizer import Q_ANNOTATION_KEY

from ..errors import UsageError
from ..torch_bridge import OpPackageBinding
from .annotation import Overrides, qat_supported, quant_annotation
from .tied_weights import annotate_tied_tables


@dataclass(frozen=True)
class QuantMode:
    """A ``quant_dtype`` of ``make_quantizer``: ``QnnQuantizer``'s default config (the aten ops:
    activations, and weights per tensor, or per output channel, or per block of ``block_size``
    input channels for the linear layers), the ``quant_dtype`` of the bound ops' annotation, and
    the dtype of the layers a ``keep`` predicate names (an LLM's ``lm_head``). The 4-bit modes
    annotate the bound ops as 16a8w: their 16-bit activations are 16a4w's, and no OpDef of the
    library declares a 4-bit weight (RMSNorm's gain keeps its 8 bits, as ExecuTorch's own
    RMSNorm keeps 16)."""

    default: QuantDtype
    ops: str
    block_size: int | None = None
    kept: QuantDtype | None = None


#: The block size of 16a4w_block: ExecuTorch's Qualcomm recipes for Llama 3.2 1B/3B, Qwen3-0.6B,
#: SmolLM3 and GLM (``static_llm_quant_recipe.py``: conv2d weights ``(1, 32, 1, 1)``, 32 input
#: channels per scale of each output channel).
BLOCK_SIZE = 32
QUANT_MODES = {
    "8a8w": QuantMode(QuantDtype.use_8a8w, "8a8w"),
    "16a8w": QuantMode(QuantDtype.use_16a8w, "16a8w"),
    "16a16w": QuantMode(QuantDtype.use_16a16w, "16a16w"),
    "16a4w": QuantMode(QuantDtype.use_16a4w, "16a8w", kept=QuantDtype.use_16a8w),
    "16a4w_block": QuantMode(QuantDtype.use_16a4w_block, "16a8w", BLOCK_SIZE, kept=QuantDtype.use_16a8w),
}


def quant_mode(name: str) -> QuantMode:
    """The mode of a name, or one error listing the names (not executorch's KeyError)."""
    try:
        return QUANT_MODES[name]
    except KeyError:
        raise UsageError(f"unknown quant_dtype {name!r}: use one of {', '.join(QUANT_MODES)}") from None


def trainable(quant_dtype: str) -> bool:
    """Whether ``make_quantizer(..., qat=True)`` takes the ``QUANT_MODES`` name: executorch has
    QAT configs for its default and for the bound ops' dtype (all but 16a16w)."""
    mode = quant_mode(quant_dtype)
    return (mode.default, True) in QUANT_CONFIG_DICT and qat_supported(mode.ops)


class BoundOpsQnnQuantizer(QnnQuantizer):
    """``QnnQuantizer`` that leaves the bound ops to our annotation: it skips them in its own
    pass (which would print "No quant config is implemented" for each, although ours
    quantizes them) and asks no output range of a multi-output one. With a ``block_size`` each
    linear layer under the default config gets per-block weights (``QnnQuantizer`` takes them
    per node name, known once the graph is)."""

    def __init__(self, binding: OpPackageBinding, block_size: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.binding = binding
        self.block_size = block_size

    def annotate(self, model: Any) -> Any:
        bound = [n.name for n in model.graph.nodes if self.binding.op_for(n) is not None]
        self.add_discard_nodes([*self.discard_nodes, *bound])  # add_discard_nodes replaces the set
        if self.block_size is not None:
            self.set_block_size_map({n.name: (1, self.block_size) for n in self._blocked_linears(model)})
        return super().annotate(model)

    def _blocked_linears(self, model: Any) -> list[torch.fx.Node]:
        """The linear layers of the default config whose input channels split into whole blocks."""
        return [
            n
            for n in model.graph.nodes
            if n.target == torch.ops.aten.linear.default
            and self._get_submodule_qconfig(n) is self.default_quant_config
            and n.args[1].meta["val"].shape[-1] % self.block_size == 0
        ]

    def _get_quant_range(self, node: torch.fx.Node) -> int | None:
        """No range, quietly, for a bound multi-output op: its outputs' specs are on its getitem
        users, none on the node. executorch asks every node (to clamp infinite constants to it)
        and would log "Could not resolve quant range" for it, twice when it takes a weight;
        nothing is clamped either way."""
        annotation = node.meta.get(Q_ANNOTATION_KEY)
        if self.binding.op_for(node) is not None and annotation is not None and annotation.output_qspec is None:
            return None
        return super()._get_quant_range(node)


def make_quantizer(
    binding: OpPackageBinding,
    quant_dtype: str = "8a8w",
    overrides: Overrides | None = None,
    soc_model: str = "SM8750",
    per_channel_conv: bool = True,
    per_channel_linear: bool = False,
    keep: Callable[[torch.fx.Node], bool] | None = None,
    qat: bool = False,
    **default_config: Any,
) -> QnnQuantizer:
    """A ``QnnQuantizer`` for ``quant_dtype`` (a ``QUANT_MODES`` name) whose custom annotation
    covers the bound ops.

    Configured as executorch's ``export_utils.make_quantizer`` does (which also accepts
    ``quant_annotation(binding, ...)`` as a custom annotation), without importing its debug
    tooling. ``default_config`` goes to ``QnnQuantizer.set_default_quant_config``. Nodes
    ``keep`` accepts take the mode's ``kept`` dtype per channel (a 4-bit mode's ``lm_head`` at
    16a8w, as ExecuTorch's Llama recipes keep it). A table that an embedding and a linear both
    read (a tied embedding) is quantized once, at the linear's spec (``tied_weights``).

    With ``qat`` every spec fake-quantizes instead of observing (executorch's QAT configs, the
    bound ops' OpDef-derived annotation included): prepare with ``prepare_qat_pt2e``, train, then
    ``convert_pt2e``. Refused, in one line, for a mode executorch has no QAT config of (16a16w).
    """
    mode = quant_mode(quant_dtype)
    if qat and not trainable(quant_dtype):
        raise UsageError(
            f"quantization-aware training has no {quant_dtype} config in executorch: use "
            f"{', '.join(name for name in QUANT_MODES if trainable(name))}"
        )
    annotation = quant_annotation(binding, mode.ops, overrides, qat)
    quantizer = BoundOpsQnnQuantizer(binding, mode.block_size, soc_model=QcomChipset[soc_model])
    quantizer.add_custom_quant_annotations((annotation, annotate_tied_tables))
    quantizer.set_default_quant_config(
        mode.default,
        is_qat=qat,
        is_conv_per_channel=per_channel_conv,
        is_linear_per_channel=per_channel_linear,
        **default_config,
    )
    if keep is not None and mode.kept is not None:
        kept = ModuleQConfig(mode.kept, qat, is_conv_per_channel=True, is_linear_per_channel=True, **default_config)
        quantizer.set_submodule_qconfig_list([(keep, kept)])
    return quantizer
