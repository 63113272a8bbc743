"""Quantization-aware training through the library's ops (``quantize_llm(..., qat=...)``,
``make_quantizer(..., qat=True)``): fake quantizers where PTQ observes, the weights trained
through them and through the ops' backward formulas, then calibrated and converted as PTQ does.
Checked on the suite's tiny Qwen3 trained here for seconds (the ``trained`` fixture): 16a4w after
QAT agrees with float on more held-out tokens than 16a4w after PTQ, and the user's model keeps
its weights."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers", reason="transformers is a dev extra (pip install -e '.[dev]')")

from qnn_custom_ops.errors import UsageError  # noqa: E402
from qnn_custom_ops.llm import RunnerLoop, eager_step, export_llm, quantize_llm  # noqa: E402
from qnn_custom_ops.llm_ops import llm_binding  # noqa: E402
from qnn_custom_ops.llm.qat import QatConfig  # noqa: E402
from qnn_custom_ops.quantizer import make_quantizer  # noqa: E402

from benchmarks.bench_llm_accuracy import compare, evaluate  # noqa: E402

PREFILL, CTX, WINDOW = 16, 64, 48


@pytest.mark.slow  # trains the tiny model (or waits for it) and runs QAT: 18-30 s
def test_qat_16a4w_agrees_with_float_on_more_held_out_tokens_than_ptq(trained):  # noqa: F811
    model, _, held, calibration = trained
    windows = held[: 6 * WINDOW].view(6, WINDOW)
    programs = export_llm(model, prefill_len=PREFILL, ctx_len=CTX, cache="runner")
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    reference = evaluate(RunnerLoop(programs.shape, eager_step(programs.prefill.module),
                                    eager_step(programs.decode.module)), windows, [])
    figures = {}
    for name, qat in (("ptq", None), ("qat", QatConfig(steps=12, lr=3e-4, window=32))):
        prefill, decode = quantize_llm(programs, "16a4w", calibration[:4], 4, qat=qat)
        run = evaluate(RunnerLoop(programs.shape, eager_step(prefill), eager_step(decode)), windows, [])
        figures[name] = compare(run, reference, windows)
    print({name: f"{f['agree']:.1%}" for name, f in figures.items()})
    assert figures["qat"]["agree"] > figures["ptq"]["agree"], figures
    assert all(torch.equal(before[name], p) for name, p in model.named_parameters())


def test_make_quantizer_fake_quantizes_with_qat_and_refuses_a_mode_executorch_cannot_train():
    from executorch.backends.qualcomm.quantizer.qconfig import FusedMovingAvgObsFakeQuantize

    quantizer = make_quantizer(llm_binding(), "16a4w_block", qat=True)
    assert quantizer.default_quant_config.is_qat
    spec = quantizer.default_quant_config.quant_config.input_activation
    assert spec.observer_or_fake_quant_ctr.p.func is FusedMovingAvgObsFakeQuantize
    with pytest.raises(UsageError, match="^quantization-aware training has no 16a16w config in executorch: use 8a8w"):
        make_quantizer(llm_binding(), "16a16w", qat=True)
