"""PyTorch references of the LLM ops: the semantics the kernels are tested against.

Each op has a shape check (shared by the reference and the fake kernel, so a bad call fails
the same way eagerly and under ``torch.export``) and a reference computed in float32 and
cast back to the input's dtype, as the kernels compute (float64 stays float64: gradcheck
checks the backward formulas of ``autograd`` in it).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ..errors import ReportedError

GELU_APPROXIMATIONS = ("none", "tanh")
ROPE_STYLES = ("neox", "gptj")
#: What the KV-cache ops make of an index outside [0, ctx_len): "skip" (padding: not written,
#: read as zeros) or "from_end" (QEfficient's, torch indexing's: a negative index counts from
#: the end, so its padding position -1 writes and reads the last row; others are skipped).
NEGATIVE_INDICES = ("skip", "from_end")


class LlmOpInputError(ReportedError, ValueError):
    """An LLM op was called with tensors its semantics do not accept."""


def real(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in the precision the math runs in: float32, or float64 for a float64 tensor."""
    return tensor.to(torch.promote_types(tensor.dtype, torch.float32))


def _require(condition: bool, op: str, message: str) -> None:
    if not condition:
        raise LlmOpInputError(f"qco_llm::{op}: {message}")


def _require_choice(op: str, name: str, value: str, choices: Sequence[str]) -> None:
    """A string parameter (an OpDef enum) must be one of its values."""
    _require(value in choices, op, f"{name}={value!r}; use one of {', '.join(choices)}")


def _require_float(op: str, **tensors: torch.Tensor) -> None:
    for name, tensor in tensors.items():
        _require(tensor.is_floating_point(), op, f"{name} must be a floating tensor, got {tensor.dtype}")


def _require_index(op: str, **tensors: torch.Tensor) -> None:
    """int32, the op's INT_32, or int64, which QNN's lowering casts to int32 (as the ops do)."""
    for name, tensor in tensors.items():
        _require(
            tensor.dtype in (torch.int32, torch.int64),
            op,
            f"{name} must be int32 (the op's INT_32 input) or int64, got {tensor.dtype}: pass {name}.int()",
        )


def _require_shape(op: str, name: str, tensor: torch.Tensor, expected: Sequence[int], what: str) -> None:
    _require(
        tuple(tensor.shape) == tuple(expected),
        op,
        f"{name} has shape {list(tensor.shape)}, expected {list(expected)} ({what})",
    )


def require_out_like(op: str, out: torch.Tensor, result: torch.Tensor) -> None:
    """An ``.out`` tensor must have the result's dtype and shape: torch's own out= ops refuse a
    dtype they cannot write, where ``copy_`` would cast (int32: truncate) or broadcast silently."""
    fix = f"pass out=torch.empty({list(result.shape)}, dtype={result.dtype})"
    _require(
        out.dtype == result.dtype,
        op,
        f"out has dtype {out.dtype}, expected {result.dtype} (the result's; .out does not cast): {fix}",
    )
    _require(
        out.shape == result.shape,
        op,
        f"out has shape {list(out.shape)}, expected {list(result.shape)} "
        f"(the result's; .out does not resize or broadcast): {fix}",
    )


def rms_norm_shape(x: torch.Tensor, weight: torch.Tensor) -> torch.Size:
    _require_float("rms_norm", x=x, weight=weight)
    _require(x.dim() >= 1, "rms_norm", "x must have at least one dimension")
    _require_shape("rms_norm", "weight", weight, [x.shape[-1]], "the last dimension of x")
    return x.shape


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    rms_norm_shape(x, weight)
    values = real(x)
    return (values * torch.rsqrt(values.pow(2).mean(-1, keepdim=True) + eps) * real(weight)).to(x.dtype)


def fused_add_rms_norm_shape(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> torch.Size:
    _require_float("fused_add_rms_norm", residual=residual)
    _require_shape("fused_add_rms_norm", "residual", residual, list(x.shape), "the shape of x")
    return rms_norm_shape(x, weight)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``fused_add_rms_norm``, functional: (the norm of ``x + residual``, the sum). The
    sum is taken in float32 and normalised before it is rounded to x's dtype, as vLLM does;
    the residual returned is that sum in x's dtype."""
    fused_add_rms_norm_shape(x, residual, weight)
    summed = real(x) + real(residual)
    return rms_norm(summed, weight, eps).to(x.dtype), summed.to(x.dtype)


def gated_shape(op: str, x: torch.Tensor) -> torch.Size:
    _require_float(op, x=x)
    _require(
        x.dim() >= 1 and x.shape[-1] % 2 == 0,
        op,
        f"x has shape {list(x.shape)}: its last dimension must be even (gate and up halves)",
    )
    return x.shape[:-1] + (x.shape[-1] // 2,)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = gated_shape("silu_and_mul", x)[-1]
    values = real(x)
    return (F.silu(values[..., :d]) * values[..., d:]).to(x.dtype)


def gelu_and_mul_shape(x: torch.Tensor, approximate: str) -> torch.Size:
    _require_choice("gelu_and_mul", "approximate", approximate, GELU_APPROXIMATIONS)
    return gated_shape("gelu_and_mul", x)


def gelu_and_mul(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    d = gelu_and_mul_shape(x, approximate)[-1]
    values = real(x)
    gate = values[..., :d]
    # GELU(+inf) is +inf; torch 2.13's float32 CPU GELU says NaN there on some machines, and the
    # kernel is judged by this reference.
    activated = torch.where(torch.isposinf(gate), gate, F.gelu(gate, approximate=approximate))
    return (activated * values[..., d:]).to(x.dtype)


def rope_shape(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, style: str) -> torch.Size:
    """cos and sin are [seq, rotary / 2] (every sequence at the same positions) or
    [batch, seq, rotary / 2] (each sequence at its own: continuous batching decode), with
    0 < rotary <= head_dim; the elements past ``rotary`` pass through (partial rotary)."""
    _require_choice("rope", "style", style, ROPE_STYLES)
    _require_float("rope", x=x, cos=cos, sin=sin)
    _require(
        x.dim() == 4,
        "rope",
        f"x has shape {list(x.shape)}, expected [batch, heads, seq, head_dim]",
    )
    batch, _, seq, head_dim = x.shape
    _require(
        cos.dim() in (2, 3) and 1 <= cos.shape[-1] <= head_dim // 2,
        "rope",
        f"cos has shape {list(cos.shape)}, expected [seq, rotary / 2] or [batch, seq, rotary / 2] "
        f"with 0 < rotary <= head_dim ({head_dim})",
    )
    table = [seq, cos.shape[-1]] if cos.dim() == 2 else [batch, seq, cos.shape[-1]]
    what = "[seq, rotary / 2]" if cos.dim() == 2 else "[batch, seq, rotary / 2]"
    _require_shape("rope", "cos", cos, table, what)
    _require_shape("rope", "sin", sin, table, f"{what}, as cos")
    return x.shape


def rope_tables(cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin as they broadcast against [batch, heads, seq, half]: [seq, half] over batch
    and heads, [batch, seq, half] over heads."""
    if cos.dim() == 2:
        return real(cos), real(sin)
    return real(cos)[:, None], real(sin)[:, None]


def rope_pairs(rotary: torch.Tensor, style: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The two halves each position rotates: neox's first and second half, gptj's even and odd
    elements."""
    half = rotary.shape[-1] // 2
    return (rotary[..., :half], rotary[..., half:]) if style == "neox" else (rotary[..., 0::2], rotary[..., 1::2])


def rope_join(a: torch.Tensor, b: torch.Tensor, style: str) -> torch.Tensor:
    """The inverse of ``rope_pairs``."""
    return torch.cat((a, b), dim=-1) if style == "neox" else torch.stack((a, b), dim=-1).flatten(-2)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, style: str = "neox") -> torch.Tensor:
    rope_shape(x, cos, sin, style)
    values = real(x)
    c, s = rope_tables(cos, sin)
    rotary, passed = values[..., : 2 * cos.shape[-1]], values[..., 2 * cos.shape[-1] :]
    a, b = rope_pairs(rotary, style)
    return torch.cat((rope_join(a * c - b * s, b * c + a * s, style), passed), dim=-1).to(x.dtype)


def _slots(op: str, cache: torch.Tensor, name: str, indices: torch.Tensor, batch_index: torch.Tensor | None) -> None:
    """The checks scatter and gather share: a 4-D float cache, integer indices [batch, n] (or
    QEfficient's [batch, 1, n]) and (continuous batching) a batch_index [batch] (or QEfficient's
    [batch, 1]), else batch == the cache's slots."""
    _require_float(op, cache=cache)
    _require(cache.dim() == 4, op, f"cache has shape {list(cache.shape)}, expected [batch, heads, ctx_len, head_dim]")
    _require_index(op, **{name: indices})
    _require(
        indices.dim() == 2 or (indices.dim() == 3 and indices.shape[1] == 1),
        op,
        f"{name} has shape {list(indices.shape)}, expected [batch, n] or [batch, 1, n]",
    )
    if batch_index is None:
        _require(
            indices.shape[0] == cache.shape[0],
            op,
            f"{name} has batch {indices.shape[0]}, the cache {cache.shape[0]} (ctx_*_cb takes a batch_index)",
        )
        return
    _require_index(op, batch_index=batch_index)
    _require(
        tuple(batch_index.shape) in ((indices.shape[0],), (indices.shape[0], 1)),
        op,
        f"batch_index has shape {list(batch_index.shape)}, expected [{indices.shape[0]}] or [{indices.shape[0]}, 1]",
    )


def _as_int32(indices: torch.Tensor) -> torch.Tensor:
    """Indices as the kernel sees them: int64 cast to int32 as QNN's lowering casts it, [b, 1, n]
    as [b, n]."""
    return indices.to(torch.int32).reshape(indices.shape[0], -1).long()


def _slot_indices(op: str, cache: torch.Tensor, batch: int, batch_index: torch.Tensor | None) -> torch.Tensor:
    """The cache slot of each sequence: ``batch_index`` (checked against the cache) or 0..batch-1."""
    slots = torch.arange(batch) if batch_index is None else _as_int32(batch_index)[:, 0]
    _require(
        bool(((slots >= 0) & (slots < cache.shape[0])).all()),
        op,
        f"batch_index {slots.tolist()} names a slot outside the cache's {cache.shape[0]}",
    )
    return slots


def _cache_rows(indices: torch.Tensor, ctx_len: int, negative: str) -> torch.Tensor:
    """The row each index names, or -1 for none (see ``NEGATIVE_INDICES``)."""
    rows = _as_int32(indices)
    if negative == "from_end":
        rows = torch.where(rows < 0, rows + ctx_len, rows)
    return torch.where((rows >= 0) & (rows < ctx_len), rows, -1)


def ctx_scatter_shape(
    cache: torch.Tensor,
    position_ids: torch.Tensor,
    updates: torch.Tensor,
    batch_index: torch.Tensor | None = None,
    op: str = "ctx_scatter",
    negative: str = "skip",
) -> torch.Size:
    _require_choice(op, "negative", negative, NEGATIVE_INDICES)
    _slots(op, cache, "position_ids", position_ids, batch_index)
    _require_float(op, updates=updates)
    batch, seq = position_ids.shape[0], position_ids.shape[-1]
    expected = [batch, cache.shape[1], seq, cache.shape[3]]
    _require_shape(op, "updates", updates, expected, "[batch, heads, seq, head_dim] of the cache and position_ids")
    return cache.shape


def _scatter(
    cache: torch.Tensor,
    batch_index: torch.Tensor | None,
    position_ids: torch.Tensor,
    updates: torch.Tensor,
    op: str,
    negative: str,
) -> torch.Tensor:
    ctx_scatter_shape(cache, position_ids, updates, batch_index, op, negative)
    batch, seq = position_ids.shape[0], position_ids.shape[-1]
    slots = _slot_indices(op, cache, batch, batch_index)
    positions = _cache_rows(position_ids, cache.shape[2], negative)
    valid = positions >= 0  # padding positions are skipped
    rows = slots[:, None].expand(batch, seq)
    out = cache.clone()
    out[rows[valid], :, positions[valid]] = updates.permute(0, 2, 1, 3)[valid].to(cache.dtype)
    return out


def ctx_scatter(
    cache: torch.Tensor, position_ids: torch.Tensor, updates: torch.Tensor, negative: str = "skip"
) -> torch.Tensor:
    return _scatter(cache, None, position_ids, updates, "ctx_scatter", negative)


def ctx_scatter_cb(
    cache: torch.Tensor,
    batch_index: torch.Tensor,
    position_ids: torch.Tensor,
    updates: torch.Tensor,
    negative: str = "skip",
) -> torch.Tensor:
    return _scatter(cache, batch_index, position_ids, updates, "ctx_scatter_cb", negative)


def ctx_gather_shape(
    cache: torch.Tensor,
    ctx_indices: torch.Tensor,
    batch_index: torch.Tensor | None = None,
    op: str = "ctx_gather",
    negative: str = "skip",
) -> list[int]:
    _require_choice(op, "negative", negative, NEGATIVE_INDICES)
    _slots(op, cache, "ctx_indices", ctx_indices, batch_index)
    return [ctx_indices.shape[0], cache.shape[1], ctx_indices.shape[-1], cache.shape[3]]


def _gather(
    cache: torch.Tensor, batch_index: torch.Tensor | None, ctx_indices: torch.Tensor, op: str, negative: str
) -> torch.Tensor:
    ctx_gather_shape(cache, ctx_indices, batch_index, op, negative)
    batch = ctx_indices.shape[0]
    slots = _slot_indices(op, cache, batch, batch_index)
    indices = _cache_rows(ctx_indices, cache.shape[2], negative)
    b, i = (indices >= 0).nonzero(as_tuple=True)
    rows = cache.new_zeros(batch, indices.shape[1], cache.shape[1], cache.shape[3])  # rows named by none read 0
    rows[b, i] = cache[slots[b], :, indices[b, i]]  # only rows inside the cache: any ctx_len, 0 included
    return rows.permute(0, 2, 1, 3).contiguous()


def ctx_gather(cache: torch.Tensor, ctx_indices: torch.Tensor, negative: str = "skip") -> torch.Tensor:
    return _gather(cache, None, ctx_indices, "ctx_gather", negative)


def ctx_gather_cb(
    cache: torch.Tensor, batch_index: torch.Tensor, ctx_indices: torch.Tensor, negative: str = "skip"
) -> torch.Tensor:
    return _gather(cache, batch_index, ctx_indices, "ctx_gather_cb", negative)
