"""A calibrated PT2E observer's quantization as a float function: what the converted program will
compute at that point (quantize, then dequantize, with the encoding observed so far).

Calibration a layer at a time can give the next layer the quantized layer's outputs instead of the
float layer's (``layer_stages``, ``inputs="quantized"``): each observer of the layer is then run as
its quantization. One small function per kind of encoding the LLM quantizer's observers make, the
kind told by the observer's own attributes; an observer that has seen nothing passes values on.
Observers are typed ``Any``: PT2E's and ExecuTorch's observer classes share no typed base that
declares ``calculate_qparams`` and the ranges.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

FakeQuant = Callable[[torch.Tensor], torch.Tensor]


def _per_block(observer: Any) -> FakeQuant:
    """torchao's affine quantization over ``block_size`` (``PerBlockParamObserver``: 4-bit weights
    with a scale per block of input channels)."""
    from torchao.quantization.quant_primitives import dequantize_affine, quantize_affine

    scale, zero_point = observer.calculate_qparams()
    block, low, high, dtype = observer.block_size, observer.quant_min, observer.quant_max, observer.dtype

    def run(x: torch.Tensor) -> torch.Tensor:
        codes = quantize_affine(x, block, scale, zero_point, dtype, low, high)
        return dequantize_affine(codes, block, scale, zero_point, dtype, low, high, output_dtype=x.dtype)

    return run


def _per_channel(observer: Any) -> FakeQuant:
    """A scale and zero point per channel along ``ch_axis`` (the projections' weights)."""
    scale, zero_point = observer.calculate_qparams()
    axis, low, high = observer.ch_axis, observer.quant_min, observer.quant_max
    return lambda x: torch.fake_quantize_per_channel_affine(x, scale, zero_point.int(), axis, low, high)


def _per_tensor(observer: Any) -> FakeQuant:
    """One scale and zero point (activations, and a per-tensor weight)."""
    scale, zero_point = observer.calculate_qparams()
    low, high = observer.quant_min, observer.quant_max
    return lambda x: torch.fake_quantize_per_tensor_affine(x, float(scale), int(zero_point), low, high)


def _kind(observer: Any) -> Callable[[Any], FakeQuant]:
    if hasattr(observer, "block_size"):
        return _per_block
    if getattr(observer, "qscheme", None) in (torch.per_channel_affine, torch.per_channel_symmetric):
        return _per_channel
    return _per_tensor


def _observed(observer: torch.nn.Module) -> bool:
    low = getattr(observer, "min_val", None)
    return isinstance(low, torch.Tensor) and low.numel() > 0 and bool(torch.isfinite(low).all())


def fake_quantizer(observer: torch.nn.Module) -> FakeQuant:
    """``observer``'s quantization with the encoding it has observed; identity if it saw nothing."""
    return _kind(observer)(observer) if _observed(observer) else _identity


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x
