"""Calibration covers every call the runner makes, whatever the prompts' lengths (issue 39, item 0):
a model trained here for seconds (the ``trained`` fixture), quantized 16a8w on eight short prompts
(4 to 14 tokens, one prefill chunk each, as "one prompt a line" gives), then a held-out prompt of
three prefill chunks scored teacher-forced against float, chunk by chunk, and decoded from there.

Calibrated on the prompts alone, the prefill program never saw a filled cache: positions of a
second chunk scored -2 dB against float with no top-1 right. Every chunk must now score as the
first does."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import sqnr_db
from tests.llm.trained_model import ARCHITECTURE

PREFILL, CTX = 16, 128


def per_position(reference: torch.Tensor, quantized: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each position's logits SQNR (dB) and whether its top-1 token is float's."""
    sqnr = torch.tensor([sqnr_db(f, q) for f, q in zip(reference, quantized)])
    return sqnr, reference.argmax(-1) == quantized.argmax(-1)


@pytest.mark.slow
def test_short_calibration_prompts_score_every_prefill_chunk_and_the_decode_after_as_the_first(trained):  # noqa: F811
    from qnn_custom_ops.llm import RunnerLoop, eager_step, export_llm, quantize_llm

    model, _, held, _ = trained
    assert ARCHITECTURE["max_position_embeddings"] >= CTX
    short = [held[1000 + 40 * i : 1000 + 40 * i + length].tolist() for i, length in enumerate(range(4, 15, 3))]
    short += [held[2000 + 40 * i : 2000 + 40 * i + length].tolist() for i, length in enumerate(range(5, 15, 3))]
    assert len(short) == 8 and max(len(p) for p in short) < PREFILL
    programs = export_llm(model, prefill_len=PREFILL, ctx_len=CTX, cache="runner")
    said: list[str] = []
    converted = quantize_llm(programs, "16a8w", short, 8, progress=said.append)
    assert any("every prefill chunk to ctx_len 128" in line for line in said), said
    reference = RunnerLoop(programs.shape, eager_step(programs.prefill.module), eager_step(programs.decode.module))
    quantized = RunnerLoop(programs.shape, *(eager_step(m) for m in converted))

    prompt = held[: 3 * PREFILL].tolist()
    sqnr, right = per_position(reference.score(prompt), quantized.score(prompt))
    chunks = [(sqnr[c * PREFILL : (c + 1) * PREFILL], right[c * PREFILL : (c + 1) * PREFILL]) for c in range(3)]
    figures = [(round(float(s.median()), 1), round(float(s.min()), 1), int(r.sum())) for s, r in chunks]
    print("per chunk: (median dB, min dB, top-1 right of 16):", figures)
    first_median, first_min, first_right = figures[0]
    assert first_median >= 20 and first_right >= 14, figures  # a trained model, well quantized
    for median, least, agree in figures[1:]:
        assert median >= first_median - 3 and least >= first_min - 6 and agree >= first_right - 2, figures

    want = reference.generate(prompt, 12)  # decode past three chunks, each step on float's token
    got = quantized.generate(prompt, 12, forced=want.tokens)
    decoded, agrees = per_position(torch.stack(want.logits), torch.stack(got.logits))
    print("decode after 48 tokens: median dB", round(float(decoded.median()), 1), "top-1", int(agrees.sum()), "of 12")
    assert float(decoded.median()) >= first_median - 3 and int(agrees.sum()) >= 10
