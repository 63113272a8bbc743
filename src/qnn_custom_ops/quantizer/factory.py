"""``make_quantizer``: executorch's ``QnnQuantizer`` with our annotation, and no network."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .annotation import Overrides, quant_dtype_of

if TYPE_CHECKING:
    from ..binding import OpPackageBinding


def make_quantizer(binding: "OpPackageBinding", quant_dtype: str = "8a8w", overrides: Overrides | None = None,
                   **options: Any) -> Any:
    """A ``QnnQuantizer`` for ``quant_dtype`` whose custom annotation covers the bound ops.

    ``options`` go to executorch's ``make_quantizer`` (``per_channel_conv``, ``soc_model``, ...).
    """
    from executorch.backends.qualcomm.export_utils import make_quantizer as executorch_make_quantizer

    annotation = binding.quant_annotation(quant_dtype, overrides)
    return executorch_make_quantizer(quant_dtype=quant_dtype_of(quant_dtype), custom_annotations=(annotation,),
                                     **options)
