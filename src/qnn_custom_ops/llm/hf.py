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

import torch

from ..llm_ops.swap import Swap, swap_modules
from .families import FAMILIES, RUNNER_VERSIONS, Family, LlmExportError, check_rope, family_of, runner_version_of
from .shapes import CACHE_LAYOUTS, LlmShape
from .static_model import HFModule, StaticAttention, StaticCausalLM, StaticLayer

#: ``model_type``s whose decoder layers the static layers below compute (``families.FAMILIES``).
ARCHITECTURES = tuple(FAMILIES)


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
