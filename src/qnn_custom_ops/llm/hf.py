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

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import torch

from ..llm_ops.ops import llm_ops
from ..llm_ops.swap import QcoRMSNorm, Swap, swap_modules
from .families import FAMILIES, RUNNER_VERSIONS, Family, LlmExportError, check_rope, family_of, runner_version_of

CACHE_LAYOUTS = ("rows", "scatter", "runner")
#: ``model_type``s whose decoder layers the static layers below compute (``families.FAMILIES``).
ARCHITECTURES = tuple(FAMILIES)
#: Masked scores are lowered by this much: exp(-255) underflows to 0 in float32, and a 16-bit
#: encoding of the scores still resolves 0.004 (an -inf or finfo.min cannot be observed).
MASK_DEPTH = 255.0
#: A transformers module of a supported architecture, read by attribute (``model.model.layers``,
#: ``attention.q_proj``...): duck-typed across architectures, so not typed further.
HFModule: TypeAlias = Any


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
    #: ``cache="runner"``: the window of the layers that read the window mask, None when no
    #: layer has one (the programs then take one mask).
    window: int | None = None

    @property
    def masks(self) -> int:
        """How many masks the ``runner`` programs take: the full one, and the window's if any."""
        return 1 if self.window is None else 2

    def empty_cache(self) -> list[torch.Tensor]:
        """Zeroed K caches of every layer, then V caches, as the programs take them (``runner``:
        K transposed ``[b, kv_heads, head_dim, ctx_len]``, of which a program reads the first
        ``ctx_len - ar_len`` columns)."""
        rows = torch.zeros(self.batch, self.kv_heads, self.ctx_len, self.head_dim)
        k = rows.transpose(2, 3).contiguous() if self.cache == "runner" else rows
        return [k.clone() for _ in range(self.layers)] + [rows.clone() for _ in range(self.layers)]

    def runner_inputs(
        self, tokens: Sequence[int], masks: Sequence[torch.Tensor], positions: Sequence[int], caches: list[torch.Tensor]
    ) -> tuple:
        """One call of a ``runner`` program, as ``qnn_llama_runner`` passes it: tokens ``[1, ar]``
        int32, the masks ``[1, 1, ar, ctx_len]``, ``input_pos [1, ar]`` int32, then the first
        ``ctx_len - ar`` columns of every K cache and rows of every V cache."""
        ar = len(tokens)
        read = [self.cache_read(k, v, ar) for k, v in zip(caches[: self.layers], caches[self.layers :])]
        return (
            torch.tensor([list(tokens)], dtype=torch.int32),
            *masks,
            torch.tensor([list(positions)], dtype=torch.int32),
            *(k for k, _ in read),
            *(v for _, v in read),
        )

    def cache_read(self, k: torch.Tensor, v: torch.Tensor, ar: int) -> tuple[torch.Tensor, torch.Tensor]:
        """What a ``runner`` call of ``ar`` tokens reads of one layer's K and V caches: the first
        ``ctx_len - ar`` columns of K, rows of V."""
        kept = self.ctx_len - ar
        return k[..., :kept].contiguous(), v[:, :, :kept].contiguous()

    def example_inputs(self, length: int) -> tuple:
        """Inputs of a call of ``length`` tokens per sequence, for export."""
        caches = self.empty_cache()
        if self.cache == "runner":
            masks = [torch.zeros(1, 1, length, self.ctx_len) for _ in range(self.masks)]  # distinct: export
            return self.runner_inputs([0] * length, masks, range(length), caches)  # takes one tensor twice as one
        start = 0 if length == self.prefill_len else self.prefill_len
        return self.inputs([[0] * length] * self.batch, [start] * self.batch, length, caches)

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
    family: Family
    #: The ``qnn_llama_runner --decoder_model_version`` the programs are made for.
    runner_version: str


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise LlmExportError(f"export_llm: {message}")


def _config_int(config: object, name: str, default: int | None = None) -> int:
    value = getattr(config, name, None)
    value = default if value is None else value
    if value is None:
        raise LlmExportError(f"export_llm: the model's config has no {name}")
    return int(value)


def _rope_tables(model: HFModule, family: Family, ctx_len: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """cos and sin ``[ctx_len, rotary/2]`` of each table the layers read, computed by the model's
    own rotary module at positions 0..ctx_len-1 (so every RoPE type HF implements gives HF's
    numbers, its ``attention_scaling`` included); types whose frequencies change with the length
    are checked first (``check_rope``)."""
    config, rotary = model.config, model.model.rotary_emb
    names = {name for i in range(len(model.model.layers)) if (name := family.rope_of_layer(config, i)) is not None}
    tables = {}
    for name in sorted(names):
        layer_type = None if name == "shared" else name
        rope_type = rotary.rope_type if layer_type is None else rotary.rope_type[layer_type]
        parameters = getattr(config, "rope_parameters", None) or {}
        check_rope(rope_type, parameters if layer_type is None else parameters[layer_type], config, ctx_len)
        kwargs = {} if layer_type is None else {"layer_type": layer_type}
        with torch.no_grad():
            cos, sin = rotary(torch.zeros(1), torch.arange(ctx_len)[None], **kwargs)
        half = cos.shape[-1] // 2
        tables[name] = (cos[0, :, :half].float().contiguous(), sin[0, :, :half].float().contiguous())
    return tables


class LlmDtypeWarning(UserWarning):
    """The checkpoint's weights are not float32: the programs compute in float32."""


def _in_float32(model: HFModule) -> None:
    """Cast a float16/bfloat16 model to float32 in place, saying so once: the programs compute
    in float32 on the host (the device's precision is set by quantization), and HF's own
    float16 kernels are not what a static program runs."""
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    if dtypes <= {torch.float32}:
        return
    warn_float32_cast("export_llm", dtypes)
    model.float()


def warn_float32_cast(where: str, dtypes: set[torch.dtype]) -> None:
    """The one ``LlmDtypeWarning`` of weights stored in ``dtypes`` and computed in float32."""
    names = ", ".join(sorted(str(d).replace("torch.", "") for d in dtypes))
    warnings.warn(LlmDtypeWarning(f"{where}: the weights are {names}; cast to float32 for the programs"), stacklevel=3)


def _runner_window(window_mask: bool, windows: Sequence[int | None], ctx_len: int, batch: int) -> int | None:
    """The window of ``cache="runner"``'s window mask (None: one mask). ``qnn_llama_runner``
    runs one sequence, and adds the window mask as the second input whenever its version is
    gemma2/gemma3 (``window_mask``), whatever the windows: such programs always take it, with
    the model's window (the runner's ``get_sliding_window``), hiding nothing when that is at
    least ``ctx_len``. Other versions build none, so no window may be shorter than the context."""
    _require(batch == 1, f"cache='runner' with batch={batch}: qnn_llama_runner runs one sequence; use batch=1")
    effective = sorted({w for w in windows if w is not None and w < ctx_len})
    _require(
        len(effective) <= (1 if window_mask else 0),
        f"cache='runner': sliding window(s) {effective} shorter than ctx_len={ctx_len}, and qnn_llama_runner "
        "builds one window mask, for Gemma 2/3 only; export ctx_len <= the window or use cache='rows'",
    )
    if not window_mask:
        return None
    return effective[0] if effective else min((w for w in windows if w is not None), default=ctx_len)


def _window(attention: HFModule, config: object) -> int | None:
    """The layer's sliding window: Qwen2 sets it per layer, Mistral and Phi-3 in the config."""
    if hasattr(attention, "sliding_window"):
        return attention.sliding_window
    return getattr(config, "sliding_window", None)


def export_llm(
    model: HFModule,
    prefill_len: int,
    ctx_len: int,
    cache: str = "rows",
    select: str = "all",
    batch: int = 1,
    runner_version: str | None = None,
    swapped: list[Swap] | None = None,
) -> LlmPrograms:
    """Prefill (``prefill_len`` tokens) and decode (one token) programs of an HF causal LM over a
    static cache of ``ctx_len`` rows, for ``batch`` sequences at a time, each at its own
    positions. The model's RMSNorms and MLPs are swapped in place (``swap_modules(model,
    select)``; its own forward computes the same after). ``runner_version``: the
    ``qnn_llama_runner`` version that will run ``cache="runner"`` programs, which decides their
    masks (by default the family's; ``model_type`` llama's, told by its tokenizer in
    ``llm export``, is then llama2: the same masks as its other versions). ``swapped``: the model
    was swapped already (``checkpoint_reading.load_by_layer`` swaps each layer as it reads it), by these."""
    family = family_of(getattr(getattr(model, "config", None), "model_type", None))
    version = runner_version_of(family, (), runner_version)
    _require(cache in CACHE_LAYOUTS, f"cache={cache!r}; use one of {', '.join(CACHE_LAYOUTS)}")
    for name, value in (("prefill_len", prefill_len), ("ctx_len", ctx_len), ("batch", batch)):
        _require(
            isinstance(value, int) and not isinstance(value, bool) and value >= 1,
            f"{name}={value!r}: need a whole number, 1 or more",
        )
    _require(prefill_len <= ctx_len, f"prefill_len={prefill_len}, ctx_len={ctx_len}: need 0 < prefill_len <= ctx_len")
    config = model.config
    model.eval()
    _in_float32(model)
    heads = _config_int(config, "num_attention_heads")
    kv_heads = _config_int(config, "num_key_value_heads", heads)
    tables = _rope_tables(model, family, ctx_len)
    swaps = swap_modules(model, select) if swapped is None else swapped
    attentions = [layer.self_attn for layer in model.model.layers]
    windows = [_window(attention, config) for attention in attentions]
    shape = LlmShape(
        len(attentions),
        kv_heads,
        attentions[0].head_dim,
        _config_int(config, "vocab_size"),
        ctx_len,
        prefill_len,
        cache,
        batch,
        _runner_window(RUNNER_VERSIONS[version].window_mask, windows, ctx_len, batch) if cache == "runner" else None,
    )
    layers = [
        StaticLayer(
            layer,
            StaticAttention(attention, heads, kv_heads, cache),
            window,
            family.rope_of_layer(config, i),
            family,
            config,
        )
        for i, (layer, attention, window) in enumerate(zip(model.model.layers, attentions, windows))
    ]
    module = StaticCausalLM(model, shape, layers, tables, family).eval()
    return LlmPrograms(
        LlmProgram("prefill", module, shape.example_inputs(prefill_len)),
        LlmProgram("decode", module, shape.example_inputs(1)),
        shape,
        swaps,
        family,
        version,
    )
