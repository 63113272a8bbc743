"""Tiny random Hugging Face causal LMs of every family the HF route supports, built from
configs (nothing downloaded): what the tests and the LLM benchmarks run on."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

import qnn_custom_ops as qco
from qnn_custom_ops.llm import host_step
from qnn_custom_ops.llm_ops import llm_binding
from qnn_custom_ops.llm.checkpoint import METHODS
from qnn_custom_ops.lowering.program import lower_methods
from qnn_custom_ops.runtime import HostRunner

COMMON = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=128, initializer_range=0.5, eos_token_id=None)
# (config class, model class, its own settings, layers, cache layout on ExecuTorch): each
# architecture brings what sets it apart -- sliding windows shorter than the 37 positions
# generated, Gemma's 1 + weight norm, tanh MLP and tied embeddings, Phi-3's fused projections
# and partial rotary; Llama takes two layers (the per-layer cache order), the others one (each
# layer lowered costs seconds).
#
# Mistral (rows) and Qwen2 (scatter) keep the layouts their windows need; every other family runs
# on ExecuTorch in the device runner's layout ("runner"; its test lowers kv_forward alone, as the
# runner's --eval_mode 0 runs it), each 2025-26 family with what sets it apart: Qwen3's per-head
# q/k norms; Gemma 2's attention and final soft-capping, sandwich norms, query_pre_attn_scalar
# and alternating window (two layers: one sliding, one full); Gemma 3's q/k norms and local/global RoPE bases (a sliding and a full
# layer); Granite's four multipliers; SmolLM3's NoPE layer; Phi-4-mini's longrope (short factors
# at this ctx_len) with partial rotary. Gemma 2/3 untie the embeddings: tied, a random model's
# scaled embedding dominates and it repeats its input token.
PHI4_FACTORS = dict(short_factor=[1.0, 1.3, 1.7, 2.0, 2.5, 3.0], long_factor=[2.0, 3.0, 5.0, 8.0, 13.0, 21.0])
ARCHITECTURES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}, 2, "runner"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM",
              dict(use_sliding_window=True, sliding_window=16, max_window_layers=0), 1, "scatter"),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=16), 1, "rows"),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(head_dim=16, hidden_act="gelu_pytorch_tanh"), 1, "runner"),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(num_key_value_heads=4, partial_rotary_factor=0.5, pad_token_id=0),
             1, "runner"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=16), 1, "runner"),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",
               dict(head_dim=16, sliding_window=16, query_pre_attn_scalar=24, attn_logit_softcapping=20.0,
                    final_logit_softcapping=15.0, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=False),
               2, "runner"),
    "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM",
                    dict(head_dim=16, sliding_window=16, layer_types=["sliding_attention", "full_attention"],
                         query_pre_attn_scalar=24, tie_word_embeddings=False), 2, "runner"),
    "granite": ("GraniteConfig", "GraniteForCausalLM",
                dict(embedding_multiplier=6.0, residual_multiplier=0.3, logits_scaling=4.0, attention_multiplier=0.2),
                1, "runner"),
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM",
                dict(no_rope_layers=[1, 0], pad_token_id=0, bos_token_id=1), 2, "runner"),
    "phi4_mini": ("Phi3Config", "Phi3ForCausalLM",
                  dict(num_key_value_heads=4, pad_token_id=0, original_max_position_embeddings=64,
                       max_position_embeddings=256,
                       rope_parameters=dict(rope_type="longrope", rope_theta=10000.0, partial_rotary_factor=0.75,
                                            original_max_position_embeddings=64, **PHI4_FACTORS)),
                  1, "runner"),
}


#: The prompt and the number of new tokens the tests compare with HF's greedy generation.
PROMPT = [5, 17, 42, 9, 77]
NEW_TOKENS = 32


def hf_tokens(model: torch.nn.Module, prompt: list[int] = PROMPT) -> list[int]:
    """HF's own greedy generation, with its own (dynamic) cache."""
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
    tokens = out[0, len(prompt):].tolist()
    assert len(tokens) == NEW_TOKENS and len(set(tokens)) > 8  # a real sequence, not a two-token loop
    return tokens


def hf_model(arch: str, **overrides: object) -> torch.nn.Module:
    """A seeded random model, eager attention, norm gains away from their identity."""
    config_class, model_class, own, layers, _ = ARCHITECTURES[arch]
    config = getattr(transformers, config_class)(**{**COMMON, **own, "num_hidden_layers": layers, **overrides})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.uniform_(-0.5, 0.5) if arch.startswith("gemma") else parameter.uniform_(0.5, 1.5)
    return model


def lowered_steps(programs, runner: HostRunner, methods=METHODS, converted=None, fold_weights=True) -> tuple:
    """The programs (or their PT2E-``converted`` modules) lowered for the host, as steps: for
    the runner's layout one program with ``methods`` (``prefill_forward``, ``kv_forward``), else
    two programs."""
    prefill, decode = converted or (programs.prefill.module, programs.decode.module)
    modules = dict(zip(METHODS, ((prefill, programs.prefill.example_inputs),
                                 (decode, programs.decode.example_inputs))))
    if programs.shape.cache == "runner":
        chosen = {m: modules[m] for m in methods}
        buffer = lower_methods(chosen, llm_binding(), "host", plan_outputs=False, fold_weights=fold_weights).buffer
        return tuple(host_step(runner, buffer, method) for method in methods)
    return tuple(host_step(runner, qco.lower(m, i, llm_binding(), target="host").buffer) for m, i in modules.values())


PROMPTS = [[1, 5, 9, 14, 30, 2, 77, 100, 3, 8], [1, 60, 61, 62, 7, 7, 120]]


def constant_bytes(module: torch.fx.GraphModule) -> dict[torch.dtype, int]:
    """Bytes of the tensors the module's graph reads by ``get_attr``, by dtype."""
    found: dict[torch.dtype, int] = {}
    for node in module.graph.nodes:
        if node.op == "get_attr":
            tensor = getattr(module, str(node.target))
            found[tensor.dtype] = found.get(tensor.dtype, 0) + tensor.numel() * tensor.element_size()
    return found


def host_program(programs, converted, fold: bool, data: Path) -> tuple[torch.Tensor, int, dict]:
    """The converted programs lowered for the host with their weights folded or as codes, the data
    file written to ``data``: the program's logits on a prompt, its data file's bytes and its
    planned memory per method."""
    import qnn_custom_ops as qco
    from qnn_custom_ops.llm import RunnerLoop, host_step
    from qnn_custom_ops.llm_ops import package_dir
    from qnn_custom_ops.runtime import HostRunner
    from qnn_custom_ops.runtime.loading import program_facts

    inputs = (programs.prefill.example_inputs, programs.decode.example_inputs)
    runner = HostRunner([qco.build_host_library(package_dir(), llm_binding())])
    lowered = lower_methods(dict(zip(METHODS, zip(converted, inputs))), llm_binding(), "host", plan_outputs=False,
                            fold_weights=fold, external_weights=True)
    with data.open("wb") as stream:
        lowered.write_data_to(stream)
    loop = RunnerLoop(programs.shape, *(host_step(runner, lowered.buffer, m, data) for m in METHODS))
    return loop.score(PROMPTS[0] * 2), data.stat().st_size, program_facts(lowered.buffer).planned_bytes
