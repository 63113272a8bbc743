"""Host generation speed, side by side in one run: HF eager ``generate`` and our programs (float
and each quantization) on ExecuTorch's host runtime, driven as the device runner drives them
(``RunnerLoop``), on the tiny trained model of ``tiny_trained_llm.py``. Prints prefill and
decode tokens per second and each ratio to HF eager and to float. ``--before`` adds each
quantization lowered without the host speed kernels (``UseHostSpeedKernels`` left out: ExecuTorch's
own ``mm`` and ``quantize_per_tensor``), timed in the same run.

    .venv/bin/python benchmarks/bench_llm_speed.py [--quants 8a8w,16a8w,16a16w] [--new-tokens 48] [--before]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))

import qnn_custom_ops as qco  # noqa: E402
from bench_llm_accuracy import CTX, PREFILL, loop_for  # noqa: E402
from tiny_trained_llm import load_trained  # noqa: E402


def median_rates(measure, repeats: int) -> tuple[float, float]:
    """The median (prefill, decode) tokens/s of ``repeats`` calls of ``measure``: one generation
    is a few milliseconds, which a busy machine's scheduler can double."""
    rates = [measure() for _ in range(repeats)]
    return statistics.median(r[0] for r in rates), statistics.median(r[1] for r in rates)


def timed_loop(loop, prompt: list[int], new_tokens: int, repeats: int) -> tuple[float, float]:
    """(prefill tokens/s, decode tokens/s) of a generation, after one warm-up."""
    loop.generate(prompt, 2)

    def once() -> tuple[float, float]:
        times: list[float] = []
        started = time.monotonic()
        loop.generate(prompt, new_tokens, on_token=lambda tokens: times.append(time.monotonic()))
        return len(prompt) / (times[0] - started), (len(times) - 1) / (times[-1] - times[0])

    return median_rates(once, repeats)


def timed_hf(model, prompt: list[int], new_tokens: int, repeats: int) -> tuple[float, float]:
    """HF eager: the prompt's forward alone, then ``generate`` of ``new_tokens`` less it."""
    import torch

    ids = torch.tensor([prompt])

    def once() -> tuple[float, float]:
        with torch.no_grad():
            started = time.monotonic()
            model(ids)
            prefill = time.monotonic() - started
            started = time.monotonic()
            model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
            total = time.monotonic() - started
        return len(prompt) / prefill, (new_tokens - 1) / max(total - prefill, 1e-9)

    with torch.no_grad():
        model(ids)  # warm-up
    return median_rates(once, repeats)


def without_speed_kernels():
    """Lowering as before the speed kernels: a quantized host program's passes without
    ``UseHostSpeedKernels`` (its weights still folded)."""
    from qnn_custom_ops.lowering import program

    everything = program._host_passes

    def passes(*args):
        return [step for step in everything(*args) if not isinstance(step, program.UseHostSpeedKernels)]

    return mock.patch.object(program, "_host_passes", passes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quants", default="16a8w")
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=5, help="generations per row; the median is printed")
    parser.add_argument("--threads", type=int, default=0,
                        help="threads for torch and ExecuTorch's threadpool (0: as they start); 1 keeps a shared "
                             "machine's other load from stalling the threaded rows (HF, XNNPACK, torch's BLAS)")
    parser.add_argument("--before", action="store_true", help="also each quantization on ExecuTorch's kernels")
    args = parser.parse_args()
    with qco.quieted():
        from qnn_custom_ops.library import export_llm, llm_binding, package_dir, quantize_llm
        from qnn_custom_ops.runtime import HostRunner

        if args.threads:
            import torch
            from executorch.extension.pybindings import portable_lib

            torch.set_num_threads(args.threads)
            portable_lib._unsafe_reset_threadpool(args.threads)

        checkpoint, _, model, held, calibration = load_trained(PREFILL)
        prompt = held[:PREFILL].tolist()
        hf = timed_hf(model, prompt, args.new_tokens, args.repeats)
        programs = export_llm(model, prefill_len=PREFILL, ctx_len=CTX, cache="runner")
        runner = HostRunner([qco.build_host_library(package_dir(), llm_binding())])
        rows = [("HF eager", hf)]
        float_loop = loop_for(programs, (programs.prefill.module, programs.decode.module), runner)
        rows.append(("float", timed_loop(float_loop, prompt, args.new_tokens, args.repeats)))
        for quant in args.quants.split(","):
            modules = quantize_llm(programs, quant, calibration, 16)
            rows.append((quant, timed_loop(loop_for(programs, modules, runner), prompt, args.new_tokens, args.repeats)))
            if args.before:
                with without_speed_kernels():
                    loop = loop_for(programs, modules, runner)
                rows.append((f"{quant} (ET kernels)", timed_loop(loop, prompt, args.new_tokens, args.repeats)))
        threads = args.threads or "default"
        print(f"{checkpoint.name}, prompt {len(prompt)} tokens, {args.new_tokens} new, median of {args.repeats}, "
              f"threads {threads}")
        print(f"{'':<20}{'prefill tok/s':>14}{'x HF':>7}{'x float':>8}{'decode tok/s':>14}{'x HF':>7}{'x float':>8}")
        flt = rows[1][1]
        for name, (prefill, decode) in rows:
            print(f"{name:<20}{prefill:>14.1f}{prefill / hf[0]:>7.2f}{prefill / flt[0]:>8.2f}"
                  f"{decode:>14.1f}{decode / hf[1]:>7.2f}{decode / flt[1]:>8.2f}")


if __name__ == "__main__":
    main()
