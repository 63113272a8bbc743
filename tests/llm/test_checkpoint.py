"""The LLM route to the phone: a checkpoint directory (made here with ``save_pretrained`` and a
tokenizer trained here; nothing downloaded) through ``qnn-custom-ops llm export`` to the one
program ExecuTorch's ``qnn_llama_runner`` runs, checked against the runner's contract (read
from its source), and run on the host by ``RunnerLoop``, a loop written from that source."""

from __future__ import annotations

import copy
import json
import re
import warnings
from pathlib import Path

import pytest
import torch

from qnn_custom_ops.cli import main
from qnn_custom_ops.llm import RunnerLoop, eager_step, export_llm, greedy
from qnn_custom_ops.llm.calibration_text import calibration_prompts
from qnn_custom_ops.llm.manifest import LlmManifest
from qnn_custom_ops.llm.text_generation import prompt_ids
from qnn_custom_ops.llm.families import LlmExportError
from qnn_custom_ops.llm.hf import LlmDtypeWarning
from qnn_custom_ops.llm.shapes import LlmShape
from qnn_custom_ops.runtime import method_specs

from tests.conftest import sqnr_db

transformers = pytest.importorskip("transformers", reason="transformers is a dev extra (pip install -e '.[dev]')")

from tests.hf_models import NEW_TOKENS, PROMPT, hf_model, hf_tokens  # noqa: E402  (after the dev extra)
from tests.llm.exports import CTX, PREFILL, cli_error, export, program_of, progress_of, trained_tokenizer  # noqa: E402

tokenizers = pytest.importorskip("tokenizers")

#: The metadata ExecuTorch's static llama writes beside the two methods (get_n_layers is the
#: one the runner requires; it reads every size from the methods' own metadata).
METADATA = ("get_ar_len", "get_bos_id", "get_eos_id", "get_dim", "get_head_dim", "get_max_batch_size",
            "get_max_seq_len", "get_max_context_len", "get_n_bos", "get_n_eos", "get_n_kv_heads", "get_n_layers",
            "get_vocab_size", "get_use_kv_cache", "get_kv_io_bit_width")


@pytest.fixture(scope="module")
def qnn_export(checkpoint, tmp_path_factory) -> Path:
    """``quantized_export`` lowered for QNN: ExecuTorch's QnnPartitioner on QAIRT's x86 libraries
    (no SDK here: ``llm export`` runs itself again with them), the LlmOpPackage as QHPI."""
    text = tmp_path_factory.mktemp("calibration") / "prompts.txt"
    text.write_text("The host runtime runs the program.\nqnn-custom-ops llm export\nA kernel for the HTP\n")
    return export(checkpoint, "llm-export-16a8w-qnn", "--quant", "16a8w", "--calibration", str(text),
                  "--target", "qnn", "--soc", "SM8650")


def shapes(specs) -> list:
    return [(tuple(spec.shape), str(spec.dtype).replace("torch.", "")) for spec in specs]


@pytest.mark.slow
def test_the_exported_program_follows_qnn_llama_runners_contract(checkpoint, float_export):
    """One .pte, methods prefill_forward and kv_forward, the metadata methods, inputs (tokens,
    mask, input_pos, K caches transposed, V caches) and outputs (logits, new K, new V) in the
    runner's order, shapes and dtypes, and outputs left unplanned (the runner sets each one)."""
    program = program_of(float_export)
    assert {"prefill_forward", "kv_forward", *METADATA} <= set(program.method_names)
    value = {name: program.load_method(name).execute([])[0] for name in METADATA}
    assert (value["get_n_layers"], value["get_n_kv_heads"], value["get_head_dim"]) == (1, 2, 16)
    assert (value["get_max_context_len"], value["get_vocab_size"], value["get_kv_io_bit_width"]) == (CTX, 300, 32)
    pte, ptd = (float_export / "model.pte").read_bytes(), (float_export / "model.ptd").read_bytes()
    for method, ar in (("prefill_forward", PREFILL), ("kv_forward", 1)):
        inputs, outputs = method_specs(pte, method)
        cached = CTX - ar
        assert shapes(inputs) == [
            ((1, ar), "int32"), ((1, 1, ar, CTX), "float32"), ((1, ar), "int32"),
            ((1, 2, 16, cached), "float32"), ((1, 2, cached, 16), "float32")], method
        assert shapes(outputs) == [
            ((1, ar, 300), "float32"), ((1, 2, 16, ar), "float32"), ((1, 2, ar, 16), "float32")], method
        meta = program.metadata(method)
        assert not any(meta.output_tensor_meta(i).is_memory_planned() for i in range(meta.num_outputs())), method
    manifest = LlmManifest.read(float_export)
    assert (manifest.decoder_model_version, manifest.quant, manifest.shape.cache) == ("qwen3", "none", "runner")
    # what the runner stops on and prepends, from tokenizer.json alone (tests/llm/test_runner_behaviour.py)
    tokenizer = transformers.AutoTokenizer.from_pretrained(float_export / "tokenizer")
    assert tokenizer.convert_ids_to_tokens(list(manifest.eos_ids)) == ["<|endoftext|>", "<|im_end|>"]
    assert value["get_bos_id"] == value["get_eos_id"] == tokenizer.convert_tokens_to_ids("<|endoftext|>")
    weights = sum(p.numel() * 4 for p in transformers.AutoModelForCausalLM.from_pretrained(checkpoint).parameters())
    assert weights < len(pte) + len(ptd) < 1.25 * weights  # the two methods share one copy of every weight
    assert (float_export / "tokenizer" / "tokenizer.json").is_file()  # the runner's --tokenizer_path


@pytest.mark.slow
def test_llm_export_says_how_far_calibration_and_float_lowering_are_with_the_time_left(float_export, quantized_export):
    for said in progress_of(float_export), progress_of(quantized_export):
        stages = [re.sub(r"\d+\.\d", "N", line) for line in said if line.startswith("lowering: ") and " in " in line]
        assert stages == ["lowering: prefill_forward and kv_forward exported in N s",
                          "lowering: edge dialect, passes and delegation in N s; emitting the program",
                          "lowering: program emitted in N s"], said
    said = progress_of(float_export)
    compiled = [line for line in said if "partitions compiled" in line]
    assert re.fullmatch(r"lowering: 1 of (\d+) partitions compiled by XNNPACK, about \d+ s left", compiled[0]), said
    total = compiled[0].split()[3]
    assert compiled[-1] == f"lowering: {total} of {total} partitions compiled by XNNPACK", said
    assert said.index(compiled[-1]) < [i for i, line in enumerate(said) if line.startswith("lowered in")][0]
    said = progress_of(quantized_export)  # read and calibrated a layer at a time, each step said
    read = [line for line in said if line.startswith("read layer ")]
    layers = len(read)
    assert layers >= 1 and read[-1].startswith(f"read layer {layers} of {layers} ("), said
    calibration = [line for line in said if line.startswith("calibration by layer: ")]
    calls = re.fullmatch(r"calibration by layer: the embedding observed on (\d+) calls, about \d+ s left",
                         calibration[0]).group(1)
    stages = ["the embedding", *(f"layer {i} of {layers}" for i in range(1, layers + 1)), "the head"]
    assert [re.sub(r", about \d+ s left$", "", line) for line in calibration] == [
        f"calibration by layer: {stage} observed on {calls} calls" for stage in stages], calibration
    assert calibration[-1] == f"calibration by layer: the head observed on {calls} calls"


@pytest.mark.slow
def test_llm_generate_gives_hfs_greedy_tokens_streams_text_and_prints_tokens_per_second(checkpoint, float_export,
                                                                                       capsys):
    from qnn_custom_ops.llm.text_generation import generate_text, load_export

    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, attn_implementation="eager").eval()
    ids = prompt_ids(tokenizer, "qwen3", "The host runtime")  # as qnn_llama_runner encodes it: its BOS first
    assert ids == [tokenizer.convert_tokens_to_ids("<|endoftext|>"), *tokenizer("The host runtime")["input_ids"]]
    with torch.no_grad():
        want = model.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False)[0, len(ids):].tolist()
    pieces: list[str] = []
    got = generate_text(load_export(float_export), "The host runtime", 24, on_text=pieces.append)
    assert got.tokens == want and got.text == tokenizer.decode(want, skip_special_tokens=True)
    assert got.text.startswith("".join(pieces))  # streamed as it grew (a character's last byte awaited)
    capsys.readouterr()
    assert main(["llm", "generate", str(float_export), "--prompt", "The host runtime", "--max-new-tokens", "24",
                 "--progress"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "".join(pieces).strip()
    assert "generating (none) on the host, as qnn_llama_runner runs the program" in err
    assert f"prefill: {len(ids)} tokens at " in err and " tokens/s; decode: 24 tokens at " in err


@pytest.mark.slow
def test_a_runner_copying_16a8w_codes_generates_exactly_what_a_loop_on_reals_does(quantized_export):
    """Each layer's new K/V rows share the encoding of its cache input, in both methods, so the
    runner's raw code copies (update_cache) are copies of values."""
    import qnn_custom_ops as qco
    from qnn_custom_ops.llm import host_step
    from qnn_custom_ops.llm_ops import llm_binding, package_dir
    from qnn_custom_ops.llm.checkpoint import METHODS
    from qnn_custom_ops.llm.text_generation import load_export
    from qnn_custom_ops.runtime import HostRunner

    manifest = LlmManifest.read(quantized_export)
    prefill, decode = (manifest.encodings[m] for m in METHODS)
    caches = 2 * manifest.shape.layers
    for i in range(caches):
        shared = {prefill.inputs[3 + i], prefill.outputs[1 + i], decode.inputs[3 + i], decode.outputs[1 + i]}
        assert len(shared) == 1 and next(iter(shared)).is_quantized, i
    assert prefill.inputs[1] == decode.inputs[1] and prefill.inputs[1].datatype.short_name == "UFIXED_POINT_16"
    assert prefill.inputs[1].scale * 65535 == pytest.approx(255)  # code 65535 is 0, code 0 is -255
    # runners before ExecuTorch 1.4 read it (8 or 16 accepted) and hold mask and logits as uint16, as here
    assert program_of(quantized_export).load_method("get_kv_io_bit_width").execute([])[0] == 16
    export = load_export(quantized_export)
    runner = HostRunner([qco.build_host_library(package_dir(), llm_binding())])
    steps = [host_step(runner, export.program, method, export.data) for method in METHODS]
    prompt = list(range(40, 53))  # 13 tokens: two prefill chunks
    reals = RunnerLoop(manifest.shape, *steps).generate(prompt, NEW_TOKENS)
    codes = RunnerLoop(manifest.shape, *steps, encodings=(prefill, decode)).generate(prompt, NEW_TOKENS)
    assert codes.tokens == reals.tokens
    assert all(torch.equal(a, b) for a, b in zip(codes.logits, reals.logits))
    assert len(set(reals.tokens)) > 4


#: 16a8w logits against float, per step, teacher-forced on float's tokens (each step's cache is
#: the quantized run's own). Measured here: min 16.4 dB, median 29.8 dB; random weights give
#: activations far wider than a trained model's, so these are floors for this model, not a claim
#: about trained ones (the trained model's figures are bench_llm_accuracy.py's, in the README).
MIN_16A8W_SQNR_DB, MEDIAN_16A8W_SQNR_DB = 12.0, 24.0


@pytest.mark.slow
def test_the_16a8w_export_stays_within_the_stated_sqnr_of_the_float_export(float_export, quantized_export):
    import qnn_custom_ops as qco
    from qnn_custom_ops.llm import host_step
    from qnn_custom_ops.llm_ops import llm_binding, package_dir
    from qnn_custom_ops.llm.checkpoint import METHODS
    from qnn_custom_ops.llm.text_generation import load_export
    from qnn_custom_ops.runtime import HostRunner

    runner = HostRunner([qco.build_host_library(package_dir(), llm_binding())])
    prompt = list(range(40, 53))
    reference, quantized = (
        RunnerLoop(e.manifest.shape, *(host_step(runner, e.program, m, e.data) for m in METHODS))
        for e in (load_export(d) for d in (float_export, quantized_export)))
    want = reference.generate(prompt, NEW_TOKENS)
    got = quantized.generate(prompt, NEW_TOKENS, forced=want.tokens)
    sqnr = torch.tensor([sqnr_db(f, q) for f, q in zip(want.logits, got.logits)])
    print("16a8w per-step logits SQNR (dB):", " ".join(f"{s:.1f}" for s in sqnr.tolist()))
    assert float(sqnr.min()) >= MIN_16A8W_SQNR_DB and float(sqnr.median()) >= MEDIAN_16A8W_SQNR_DB


@pytest.mark.slow
def test_calibration_says_each_prompt_and_how_many_calls_of_each_method_it_observed():
    from qnn_custom_ops.llm import export_llm, quantize_llm

    programs = export_llm(hf_model("llama", num_hidden_layers=1), prefill_len=4, ctx_len=16, cache="runner")
    said: list[str] = []
    quantize_llm(programs, "16a8w", [[5, 17, 42, 9], [3, 64, 21]], 4, progress=said.append)
    assert re.fullmatch(r"calibration: prompt 1 of 2 observed, about \d+ s left", said[0]), said
    assert said[1] == "calibration: prompt 2 of 2 observed", said
    # each prompt: a prefill chunk and 3 decode calls generating, then 2 chunks scoring its 7-8 tokens; then the
    # context's walk over 15 tokens: 3 chunks, 4 decode calls after each of the first two, 3 after the last
    # (positions 12 to 14, the runner's last at ctx - 2)
    assert said[3] == "calibration: prefill observed on 9 calls, decode on 17", said


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["gemma2", "llama"])
def test_the_runner_loop_chunks_a_long_prompt_and_follows_windows_as_hf_does(arch):
    """A 13-token prompt through a 4-token prefill (chunks, stale padding rows) and Gemma 2's
    window mask hiding keys past 16 positions, eagerly: HF's tokens."""
    model = hf_model(arch)
    prompt = [5, 17, 42, 9, 77, 3, 64, 99, 12, 1, 2, 8, 30]
    want = hf_tokens(copy.deepcopy(model), prompt)
    programs = export_llm(model, prefill_len=4, ctx_len=52, cache="runner")
    assert programs.shape.masks == (2 if arch == "gemma2" else 1)
    step = eager_step(programs.prefill.module)
    assert RunnerLoop(programs.shape, step, step).generate(prompt, NEW_TOKENS).tokens == want


@pytest.mark.slow
def test_a_bfloat16_checkpoint_is_cast_with_one_warning_and_generates_hfs_float_tokens():
    model = hf_model("qwen3").to(torch.bfloat16)
    reference = copy.deepcopy(model).float()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        programs = export_llm(model, prefill_len=8, ctx_len=40)
    cast = [w for w in caught if issubclass(w.category, LlmDtypeWarning)]
    assert [str(w.message) for w in cast] == ["export_llm: the weights are bfloat16; cast to float32 for the programs"]
    step = eager_step(programs.prefill.module)
    assert greedy(programs.shape, step, step, PROMPT, NEW_TOKENS).tokens == hf_tokens(reference)


@pytest.mark.parametrize("token, message", [
    (128, r"token 1 is 128, outside the vocabulary \(ids 0 to 127\)"),
    (-1, r"token 1 is -1, outside the vocabulary"),
    (1.7, r"token 1 is 1.7, not a whole-number token id"),
    (True, r"token 1 is True, not a whole-number token id"),
])
@pytest.mark.slow
def test_a_bad_token_id_is_one_error_naming_it(token, message):
    programs = export_llm(hf_model("llama"), prefill_len=8, ctx_len=40)
    step = eager_step(programs.prefill.module)
    with pytest.raises(LlmExportError, match=rf"^greedy: prompt 0: {message}"):
        greedy(programs.shape, step, step, [5, token], 4)


@pytest.mark.parametrize("rope, ctx, message", [
    (dict(rope_type="dynamic", factor=2.0), 200, r"rope_type 'dynamic' at ctx_len=200: dynamic NTK recomputes its "
                                                 r"frequencies for longer sequences \(past 128 positions\).*export "
                                                 r"ctx_len <= 128"),
    (dict(rope_type="longrope", original_max_position_embeddings=64, short_factor=[1.0] * 8, long_factor=[2.0] * 8),
     100, r"rope_type 'longrope' at ctx_len=100: longrope switches from short_factor to long_factor .*past 64"),
])
@pytest.mark.slow
def test_a_rope_type_whose_frequencies_change_past_the_context_is_refused_saying_what_to_export(rope, ctx, message):
    model = hf_model("llama", rope_parameters={"rope_theta": 10000.0, **rope})
    with pytest.raises(LlmExportError, match=rf"^export_llm: {message}"):
        export_llm(model, prefill_len=8, ctx_len=ctx)
    export_llm(hf_model("llama", rope_parameters={"rope_theta": 10000.0, **rope}), prefill_len=8, ctx_len=64)


def test_calibration_prompts_fit_the_programs():
    shape = LlmShape(layers=1, kv_heads=2, head_dim=16, vocab=300, ctx_len=40, prefill_len=8, cache="runner")
    prompts = calibration_prompts(trained_tokenizer(), shape, ["a " * 100, "", "short"])
    assert [len(p) for p in prompts][1:] == [len(trained_tokenizer()("short")["input_ids"])]
    assert len(prompts[0]) == 24  # ctx_len - 16 calibration tokens: the runner generates ctx_len - prompt


def test_llm_export_of_what_is_not_a_checkpoint_is_one_line(tmp_path, capsys):
    assert "no config.json; pass a Hugging Face checkpoint directory" in cli_error(
        capsys, "llm", "export", str(tmp_path), "-o", str(tmp_path / "out"))
    transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=64).save_pretrained(tmp_path)
    assert "model_type 'gpt2' is not supported; supported: llama, qwen2" in cli_error(
        capsys, "llm", "export", str(tmp_path), "-o", str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_llm_options_that_cannot_work_are_one_line(checkpoint, tmp_path, capsys, monkeypatch):
    out = str(tmp_path / "out")
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)
    assert "--target qnn needs --soc" in cli_error(capsys, "llm", "export", str(checkpoint), "-o", out,
                                                   "--target", "qnn")
    assert "--calibration nope.txt: no such file" in cli_error(capsys, "llm", "export", str(checkpoint), "-o", out,
                                                               "--quant", "8a8w", "--calibration", "nope.txt")
    assert f"{tmp_path}: no manifest.json; pass a directory written by qnn-custom-ops llm export" in cli_error(
        capsys, "llm", "generate", str(tmp_path), "--prompt", "hi")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_llm_generate_refuses_a_prompt_too_long_and_a_chat_without_template(float_export, tmp_path, capsys):
    assert "a prompt of" in cli_error(capsys, "llm", "generate", str(float_export), "--prompt", "word " * 200)
    bare = tmp_path / "bare"
    bare.mkdir()
    for item in float_export.iterdir():
        (bare / item.name).symlink_to(item)
    (bare / "tokenizer").unlink()
    (bare / "tokenizer").mkdir()
    for item in (float_export / "tokenizer").iterdir():
        if item.name != "chat_template.jinja":
            (bare / "tokenizer" / item.name).write_bytes(item.read_bytes())
    config = json.loads((bare / "tokenizer" / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (bare / "tokenizer" / "tokenizer_config.json").write_text(json.dumps(config))
    assert "--chat hf: the tokenizer has no chat template; use --chat for the runner's own template" in cli_error(
        capsys, "llm", "generate", str(bare), "--prompt", "hi", "--chat", "hf", "--no-verify")


def test_building_the_cli_parser_imports_no_torch():
    """The llm commands are registered without importing torch (whose import chatter would
    reach every command before the CLI quiets it)."""
    import subprocess
    import sys

    code = "import sys; from qnn_custom_ops.cli import build_parser; build_parser(); print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


@pytest.mark.parametrize("rope", [
    dict(rope_type="linear", factor=2.0),
    dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
         original_max_position_embeddings=32),
    dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=32),
    dict(rope_type="dynamic", factor=2.0),
])
@pytest.mark.slow
def test_every_fixed_rope_type_generates_hfs_tokens(rope):
    """Each type's tables come from the model's own rotary module, so they are HF's; dynamic
    NTK within max_position_embeddings is the plain table, as HF leaves it there."""
    model = hf_model("llama", rope_parameters={"rope_theta": 10000.0, **rope})
    want = hf_tokens(copy.deepcopy(model))
    programs = export_llm(model, prefill_len=8, ctx_len=40, cache="runner")
    step = eager_step(programs.prefill.module)
    assert RunnerLoop(programs.shape, step, step).generate(PROMPT, NEW_TOKENS).tokens == want


@pytest.mark.slow
def test_a_qnn_export_runs_on_the_x86_htp_simulator_and_generates_the_host_programs_tokens(
        quantized_export, qnn_export, capfd, monkeypatch):
    """The whole one-layer 16a8w decoder in one QNN context binary per method (RmsNorm, SiluAndMul,
    Rope from the LlmOpPackage; the rest QNN's built-ins), its mask, caches and logits as codes;
    prefill over two chunks, then decode, on the simulator: the host program's tokens."""
    from qnn_custom_ops.llm.text_generation import generate_text, load_export
    from qnn_custom_ops.runtime.loading import program_facts

    host, qnn = LlmManifest.read(quantized_export), LlmManifest.read(qnn_export)
    assert qnn.target == "qnn" and qnn.encodings == host.encodings  # one calibration, two lowerings
    pte = (qnn_export / "model.pte").read_bytes()
    facts = program_facts(pte)
    assert facts.backends == {"QnnBackend"} and not any(op.startswith("qco_llm::") for op in facts.operators)
    for method, ar in (("prefill_forward", PREFILL), ("kv_forward", 1)):  # codes where the runner holds codes
        inputs, outputs = method_specs(pte, method)
        assert shapes(inputs) == [((1, ar), "int32"), ((1, 1, ar, CTX), "uint16"), ((1, ar), "int32"),
                                  ((1, 2, 16, CTX - ar), "uint16"), ((1, 2, CTX - ar, 16), "uint16")], method
        assert [dtype for _, dtype in shapes(outputs)] == ["uint16"] * 3, method
    prompt = "A kernel for the HTP runs the program"  # longer than one prefill chunk
    want = generate_text(load_export(quantized_export), prompt, 12)
    assert want.prompt_tokens > PREFILL

    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)
    capfd.readouterr()
    assert main(["llm", "generate", str(qnn_export), "--prompt", prompt, "--max-new-tokens", "12", "--json",
                 "--progress"]) == 0
    out, err = capfd.readouterr()
    got = json.loads(out)
    assert got["ids"] == want.tokens and got["text"] == want.text
    assert "on QAIRT 2.51's x86 HTP simulator (ExecuTorch's QNN backend, the context binary the phone runs)" in err
