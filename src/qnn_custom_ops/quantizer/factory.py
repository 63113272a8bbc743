"""``make_quantizer``: executorch's ``QnnQuantizer`` with our annotation, and no network."""

from __future__ import annotations

from typing import Any

import torch
from executorch.backends.qualcomm.quantizer.quantizer import QnnQuantizer
from executorch.backends.qualcomm.serialization.qc_schema import QcomChipset
from torchao.quantization.pt2e.quantizer.quantizer import Q_ANNOTATION_KEY

from ..torch_bridge import OpPackageBinding
from .annotation import Overrides, quant_annotation, quant_dtype_of


class BoundOpsQnnQuantizer(QnnQuantizer):
    """``QnnQuantizer`` that leaves the bound ops to our annotation: it skips them in its own
    pass (which would print "No quant config is implemented" for each, although ours
    quantizes them) and asks no output range of a multi-output one."""

    def __init__(self, binding: OpPackageBinding, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.binding = binding

    def annotate(self, model: Any) -> Any:
        bound = [n.name for n in model.graph.nodes if self.binding.op_for(n) is not None]
        self.add_discard_nodes([*self.discard_nodes, *bound])  # add_discard_nodes replaces the set
        return super().annotate(model)

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
    **default_config: Any,
) -> QnnQuantizer:
    """A ``QnnQuantizer`` for ``quant_dtype`` whose custom annotation covers the bound ops.

    Configured as executorch's ``export_utils.make_quantizer`` does (which also accepts
    ``quant_annotation(binding, ...)`` as a custom annotation), without importing its debug
    tooling. ``default_config`` goes to ``QnnQuantizer.set_default_quant_config``.
    """
    annotation = quant_annotation(binding, quant_dtype, overrides)
    quantizer = BoundOpsQnnQuantizer(binding, soc_model=QcomChipset[soc_model])
    quantizer.add_custom_quant_annotations((annotation,))
    quantizer.set_default_quant_config(
        quant_dtype_of(quant_dtype),
        is_conv_per_channel=per_channel_conv,
        is_linear_per_channel=per_channel_linear,
        **default_config,
    )
    return quantizer
