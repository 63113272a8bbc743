"""Quantized accuracy on a model that has learned something: the tiny trained Qwen3 of
``tiny_trained_llm.py`` (trained first if the cache lacks it), float vs 8a8w, 16a8w and 16a16w
programs in the device runner's layout on ExecuTorch (host; each quantized op's integer kernel
as on the HTP), on held-out text it never saw.

Teacher-forced over held-out windows (``RunnerLoop.score``): top-1 agreement with float,
perplexity against float's, per-position logits SQNR (min, median); then greedy tokens equal
to float's out of 64 (8 held-out prompts, 8 tokens each).

``--qat STEPS`` adds a row per mode quantized after that many steps of quantization-aware
training (``quantize_llm(..., qat=QatConfig(...))``: distillation from the float program by
default, ``--qat-loss next_token`` for the text's own next tokens), on the calibration prompts or,
with ``--qat-text N``, on N tokens of other training text; ``--kv8`` a row per 16-bit-activation
mode with 8-bit KV caches (``kv_bits=8``), and the cache bytes they save at Llama-3.2-1B's shape;
``--keep8 PCT`` a row per 4-bit mode (and per QAT row) with the parts ``llm export --keep-8bit
auto --keep-target PCT`` keeps at 8-bit weights (``sensitivity.choose_kept`` on the calibration
prompts, as the export measures it), saying what it kept and its share of the 4-bit weights;
``--by-layer`` a row per mode quantized as ``llm export`` quantizes without QAT: the checkpoint read
and calibrated a layer at a time (``layer_stages.quantize_by_layer``, teacher-forced calibration calls),
and a ``+by-layer-q`` row with each layer's inputs from the quantized layer (``inputs="quantized"``).

    .venv/bin/python -m benchmarks.bench_llm_accuracy [--quants 8a8w,16a8w,16a16w] [--windows 12]
        [--qat STEPS [--qat-loss distill|next_token] [--qat-lr 1e-4] [--qat-text TOKENS]] [--kv8]
        [--keep8 PCT] [--by-layer]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

import qnn_custom_ops as qco
from benchmarks.tiny_trained_llm import load_trained

PREFILL, CTX, WINDOW, PROMPT, NEW = 32, 128, 96, 16, 8


def sqnr_db(signal, noisy) -> float:
    import torch

    return float(10 * torch.log10(signal.pow(2).sum() / (signal - noisy).pow(2).sum()))


def loop_for(programs, modules, runner):
    """A RunnerLoop over ``modules`` (prefill, decode) lowered into one program for the host."""
    from qnn_custom_ops.llm import RunnerLoop, host_step
    from qnn_custom_ops.llm_ops import llm_binding
    from qnn_custom_ops.llm.checkpoint import METHODS
    from qnn_custom_ops.lowering.program import lower_methods

    inputs = (programs.prefill.example_inputs, programs.decode.example_inputs)
    program = lower_methods(dict(zip(METHODS, zip(modules, inputs))), llm_binding(), "host", plan_outputs=False)
    return RunnerLoop(programs.shape, *(host_step(runner, program.buffer, m) for m in METHODS))


def evaluate(loop, windows, prompts) -> dict:
    """Every window's teacher-forced logits and every prompt's greedy tokens."""
    return {
        "logits": [loop.score(w.tolist()) for w in windows],
        "greedy": [loop.generate(p.tolist(), NEW).tokens for p in prompts],
    }


def perplexity(logits_list, windows) -> float:
    import torch

    losses = [torch.nn.functional.cross_entropy(lg[:-1], w[1:]) for lg, w in zip(logits_list, windows)]
    return math.exp(float(torch.stack(losses).mean()))


def held_out_sets(held, windows: int) -> tuple:
    """(windows, prompts): ``windows`` teacher-forcing windows of ``WINDOW`` tokens from the start
    of the held-out stream, and 8 prompts of ``PROMPT`` tokens from its last 8 windows."""
    return held[: windows * WINDOW].view(windows, WINDOW), [w[:PROMPT] for w in held[-8 * WINDOW :].view(8, WINDOW)]


def compare(run: dict, reference: dict, windows) -> dict:
    """A run's figures against the reference's (``evaluate`` results): top-1 agreement,
    perplexity, per-position logits SQNR (min, median), greedy tokens equal out of 64."""
    import torch

    logits, expected = torch.cat(run["logits"]), torch.cat(reference["logits"])
    sqnr = [sqnr_db(f, q) for f, q in zip(expected, logits)]
    return {
        "agree": float((logits.argmax(-1) == expected.argmax(-1)).float().mean()),
        "ppl": perplexity(run["logits"], windows),
        "sqnr_min": min(sqnr),
        "sqnr_median": statistics.median(sqnr),
        "greedy": sum(a == b for g, f in zip(run["greedy"], reference["greedy"]) for a, b in zip(g, f)),
    }


def row(name: str, figures: dict, float_ppl: float, seconds: float, width: int = 16) -> str:
    """One line of the table ``HEADER`` heads."""
    return (f"{name:<{width}}{figures['agree']:>12.1%}{figures['ppl']:>8.2f}{figures['ppl'] / float_ppl:>10.3f}"
            f"{figures['sqnr_min']:>10.1f}{figures['sqnr_median']:>10.1f}{figures['greedy']:>7}/64{seconds:>9.0f}")


def header(name: str = "mode", width: int = 16) -> str:
    return (f"{name:<{width}}{'top-1 agree':>12}{'ppl':>8}{'ppl/float':>10}{'SQNR min':>10}{'SQNR med':>10}"
            f"{'greedy =':>10}{'seconds':>9}")


#: Llama-3.2-1B's caches (16 layers, 8 KV heads of 64) at ``--ctx 4096``: elements of K and V.
LLAMA_1B_CACHE_ELEMENTS = 2 * 16 * 8 * 64 * 4096


def cache_bytes_line() -> str:
    """What 8-bit caches save at Llama-3.2-1B's shape, ``--ctx 4096``."""
    at16, at8 = 2 * LLAMA_1B_CACHE_ELEMENTS, LLAMA_1B_CACHE_ELEMENTS
    return (f"KV caches of Llama-3.2-1B (16 layers x 8 KV heads x 64, K and V) at ctx 4096: {at16 / 2**20:.0f} MiB "
            f"in 16 bits, {at8 / 2**20:.0f} MiB in 8 ({(at16 - at8) / 2**20:.0f} MiB saved)")


def qat_text(tokenizer, tokens: int) -> tuple:
    """``tokens`` training tokens of files the calibration prompts do not come from."""
    from benchmarks.tiny_trained_llm import corpus, token_stream

    train_texts, _ = corpus()
    return (tuple(token_stream(tokenizer, train_texts[3::5])[:tokens].tolist()),)


def runs(args, tokenizer) -> list:
    """(row name, quantize_llm keywords) of every row asked for; ``keep_8bit: "auto"`` is
    chosen when the row runs (``kept``)."""
    from qnn_custom_ops.llm.qat import QatConfig

    rows = []
    for quant in args.quants.split(","):
        if args.by_layer:
            rows.append((f"{quant}+by-layer", {"by_layer": "float"}))
            rows.append((f"{quant}+by-layer-q", {"by_layer": "quantized"}))
        kept = [("+keep8", {"keep_8bit": "auto"})] if args.keep8 and quant.startswith("16a4w") else []
        rows += [(quant, {}), *((quant + name, options) for name, options in kept)]
        if args.qat:
            text = qat_text(tokenizer, args.qat_text) if args.qat_text else None
            config = QatConfig(steps=args.qat, lr=args.qat_lr, loss=args.qat_loss, text=text)
            rows += [(f"{quant}+qat{name}", {"qat": config, **options}) for name, options in [("", {}), *kept]]
        if args.kv8 and quant.startswith("16a"):
            rows.append((f"{quant}+kv8", {"kv_bits": 8}))
    return rows


def kept(programs, quant: str, options: dict, calibration, target: float) -> dict:
    """``options`` with ``keep_8bit="auto"`` replaced by the parts ``choose_kept`` picks on the
    float weights, said (a QAT row then trains with them fake-quantized at 8 bits, as ``llm export
    --qat N --keep-8bit auto`` does)."""
    from qnn_custom_ops.llm.sensitivity import choose_kept

    if options.get("keep_8bit") != "auto":
        return options
    choice = choose_kept(programs, quant, calibration, calibration, target)
    print(f"  {quant} keep-8bit auto: {len(choice.kept)} parts ({choice.weight_share:.0%} of the 4-bit weights): "
          f"{', '.join(choice.kept) or 'nothing'}; {choice.top1_agreement:.1%} on the calibration prompts", flush=True)
    return {**options, "keep_8bit": choice.kept}


def quantized_by_layer(checkpoint: Path, quant: str, calibration, inputs: str) -> tuple:
    """The checkpoint read and quantized a layer at a time, as ``llm export`` does without QAT."""
    import tempfile

    from qnn_custom_ops.llm.checkpoint import programs_by_layer
    from qnn_custom_ops.llm.layer_stages import quantize_by_layer

    with tempfile.TemporaryDirectory() as store:
        _, _, _, programs, weights = programs_by_layer(checkpoint, Path(store), PREFILL, CTX, None, lambda line: None)
        return quantize_by_layer(programs, weights, quant, calibration, 16, lambda line: None, inputs=inputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quants", default="8a8w,16a8w,16a16w")
    parser.add_argument("--windows", type=int, default=12)
    parser.add_argument("--qat", type=int, default=0, metavar="STEPS")
    parser.add_argument("--qat-loss", default="distill", choices=("distill", "next_token"))
    parser.add_argument("--qat-lr", type=float, default=1e-4)
    parser.add_argument("--qat-text", type=int, default=0, metavar="TOKENS")
    parser.add_argument("--kv8", action="store_true")
    parser.add_argument("--keep8", type=float, default=0, metavar="PCT")
    parser.add_argument("--by-layer", action="store_true")
    args = parser.parse_args()
    with qco.quieted():
        from qnn_custom_ops.llm import export_llm, quantize_llm
        from qnn_custom_ops.llm_ops import llm_binding, package_dir
        from qnn_custom_ops.runtime import HostRunner

        checkpoint, tokenizer, model, held, calibration = load_trained(PREFILL)
        windows, prompts = held_out_sets(held, args.windows)
        programs = export_llm(model, prefill_len=PREFILL, ctx_len=CTX, cache="runner")
        runner = HostRunner([qco.build_host_library(package_dir(), llm_binding())])
        started = time.monotonic()
        float_run = evaluate(loop_for(programs, (programs.prefill.module, programs.decode.module), runner), windows,
                             prompts)
        float_ppl = perplexity(float_run["logits"], windows)
        print(f"{checkpoint.name}: float held-out perplexity {float_ppl:.2f} over {args.windows} windows of "
              f"{WINDOW} tokens ({time.monotonic() - started:.0f} s)")
        print(header())
        for name, options in runs(args, tokenizer):
            started = time.monotonic()
            quant = name.split("+")[0]
            options = kept(programs, quant, options, calibration, args.keep8 / 100)
            inputs = options.pop("by_layer", None)
            if inputs is not None:
                modules = quantized_by_layer(checkpoint, quant, calibration, inputs)
            else:
                modules = quantize_llm(programs, quant, calibration, 16, **options)
            run = evaluate(loop_for(programs, modules, runner), windows, prompts)
            print(row(name, compare(run, float_run, windows), float_ppl, time.monotonic() - started), flush=True)
        if args.kv8:
            print(cache_bytes_line())


if __name__ == "__main__":
    main()
