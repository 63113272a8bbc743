"""Host generation speed, side by side in one run: HF eager ``generate`` and our programs (float
and each quantization) on ExecuTorch's host runtime, driven as the device runner drives them
(``RunnerLoop``), on the tiny trained model of ``tiny_trained_llm.py``. Prints prefill (time to
the first token) and decode tokens per second and each ratio to HF eager and to float, every row
measured once a round in turn. ``--before`` adds each quantization lowered without the host speed
kernels (``UseHostSpeedKernels`` left out: ExecuTorch's own kernels), timed in the same run.
``--calls N`` adds one prefill call's milliseconds through the runner loop, ``HostRunner.run`` and
the program's method alone, the steadier figures on a shared machine.

    .venv/bin/python -m benchmarks.bench_llm_speed [--quants 8a8w,16a8w,16a16w] [--new-tokens 48] [--before]
        [--threads 1] [--repeats 21] [--calls 200]
"""

from __future__ import annotations

import argparse
import statistics
import time
from unittest import mock

import qnn_custom_ops as qco
from benchmarks.bench_llm_accuracy import CTX, PREFILL
from benchmarks.tiny_trained_llm import load_trained


def generation_rates(loop, prompt: list[int], new_tokens: int):
    """A call measuring one generation of ``loop``: (prefill tokens/s, decode tokens/s), after one warm-up."""
    loop.generate(prompt, 2)

    def once() -> tuple[float, float]:
        times: list[float] = []
        started = time.monotonic()
        loop.generate(prompt, new_tokens, on_token=lambda tokens: times.append(time.monotonic()))
        return len(prompt) / (times[0] - started), (len(times) - 1) / (times[-1] - times[0])

    return once


def hf_rates(model, prompt: list[int], new_tokens: int):
    """A call measuring HF eager: the prompt's forward alone, then ``generate`` of ``new_tokens``
    less it; after one warm-up."""
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
        model(ids)
    return once


def interleaved_medians(measures: dict, repeats: int) -> dict[str, tuple[float, float]]:
    """Each row's median (prefill, decode) tokens/s over ``repeats`` rounds, every round measuring
    each row once in turn: a generation is a few milliseconds, which a shared machine's load can
    double, and load that comes and goes then slows every row alike instead of the rows it meets."""
    rates: dict[str, list[tuple[float, float]]] = {name: [] for name in measures}
    for _ in range(repeats):
        for name, measure in measures.items():
            rates[name].append(measure())
    return {
        name: (statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows))
        for name, rows in rates.items()
    }


def lowered(programs, modules) -> bytes:
    """``modules`` (prefill, decode) lowered into one program for the host, as ``bench_llm_accuracy`` does."""
    from qnn_custom_ops.llm_ops import llm_binding
    from qnn_custom_ops.llm.checkpoint import METHODS
    from qnn_custom_ops.lowering.program import lower_methods

    inputs = (programs.prefill.example_inputs, programs.decode.example_inputs)
    return lower_methods(dict(zip(METHODS, zip(modules, inputs))), llm_binding(), "host", plan_outputs=False).buffer


def runner_loop(programs, pte: bytes, runner):
    """The device runner's loop over the program's two methods, run by ``runner``."""
    from qnn_custom_ops.llm import RunnerLoop, host_step
    from qnn_custom_ops.llm.checkpoint import METHODS

    return RunnerLoop(programs.shape, *(host_step(runner, pte, m) for m in METHODS))


def prefill_call_times(loop, pte: bytes, prompt: list[int]) -> dict:
    """Calls timing one prefill three ways: through the runner loop (``RunnerLoop.score``, the
    prompt processor), its program call alone (``HostRunner.run``, the loop's step) and the
    method alone (the runtime's ``execute``, no copies): what each layer adds, per program."""
    from executorch.runtime import Runtime

    inputs = loop.generate(prompt, 1, record=True).prefill_inputs[0]
    method = Runtime.get().load_program(pte).load_method("prefill_forward")

    def timed(call):
        def once() -> float:
            started = time.perf_counter()
            call()
            return time.perf_counter() - started

        return once

    return {
        "runner loop": timed(lambda: loop.score(prompt)),
        "HostRunner.run": timed(lambda: loop.steps[0](inputs)),
        "program": timed(lambda: method.execute(list(inputs))),
    }


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
    parser.add_argument("--repeats", type=int, default=5,
                        help="rounds of one generation per row, in turn; each row's median is printed")
    parser.add_argument("--threads", type=int, default=0,
                        help="threads for torch and ExecuTorch's threadpool (0: as they start); 1 keeps a shared "
                             "machine's other load from stalling the threaded rows (HF, XNNPACK, torch's BLAS)")
    parser.add_argument("--before", action="store_true", help="also each quantization on ExecuTorch's kernels")
    parser.add_argument("--calls", type=int, default=0,
                        help="also time one prefill call this many interleaved rounds: through the runner loop, "
                             "HostRunner.run and the program's method alone")
    args = parser.parse_args()
    with qco.quieted():
        from qnn_custom_ops.llm import export_llm, quantize_llm
        from qnn_custom_ops.llm_ops import llm_binding, package_dir
        from qnn_custom_ops.runtime import HostRunner

        if args.threads:
            import torch
            from executorch.extension.pybindings import portable_lib

            torch.set_num_threads(args.threads)
            portable_lib._unsafe_reset_threadpool(args.threads)

        checkpoint, _, model, held, calibration = load_trained(PREFILL)
        prompt = held[:PREFILL].tolist()
        programs = export_llm(model, prefill_len=PREFILL, ctx_len=CTX, cache="runner")
        runner = HostRunner([qco.build_host_library(package_dir(), llm_binding())])
        ptes = {"float": lowered(programs, (programs.prefill.module, programs.decode.module))}
        for quant in args.quants.split(","):
            modules = quantize_llm(programs, quant, calibration, 16)
            ptes[quant] = lowered(programs, modules)
            if args.before:
                with without_speed_kernels():
                    ptes[f"{quant} (ET kernels)"] = lowered(programs, modules)
        loops = {name: runner_loop(programs, pte, runner) for name, pte in ptes.items()}
        measures = {"HF eager": hf_rates(model, prompt, args.new_tokens)}
        measures.update((name, generation_rates(loop, prompt, args.new_tokens)) for name, loop in loops.items())
        rows = list(interleaved_medians(measures, args.repeats).items())
        hf = rows[0][1]
        threads = args.threads or "default"
        print(f"{checkpoint.name}, prompt {len(prompt)} tokens, {args.new_tokens} new, median of {args.repeats} "
              "interleaved rounds, "
              f"threads {threads}")
        print(f"{'':<20}{'prefill tok/s':>14}{'x HF':>7}{'x float':>8}{'decode tok/s':>14}{'x HF':>7}{'x float':>8}")
        flt = rows[1][1]
        for name, (prefill, decode) in rows:
            print(f"{name:<20}{prefill:>14.1f}{prefill / hf[0]:>7.2f}{prefill / flt[0]:>8.2f}"
                  f"{decode:>14.1f}{decode / hf[1]:>7.2f}{decode / flt[1]:>8.2f}")
        if args.calls:
            print_call_times(loops, ptes, prompt, args.calls)


def print_call_times(loops: dict, ptes: dict, prompt: list[int], rounds: int) -> None:
    """One prefill call's median milliseconds, each way and each row's ratio to float's, over
    ``rounds`` interleaved rounds (every call of every row once a round)."""
    calls = {name: prefill_call_times(loop, ptes[name], prompt) for name, loop in loops.items()}
    timers = {(name, way): once for name, ways in calls.items() for way, once in ways.items()}
    times: dict = {key: [] for key in timers}
    for _ in range(rounds):
        for key, once in timers.items():
            times[key].append(once())
    medians = {key: 1000 * statistics.median(samples) for key, samples in times.items()}
    ways = list(calls["float"])
    print(f"one {len(prompt)}-token prefill call, median ms of {rounds} interleaved rounds (x float)")
    print(f"{'':<20}" + "".join(f"{way:>24}" for way in ways))
    for name in calls:
        cells = (f"{medians[(name, w)]:.3f} ({medians[(name, w)] / medians[('float', w)]:.2f}x)" for w in ways)
        print(f"{name:<20}" + "".join(f"{cell:>24}" for cell in cells))


if __name__ == "__main__":
    main()
