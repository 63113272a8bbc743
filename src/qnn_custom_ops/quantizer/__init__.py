"""Quantizer annotation for bound custom ops, derived from their OpDef datatypes."""

from ..qnn_sdk import guard_sdk_download

guard_sdk_download()  # before anything imports executorch's QNN code

from .annotation import (  # noqa: E402
    FLOAT_TENSORS_KEY,
    QUANT_DTYPES,
    QuantAnnotationError,
    Share,
    io_quant_configs,
    make_annotation,
    qat_supported,
    quant_annotation,
    quant_dtype_of,
    spec_datatype,
)
from .factory import QUANT_MODES, BoundOpsQnnQuantizer, QuantMode, make_quantizer, quant_mode, trainable  # noqa: E402

__all__ = [
    "BoundOpsQnnQuantizer",
    "FLOAT_TENSORS_KEY",
    "QUANT_DTYPES",
    "QUANT_MODES",
    "QuantAnnotationError",
    "QuantMode",
    "Share",
    "io_quant_configs",
    "make_annotation",
    "make_quantizer",
    "qat_supported",
    "quant_annotation",
    "quant_dtype_of",
    "quant_mode",
    "spec_datatype",
    "trainable",
]
