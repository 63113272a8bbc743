"""ExecuTorch's own static-LLM quantization beside ours, on the tiny trained Qwen3 of
``tiny_trained_llm.py``, same held-out windows, prompts and figures as ``bench_llm_accuracy.py``.

Theirs: the wheel's ``examples/qualcomm/oss_scripts/llama`` pipeline, without the QNN SDK. Our
checkpoint converted by their Qwen3 weight converter into their static model (``LlamaModel`` of
``model/static_llama.py``, the 0.6B config's settings at our sizes, linears as 1x1 convs, masked
softmax as their Qwen3 configs enable it); quantized by ``QnnQuantizer`` with a recipe of
``static_llm_quant_recipe.py`` (``16a8w``: their 16a8w static-LLM recipe, min-max observers,
per-channel conv weights; ``qwen3-0_6b``: their Qwen3-0.6B recipe, 16a4w block weights); calibrated
as their ``PTQStrategy`` does, one call of their calibration graph (``ar_len = ctx_len``) per
sample, padded with their collator's mask. Their prefill and decode graphs take this graph's
encodings unchanged (``_encoding_override``, the KV inputs the outputs'), so the converted
calibration graph computes what they compute; it is evaluated eagerly (fake-quantized), over a
whole window per call, greedy by rerunning the prefix.

Ours: ``quantize_llm`` 16a8w, evaluated eagerly through ``RunnerLoop`` (the same kind of run as
theirs) and as ``bench_llm_accuracy.py`` reports it, lowered and run on ExecuTorch (host, each
quantized op's integer kernel). Both calibrate on the same 16 sequences: each calibration prompt
and the 16 tokens float generates from it (ours also walks them, as one text, through every
prefill chunk of the context with decode calls after each: ``quantize_llm``). Eager rows compare with float eager, the ExecuTorch
row with float on ExecuTorch.

    .venv/bin/python -m benchmarks.bench_executorch_recipe [--recipes 16a8w,qwen3-0_6b] [--windows 12]
                                                            [--no-executorch]
"""

from __future__ import annotations

import os

os.environ["QNN_SDK_ROOT"] = ""  # before executorch's QNN helpers: never let them download the SDK

import argparse  # noqa: E402
import contextlib  # noqa: E402
import importlib.util  # noqa: E402
import io  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402
from pathlib import Path  # noqa: E402

from benchmarks.bench_llm_accuracy import (  # noqa: E402
    CTX,
    PREFILL,
    compare,
    evaluate,
    header,
    held_out_sets,
    loop_for,
    perplexity,
    row,
)
from benchmarks.tiny_trained_llm import load_trained  # noqa: E402

import qnn_custom_ops as qco  # noqa: E402

OSS_LLAMA = "executorch.examples.qualcomm.oss_scripts.llama"
#: The recipes of ``static_llm_quant_recipe.py`` this benchmark can run, by the name it prints.
RECIPES = {"16a8w": "Smollm2QuantRecipe", "qwen3-0_6b": "Qwen3_0_6BQuantRecipe"}
WIDTH = 28


def oss_llama(module: str):
    """A module of ExecuTorch's static-LLM scripts. Their package's ``__init__`` imports every
    model's weight converter, some through ``torchtune`` (absent here), so the package is entered
    without running it: its modules import as they would."""
    if OSS_LLAMA not in sys.modules:
        spec = importlib.util.find_spec(OSS_LLAMA)
        package = types.ModuleType(OSS_LLAMA)
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules[OSS_LLAMA] = package
    return importlib.import_module(f"{OSS_LLAMA}.{module}")


def model_args(config, ctx_len: int, kv_io_bit_width: int):
    """Their ``ModelArgs`` for our checkpoint: the keys of their Qwen3 0.6B config
    (``examples/models/qwen3/config/0_6b_config.json``) at our sizes, then what
    ``process_model_args`` sets for the calibration graph (``ar_len = max_context_len``) and
    what a Qwen3 config asks for on a current SDK (masked softmax)."""
    from executorch.examples.models.llama.model_args import ModelArgs

    args = ModelArgs(
        dim=config.hidden_size, ffn_dim_multiplier=1, hidden_dim=config.intermediate_size,
        n_heads=config.num_attention_heads, head_dim=config.head_dim, n_kv_heads=config.num_key_value_heads,
        n_layers=config.num_hidden_layers, norm_eps=config.rms_norm_eps,
        rope_theta=config.rope_parameters["rope_theta"], use_scaled_rope=False, vocab_size=config.vocab_size,
        use_hf_rope=True, attention_qkv_bias=False, use_qk_norm=True, qk_norm_before_rope=True,
    )
    args.max_batch_size, args.max_seq_len, args.max_context_len = 1, ctx_len, ctx_len
    args.use_kv_cache, args.ar_len, args.kv_io_bit_width = True, ctx_len, kv_io_bit_width
    args.enable_masked_softmax = True
    return args


def static_qwen3(checkpoint: Path, config, ctx_len: int, kv_io_bit_width: int):
    """Their static model of our checkpoint, as ``TextDecoder._prepare_model`` builds it: the HF
    weights through their Qwen3 converter (to a file, as ``download_and_convert_hf_checkpoint``
    does), then the attention and MLP projections as 1x1 convolutions, the rest by
    ``convert_linear_to_conv2d``."""
    import torch
    from executorch.backends.qualcomm.utils.utils import convert_linear_to_conv2d
    from executorch.examples.models.qwen3.convert_weights import convert_weights

    static_llama = oss_llama("model.static_llama")
    model = static_llama.LlamaModel(model_args(config, ctx_len, kv_io_bit_width), ar_len=ctx_len,
                                    output_new_cache_only=True, output_cache=True, use_i64_token=False)
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
        convert_weights(str(checkpoint), f"{tmp}/model.pth")
        state = torch.load(f"{tmp}/model.pth", weights_only=True, map_location="cpu")
    model.load_state_dict(state, strict=True, assign=True)
    for layer in model.layers:
        layer.attention.prepare_attention_conv()
        layer.feed_forward.prepare_feedforward_conv()
    return convert_linear_to_conv2d(model).eval()


class FullSequence:
    """``score`` and ``generate`` of a ``RunnerLoop`` over their calibration graph: a sequence in
    one call (padded to ``ctx_len`` as their calibration collator pads, its padding rows masked),
    greedy by rerunning the prefix with each new token."""

    def __init__(self, module, example_inputs: tuple, ctx_len: int):
        self.module, self.ctx_len = module, ctx_len
        self.template, self.caches = example_inputs[1], (*example_inputs[3], *example_inputs[4])  # empty: ar = ctx
        self.masking = oss_llama("masking_utils")

    def inputs(self, tokens: list[int]) -> tuple:
        """Their ``LLMCalibCollator`` batch of one and ``DecoderInference``'s inputs."""
        import torch

        mask = self.masking.AttentionMask.from_input_ids(self.template, [tokens], self.ctx_len)
        padded = torch.zeros(1, self.ctx_len, dtype=torch.int32)
        padded[0, : len(tokens)] = torch.tensor(tokens, dtype=torch.int32)
        positions = torch.arange(self.ctx_len, dtype=torch.int32)[None]
        return (padded, *mask, positions, *self.caches)

    def score(self, tokens: list[int]):
        import torch

        with torch.no_grad():
            return self.module(*self.inputs(tokens))[0][0, : len(tokens)]

    def generate(self, prompt: list[int], new_tokens: int) -> types.SimpleNamespace:
        tokens = list(prompt)
        for _ in range(new_tokens):
            tokens.append(int(self.score(tokens)[-1].double().argmax()))
        return types.SimpleNamespace(tokens=tokens[len(prompt) :])


def quantize_theirs(model, recipe: str, samples: list[list[int]], full: FullSequence):
    """``TextDecoder.quantize`` of the calibration graph: ``make_quantizer`` (HTP, its default
    SoC) with the recipe set, strict export, ``prepare_pt2e``, one call per calibration sample
    (``PTQStrategy``; their Qwen3-0.6B config's SeqMSE search left out), ``convert_pt2e``."""
    import torch
    from executorch.backends.qualcomm.export_utils import make_quantizer
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = make_quantizer()
    quantizer.set_recipe(getattr(oss_llama("static_llm_quant_recipe"), RECIPES[recipe])().recipe)
    with torch.no_grad():
        module = torch.export.export(model, full.inputs(samples[0]), strict=True).module()
        module = prepare_pt2e(module, quantizer)
        for sample in samples:
            module(*full.inputs(sample))
        return convert_pt2e(module)


def theirs(checkpoint: Path, config, recipes: list[str], samples, windows, prompts, reference) -> None:
    """Their float static model (the conversion's check), then each recipe's, one row each."""
    static_llm_quant_recipe = oss_llama("static_llm_quant_recipe")
    for recipe in ["float", *recipes]:
        started = time.monotonic()
        bits = 16 if recipe == "float" else getattr(static_llm_quant_recipe, RECIPES[recipe])().get_kv_io_bit_width()
        model = static_qwen3(checkpoint, config, CTX, bits)
        full = FullSequence(model, model.get_example_inputs(), CTX)
        if recipe != "float":
            full = FullSequence(quantize_theirs(model, recipe, samples, full), model.get_example_inputs(), CTX)
        run = evaluate(full, windows, prompts)
        print(row(f"executorch {recipe} eager", compare(run, reference, windows),
                  perplexity(reference["logits"], windows), time.monotonic() - started, WIDTH), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", default=",".join(RECIPES), help=f"of {', '.join(RECIPES)}")
    parser.add_argument("--windows", type=int, default=12)
    parser.add_argument("--no-executorch", dest="executorch", action="store_false",
                        help="leave out our rows on ExecuTorch (lowering and host runs: most of the time)")
    args = parser.parse_args()
    with qco.quieted():
        from qnn_custom_ops.llm import RunnerLoop, eager_step, export_llm, quantize_llm
        from qnn_custom_ops.llm_ops import llm_binding, package_dir
        from qnn_custom_ops.runtime import HostRunner

        checkpoint, _, model, held, calibration = load_trained(PREFILL)
        windows, prompts = held_out_sets(held, args.windows)
        config = model.config
        programs = export_llm(model, prefill_len=PREFILL, ctx_len=CTX, cache="runner")

        def eager(modules):
            return RunnerLoop(programs.shape, *(eager_step(m) for m in modules))

        started = time.monotonic()
        float_modules = (programs.prefill.module, programs.decode.module)
        float_run = evaluate(eager(float_modules), windows, prompts)
        float_ppl = perplexity(float_run["logits"], windows)
        samples = [p + eager(float_modules).generate(p, 16).tokens for p in calibration]
        print(f"{checkpoint.name}: float (ours, eager) held-out perplexity {float_ppl:.2f} over {args.windows} "
              f"windows ({time.monotonic() - started:.0f} s); calibration: {len(samples)} sequences of "
              f"{len(samples[0])} tokens")
        print(header("recipe, run", WIDTH))
        theirs(checkpoint, config, args.recipes.split(","), samples, windows, prompts, float_run)
        started = time.monotonic()
        modules = quantize_llm(programs, "16a8w", calibration, 16)
        quantized = time.monotonic() - started
        run = evaluate(eager(modules), windows, prompts)
        print(row("ours 16a8w eager", compare(run, float_run, windows), float_ppl, time.monotonic() - started,
                  WIDTH), flush=True)
        if args.executorch:
            started = time.monotonic()
            runner = HostRunner([qco.build_host_library(package_dir(), llm_binding())])
            float_host = evaluate(loop_for(programs, float_modules, runner), windows, prompts)
            run = evaluate(loop_for(programs, modules, runner), windows, prompts)
            print(row("ours 16a8w ExecuTorch", compare(run, float_host, windows),
                      perplexity(float_host["logits"], windows), quantized + time.monotonic() - started, WIDTH))


if __name__ == "__main__":
    main()
