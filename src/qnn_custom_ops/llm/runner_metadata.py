"""The constant methods ``qnn_llama_runner`` reads beside the two programs (``runner_metadata``):
its sizes, BOS and EOS, the caches' width; and the tokens it stops on (``eos_ids``)."""

from __future__ import annotations

from typing import Any

from .hf import LlmPrograms
from .runner_text import RunnerText


def eos_ids(text: RunnerText) -> tuple[int, ...]:
    """The tokens ``qnn_llama_runner`` stops on for the version and the ``tokenizer.json``
    pushed beside it (``runner_text``): what ``llm generate`` stops on too, so host and phone
    stop at the same token."""
    return text.stop_ids()


def runner_metadata(
    programs: LlmPrograms, model: Any, text: RunnerText, quant: str, kv_bits: int = 16
) -> dict[str, Any]:
    """The constant methods ExecuTorch's static llama writes (``static_llama.py:807-824``, with
    ``get_sliding_window`` where a window mask is taken), with what the runners of ExecuTorch
    1.x read (checked: release/1.0 to 1.4 and main of 2026-08-22): ``get_n_layers``, required
    (``runner.cpp:234-237``), and ``get_sliding_window`` when present (``runner.cpp:274-279``);
    runners before 1.4 (PR #19146) also read ``get_kv_io_bit_width`` (``qnn_llama_runner.cpp``
    of release/1.3, lines 299-318: 8 when absent, 8 or 16 accepted, any other refused). Its
    value is ExecuTorch's own (``static_llm_quant_recipe.py:32-43``, ``llm_wrappers.py:439-442``):
    8 for 8a8w, 16 for the other quantized modes, 32 for float, which those runners refuse --
    they hold masks and logits as uint16 codes and cannot run a float program (nor an 8a8w one,
    whose mask and logits are uint8 here: it needs a 1.4 runner or later). BOS and EOS are the
    runner's own (``runner_text``); it prepends one BOS (``get_n_bos``). ``kv_bits`` 8 (8-bit
    caches under a 16-bit-activation mode, ``quantize_llm``'s) makes it 8, as ExecuTorch's
    8-bit KV recipes write it."""
    shape, config = programs.shape, model.config
    bits = {"none": 32, "8a8w": 8}.get(quant, kv_bits)
    metadata: dict[str, Any] = {
        "get_ar_len": 1,
        "get_bos_id": text.bos,
        "get_eos_id": text.eos,
        "get_dim": int(config.hidden_size),
        "get_head_dim": shape.head_dim,
        "get_max_batch_size": 1,
        "get_max_seq_len": shape.ctx_len,
        "get_max_context_len": shape.ctx_len,
        "get_n_bos": 1,
        "get_n_eos": 1,
        "get_n_kv_heads": shape.kv_heads,
        "get_n_layers": shape.layers,
        "get_vocab_size": shape.vocab,
        "get_use_kv_cache": True,
        "get_kv_io_bit_width": bits,
    }
    if shape.window is not None:
        metadata["get_sliding_window"] = shape.window
    return metadata
