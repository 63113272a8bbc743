"""Host generation speed, side by side in one run: HF eager ``generate`` and our programs (float
and each quantization) on ExecuTorch's host runtime, driven as the device runner drives them
(``RunnerLoop``), on the tiny trained model of ``tiny_trained_llm.py``. Prints prefill and
decode tokens per second and each ratio to HF eager.

    .venv/bin/python benchmarks/bench_llm_speed.py [--quants 16a8w] [--new-tokens 48]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import qnn_custom_ops as qco  # noqa: E402
from bench_llm_accuracy import CTX, PREFILL, loop_for  # noqa: E402
from tiny_trained_llm import load_trained  # noqa: E402


def timed_loop(loop, prompt: list[int], new_tokens: int) -> tuple[float, float]:
    """(prefill tokens/s, decode tokens/s) of one generation, after one warm-up."""
    loop.generate(prompt, 2)
    times: list[float] = []
    started = time.monotonic()
    loop.generate(prompt, new_tokens, on_token=lambda tokens: times.append(time.monotonic()))
    return len(prompt) / (times[0] - started), (len(times) - 1) / (times[-1] - times[0])


def timed_hf(model, prompt: list[int], new_tokens: int) -> tuple[float, float]:
    """HF eager: the prompt's forward alone, then ``generate`` of ``new_tokens`` less it."""
    import torch

    ids = torch.tensor([prompt])
    with torch.no_grad():
        model(ids)  # warm-up
        started = time.monotonic()
        model(ids)
        prefill = time.monotonic() - started
        started = time.monotonic()
        model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
        total = time.monotonic() - started
    return len(prompt) / prefill, (new_tokens - 1) / max(total - prefill, 1e-9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quants", default="16a8w")
    parser.add_argument("--new-tokens", type=int, default=48)
    args = parser.parse_args()
    with qco.quieted():
        from qnn_custom_ops.library import export_llm, llm_binding, package_dir, quantize_llm
        from qnn_custom_ops.runtime import HostRunner

        checkpoint, _, model, held, calibration = load_trained(PREFILL)
        prompt = held[:PREFILL].tolist()
        hf = timed_hf(model, prompt, args.new_tokens)
        programs = export_llm(model, prefill_len=PREFILL, ctx_len=CTX, cache="runner")
        runner = HostRunner([qco.build_host_library(package_dir(), llm_binding())])
        rows = [("HF eager", hf)]
        rows.append(("float", timed_loop(loop_for(programs, (programs.prefill.module, programs.decode.module), runner),
                                         prompt, args.new_tokens)))
        for quant in args.quants.split(","):
            modules = quantize_llm(programs, quant, calibration, 16)
            rows.append((quant, timed_loop(loop_for(programs, modules, runner), prompt, args.new_tokens)))
        print(f"{checkpoint.name}, prompt {len(prompt)} tokens, {args.new_tokens} new, one thread per op as set")
        print(f"{'':<10}{'prefill tok/s':>14}{'x HF':>7}{'decode tok/s':>14}{'x HF':>7}")
        for name, (prefill, decode) in rows:
            print(f"{name:<10}{prefill:>14.1f}{prefill / hf[0]:>7.2f}{decode:>14.1f}{decode / hf[1]:>7.2f}")


if __name__ == "__main__":
    main()
