"""Every family of the HF route, quantized: per-step logits SQNR of 16a8w (or --quant) programs
against float, teacher-forced on float's greedy tokens, on ExecuTorch (host target, each
quantized op's integer kernel as on the HTP), in the layout the tests run each family in (the
device runner's for the 2025-26 families).

The models are the tests' tiny random ones (tests/hf_models.py): random weights give
activations far wider than a trained model's, so read the figures as floors of these models,
not as a trained model's accuracy.

    .venv/bin/python -m benchmarks.bench_llm_families [--quant 16a8w] [--families qwen3,gemma2]
"""

from __future__ import annotations

import argparse
import statistics
import time


import qnn_custom_ops as qco

PROMPT, NEW_TOKENS, PREFILL, CTX = [5, 17, 42, 9, 77], 32, 8, 40
#: Calibration covers the vocabulary: each token of a random model has its own ranges.
CALIBRATION = [list(range(i, i + PREFILL)) for i in range(0, 128, PREFILL)]


def sqnr_db(signal, noisy) -> float:
    import torch

    return float(10 * torch.log10(signal.pow(2).sum() / (signal - noisy).pow(2).sum()))


def measure(arch: str, quant: str, runner) -> tuple[list[float], float]:
    """Per-step SQNR of the quantized programs' logits against float's, and seconds taken, in
    the layout the tests run the family in on ExecuTorch."""
    from qnn_custom_ops.llm import eager_step, export_llm, greedy, quantize_llm
    from tests.hf_models import ARCHITECTURES, hf_model, lowered_steps

    started = time.monotonic()
    # Qwen2's test layout, scatter, does not lower quantized (an int32 position tensor gets a
    # quantize node): measured in rows, the default layout.
    cache = {"scatter": "rows"}.get(ARCHITECTURES[arch][4], ARCHITECTURES[arch][4])
    programs = export_llm(hf_model(arch), prefill_len=PREFILL, ctx_len=CTX, cache=cache)
    step = eager_step(programs.prefill.module)
    reference = greedy(programs.shape, step, step, PROMPT, NEW_TOKENS)
    converted = quantize_llm(programs, quant, CALIBRATION, 8)
    quantized = greedy(programs.shape, *lowered_steps(programs, runner, converted=converted), PROMPT, NEW_TOKENS,
                       forced=reference.tokens)
    return [sqnr_db(f, q) for f, q in zip(reference.logits, quantized.logits)], time.monotonic() - started


def main() -> None:
    from tests.hf_models import ARCHITECTURES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quant", default="16a8w")
    parser.add_argument("--families", default=",".join(ARCHITECTURES))
    args = parser.parse_args()
    with qco.quieted():
        from qnn_custom_ops.llm_ops import llm_binding, package_dir
        from qnn_custom_ops.runtime import HostRunner

        runner = HostRunner([qco.build_host_library(package_dir(), llm_binding())])
        print(f"{args.quant} per-step logits SQNR against float (dB), {NEW_TOKENS} steps teacher-forced, on ExecuTorch")
        print(f"{'family':<14}{'min':>8}{'median':>8}{'max':>8}{'seconds':>10}")
        for arch in args.families.split(","):
            sqnr, seconds = measure(arch, args.quant, runner)
            print(f"{arch:<14}{min(sqnr):>8.1f}{statistics.median(sqnr):>8.1f}{max(sqnr):>8.1f}{seconds:>10.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
