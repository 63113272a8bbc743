"""What ``llm export`` says about a checkpoint before it loads it, one line each, from
``config.json`` and ``tokenizer.json`` alone (no model, no torch): a tokenizer covering far
fewer ids than the model's vocabulary, and a sliding window the context never reaches.
Each is a fact about the export, not an error: the export goes on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .families import FAMILIES, RUNNER_VERSIONS

#: A tokenizer covering less than this share of ``vocab_size`` is said (a published model pads
#: its vocabulary by well under 1%: Qwen2.5's 151665 ids of 151936, Phi-3's 32011 of 32064).
COVERED_SHARE = 0.9


def tokenizer_ids(directory: Path) -> int | None:
    """How many ids ``tokenizer.json`` gives (its largest id + 1, the added tokens included), None
    when there is no such file or it is not one this reads."""
    path = directory / "tokenizer.json"
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        vocab = body["model"]["vocab"]
        ids = list(vocab.values()) if isinstance(vocab, dict) else list(range(len(vocab)))  # Unigram: a list
        ids += [int(token["id"]) for token in body.get("added_tokens") or ()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return max(ids) + 1 if ids else None


def vocabulary_note(directory: Path, config: dict[str, Any]) -> str | None:
    """One line when the checkpoint's tokenizer covers far fewer ids than ``vocab_size``."""
    vocab, covered = config.get("vocab_size"), tokenizer_ids(directory)
    if not isinstance(vocab, int) or covered is None or covered >= COVERED_SHARE * vocab:
        return None
    return (
        f"{directory}/tokenizer.json gives {covered} token ids, config.json's vocab_size is {vocab}: no text "
        f"encodes to ids {covered} to {vocab - 1}, though generation may pick them (decoded as nothing); "
        "is this the checkpoint's own tokenizer?"
    )


def window_note(config: dict[str, Any], ctx_len: int, version: str | None) -> str | None:
    """One line when the runner version takes a window mask and the model's sliding window is
    not shorter than ``--ctx``: the mask is there, and hides nothing."""
    family = FAMILIES.get(str(config.get("model_type")))
    window = config.get("sliding_window")
    if family is None or not isinstance(window, int):
        return None
    version = version or family.runner_version
    if not RUNNER_VERSIONS[version].window_mask or window < ctx_len:
        return None
    return (
        f"--ctx {ctx_len} is not above {config['model_type']}'s sliding window ({window}): the window mask input "
        f"qnn_llama_runner gives {version} programs hides nothing at this context, so every layer attends to the "
        f"whole context (as HF does here); export --ctx above {window} to use the window"
    )
