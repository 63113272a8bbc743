"""export_llm: Hugging Face causal LMs built from configs (random weights, nothing downloaded)
as prefill and decode programs on the library's ops, generating HF's greedy tokens.

On ExecuTorch each architecture lowers its two programs once, in one cache layout; the other
layout is checked eagerly."""

from __future__ import annotations

import copy

import pytest
import torch

from qnn_custom_ops.llm import RunnerLoop
from qnn_custom_ops.llm.generation import greedy, greedy_batch
from qnn_custom_ops.llm.steps import eager_step
from qnn_custom_ops.llm.hf import LlmExportError, export_llm

transformers = pytest.importorskip("transformers", reason="transformers is a dev extra (pip install -e '.[dev]')")

from tests.hf_models import (  # noqa: E402  (after the dev extra)
    ARCHITECTURES, NEW_TOKENS, PROMPT, hf_model, hf_tokens, lowered_steps)

PREFILL_LEN, CTX_LEN = 8, 40


def other_layout(arch: str) -> str:
    return "scatter" if ARCHITECTURES[arch][4] == "rows" else "rows"


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_the_layout_not_run_on_executorch_generates_hfs_greedy_tokens_eagerly(arch):
    model = hf_model(arch)
    want = hf_tokens(copy.deepcopy(model))
    programs = export_llm(model, prefill_len=PREFILL_LEN, ctx_len=CTX_LEN, cache=other_layout(arch))
    step = eager_step(programs.prefill.module)
    assert greedy(programs.shape, step, step, PROMPT, NEW_TOKENS).tokens == want


@pytest.mark.slow
def test_the_sliding_window_is_followed_where_it_changes_the_tokens():
    """Mistral's window of 16 hides keys of the 37 positions generated: HF's tokens change with
    it, and the static programs follow."""
    windowed = hf_tokens(hf_model("mistral"))
    assert windowed != hf_tokens(hf_model("mistral", sliding_window=None))
    programs = export_llm(hf_model("mistral"), prefill_len=PREFILL_LEN, ctx_len=CTX_LEN)
    step = eager_step(programs.prefill.module)
    assert greedy(programs.shape, step, step, PROMPT, NEW_TOKENS).tokens == windowed


@pytest.mark.slow
def test_every_norm_and_mlp_runs_on_the_librarys_ops():
    for arch in ARCHITECTURES:
        model = hf_model(arch)
        norms = [name for name, m in model.named_modules() if type(m).__name__.endswith("RMSNorm")]
        swaps = export_llm(model, prefill_len=PREFILL_LEN, ctx_len=CTX_LEN).swaps
        layers = ARCHITECTURES[arch][3]
        assert sorted({s.op for s in swaps}) == sorted({"rms_norm", "gelu_and_mul" if arch.startswith("gemma") else
                                                        "silu_and_mul"}), arch
        assert len(norms) >= 2 * layers + 1, arch  # q/k norms (Qwen3, Gemma 3), four per layer (Gemma 2/3)
        assert len(swaps) == len(norms) + layers, arch  # every norm, and the MLP of each layer
    programs = export_llm(hf_model("llama"), prefill_len=PREFILL_LEN, ctx_len=CTX_LEN)
    graph = programs.prefill.exported.graph
    fused = [n for n in graph.nodes if n.target == torch.ops.qco_llm.fused_add_rms_norm.default]
    assert len(fused) == ARCHITECTURES["llama"][3]  # the residual add and post-attention norm of each layer


@pytest.mark.slow
def test_rows_layout_returns_only_the_new_rows_and_scatter_the_whole_cache():
    for cache, rows in (("rows", 1), ("scatter", CTX_LEN)):
        programs = export_llm(hf_model("llama"), prefill_len=PREFILL_LEN, ctx_len=CTX_LEN, cache=cache)
        outputs = programs.decode.exported.module()(*programs.decode.example_inputs)
        assert [tuple(o.shape) for o in outputs] == [(1, 1, 128)] + [(1, 2, rows, 16)] * 4


@pytest.mark.parametrize("kwargs, message", [
    (dict(prefill_len=0, ctx_len=8), r"prefill_len=0: need a whole number, 1 or more"),
    (dict(prefill_len=16, ctx_len=8), r"prefill_len=16, ctx_len=8"),
    (dict(prefill_len=4, ctx_len=8, cache="ring"), r"cache='ring'; use one of rows, scatter, runner"),
    (dict(prefill_len=4, ctx_len=8, batch=0), r"batch=0: need a whole number, 1 or more"),
    (dict(prefill_len=8.5, ctx_len=16), r"prefill_len=8.5: need a whole number, 1 or more"),
    (dict(prefill_len=4, ctx_len=8, batch=2, cache="runner"), r"cache='runner' with batch=2: qnn_llama_runner runs "
                                                              r"one sequence; use batch=1"),
])
@pytest.mark.slow
def test_bad_shapes_are_one_line_naming_the_argument(kwargs, message):
    with pytest.raises(LlmExportError, match=rf"^export_llm: {message}"):
        export_llm(hf_model("llama"), **kwargs)


@pytest.mark.slow
def test_an_architecture_it_does_not_know_is_refused_naming_the_known_ones():
    config = transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=64)
    with pytest.raises(LlmExportError, match=r"model_type 'gpt2' is not supported; supported: llama, qwen2, "):
        export_llm(transformers.GPT2LMHeadModel(config), prefill_len=4, ctx_len=8)


@pytest.mark.parametrize("prompt, new_tokens, message", [
    ([], 4, r"a prompt of 0 tokens; the programs take 1 to 8 \(prefill_len 8, ctx_len 40, cache='rows'\)"),
    (list(range(9)), 4, r"a prompt of 9 tokens"),
    (PROMPT, 40, r"5 prompt \+ 40 new tokens do not fit ctx_len 40: ask for at most 36"),
])
@pytest.mark.slow
def test_a_generation_that_does_not_fit_the_programs_is_refused(prompt, new_tokens, message):
    programs = export_llm(hf_model("llama"), prefill_len=PREFILL_LEN, ctx_len=CTX_LEN)
    step = eager_step(programs.prefill.module)
    with pytest.raises(LlmExportError, match=rf"^greedy: {message}"):
        greedy(programs.shape, step, step, prompt, new_tokens)
    with pytest.raises(LlmExportError, match=r"^greedy: 2 prompts for programs of batch 1 .*: pass 1"):
        greedy_batch(programs.shape, step, step, [PROMPT, PROMPT], 4)


#: The layouts with windows (rows, scatter) run two prompts of different lengths at once: per-sequence
#: RoPE tables and masks, each cache row written at its own sequence's position.
BATCH_PROMPTS = [PROMPT, [99, 3, 64]]


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_float_programs_on_executorch_generate_hfs_32_greedy_tokens(arch, runner):
    model = hf_model(arch)
    cache = ARCHITECTURES[arch][4]
    if cache == "runner":  # kv_forward alone, as the runner's --eval_mode 0: half the lowering
        want = hf_tokens(copy.deepcopy(model))
        programs = export_llm(model, prefill_len=PREFILL_LEN, ctx_len=CTX_LEN, cache=cache)
        (decode,) = lowered_steps(programs, runner, ["kv_forward"])  # (llm/test_checkpoint.py runs prefill_forward)
        assert RunnerLoop(programs.shape, None, decode).generate(PROMPT, NEW_TOKENS).tokens == want
    else:
        want = [hf_tokens(copy.deepcopy(model), prompt) for prompt in BATCH_PROMPTS]
        programs = export_llm(model, prefill_len=PREFILL_LEN, ctx_len=CTX_LEN, cache=cache, batch=len(BATCH_PROMPTS))
        got = greedy_batch(programs.shape, *lowered_steps(programs, runner), BATCH_PROMPTS, NEW_TOKENS)
        assert [g.tokens for g in got] == want
