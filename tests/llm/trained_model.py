"""The LLM tests' trained model: a tiny Qwen3 trained for seconds on the standard library's
sources by the accuracy benchmark's own code (``benchmarks/tiny_trained_llm.py``), once per run."""

from __future__ import annotations

from pathlib import Path

import torch

from benchmarks.tiny_trained_llm import corpus, token_stream, train_model

#: Small enough to train in about 3 s on one thread; its held-out perplexity is about 114.
ARCHITECTURE = dict(hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, max_position_embeddings=256, tie_word_embeddings=True)
STEPS, VOCAB, WINDOW, PREFILL, CTX = 150, 512, 64, 16, 128


def train_into(root: Path) -> None:
    """Train the model (one torch thread) and save what ``trained`` gives, for every module and
    xdist worker of the run to load (``shared_build``): the same weights, trained once."""
    train_texts, held_out = corpus()
    model, tokenizer = train_model(train_texts[::10], STEPS, architecture=ARCHITECTURE, vocab=VOCAB,
                                   seq=WINDOW, batch=8, log=lambda line: None)
    calibration = token_stream(tokenizer, train_texts[1::20])[: 8 * PREFILL].view(8, PREFILL).tolist()
    model.config.save_pretrained(root / "model")
    torch.save(model.state_dict(), root / "weights.pt")
    tokenizer.save_pretrained(root / "tokenizer")
    torch.save({"held": token_stream(tokenizer, held_out[:3]), "calibration": calibration}, root / "data.pt")
