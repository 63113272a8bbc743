"""16a8w keeps what a model has learned: a tiny Qwen3 trained here for seconds (seeded, CPU, one
thread), quantized through the library's route (``export_llm``, ``quantize_llm``), scored
teacher-forced on held-out text as ``benchmarks/bench_llm_accuracy.py`` scores the benchmark's
model (its training and figures are the benchmark's own code, imported, not copied).

Random weights make activations far wider than a trained model's, so only a trained model says
whether a quantizer keeps accuracy. The floors are the issue's goals (top-1 agreement with float
at least 98 % less a margin, perplexity within 2 %); 8a8w, quantized the same way, agrees on about
95 % here, so a quantizer that lost 16-bit activations fails them. The suite's cache is its own
(``QCO_CACHE_DIR``), so the benchmark's cached model is never what this measures.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

from bench_llm_accuracy import compare, evaluate, perplexity  # noqa: E402
from tiny_trained_llm import corpus, token_stream, train_model  # noqa: E402

#: Small enough to train in about 3 s on one thread; its held-out perplexity is about 114.
ARCHITECTURE = dict(hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, max_position_embeddings=256, tie_word_embeddings=True)
STEPS, VOCAB, WINDOW, PREFILL, CTX = 150, 512, 64, 16, 128


def _train_into(root: Path) -> None:
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


@pytest.fixture(scope="module")
def trained():
    """(model, tokenizer, held-out stream, 8 calibration prompts of ``PREFILL`` training tokens),
    trained on a tenth of the standard library's sources with one torch thread (deterministic),
    once per run (``shared_build``); each module gets its own copy of the model."""
    import transformers

    from .conftest import shared_build

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        root = shared_build("llm-trained", _train_into)
        model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config.from_pretrained(root / "model"))
        model.load_state_dict(torch.load(root / "weights.pt"))
        tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(root / "tokenizer")
        data = torch.load(root / "data.pt")
        yield model.eval(), tokenizer, data["held"], data["calibration"]
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_16a8w_of_a_model_trained_for_seconds_agrees_with_float_on_held_out_text(trained):
    from qnn_custom_ops.llm import RunnerLoop, eager_step, export_llm, quantize_llm

    model, _, held, calibration = trained
    windows = held[: 8 * WINDOW].view(8, WINDOW)
    programs = export_llm(model, prefill_len=PREFILL, ctx_len=CTX, cache="runner")
    prefill, decode = quantize_llm(programs, "16a8w", calibration, 8)
    reference = evaluate(RunnerLoop(programs.shape, eager_step(programs.prefill.module),
                                    eager_step(programs.decode.module)), windows, [])
    quantized = evaluate(RunnerLoop(programs.shape, eager_step(prefill), eager_step(decode)), windows, [])
    figures = compare(quantized, reference, windows)
    float_ppl = perplexity(reference["logits"], windows)
    assert float_ppl < 200, f"the model learned too little to measure anything (perplexity {float_ppl:.1f})"
    assert figures["agree"] >= 0.97, figures
    assert abs(figures["ppl"] / float_ppl - 1) <= 0.02, figures
