"""Every family of the HF route, quantized: per-step logits SQNR of 16a8w (or --quant) programs
against float, teacher-forced on float's greedy tokens, on ExecuTorch (host target, each
quantized op's integer kernel as on the HTP), in the device runner's layout.

The models are the tests' tiny random ones (tests/hf_models.py): random weights give
activations far wider than a trained model's, so read the figures as floors of these models,
not as a trained model's accuracy.

    .venv/bin/python benchmarks/bench_llm_families.py [--quant 16a8w] [--families qwen3,gemma2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import qnn_custom_ops as qco  # noqa: E402

PROMPT, NEW_TOKENS, PREFILL, CTX = [5, 17, 42, 9, 77], 32, 8, 40
#: Calibration covers the vocabulary: each token of a random model has its own ranges.
CALIBRATION = [list(range(i, i + PREFILL)) for i in range(0, 128, PREFILL)]


def sqnr_db(signal, noisy) -> float:
    import torch

    return float(10 * torch.log10(signal.pow(2).sum() / (signal - noisy).pow(2).sum()))


def measure(arch: str, quant: str, runner) -> tuple[list[float], float]:
    """Per-step SQNR of the quantized program's logits against float's, and seconds taken."""
    from qnn_custom_ops.library import RunnerLoop, eager_step, export_llm, host_step, llm_binding, quantize_llm
    from qnn_custom_ops.library.checkpoint import METHODS
    from qnn_custom_ops.lowering.program import lower_methods
    from tests.hf_models import hf_model

    started = time.monotonic()
    programs = export_llm(hf_model(arch), prefill_len=PREFILL, ctx_len=CTX, cache="runner")
    step = eager_step(programs.prefill.module)
    reference = RunnerLoop(programs.shape, step, step).generate(PROMPT, NEW_TOKENS)
    modules = quantize_llm(programs, quant, CALIBRATION, 8)
    inputs = (programs.prefill.example_inputs, programs.decode.example_inputs)
    program = lower_methods(dict(zip(METHODS, zip(modules, inputs))), llm_binding(), "host", plan_outputs=False)
    steps = [host_step(runner, program.buffer, method) for method in METHODS]
    quantized = RunnerLoop(programs.shape, *steps).generate(PROMPT, NEW_TOKENS, forced=reference.tokens)
    return [sqnr_db(f, q) for f, q in zip(reference.logits, quantized.logits)], time.monotonic() - started


def main() -> None:
    from tests.hf_models import ARCHITECTURES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quant", default="16a8w")
    parser.add_argument("--families", default=",".join(ARCHITECTURES))
    args = parser.parse_args()
    with qco.quieted():
        from qnn_custom_ops.library import llm_binding, package_dir
        from qnn_custom_ops.runtime import HostRunner

        runner = HostRunner([qco.build_host_library(package_dir(), llm_binding())])
        print(f"{args.quant} per-step logits SQNR against float (dB), {NEW_TOKENS} steps teacher-forced, ExecuTorch host")
        print(f"{'family':<14}{'min':>8}{'median':>8}{'max':>8}{'seconds':>10}")
        for arch in args.families.split(","):
            sqnr, seconds = measure(arch, args.quant, runner)
            print(f"{arch:<14}{min(sqnr):>8.1f}{statistics.median(sqnr):>8.1f}{max(sqnr):>8.1f}{seconds:>10.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
