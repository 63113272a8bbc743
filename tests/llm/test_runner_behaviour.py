"""What ``qnn_llama_runner`` does, held to its source (ExecuTorch main of 2026-08-22,
``examples/qualcomm/oss_scripts/llama/``; pytorch/tokenizers' ``src/hf_tokenizer.cpp``), and
what our export and host run therefore do (issue 39, items 1 and 4): the window mask of the
gemma2/gemma3 versions, the tokens it stops on, the version a Llama checkpoint gets, the prompt
it formats (and its BOS), where it stops at the end of the context."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from qnn_custom_ops.llm import RunnerLoop, eager_step, export_llm
from qnn_custom_ops.llm.text_generation import prompt_ids
from qnn_custom_ops.llm.families import FAMILIES, LlmExportError, runner_version_of
from qnn_custom_ops.llm.runner_text import RunnerText, RunnerTokenWarning, warn_of_other_tokens

transformers = pytest.importorskip("transformers", reason="transformers is a dev extra (pip install -e '.[dev]')")
tokenizers = pytest.importorskip("tokenizers")

from tests.hf_models import NEW_TOKENS, PROMPT, hf_model, hf_tokens  # noqa: E402
from tests.llm.exports import cli_error  # noqa: E402

LLAMA3 = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
SENTENCEPIECE = ["<unk>", "<s>", "</s>"]  # Llama 2, TinyLlama: no added token says bos, eos, begin or end
SMOLLM2 = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
GEMMA = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"]


def tokenizer_with(specials: list[str], **roles: str) -> transformers.PreTrainedTokenizerFast:
    """A byte-level BPE whose first ids are ``specials`` (its tokenizer.json's added tokens);
    ``roles``: bos_token, eos_token..."""
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=300, special_tokens=specials,
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(["hello world, the user and the assistant"], trainer)
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, **roles)
    tokenizer.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                               "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return tokenizer


@pytest.mark.parametrize("specials, version, bos, stops", [
    (LLAMA3, "llama3", "<|begin_of_text|>", {"<|end_of_text|>", "<|eot_id|>"}),
    (SENTENCEPIECE, "llama2", "<unk>", {"<unk>"}),  # none found: id 0 for both (hf_tokenizer.cpp, tokenizer.h)
    (SMOLLM2, "smollm2_135m", "<|endoftext|>", {"<|endoftext|>", "<|im_end|>"}),
    (GEMMA, "gemma3", "<bos>", {"<bos>", "<end_of_turn>"}),  # two "end"s, neither "text": EOS is the BOS
])
def test_bos_and_stop_tokens_are_what_the_runner_reads_from_tokenizer_json(specials, version, bos, stops):
    """runner.cpp:185-219 stops on the tokenizer's EOS and the version's token; HFTokenizer::load
    guesses BOS and EOS from tokenizer.json's added tokens (hf_tokenizer.cpp:247-305)."""
    tokenizer = tokenizer_with(specials)
    text = RunnerText.of(tokenizer, version)
    assert tokenizer.convert_ids_to_tokens(text.bos) == bos
    assert set(tokenizer.convert_ids_to_tokens(list(text.stop_ids()))) == stops


def test_a_runner_bos_or_eos_other_than_the_checkpoints_is_said_once_with_what_reads_the_checkpoints():
    sentencepiece = RunnerText.of(tokenizer_with(SENTENCEPIECE, bos_token="<s>", eos_token="</s>"), "llama2")
    with pytest.warns(RunnerTokenWarning) as said:
        warn_of_other_tokens(sentencepiece)
    assert [str(w.message) for w in said] == [
        "qnn_llama_runner reads tokenizer.json's BOS as '<unk>' (id 0) and EOS as '<unk>' (id 0), not the "
        "checkpoint's '<s>' and '</s>': on the phone every prompt starts with that BOS and generation stops on ids "
        "[0] only; pass the export's tokenizer/ directory as --tokenizer_path, whose tokenizer_config.json names "
        "the checkpoint's (llm generate computes what tokenizer.json gives)"]
    llama3 = tokenizer_with(LLAMA3, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_of_other_tokens(RunnerText.of(llama3, "llama3"))  # <|eot_id|> is llama3's stop token: nothing said


@pytest.mark.parametrize("specials, version",
                         [(LLAMA3, "llama3"), (SMOLLM2, "smollm2_135m"), (SENTENCEPIECE, "llama2")])
def test_a_llama_checkpoint_gets_the_runners_version_its_tokenizer_tells(specials, version):
    assert runner_version_of(FAMILIES["llama"], set(specials)) == version
    assert runner_version_of(FAMILIES["llama"], set(specials), "smollm3") == "smollm3"  # --decoder-model-version
    with pytest.raises(LlmExportError, match=r"^--decoder-model-version 'llama4': use one of llama2, llama3, gemma"):
        runner_version_of(FAMILIES["llama"], set(specials), "llama4")


def test_chat_is_the_runners_template_for_the_version_after_its_bos_and_hfs_only_when_asked():
    """qnn_llama_runner.cpp:103-223 formats every --prompt (qwen3 ends at "assistant", no newline;
    qwen2_5 and llama2 send the text as it is); runner.cpp:417-442 encodes it after one BOS."""
    tokenizer = tokenizer_with(SMOLLM2)
    said = {version: tokenizer.decode(prompt_ids(tokenizer, version, "hello world", "runner"))
            for version in ("qwen3", "smollm2_135m", "qwen2_5", "llama2")}
    assert said == {"qwen3": "<|endoftext|><|im_start|>user\nhello world<|im_end|>\n<|im_start|>assistant",
                    "smollm2_135m": "<|endoftext|><|im_start|>user\nhello world<|im_end|>\n<|im_start|>assistant\n\n",
                    "qwen2_5": "<|endoftext|>hello world", "llama2": "<|endoftext|>hello world"}
    assert tokenizer.decode(prompt_ids(tokenizer, "qwen3", "hello world")) == "<|endoftext|>hello world"
    hf = prompt_ids(tokenizer, "qwen3", "hello world", "hf")
    assert tokenizer.decode(hf) == "<|im_start|>user\nhello world<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["gemma3_text", "gemma2"])
def test_gemma_with_a_window_past_the_context_still_takes_the_window_mask_the_runner_adds(arch):
    """runner.cpp:122-130: the gemma2/gemma3 versions add the window mask as input 2 whatever the
    window; with a window of ctx_len or more it hides nothing, and the loop generates HF's tokens."""
    model = hf_model(arch, sliding_window=48)
    want = hf_tokens(copy.deepcopy(model))
    programs = export_llm(model, prefill_len=8, ctx_len=40, cache="runner")
    assert programs.runner_version in ("gemma2", "gemma3") and programs.shape.window == 48
    tokens, mask, window_mask, positions = programs.prefill.example_inputs[:4]
    assert mask.shape == window_mask.shape == (1, 1, 8, 40) and positions.dtype == torch.int32
    step = eager_step(programs.prefill.module)
    assert RunnerLoop(programs.shape, step, step).generate(PROMPT, NEW_TOKENS).tokens == want


def test_the_loop_stops_at_the_end_of_the_context_where_the_runner_does():
    """token_generator.cpp:274: decode while pos < seq_len - 1, seq_len at most the context
    (runner.cpp:401-408): ctx_len - len(prompt) tokens, the last kv_forward call at ctx_len - 2."""
    programs = export_llm(hf_model("llama", num_hidden_layers=1), prefill_len=4, ctx_len=16, cache="runner")
    step = eager_step(programs.prefill.module)
    loop = RunnerLoop(programs.shape, step, step)
    run = loop.generate(PROMPT, 16 - len(PROMPT), record=True)
    positions = [int(inputs[1 + programs.shape.masks][0, 0]) for inputs in run.decode_inputs]
    assert len(run.tokens) == 11 and positions == list(range(5, 15))
    with pytest.raises(LlmExportError, match=r"5 prompt \+ 12 new tokens do not fit ctx_len 16: ask for at most 11"):
        loop.generate(PROMPT, 12)


def test_a_tokenizer_without_tokenizer_json_is_one_error_naming_what_the_runner_reads():
    class SlowTokenizer:  # a tokenizer transformers keeps in Python only, with no tokenizer.json
        pass

    with pytest.raises(LlmExportError, match=r"^SlowTokenizer has no tokenizer.json, which qnn_llama_runner reads"):
        RunnerText.of(SlowTokenizer(), "qwen3")


def test_an_unknown_decoder_model_version_is_one_line_before_anything_is_written(checkpoint, tmp_path, capsys):  # noqa: F811
    err = cli_error(capsys, "llm", "export", str(checkpoint), "-o", str(tmp_path / "out"), "--ctx", "64",
                    "--decoder-model-version", "llama4")
    assert err.startswith("error: --decoder-model-version 'llama4': use one of llama2, llama3, gemma"), err
    assert not (tmp_path / "out").exists()


def test_calibration_prompts_are_the_tokens_the_phone_is_given():
    """Each calibration line as the runner encodes a --prompt: its BOS at position 0 (where a
    model keeps its attention sink) and the version's template."""
    from qnn_custom_ops.llm.calibration_text import calibration_prompts
    from qnn_custom_ops.llm.shapes import LlmShape

    tokenizer = tokenizer_with(SMOLLM2)
    shape = LlmShape(layers=1, kv_heads=2, head_dim=16, vocab=300, ctx_len=64, prefill_len=8, cache="runner")
    (prompt,) = calibration_prompts(tokenizer, shape, ["hello world"], version="qwen3")
    assert tokenizer.decode(prompt) == "<|endoftext|><|im_start|>user\nhello world<|im_end|>\n<|im_start|>assistant"


@pytest.mark.slow
def test_llm_generate_chat_gives_the_runners_prompt_and_hfs_only_when_asked_saying_so(float_export, capsys):  # noqa: F811
    from qnn_custom_ops.cli import main

    tokenizer = transformers.AutoTokenizer.from_pretrained(float_export / "tokenizer")
    for chat, template in (("--chat", "runner"), ("hf", "hf")):
        capsys.readouterr()
        argv = ["llm", "generate", str(float_export), "--prompt", "What is an NPU?", "--max-new-tokens", "4", "--chat"]
        assert main(argv + ([] if chat == "--chat" else [chat])) == 0
        err = capsys.readouterr().err
        count = len(prompt_ids(tokenizer, "qwen3", "What is an NPU?", template))
        assert f"prefill: {count} tokens at " in err, err
        said = "note: --chat hf wraps the prompt in the tokenizer's chat template, not qnn_llama_runner's"
        assert (said in err) == (template == "hf"), err
