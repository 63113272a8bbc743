"""The static model ``hf.export_llm`` builds from a Hugging Face causal LM: HF's attention and its
growing cache replaced by a fixed ``[batch, kv_heads, ctx_len, head_dim]`` cache per layer and
K/V, passed in and out of the program (no state inside it, so the same graph runs on ExecuTorch's
host runtime and in the QNN delegate), RoPE by ``qco_llm::rope``, each sequence at its own
positions with a mask of its own.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import torch

from ..llm_ops.ops import llm_ops
from ..llm_ops.swap import QcoRMSNorm
from .families import Family
from .shapes import LlmShape

#: Masked scores are lowered by this much: exp(-255) underflows to 0 in float32, and a 16-bit
#: encoding of the scores still resolves 0.004 (an -inf or finfo.min cannot be observed).
MASK_DEPTH = 255.0


#: A transformers module of a supported architecture, read by attribute (``model.model.layers``,
#: ``attention.q_proj``...): duck-typed across architectures, so not typed further.
HFModule: TypeAlias = Any


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
        self.attention = attention  # HF's module: its projections, q/k norms, scaling and soft-capping
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, attention.head_dim
        self.cache = cache
        self.softcap = getattr(attention, "attn_logit_softcapping", None)
        self.ops = llm_ops()

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v as ``[batch, heads, seq, head_dim]``; Phi-3 fuses the projections into ``qkv_proj``."""
        sizes = (self.heads * self.head_dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim)
        if hasattr(self.attention, "qkv_proj"):
            q, k, v = self.attention.qkv_proj(x).split(sizes, dim=-1)
        else:
            q, k, v = (self.attention.q_proj(x), self.attention.k_proj(x), self.attention.v_proj(x))
        batch = x.shape[0]
        q = q.view(batch, -1, self.heads, self.head_dim)
        k, v = (t.view(batch, -1, self.kv_heads, self.head_dim) for t in (k, v))
        q, k = self._head_norm("q_norm", q), self._head_norm("k_norm", k)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def _head_norm(self, name: str, t: torch.Tensor) -> torch.Tensor:
        """Qwen3's and Gemma 3's per-head RMSNorm over the head dimension (``rms_norm`` once swapped)."""
        norm = getattr(self.attention, name, None)
        return t if norm is None else norm(t)

    def _scores(self, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Softmax of scaled scores, soft-capped first where the family caps them (Gemma 2:
        cap * tanh(s / cap), as HF's eager attention does before the mask)."""
        scores = scores * self.attention.scaling
        if self.softcap is not None:
            scores = torch.tanh(scores / self.softcap) * self.softcap
        return torch.softmax(scores + mask, dim=-1)

    def _grouped(self, q: torch.Tensor) -> torch.Tensor:
        """``[b, heads, seq, d]`` -> ``[b, kv_heads, group * seq, d]``: query head h uses KV head
        h // group, as HF's ``repeat_kv`` orders them."""
        return q.reshape(q.shape[0], self.kv_heads, -1, self.head_dim)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor | None,
        sin: torch.Tensor | None,
        position_ids: torch.Tensor,
        mask: torch.Tensor,
        ctx_indices: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = self._project(x)
        if cos is not None:  # SmolLM3's NoPE layers have none
            q, k = self.ops["rope"](q, cos, sin), self.ops["rope"](k, cos, sin)
        grouped = self._grouped(q)
        group = self.heads // self.kv_heads
        mask = mask.repeat(1, group, 1).unsqueeze(1)  # [b, 1, group * seq, keys]: every KV head
        if self.cache == "scatter":
            k_cache = self.ops["ctx_scatter"](k_cache, position_ids, k)
            v_cache = self.ops["ctx_scatter"](v_cache, position_ids, v)
            keys, values = self.ops["ctx_gather"](k_cache, ctx_indices), self.ops["ctx_gather"](v_cache, ctx_indices)
            probs = self._scores(grouped @ keys.transpose(-1, -2), mask)
            out, new = probs @ values, (k_cache, v_cache)
        else:  # rows, and the runner's layout: its K cache and new K rows transposed
            transposed = self.cache == "runner"
            cached_keys = k_cache if transposed else k_cache.transpose(-1, -2)
            new_keys = k.transpose(-1, -2)
            scores = torch.cat((grouped @ cached_keys, grouped @ new_keys), dim=-1)
            probs = self._scores(scores, mask)
            cached = v_cache.shape[2]
            out = probs[..., :cached] @ v_cache + probs[..., cached:] @ v
            new = (new_keys if transposed else k, v)
        batch = x.shape[0]
        out = (
            out.reshape(batch, self.heads, -1, self.head_dim)
            .transpose(1, 2)
            .reshape(batch, -1, self.heads * self.head_dim)
        )
        return self.attention.o_proj(out), *new


class StaticLayer(torch.nn.Module):
    """A decoder layer, dropout off (eval): Llama's pre-norm layer, or Gemma 2/3's with a norm
    after each block too (``sandwich``), each block's output scaled by Granite's residual
    multiplier. The residual add and the norm after it are one ``fused_add_rms_norm`` when that
    norm is the library's (vLLM's fusion); a norm left native keeps the add apart."""

    input_layernorm: HFModule
    attention_out_norm: HFModule
    mlp_norm: HFModule
    mlp_out_norm: HFModule
    mlp: HFModule
    self_attn: StaticAttention
    window: int | None
    rope: str | None
    fused_add_rms_norm: Any

    def __init__(
        self,
        layer: HFModule,
        attention: StaticAttention,
        window: int | None,
        rope: str | None,
        family: Family,
        config: object,
    ):
        super().__init__()
        self.input_layernorm = layer.input_layernorm
        identity = torch.nn.Identity()
        if family.sandwich_norms:
            self.attention_out_norm, self.mlp_norm = layer.post_attention_layernorm, layer.pre_feedforward_layernorm
            self.mlp_out_norm = layer.post_feedforward_layernorm
        else:
            self.attention_out_norm, self.mlp_out_norm = identity, identity
            self.mlp_norm = layer.post_attention_layernorm
        self.mlp = layer.mlp
        self.self_attn = attention
        self.window, self.rope = window, rope
        self.residual_multiplier = family.residual_multiplier(config)
        self.fused_add_rms_norm = llm_ops()["fused_add_rms_norm"]

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None, *args: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        attended, k, v = self.self_attn(self.input_layernorm(x), cos, sin, *args)
        normed, x = self._add_and_norm(self._scaled(self.attention_out_norm(attended)), x)
        return x + self._scaled(self.mlp_out_norm(self.mlp(normed))), k, v

    def _scaled(self, block: torch.Tensor) -> torch.Tensor:
        """A block's output times the residual multiplier (Granite's; 1 leaves the graph as it is)."""
        return block if self.residual_multiplier == 1.0 else block * self.residual_multiplier

    def _add_and_norm(self, block: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the MLP's input norm of x + block, x + block)."""
        norm = self.mlp_norm
        if isinstance(norm, QcoRMSNorm):
            return self.fused_add_rms_norm(block, x, norm.weight, norm.eps)
        x = x + block
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
        rope_tables: dict[str, tuple[torch.Tensor, torch.Tensor]],
        family: Family,
    ):
        super().__init__()
        decoder = model.model
        self.embed_tokens, self.norm, self.lm_head = decoder.embed_tokens, decoder.norm, model.lm_head
        self.layers = torch.nn.ModuleList(layers)
        self.shape = shape
        config = model.config
        self.embedding_multiplier = family.embedding_multiplier(config)
        self.logits_divisor = family.logits_divisor(config)
        self.logits_softcap = family.logits_softcap(config)
        # cos/sin of every position as tables read by position (QEfficient and ExecuTorch's static
        # llama do the same): a quantizer sees their [-1, 1] once, where cos(position * inv_freq)
        # computed in the graph quantizes the angles over the positions calibration happened to see.
        self.rope_names = sorted(rope_tables)
        for name, (cos, sin) in rope_tables.items():
            self.register_buffer(f"cos_{name}", cos, persistent=False)
            self.register_buffer(f"sin_{name}", sin, persistent=False)
        self.register_buffer("key_positions", torch.arange(shape.ctx_len, dtype=torch.int32), persistent=False)
        self.windows = sorted({layer.window for layer in layers}, key=lambda w: -1 if w is None else w)

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

    def _angles(self, name: str, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin ``[b, seq, rotary/2]`` of each sequence's positions from table ``name``
        (``rope``'s per-sequence tables); padding (-1) reads row 0: it writes nothing and
        nothing attends to it."""
        rows = positions.clamp(min=0).reshape(-1)
        cos, sin = getattr(self, f"cos_{name}"), getattr(self, f"sin_{name}")
        shape = (*positions.shape, cos.shape[1])
        return cos.index_select(0, rows).reshape(shape), sin.index_select(0, rows).reshape(shape)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        """The head, then Granite's divisor and Gemma 2/3's final soft-cap where the family has them."""
        logits = self.lm_head(self.norm(x))
        if self.logits_divisor != 1.0:
            logits = logits / self.logits_divisor
        if self.logits_softcap is not None:
            logits = torch.tanh(logits / self.logits_softcap) * self.logits_softcap
        return logits

    def _masks(self, positions: torch.Tensor) -> tuple[dict[int | None, torch.Tensor], torch.Tensor]:
        """Each layer window's mask ``[b, seq, keys]`` and ``ctx_indices``, from the positions."""
        keys, causal, ctx_indices = self._keys(positions)
        windows = {layer.window for layer in self.layers}
        return {window: self._mask(keys, positions, causal, window) for window in windows}, ctx_indices

    def forward(self, tokens: torch.Tensor, *inputs: torch.Tensor) -> tuple:
        """rows/scatter: ``(tokens, position_ids, *k_caches, *v_caches)``; runner: ``(tokens,
        mask[, window_mask], input_pos, *k_caches, *v_caches)``, masks as the runner writes them."""
        if self.shape.cache == "runner":
            given = [mask.squeeze(1) for mask in inputs[: self.shape.masks]]
            masks = {window: given[-1] if window is not None else given[0] for window in self.windows}
            positions, caches = inputs[self.shape.masks], inputs[self.shape.masks + 1 :]
            ctx_indices = positions
        else:
            positions, caches = inputs[0], inputs[1:]
            masks, ctx_indices = self._masks(positions)
        angles = {name: self._angles(name, positions) for name in self.rope_names}
        x = self.embed_tokens(tokens)
        if self.embedding_multiplier != 1.0:
            x = x * self.embedding_multiplier
        count = self.shape.layers
        new_k, new_v = [], []
        for i, layer in enumerate(self.layers):
            cos, sin = angles[layer.rope] if layer.rope is not None else (None, None)
            x, k, v = layer(x, cos, sin, positions, masks[layer.window], ctx_indices, caches[i], caches[count + i])
            new_k.append(k)
            new_v.append(v)
        return (self._logits(x), *new_k, *new_v)
