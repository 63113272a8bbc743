"""From a Hugging Face causal LM to prefill and decode programs on the library's ops.

``export_llm`` keeps the model's own modules (embedding, projections, ``lm_head``), swaps the
RMSNorms and MLPs (``swap_modules``) and replaces HF's attention and its growing cache by a
static one: RoPE by ``qco_llm::rope``, the KV cache a fixed ``[batch, kv_heads, ctx_len,
head_dim]`` tensor per layer and K/V, passed in and out of the program (no state inside it,
so the same graph runs on ExecuTorch's host runtime and in the QNN delegate). Each of the
``batch`` sequences sits at its own positions (RoPE tables per sequence, a mask per sequence).

Two cache layouts:

- ``"rows"`` (the default; ExecuTorch's static llama): the program reads the cache and returns
  only the rows of this call ``[batch, kv_heads, seq, head_dim]``; the caller writes them into its
  cache at their positions (``KvCache.carry``). Attention is split over the cache and the new
  rows, so nothing copies the cache: a decode step moves the rows it reads plus the new rows.
- ``"scatter"`` (QEfficient's): ``ctx_scatter`` writes the new rows into the cache, the new
  cache is an output, ``ctx_gather`` reads rows up to the newest position (the rest read 0).
  Every decode step copies the whole cache (in the scatter and through the graph output).

Inputs of both programs: ``tokens [batch, seq] int32``, ``position_ids [batch, seq] int32``
(padding at the end as -1: it writes nothing and attends to nothing), then the K caches of every
layer, then the V caches. Outputs: ``logits [batch, seq, vocab]``, then K and V as above.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import torch

from ..errors import UsageError
from .llm import llm_ops
from .swap import QcoRMSNorm, Swap, swap_modules

CACHE_LAYOUTS = ("rows", "scatter")
#: ``model_type``s whose decoder layers compute exactly what the static layers below do.
ARCHITECTURES = ("llama", "qwen2", "mistral", "gemma", "phi3")
#: Masked scores are lowered by this much: exp(-255) underflows to 0 in float32, and a 16-bit
#: encoding of the scores still resolves 0.004 (an -inf or finfo.min cannot be observed).
MASK_DEPTH = 255.0
_STATIC_ROPE = ("default", "linear", "llama3", "yarn")
#: A transformers module of a supported architecture, read by attribute (``model.model.layers``,
#: ``attention.q_proj``...): duck-typed across architectures, so not typed further.
HFModule: TypeAlias = Any


class LlmExportError(UsageError):
    """A model or a shape ``export_llm`` cannot turn into static programs."""


@dataclass(frozen=True)
class LlmShape:
    """The static shapes both programs share."""

    layers: int
    kv_heads: int
    head_dim: int
    vocab: int
    ctx_len: int
    prefill_len: int
    cache: str
    batch: int = 1

    def empty_cache(self) -> list[torch.Tensor]:
        """Zeroed K caches of every layer, then V caches, as the programs take them."""
        return [torch.zeros(self.batch, self.kv_heads, self.ctx_len, self.head_dim) for _ in range(2 * self.layers)]

    def inputs(
        self, tokens: Sequence[Sequence[int]], starts: Sequence[int], length: int, caches: list[torch.Tensor]
    ) -> tuple:
        """One call's inputs: sequence b's ``tokens[b]`` at positions ``starts[b]...``, each
        padded to ``length`` with token 0 at position -1."""
        token_rows = [list(row) + [0] * (length - len(row)) for row in tokens]
        position_rows = [
            list(range(start, start + len(row))) + [-1] * (length - len(row)) for row, start in zip(tokens, starts)
        ]
        token_ids = torch.tensor(token_rows, dtype=torch.int32)
        return (token_ids, torch.tensor(position_rows, dtype=torch.int32), *caches)


class StaticAttention(torch.nn.Module):
    """HF attention over a static cache: ``qco_llm::rope`` on q and k, grouped queries matched
    to their KV head by a reshape (no ``repeat_kv`` copy of the cache)."""

    attention: HFModule
    heads: int
    kv_heads: int
    head_dim: int
    cache: str
    ops: dict[str, Any]

    def __init__(self, attention: HFModule, heads: int, kv_heads: int, cache: str):
        super().__init__()
        self.attention = attention  # HF's module: its projections and scaling
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, attention.head_dim
        self.cache = cache
        self.ops = llm_ops()

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v as ``[batch, heads, seq, head_dim]``; Phi-3 fuses the projections into ``qkv_proj``."""
        sizes = (self.heads * self.head_dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim)
        if hasattr(self.attention, "qkv_proj"):
            q, k, v = self.attention.qkv_proj(x).split(sizes, dim=-1)
        else:
            q, k, v = (self.attention.q_proj(x), self.attention.k_proj(x), self.attention.v_proj(x))
        return tuple(
            t.view(x.shape[0], -1, n, self.head_dim).transpose(1, 2)
            for t, n in zip((q, k, v), (self.heads, self.kv_heads, self.kv_heads))
        )

    def _grouped(self, q: torch.Tensor) -> torch.Tensor:
        """``[b, heads, seq, d]`` -> ``[b, kv_heads, group * seq, d]``: query head h uses KV head
        h // group, as HF's ``repeat_kv`` orders them."""
        return q.reshape(q.shape[0], self.kv_heads, -1, self.head_dim)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        position_ids: torch.Tensor,
        mask: torch.Tensor,
        ctx_indices: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = self._project(x)
        q, k = self.ops["rope"](q, cos, sin), self.ops["rope"](k, cos, sin)
        grouped = self._grouped(q)
        group = self.heads // self.kv_heads
        mask = mask.repeat(1, group, 1).unsqueeze(1)  # [b, 1, group * seq, keys]: every KV head
        scaling = self.attention.scaling
        if self.cache == "scatter":
            k_cache = self.ops["ctx_scatter"](k_cache, position_ids, k)
            v_cache = self.ops["ctx_scatter"](v_cache, position_ids, v)
            keys, values = self.ops["ctx_gather"](k_cache, ctx_indices), self.ops["ctx_gather"](v_cache, ctx_indices)
            probs = torch.softmax(grouped @ keys.transpose(-1, -2) * scaling + mask, dim=-1)
            out, new = probs @ values, (k_cache, v_cache)
        else:
            scores = torch.cat((grouped @ k_cache.transpose(-1, -2), grouped @ k.transpose(-1, -2)), dim=-1)
            probs = torch.softmax(scores * scaling + mask, dim=-1)
            ctx_len = k_cache.shape[2]
            out, new = probs[..., :ctx_len] @ v_cache + probs[..., ctx_len:] @ v, (k, v)
        batch = x.shape[0]
        out = (
            out.reshape(batch, self.heads, -1, self.head_dim)
            .transpose(1, 2)
            .reshape(batch, -1, self.heads * self.head_dim)
        )
        return self.attention.o_proj(out), *new


class StaticLayer(torch.nn.Module):
    """A pre-norm decoder layer (Llama, Qwen2, Mistral, Gemma, Phi-3: dropout is off in eval).
    The residual add and the post-attention norm are one ``fused_add_rms_norm`` when that norm
    is the library's (vLLM's fusion); a norm left native keeps the add apart."""

    input_layernorm: HFModule
    post_attention_layernorm: HFModule
    mlp: HFModule
    self_attn: StaticAttention
    window: int | None
    fused_add_rms_norm: Any

    def __init__(self, layer: HFModule, attention: StaticAttention, window: int | None):
        super().__init__()
        self.input_layernorm = layer.input_layernorm
        self.post_attention_layernorm = layer.post_attention_layernorm
        self.mlp = layer.mlp
        self.self_attn = attention
        self.window = window
        self.fused_add_rms_norm = llm_ops()["fused_add_rms_norm"]

    def forward(self, x: torch.Tensor, *args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        attended, k, v = self.self_attn(self.input_layernorm(x), *args)
        normed, x = self._add_and_norm(attended, x)
        return x + self.mlp(normed), k, v

    def _add_and_norm(self, attended: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(post-attention norm of x + attended, x + attended)."""
        norm = self.post_attention_layernorm
        if isinstance(norm, QcoRMSNorm):
            return self.fused_add_rms_norm(attended, x, norm.weight, norm.eps)
        x = x + attended
        return norm(x), x


class StaticCausalLM(torch.nn.Module):
    """``forward(tokens, position_ids, *k_caches, *v_caches) -> (logits, *k, *v)`` over the HF
    model's modules; see the module docstring for the layouts."""

    embed_tokens: HFModule
    norm: HFModule
    lm_head: HFModule
    shape: LlmShape
    layers: Any  # ModuleList of StaticLayer
    cos_table: torch.Tensor
    sin_table: torch.Tensor
    key_positions: torch.Tensor

    def __init__(
        self,
        model: HFModule,
        shape: LlmShape,
        layers: list[StaticLayer],
        inv_freq: torch.Tensor,
        rope_scaling: float,
    ):
        super().__init__()
        decoder = model.model
        self.embed_tokens, self.norm, self.lm_head = decoder.embed_tokens, decoder.norm, model.lm_head
        self.layers = torch.nn.ModuleList(layers)
        self.shape = shape
        # cos/sin of every position as tables read by position (QEfficient and ExecuTorch's static
        # llama do the same): a quantizer sees their [-1, 1] once, where cos(position * inv_freq)
        # computed in the graph quantizes the angles over the positions calibration happened to see.
        angles = torch.arange(shape.ctx_len, dtype=torch.float32)[:, None] * inv_freq.detach().float()[None, :]
        self.register_buffer("cos_table", angles.cos() * rope_scaling, persistent=False)
        self.register_buffer("sin_table", angles.sin() * rope_scaling, persistent=False)
        self.register_buffer("key_positions", torch.arange(shape.ctx_len, dtype=torch.int32), persistent=False)

    def _keys(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per sequence (``positions [b, seq]``): key positions ``[b, keys]``, which of them each
        query sees before windows ``[b, seq, keys]``, and ``ctx_indices [b, ctx_len]``."""
        batch = positions.shape[0]
        queries = positions[:, :, None]
        cache_keys = self.key_positions[None, :].expand(batch, -1)
        if self.shape.cache == "scatter":  # the cache holds every row written so far, these included
            newest = positions.max(dim=1, keepdim=True).values
            ctx_indices = torch.where(cache_keys <= newest, cache_keys, torch.full_like(cache_keys, -1))
            return cache_keys, (cache_keys[:, None, :] <= queries) & (queries >= 0), ctx_indices
        keys = torch.cat((cache_keys, positions), dim=1)  # the cache, then this call's rows
        cached = (cache_keys[:, None, :] < positions[:, :1, None]) & (queries >= 0)
        new = (positions[:, None, :] <= queries) & (positions[:, None, :] >= 0)
        return keys, torch.cat((cached, new), dim=2), cache_keys

    @staticmethod
    def _mask(keys: torch.Tensor, positions: torch.Tensor, causal: torch.Tensor, window: int | None) -> torch.Tensor:
        """0 where a query sees a key, -MASK_DEPTH elsewhere; a sliding window (HF's: a key is
        seen while ``key > query - window``) hides the older keys too."""
        if window is not None:
            causal = causal & (keys[:, None, :] > positions[:, :, None] - window)
        return (causal.float() - 1.0) * MASK_DEPTH

    def _angles(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin ``[b, seq, rotary/2]`` of each sequence's positions (``rope``'s per-sequence
        tables); padding (-1) reads row 0: it writes nothing and nothing attends to it."""
        rows = positions.clamp(min=0).reshape(-1)
        shape = (*positions.shape, self.cos_table.shape[1])
        return self.cos_table.index_select(0, rows).reshape(shape), self.sin_table.index_select(0, rows).reshape(shape)

    def forward(self, tokens: torch.Tensor, position_ids: torch.Tensor, *caches: torch.Tensor) -> tuple:
        positions = position_ids
        cos, sin = self._angles(positions)
        keys, causal, ctx_indices = self._keys(positions)
        masks = {}
        for layer in self.layers:
            if layer.window not in masks:
                masks[layer.window] = self._mask(keys, positions, causal, layer.window)
        x = self.embed_tokens(tokens)
        count = self.shape.layers
        new_k, new_v = [], []
        for i, layer in enumerate(self.layers):
            x, k, v = layer(x, cos, sin, position_ids, masks[layer.window], ctx_indices, caches[i], caches[count + i])
            new_k.append(k)
            new_v.append(v)
        return (self.lm_head(self.norm(x)), *new_k, *new_v)


@dataclass
class LlmProgram:
    """One static program: the module to quantize or lower, and example inputs of its shapes."""

    name: str
    module: StaticCausalLM
    example_inputs: tuple
    _exported: list = field(default_factory=list, repr=False)

    @property
    def exported(self) -> torch.export.ExportedProgram:
        """``torch.export`` of the module, under ``no_grad`` (PT2E's quantizer fails on a graph
        exported with autograd on), exported once."""
        if not self._exported:
            with torch.no_grad():
                self._exported.append(torch.export.export(self.module, self.example_inputs))
        return self._exported[0]


@dataclass
class LlmPrograms:
    """What ``export_llm`` returns: the prefill and decode programs and what it swapped."""

    prefill: LlmProgram
    decode: LlmProgram
    shape: LlmShape
    swaps: list[Swap]


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise LlmExportError(f"export_llm: {message}")


def _config_int(config: object, name: str, default: int | None = None) -> int:
    value = getattr(config, name, None)
    value = default if value is None else value
    if value is None:
        raise LlmExportError(f"export_llm: the model's config has no {name}")
    return int(value)


def _rotary(model: HFModule) -> tuple[torch.Tensor, float]:
    """The model's static RoPE frequencies and their cos/sin scaling (HF's ``attention_scaling``)."""
    rotary = model.model.rotary_emb
    rope_type = getattr(rotary, "rope_type", "default")
    _require(
        rope_type in _STATIC_ROPE,
        f"rope_type {rope_type!r} changes its frequencies with the sequence "
        f"length; static programs take one of {', '.join(_STATIC_ROPE)}",
    )
    return rotary.inv_freq, float(getattr(rotary, "attention_scaling", 1.0))


def _window(attention: HFModule, config: object) -> int | None:
    """The layer's sliding window: Qwen2 sets it per layer, Mistral and Phi-3 in the config."""
    if hasattr(attention, "sliding_window"):
        return attention.sliding_window
    return getattr(config, "sliding_window", None)


def export_llm(
    model: HFModule, prefill_len: int, ctx_len: int, cache: str = "rows", select: str = "all", batch: int = 1
) -> LlmPrograms:
    """Prefill (``prefill_len`` tokens) and decode (one token) programs of an HF causal LM over a
    static cache of ``ctx_len`` rows, for ``batch`` sequences at a time, each at its own
    positions. The model's RMSNorms and MLPs are swapped in place (``swap_modules(model,
    select)``; its own forward computes the same after)."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    _require(
        model_type in ARCHITECTURES,
        f"model_type {model_type!r} is not supported; supported: "
        f"{', '.join(ARCHITECTURES)} (a transformers *ForCausalLM)",
    )
    _require(cache in CACHE_LAYOUTS, f"cache={cache!r}; use one of {', '.join(CACHE_LAYOUTS)}")
    _require(
        0 < prefill_len <= ctx_len, f"prefill_len={prefill_len}, ctx_len={ctx_len}: need 0 < prefill_len <= ctx_len"
    )
    _require(isinstance(batch, int) and batch >= 1, f"batch={batch!r}: need a whole number of sequences, 1 or more")
    config = model.config
    model.eval()
    heads = _config_int(config, "num_attention_heads")
    kv_heads = _config_int(config, "num_key_value_heads", heads)
    inv_freq, rope_scaling = _rotary(model)
    swaps = swap_modules(model, select)
    attentions = [layer.self_attn for layer in model.model.layers]
    shape = LlmShape(
        len(attentions),
        kv_heads,
        attentions[0].head_dim,
        _config_int(config, "vocab_size"),
        ctx_len,
        prefill_len,
        cache,
        batch,
    )
    layers = [
        StaticLayer(layer, StaticAttention(attention, heads, kv_heads, cache), _window(attention, config))
        for layer, attention in zip(model.model.layers, attentions)
    ]
    module = StaticCausalLM(model, shape, layers, inv_freq, rope_scaling).eval()
    caches = shape.empty_cache()
    return LlmPrograms(
        LlmProgram("prefill", module, shape.inputs([[0] * prefill_len] * batch, [0] * batch, prefill_len, caches)),
        LlmProgram("decode", module, shape.inputs([[0]] * batch, [prefill_len] * batch, 1, caches)),
        shape,
        swaps,
    )
