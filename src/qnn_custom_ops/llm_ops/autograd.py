"""The LLM ops' backward formulas, written out (``backward(ctx, *grads)`` reading ``ctx.inputs``,
as ``register_backward`` takes them): cheaper than the backward ``define_torch_ops`` would derive
from the references, which runs the forward again, and checked against them by gradcheck in
float64 (tests/llm_ops/test_autograd.py).

Each computes in the reference's precision (``real``: float32, float64 for float64) and returns
each gradient in its input's dtype. The KV-cache ops have none (``NO_CACHE_GRADIENT``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ..torch_bridge.autograd import NoGradient
from .reference import real, rope_join, rope_pairs, rope_tables

NO_CACHE_GRADIENT = NoGradient(
    "the KV-cache ops move rows of the exported programs' static cache",
    "train the model without its cache (the module swap_modules changed, not export_llm's programs), "
    "or detach what flows into the cache",
)


def _rms_norm_vjp(
    x: torch.Tensor, weight: torch.Tensor, eps: float, grad: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """y = x·r·w with r = 1/sqrt(mean(x²) + eps): dx = r·(g·w) − x·r³·mean(g·w·x), dw = Σ g·x·r."""
    values, g = real(x), real(grad)
    r = torch.rsqrt(values.pow(2).mean(-1, keepdim=True) + eps)
    gw = g * real(weight)
    dx = r * gw - values * r.pow(3) * (gw * values).mean(-1, keepdim=True)
    dw = (g * values * r).reshape(-1, x.shape[-1]).sum(0)
    return dx, dw


def rms_norm_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    x, weight, eps = ctx.inputs
    dx, dw = _rms_norm_vjp(x, weight, eps, grad)
    return dx.to(x.dtype), dw.to(weight.dtype), None


def fused_add_rms_norm_backward(ctx: Any, grad_norm: torch.Tensor, grad_sum: torch.Tensor) -> tuple[Any, ...]:
    """Both outputs depend on s = x + residual: ds = the norm's dx + the sum's gradient."""
    x, residual, weight, eps = ctx.inputs
    ds, dw = _rms_norm_vjp(real(x) + real(residual), weight, eps, grad_norm)
    ds = ds + real(grad_sum)
    return ds.to(x.dtype), ds.to(residual.dtype), dw.to(weight.dtype), None


def _gated_vjp(x: torch.Tensor, grad: torch.Tensor, activation: torch.Tensor, gate_grad: torch.Tensor) -> torch.Tensor:
    """y = act(a)·b over x = [a, b]: dx = [g·b·act'(a), g·act(a)] (``gate_grad`` is g·b·act'(a))."""
    return torch.cat((gate_grad, real(grad) * activation), dim=-1).to(x.dtype)


def _gate(x: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The gate a and the gradient reaching act(a): g·b."""
    values = real(x)
    d = x.shape[-1] // 2
    return values[..., :d], real(grad) * values[..., d:]


def silu_and_mul_backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
    """silu(a) = a·σ(a), silu'(a) = σ(a)·(1 + a·(1 − σ(a))): aten's ``silu_backward`` computes
    g·b·silu'(a) in one pass over the gate, where these torch ops would take five."""
    (x,) = ctx.inputs
    gate, up_grad = _gate(x, grad)
    return _gated_vjp(x, grad, F.silu(gate), torch.ops.aten.silu_backward(up_grad, gate))


def gelu_and_mul_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    """gelu(a) = a·Φ(a), gelu'(a) = Φ(a) + a·φ(a); with ``approximate="tanh"``, a/2·(1 + tanh(u)),
    u = √(2/π)·(a + 0.044715·a³), and its derivative: aten's ``gelu_backward``, one pass."""
    x, approximate = ctx.inputs
    gate, up_grad = _gate(x, grad)
    gate_grad = torch.ops.aten.gelu_backward(up_grad, gate, approximate=approximate)
    return _gated_vjp(x, grad, F.gelu(gate, approximate=approximate), gate_grad), None


def rope_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    """Each pair (a, b) turns by θ: (a·c − b·s, b·c + a·s). Its gradient turns back by −θ:
    (ga·c + gb·s, gb·c − ga·s); dcos = Σ ga·a + gb·b, dsin = Σ gb·a − ga·b over what cos and
    sin broadcast across."""
    x, cos, sin, style = ctx.inputs
    rotated = 2 * cos.shape[-1]
    c, s = rope_tables(cos, sin)
    g = real(grad)
    ga, gb = rope_pairs(g[..., :rotated], style)
    a, b = rope_pairs(real(x)[..., :rotated], style)
    dx = torch.cat((rope_join(ga * c + gb * s, gb * c - ga * s, style), g[..., rotated:]), dim=-1)
    needs_cos, needs_sin = ctx.needs_input_grad[1:3]
    dcos = (ga * a + gb * b).sum_to_size(c.shape).reshape(cos.shape).to(cos.dtype) if needs_cos else None
    dsin = (gb * a - ga * b).sum_to_size(s.shape).reshape(sin.shape).to(sin.dtype) if needs_sin else None
    return dx.to(x.dtype), dcos, dsin, None
