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

import pytest

from benchmarks.bench_llm_accuracy import compare, evaluate, perplexity

from tests.llm.trained_model import CTX, PREFILL, WINDOW


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
