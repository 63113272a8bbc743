"""What each Hugging Face model family computes beyond a Llama decoder, one registry entry each.

``export_llm`` builds every family from the same static pieces; an entry only names what sets
its family apart (XNNPACK's partitioner configs are the model: one small config per op, no
if-chain). What HF keeps on the modules themselves is read off them instead, for every family
alike: q/k norms (``attention.q_norm``), attention soft-capping
(``attention.attn_logit_softcapping``), ``attention.scaling`` (Gemma 2's
``query_pre_attn_scalar``, Granite's ``attention_multiplier``), per-layer sliding windows and
Gemma's scaled embedding.

RoPE types have a registry of their own (``ROPE_TYPES``): a type whose frequencies change with
the sequence length is exported only up to the length at which HF still uses one set of them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError

#: A transformers config, read by attribute.
Config = Any


class LlmExportError(UsageError):
    """A model or a shape ``export_llm`` cannot turn into static programs."""


def _one(config: Config) -> float:
    return 1.0


def _config_float(name: str) -> Callable[[Config], float]:
    """A multiplier the config holds under ``name`` (Granite's)."""

    def read(config: Config) -> float:
        return float(getattr(config, name))

    read.__name__ = name
    return read


def _no_cap(config: Config) -> float | None:
    return None


def _final_softcap(config: Config) -> float | None:
    """Gemma 2 and 3: logits = cap * tanh(logits / cap)."""
    cap = getattr(config, "final_logit_softcapping", None)
    return None if cap is None else float(cap)


#: Which rotary table a layer reads: a name (``rope_tables`` makes one per name) or None (no RoPE).
RopeOfLayer = Callable[[Config, int], "str | None"]


def _shared_rope(config: Config, layer: int) -> str | None:
    return "shared"


def _rope_by_layer_type(config: Config, layer: int) -> str | None:
    """Gemma 3: sliding layers use the local base, full-attention layers the global one."""
    return str(config.layer_types[layer])


def _no_rope_layers(config: Config, layer: int) -> str | None:
    """SmolLM3: ``no_rope_layers[i] == 0`` marks a layer without RoPE (NoPE)."""
    return "shared" if config.no_rope_layers[layer] else None


@dataclass(frozen=True)
class RunnerVersion:
    """What ``qnn_llama_runner --decoder_model_version`` does for one version, read from its
    source (ExecuTorch main of 2026-08-22, ``examples/qualcomm/oss_scripts/llama/``)."""

    #: The text ``get_formatted_prompt`` puts before and after the prompt, with no system
    #: prompt (``qnn_llama_runner.cpp:103-223``); the runner formats every ``--prompt`` so.
    template: tuple[str, str] = ("", "")
    #: The token it stops on beside the tokenizer's EOS (``runner/runner.cpp:199-219``): the
    #: first id its tokenizer encodes this text to.
    stop_text: str | None = None
    #: A second, sliding-window mask input after the first (``runner/runner.cpp:122-130``:
    #: ``CacheMode::HybridCache``), whatever the model's windows.
    window_mask: bool = False


_GEMMA_TURN = ("<start_of_turn>user\n", "<end_of_turn>\n<start_of_turn>model\n")

#: The versions the runner knows whose models we export (it also has codegen, glm and gemma4).
RUNNER_VERSIONS: dict[str, RunnerVersion] = {
    "llama2": RunnerVersion(),
    "llama3": RunnerVersion(
        ("<|start_header_id|>user<|end_header_id|>\n\n", "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
        "<|eot_id|>",
    ),
    "gemma": RunnerVersion(_GEMMA_TURN, "<end_of_turn>"),
    "gemma2": RunnerVersion(_GEMMA_TURN, "<end_of_turn>", window_mask=True),
    "gemma3": RunnerVersion(_GEMMA_TURN, "<end_of_turn>", window_mask=True),
    "granite": RunnerVersion(
        ("<|start_of_role|>user<|end_of_role|>", "<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>")
    ),
    "phi_4_mini": RunnerVersion(("<|user|>", "<|end|><|assistant|>"), "<|end|>"),
    "qwen2_5": RunnerVersion(),
    "qwen3": RunnerVersion(("<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant"), "<|im_end|>"),
    "smollm2_135m": RunnerVersion(("<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n\n"), "<|im_end|>"),
    "smollm3": RunnerVersion(("<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"), "<|im_end|>"),
}


@dataclass(frozen=True)
class Family:
    """What one ``model_type`` adds to the Llama layer; every field defaults to Llama's."""

    #: Post-attention and post-feedforward norms around each block (Gemma 2 and 3): the
    #: residual add follows the norm of the block's output.
    sandwich_norms: bool = False
    embedding_multiplier: Callable[[Config], float] = _one
    residual_multiplier: Callable[[Config], float] = _one
    logits_divisor: Callable[[Config], float] = _one
    logits_softcap: Callable[[Config], float | None] = _no_cap
    rope_of_layer: RopeOfLayer = _shared_rope
    #: ``qnn_llama_runner --decoder_model_version`` (a ``RUNNER_VERSIONS`` name), unless one of
    #: ``versions_by_token`` applies.
    runner_version: str = "llama2"
    #: (special token, version): the first whose token the checkpoint's tokenizer has picks
    #: the version (one ``model_type`` serving checkpoints the runner treats apart).
    versions_by_token: tuple[tuple[str, str], ...] = ()


FAMILIES: dict[str, Family] = {
    # Llama 3's tokenizer has <|eot_id|>, SmolLM2's <|im_end|>; Llama 2 and TinyLlama neither.
    "llama": Family(versions_by_token=(("<|eot_id|>", "llama3"), ("<|im_end|>", "smollm2_135m"))),
    "qwen2": Family(runner_version="qwen2_5"),
    "mistral": Family(runner_version="llama2"),
    "gemma": Family(runner_version="gemma"),
    "phi3": Family(runner_version="phi_4_mini"),
    "qwen3": Family(runner_version="qwen3"),
    "smollm3": Family(rope_of_layer=_no_rope_layers, runner_version="smollm3"),
    "granite": Family(
        embedding_multiplier=_config_float("embedding_multiplier"),
        residual_multiplier=_config_float("residual_multiplier"),
        logits_divisor=_config_float("logits_scaling"),
        runner_version="granite",
    ),
    "gemma2": Family(sandwich_norms=True, logits_softcap=_final_softcap, runner_version="gemma2"),
    "gemma3_text": Family(
        sandwich_norms=True,
        logits_softcap=_final_softcap,
        rope_of_layer=_rope_by_layer_type,
        runner_version="gemma3",
    ),
}


def family_of(model_type: object) -> Family:
    """The registry entry of ``model_type``, or one error naming the supported ones."""
    family = FAMILIES.get(str(model_type))
    if family is None:
        hint = " (Gemma 3: load the text model, Gemma3ForCausalLM)" if model_type == "gemma3" else ""
        raise LlmExportError(
            f"export_llm: model_type {model_type!r} is not supported{hint}; supported: "
            f"{', '.join(FAMILIES)} (a transformers *ForCausalLM)"
        )
    return family


def runner_version_of(family: Family, special_tokens: Collection[str], override: str | None = None) -> str:
    """The ``--decoder_model_version`` of a checkpoint: ``override`` if given (checked), else
    the family's, told apart by the tokenizer's special tokens where one family serves several."""
    if override is not None:
        if override not in RUNNER_VERSIONS:
            raise LlmExportError(
                f"--decoder-model-version {override!r}: use one of {', '.join(RUNNER_VERSIONS)} "
                "(qnn_llama_runner's versions of the families exported here)"
            )
        return override
    return next((v for token, v in family.versions_by_token if token in special_tokens), family.runner_version)


@dataclass(frozen=True)
class RopeType:
    """A transformers RoPE type: the longest context at which HF keeps one set of frequencies
    (None: any), and why it changes them past it."""

    fixed_up_to: Callable[[dict, Config], int] | None = None
    why: str = ""


def _original_max(parameters: dict, config: Config) -> int:
    return int(parameters.get("original_max_position_embeddings") or config.original_max_position_embeddings)


def _max_positions(parameters: dict, config: Config) -> int:
    return int(config.max_position_embeddings)


ROPE_TYPES: dict[str, RopeType] = {
    "default": RopeType(),
    "linear": RopeType(),
    "llama3": RopeType(),
    "yarn": RopeType(),
    "proportional": RopeType(),
    "dynamic": RopeType(_max_positions, "dynamic NTK recomputes its frequencies for longer sequences"),
    "longrope": RopeType(_original_max, "longrope switches from short_factor to long_factor for longer sequences"),
}


def check_rope(rope_type: str, parameters: dict, config: Config, ctx_len: int) -> None:
    """Refuse a RoPE type HF computes differently from a fixed table at ``ctx_len``, saying why
    and what to export instead."""
    rule = ROPE_TYPES.get(rope_type)
    if rule is None:
        raise LlmExportError(
            f"export_llm: rope_type {rope_type!r} is not known to the static export; known: {', '.join(ROPE_TYPES)}"
        )
    if rule.fixed_up_to is None:
        return
    limit = rule.fixed_up_to(parameters, config)
    if ctx_len > limit:
        raise LlmExportError(
            f"export_llm: rope_type {rope_type!r} at ctx_len={ctx_len}: {rule.why} (past {limit} positions), "
            f"mid-generation, which a static table cannot follow; export ctx_len <= {limit}"
        )
