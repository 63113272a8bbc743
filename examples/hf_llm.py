"""A Hugging Face causal LM (from a config, random weights) as prefill and decode programs on
the LLM op library: greedy generation on ExecuTorch beside HF's own, in float, then quantized
(per-step logits SQNR against float, teacher-forced on float's tokens).

    .venv/bin/python examples/hf_llm.py                          # llama: float, 16a8w, 8a8w
    .venv/bin/python examples/hf_llm.py --arch gemma --quant none
    .venv/bin/python examples/hf_llm.py --target qnn --soc SM8650  # the QNN lowering (QNN SDK needed)
"""

from __future__ import annotations

import argparse
import copy
import os
import sys

os.environ.setdefault("QNN_SDK_ROOT", "")  # never let executorch download the SDK

import qnn_custom_ops as qco  # noqa: E402

with qco.quieted():  # third-party import chatter (torchao, pytree, FutureWarning) dropped; ours kept
    import torch
    import transformers

    from qnn_custom_ops.library import (eager_step, export_llm, greedy, host_step, llm_binding, package_dir,
                                        quantize_llm)
    from qnn_custom_ops.runtime import HostRunner

CONFIGS = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM, {}),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM, {}),
    "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM, {"sliding_window": 16}),
    "gemma": (transformers.GemmaConfig, transformers.GemmaForCausalLM, {"head_dim": 32,
                                                                        "hidden_act": "gelu_pytorch_tanh"}),
    "phi3": (transformers.Phi3Config, transformers.Phi3ForCausalLM, {"pad_token_id": 0}),
}
PROMPT, NEW_TOKENS = [5, 17, 42, 9, 77], 32


def build(arch: str) -> torch.nn.Module:
    config_class, model_class, own = CONFIGS[arch]
    config = config_class(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, initializer_range=0.5, eos_token_id=None,
                          **own)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return model_class(config).eval()


def sqnr_db(signal: torch.Tensor, noisy: torch.Tensor) -> float:
    return float(10 * torch.log10(signal.pow(2).sum() / (signal - noisy).pow(2).sum()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=CONFIGS, default="llama")
    parser.add_argument("--cache", choices=("rows", "scatter"), default="rows")
    parser.add_argument("--quant", choices=("16a8w", "8a8w", "none"), nargs="+", default=["16a8w", "8a8w"])
    parser.add_argument("--target", choices=("host", "qnn"), default="host")
    parser.add_argument("--soc", default="SM8650")
    args = parser.parse_args(argv)
    model = build(args.arch)
    with torch.no_grad():
        hf = copy.deepcopy(model).generate(torch.tensor([PROMPT]), max_new_tokens=NEW_TOKENS, do_sample=False,
                                           pad_token_id=0)[0, len(PROMPT):].tolist()
    programs = export_llm(model, prefill_len=8, ctx_len=64, cache=args.cache)
    print(f"{args.arch}: swapped {len(programs.swaps)} modules; programs {programs.shape}")
    if args.target == "qnn":
        from qnn_custom_ops.lowering import compile_spec, makefile_builds
        from executorch.backends.qualcomm.utils.utils import get_soc_to_htp_arch_map

        arch = int(get_soc_to_htp_arch_map()[args.soc].value)
        spec = compile_spec(args.soc, llm_binding(), makefile_builds(package_dir(), "LlmOpPackage", arch))
        for program in (programs.prefill, programs.decode):
            qco.lower(program.module, program.example_inputs, llm_binding(), target="qnn", compile_spec=spec,
                      output=f"{args.arch}_{program.name}.pte")
        return 0
    runner = HostRunner([qco.build_host_library(package_dir(), llm_binding())])
    lowered = [qco.lower(p.module, p.example_inputs, llm_binding(), target="host")
               for p in (programs.prefill, programs.decode)]
    ours = greedy(programs.shape, host_step(runner, lowered[0].buffer), host_step(runner, lowered[1].buffer),
                  PROMPT, NEW_TOKENS)
    same = ours.tokens == hf
    print(f"float on ExecuTorch: {NEW_TOKENS} greedy tokens {'equal' if same else 'DIFFER FROM'} HF eager's")
    calibration = [list(range(i, i + 8)) for i in range(0, 256, 8)]
    for quant in (q for q in args.quant if q != "none"):
        prefill, decode = quantize_llm(programs, quant, calibration, 8)
        steps = [host_step(runner, qco.lower(m, p.example_inputs, llm_binding(), target="host").buffer)
                 for m, p in ((prefill, programs.prefill), (decode, programs.decode))]
        quantized = greedy(programs.shape, *steps, PROMPT, NEW_TOKENS, forced=ours.tokens)
        sqnr = torch.tensor([sqnr_db(f, q) for f, q in zip(ours.logits, quantized.logits)])
        print(f"{quant} logits SQNR vs float per step: min {sqnr.min():.1f} dB, median {sqnr.median():.1f} dB, "
              f"max {sqnr.max():.1f} dB")
    return 0 if same else 1


if __name__ == "__main__":
    with qco.quieted():  # and what export and lowering say while they run
        code = main()
    sys.exit(code)
