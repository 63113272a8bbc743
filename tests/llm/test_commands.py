"""The ``llm`` commands a deployer expects (issue 44): ``llm families``, ``llm eval``, ``llm
generate``'s ids, JSON, sampling and repeated timings, and arguments checked before any heavy
import. The exports are the ones ``tests/llm/test_checkpoint.py`` builds once per run."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest
import torch

from qnn_custom_ops.cli import main

from tests.conftest import REPO

DOCS = REPO / "docs" / "llm-commands.md"


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_llm_families_lists_every_registry_entry_without_importing_torch():
    code = ("import sys, json; from qnn_custom_ops.cli import main; main(['llm', 'families', '--json']); "
            "print(json.dumps('torch' in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    *listing, imported = done.stdout.strip().splitlines()
    assert json.loads(imported) is False
    listed = json.loads("\n".join(listing))
    from qnn_custom_ops.llm.families import FAMILIES, ROPE_TYPES, RUNNER_VERSIONS

    assert [f["model_type"] for f in listed["families"]] == list(FAMILIES)
    assert {f["model_type"]: f["runner_version"] for f in listed["families"]} == {
        name: family.runner_version for name, family in FAMILIES.items()}
    assert [r["rope_type"] for r in listed["rope_types"]] == list(ROPE_TYPES)
    assert [v["decoder_model_version"] for v in listed["runner_versions"]] == list(RUNNER_VERSIONS)
    by_type = {f["model_type"]: f for f in listed["families"]}
    assert by_type["gemma2"]["window_mask"] and not by_type["qwen2"]["window_mask"]
    assert by_type["llama"]["runner_version_by_token"] == {"<|eot_id|>": "llama3", "<|im_end|>": "smollm2_135m"}
    assert "logits divisor (logits scaling)" in by_type["granite"]["adds"]
    limits = {r["rope_type"]: r["ctx_at_most"] for r in listed["rope_types"]}
    assert (limits["default"], limits["dynamic"], limits["longrope"]) == (
        None, "max_position_embeddings", "original_max_position_embeddings")


def test_llm_families_prints_one_row_per_family_and_the_docs_hold_the_same_tables(capsys):
    from qnn_custom_ops.llm.families import FAMILIES

    code, out, _ = run_cli(capsys, "llm", "families")
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines() if line.split() and line.split()[0] in FAMILIES}
    assert list(rows) == list(FAMILIES)
    assert rows["gemma3_text"].split()[1] == "gemma3" and rows["gemma3_text"].endswith("window mask")
    assert rows["mistral"].endswith("refused if < --ctx")
    code, markdown, _ = run_cli(capsys, "llm", "families", "--markdown")
    assert code == 0 and "| gemma2 | gemma2 |" in markdown
    assert markdown in DOCS.read_text(), "regenerate docs/llm-commands.md's tables: qnn-custom-ops llm families --markdown"


# ---------------------------------------------------------------- llm eval

transformers = pytest.importorskip("transformers", reason="transformers is a dev extra (pip install -e '.[dev]')")

from tests.llm.exports import cli_error  # noqa: E402

#: The README's opening: about 560 tokens of this tokenizer, eleven windows of 56.
EVAL_TEXT = "\n".join((REPO / "README.md").read_text().splitlines()[:12])


def hf_perplexity(checkpoint_dir, ids: list[int], window: int) -> tuple[float, list[torch.Tensor]]:
    """Perplexity and per-window logits of the checkpoint in transformers, each window the BOS and
    the next ``window - 1`` ids: computed here without the library, as a reference."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint_dir).eval()
    bos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    total, count, logits = 0.0, 0, []
    for start in range(0, len(ids), window - 1):
        chunk = [bos, *ids[start:start + window - 1]]
        with torch.no_grad():
            out = model(torch.tensor([chunk]), labels=torch.tensor([chunk]))
        total += float(out.loss) * (len(chunk) - 1)
        count += len(chunk) - 1
        logits.append(out.logits[0])
    return math.exp(total / count), logits


@pytest.mark.slow
def test_llm_eval_scores_perplexity_and_agreement_as_transformers_computes_them(checkpoint, float_export,
                                                                              quantized_export, tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text(EVAL_TEXT)
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    ids = tokenizer(EVAL_TEXT, add_special_tokens=False)["input_ids"]
    want, _ = hf_perplexity(checkpoint, ids, 56)  # ctx 64 - prefill 8
    windows = math.ceil(len(ids) / 55)  # each the BOS and 55 text tokens
    assert windows > 2

    code, out, err = run_cli(capsys, "llm", "eval", str(float_export), "--text", str(text), "--against",
                             str(checkpoint), "--progress")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"{float_export} (none, host): perplexity ")
    assert lines[0].endswith(f" over {len(ids)} tokens ({windows} windows of up to 56)")
    float_ppl = float(lines[0].split("perplexity ")[1].split()[0])
    assert float_ppl == pytest.approx(want, rel=1e-4)  # the float export is the checkpoint, through the runner's loop
    assert lines[1].startswith(f"{checkpoint} (checkpoint, float32 in transformers): perplexity ")
    assert float(lines[1].split()[-1]) == pytest.approx(want, rel=1e-6)
    assert lines[2].startswith(f"top-1 agreement 100.0% of {len(ids) + windows} positions; logits SQNR per position: min ")
    said = [re.sub(r"^\[ *[\d.]+s\] ", "", line) for line in err.splitlines() if "eval: window" in line]
    # the first window loads the programs: the time left is told from the pace of the next ones
    assert re.fullmatch(rf"eval: window 1 of {windows} scored in [\d.]+ s \(the programs loaded with it\)", said[0])
    assert re.fullmatch(rf"eval: window 2 of {windows} scored, about \d+ s left", said[1]), said
    assert said[-1] == f"eval: window {windows} of {windows} scored", said

    code, out, err = run_cli(capsys, "llm", "eval", str(quantized_export), "--text", str(text), "--against",
                             str(float_export), "--json")
    assert code == 0, err
    got = json.loads(out)
    assert (got["quant"], got["tokens"], got["windows"], got["window"]) == ("16a8w", len(ids), windows, 56)
    against = got["against"]
    assert against["perplexity"] == pytest.approx(want, rel=1e-4)
    assert against["kind"] == "export, none, on the host, as qnn_llama_runner runs the program"
    assert against["positions"] == len(ids) + windows
    # 16a8w beside float on random weights: the floors llm/test_checkpoint.py states for generation
    assert against["sqnr_median_db"] >= 24.0 and against["sqnr_min_db"] >= 8.0
    assert 0.8 <= against["top1_agreement"] < 1.0
    assert got["perplexity"] != pytest.approx(want, rel=1e-4)  # quantized: close, not the same

    other = tmp_path / "other-tokenizer"  # the same weights and vocabulary size, one token spelled otherwise
    other.mkdir()
    for item in checkpoint.iterdir():
        (other / item.name).write_bytes(item.read_bytes())
    body = json.loads((other / "tokenizer.json").read_text())
    vocab = body["model"]["vocab"]
    vocab["qco-other"] = vocab.pop(next(token for token in vocab if len(token) > 2))
    (other / "tokenizer.json").write_text(json.dumps(body))
    code, out, err = run_cli(capsys, "llm", "eval", str(float_export), "--text", str(text), "--against", str(other))
    assert (code, out, err.strip()) == (2, "", f"error: --against {other}: its tokenizer is not the export's, so the "
                                        "same ids are other tokens; compare an export with its own checkpoint, or "
                                        "with another export of it")


def test_llm_eval_refuses_what_it_cannot_score_in_one_line(tmp_path, capsys):
    export = tmp_path / "export"
    export.mkdir()
    (export / "manifest.json").write_text("{}")
    text = tmp_path / "text.txt"
    text.write_text("some text")
    for argv, message in (
        (["llm", "eval", str(tmp_path / "nothing"), "--text", str(text)],
         f"error: {tmp_path / 'nothing'}: no manifest.json; pass a directory written by qnn-custom-ops llm export"),
        (["llm", "eval", str(export), "--text", str(tmp_path / "nope.txt")],
         f"error: --text {tmp_path / 'nope.txt'}: no such file; give a UTF-8 text file"),
        (["llm", "eval", str(export), "--text", str(text), "--against", str(tmp_path)],
         f"error: --against {tmp_path}: neither an export (manifest.json) nor a checkpoint (config.json); pass one"),
    ):
        code, out, err = run_cli(capsys, *argv)
        assert (code, out, err.strip()) == (2, "", message)
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    code, _, err = run_cli(capsys, "llm", "eval", str(export), "--text", str(tmp_path / "latin1.txt"))
    assert code == 2 and err.strip() == f"error: --text {tmp_path / 'latin1.txt'}: byte 3 is not UTF-8; give a UTF-8 text file"


# ---------------------------------------------------------------- llm generate: ids, JSON, sampling, repeats

PROMPT = "The host runtime"


@pytest.mark.slow
def test_llm_generate_prints_the_runners_prompt_ids_and_hfs_greedy_ids(checkpoint, float_export, capsys):
    from qnn_custom_ops.llm.text_generation import prompt_ids

    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, attn_implementation="eager").eval()
    ids = prompt_ids(tokenizer, "qwen3", PROMPT)
    with torch.no_grad():
        want = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)[0, len(ids):].tolist()
    code, out, err = run_cli(capsys, "llm", "generate", str(float_export), "--prompt", PROMPT, "--max-new-tokens",
                             "12", "--ids", "--progress")
    assert code == 0, err
    assert "] generating (none) on the host, as qnn_llama_runner runs the program" in err  # greedy: as before
    assert out.splitlines()[-2:] == [f"prompt ids: {' '.join(map(str, ids))}", f"ids: {' '.join(map(str, want))}"]
    code, out, err = run_cli(capsys, "llm", "generate", str(float_export), "--prompt", PROMPT, "--max-new-tokens",
                             "12", "--json", "--warmup", "1", "--repeat", "3")
    assert code == 0, err
    got = json.loads(out)
    assert (got["prompt_ids"], got["ids"]) == (ids, want)
    assert got["text"] == tokenizer.decode(want, skip_special_tokens=True)
    assert (got["warmup"], got["repeat"], got["sampling"]) == (1, 3, {"temperature": 0.0, "top_p": 1.0, "seed": None})
    for phase in ("prefill_tokens_per_second", "decode_tokens_per_second"):
        rates = got[phase]
        assert len(rates["runs"]) == 3 and rates["min"] <= rates["median"] <= rates["max"]
        assert rates["median"] == sorted(rates["runs"])[1] and rates["min"] > 0
    assert re.fullmatch(rf"prefill: {len(ids)} tokens at median [\d.]+ tokens/s \(min [\d.]+, max [\d.]+\); decode: 12 "
                        r"tokens at median [\d.]+ tokens/s \(min [\d.]+, max [\d.]+\); 3 timed runs after 1 warm-up",
                        err.strip()), err


@pytest.mark.slow
def test_llm_generate_samples_reproducibly_from_a_seed(quantized_export, capsys):
    def sampled(*options: str) -> list[int]:
        code, out, err = run_cli(capsys, "llm", "generate", str(quantized_export), "--prompt", PROMPT,
                                 "--max-new-tokens", "16", "--json", *options)
        assert code == 0, err
        return json.loads(out)["ids"]

    greedy = sampled()
    first = sampled("--temperature", "1.5", "--seed", "3")
    assert sampled("--temperature", "1.5", "--seed", "3", "--repeat", "2") == first  # every run from the seed
    assert sampled("--temperature", "1.5", "--seed", "4") != first
    assert first != greedy
    assert sampled("--temperature", "1.5", "--top-p", "1e-9", "--seed", "5") == greedy  # the nucleus: the top token


@pytest.mark.slow  # 60000 draws, one call each
def test_sampling_draws_from_the_softmax_at_the_temperature_within_the_nucleus():
    from qnn_custom_ops.llm.sampling import Sampling

    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    for temperature, top_p in ((1.0, 1.0), (0.5, 1.0), (2.0, 0.8)):
        choose = Sampling(temperature, top_p, seed=1).chooser()
        counts = torch.bincount(torch.tensor([choose(logits) for _ in range(20000)]), minlength=4).double() / 20000
        want = torch.softmax(logits.double() / temperature, 0)
        kept = (want.cumsum(0) - want) < top_p  # the smallest set of tokens reaching top_p
        want = torch.where(kept, want, 0) / want[kept].sum()
        assert torch.allclose(counts, want, atol=0.012), (temperature, top_p, counts, want)
    assert Sampling().chooser()(logits) == 0  # greedy: the argmax


@pytest.mark.parametrize("options, message", [
    (["--seed", "3"], "--seed applies to sampling, and --temperature is 0 (greedy: the argmax, nothing drawn); "
                      "give --temperature above 0 too, or leave it out"),
    (["--temperature", "1", "--top-p", "0"], "--top-p 0.0: give a probability above 0, at most 1"),
    (["--temperature", "-1"], "--temperature -1.0: give 0 (greedy) or a number above 0"),
    (["--chat", "nope"], "--chat 'nope': use one of runner, hf"),
])
def test_llm_generate_refuses_options_that_cannot_work_in_one_line_before_loading_torch(tmp_path, options, message):
    (tmp_path / "manifest.json").write_text("{}")
    code = ("import sys; from qnn_custom_ops.cli import main; "
            f"code = main(['llm', 'generate', {str(tmp_path)!r}, '--prompt', 'hi', *{options!r}]); "
            "print(code, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.stdout.strip(), done.stderr.strip()) == ("2 False", f"error: {message}")


def test_the_clis_early_choices_are_the_librarys():
    from qnn_custom_ops.cli.llm_commands import common, generate
    from qnn_custom_ops.llm.manifest import TARGETS
    from qnn_custom_ops.llm.text_generation import CHAT_TEMPLATES
    from qnn_custom_ops.quantizer import QUANT_MODES

    assert common.QUANT_CHOICES == ("none", *QUANT_MODES)
    assert common.TARGET_CHOICES == TARGETS
    assert generate.CHAT_CHOICES == CHAT_TEMPLATES


@pytest.mark.parametrize("argv, message", [
    (["llm", "export", "{tmp}/nothing", "-o", "{tmp}/out"],
     "{tmp}/nothing: no config.json; pass a Hugging Face checkpoint directory"),
    (["llm", "export", "{tmp}/ckpt", "-o", "{tmp}/out", "--quant", "16a8"],
     "--quant '16a8': use one of none, 8a8w, 16a8w, 16a16w, 16a4w, 16a4w_block"),
    (["llm", "export", "{tmp}/ckpt", "-o", "{tmp}/ckpt/config.json"],
     "-o {tmp}/ckpt/config.json: exists and is not a directory; choose another"),
    (["llm", "export", "{tmp}/ckpt", "-o", "{tmp}/out", "--decoder-model-version", "qwen"],
     "--decoder-model-version 'qwen': use one of llama2, llama3, gemma, gemma2, gemma3, granite, phi_4_mini, "
     "qwen2_5, qwen3, smollm2_135m, smollm3"),
    (["llm", "generate", "{tmp}/nothing", "--prompt", "hi"],
     "{tmp}/nothing: no manifest.json; pass a directory written by qnn-custom-ops llm export"),
    (["llm", "eval", "{tmp}/nothing", "--text", "{tmp}/ckpt/config.json"],
     "{tmp}/nothing: no manifest.json; pass a directory written by qnn-custom-ops llm export"),
])
def test_a_wrong_path_or_option_is_one_line_before_torch_is_imported(tmp_path, argv, message):
    """What benchmarks/bench_cli_errors.py times (0.2 s, 7.6-8 s before): here only that the
    answer comes before the heavy imports, and what it says."""
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text('{"model_type": "qwen3"}')
    (tmp_path / "ckpt" / "tokenizer.json").write_text("{}")
    argv = [a.format(tmp=tmp_path) for a in argv]
    code = f"import sys; from qnn_custom_ops.cli import main; print(main({argv!r}), 'torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.stdout.strip(), done.stderr.strip()) == ("2 False", "error: " + message.format(tmp=tmp_path))


# ---------------------------------------------------------------- what llm export says, and when

def export_says(tmp_path, config: dict, tokenizer: dict, *options: str, env: dict | None = None) -> list[str]:
    """stderr of ``llm export`` on a checkpoint of ``config.json`` and ``tokenizer.json`` alone,
    stopped by ``-o`` naming a file (refused before anything heavy: the notes come first)."""
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps(config))
    (checkpoint / "tokenizer.json").write_text(json.dumps(tokenizer))
    argv = ["llm", "export", str(checkpoint), "-o", str(checkpoint / "config.json"), *options]
    code = f"import sys; from qnn_custom_ops.cli import main; print(main({argv!r}), 'torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.stdout.strip() == "2 False", done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1] == f"error: -o {checkpoint}/config.json: exists and is not a directory; choose another"
    return lines[:-1]


BPE = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2}}, "added_tokens": [{"id": 3, "content": "<s>"}]}


def test_llm_export_says_in_one_line_when_the_tokenizer_covers_far_fewer_ids_than_the_vocabulary(tmp_path):
    said = export_says(tmp_path, {"model_type": "qwen3", "vocab_size": 4000}, BPE)
    assert said == [f"warning: {tmp_path}/ckpt/tokenizer.json gives 4 token ids, config.json's vocab_size is 4000: no "
                    "text encodes to ids 4 to 3999, though generation may pick them (decoded as nothing); is this the "
                    "checkpoint's own tokenizer?"]
    (tmp_path / "ckpt").rename(tmp_path / "first")
    assert export_says(tmp_path, {"model_type": "qwen3", "vocab_size": 4}, BPE) == []


@pytest.mark.parametrize("config, ctx, version, said", [
    ({"model_type": "gemma3_text", "sliding_window": 512}, "256", None, True),
    ({"model_type": "gemma3_text", "sliding_window": 512}, "1024", None, False),
    ({"model_type": "gemma2", "sliding_window": 64}, "64", None, True),
    ({"model_type": "qwen2", "sliding_window": 512}, "256", None, False),  # no window mask: nothing to hide
    ({"model_type": "qwen2", "sliding_window": 512}, "256", "gemma2", True),  # a version that takes one
])
def test_llm_export_says_when_the_window_mask_hides_nothing_at_its_context(tmp_path, config, ctx, version, said):
    options = ["--ctx", ctx, *(["--decoder-model-version", version] if version else [])]
    lines = export_says(tmp_path, config, BPE, *options)
    window = config["sliding_window"]
    want = [f"note: --ctx {ctx} is not above {config['model_type']}'s sliding window ({window}): the window mask "
            f"input qnn_llama_runner gives {version or config['model_type'].replace('_text', '')} programs hides "
            f"nothing at this context, so every layer attends to the whole context (as HF does here); export --ctx "
            f"above {window} to use the window"]
    assert lines == (want if said else [])


def test_a_library_warning_is_printed_when_it_is_raised_not_after_the_command(capsys):
    import warnings

    from qnn_custom_ops.llm.hf import LlmDtypeWarning
    from qnn_custom_ops.cli.llm_commands.common import own_warnings_as_lines

    with own_warnings_as_lines():
        print("loading", file=sys.stderr)
        warnings.warn(LlmDtypeWarning("ckpt: the weights are bfloat16; cast to float32 for the programs"))
        print("wrote out/model.pte", file=sys.stderr)
    assert capsys.readouterr().err.splitlines() == [
        "loading", "warning: ckpt: the weights are bfloat16; cast to float32 for the programs", "wrote out/model.pte"]


def test_every_warning_of_ours_is_one_line_and_a_third_partys_waits_for_verbose(capsys, monkeypatch):
    """A quantized export short of its target (``LlmQuantWarning``) is said as one line, as every
    warning of ours is (it used to be shown only with --verbose); torch's chatter is not."""
    import warnings

    from qnn_custom_ops.cli.llm_commands.common import own_warnings_as_lines
    from qnn_custom_ops.llm.checkpoint import LlmQuantWarning

    shown_as_python_does: list[str] = []
    monkeypatch.setattr(warnings, "showwarning", lambda message, *args, **kwargs: shown_as_python_does.append(
        str(message)))
    for verbose in (False, True):
        with own_warnings_as_lines(verbose):
            warnings.warn(LlmQuantWarning("--keep-8bit auto: below the target"))
            warnings.warn(f"a third party's notice, verbose={verbose}", UserWarning)
        assert capsys.readouterr().err.splitlines() == ["warning: --keep-8bit auto: below the target"]
    assert shown_as_python_does == ["a third party's notice, verbose=True"]


@pytest.mark.slow
def test_xnnpacks_one_time_pattern_graphs_are_built_before_the_first_partition_is_timed():
    """They took 6 s inside the first partition's preprocess (a small one's is 0.2 s), so the first
    time-left estimate of a float export was 5-13x too long (the tiny Qwen3: 'about 58 s left' for 4 s;
    now 'about 3 s' for 3.4 s)."""
    from executorch.backends.xnnpack.partition.graphs import bilinear_2d, sdpa
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend
    from executorch.exir import to_edge_transform_and_lower

    from qnn_custom_ops.lowering.lowering_progress import partitions_reported

    sdpa.get_graphs.cache_clear()
    bilinear_2d._get_bilinear_2d_graphs.cache_clear()
    original = XnnpackBackend.__dict__["preprocess"]
    built_when_called: list[bool] = []

    def spy(*args, **kwargs):
        built_when_called.append(sdpa.get_graphs.cache_info().currsize > 0
                                 and bilinear_2d._get_bilinear_2d_graphs.cache_info().currsize > 0)
        return original.__func__(*args, **kwargs)

    XnnpackBackend.preprocess = staticmethod(spy)
    try:
        said: list[str] = []
        with partitions_reported(said.append):
            to_edge_transform_and_lower({"forward": torch.export.export(torch.nn.Linear(8, 8), (torch.randn(2, 8),))},
                                        partitioner={"forward": [XnnpackPartitioner()]})
    finally:
        XnnpackBackend.preprocess = original
    assert built_when_called == [True], built_when_called
    assert said == ["lowering: 1 of 1 partitions compiled by XNNPACK"]


def test_a_qnn_export_started_again_with_the_simulators_libraries_does_not_say_its_notes_twice(tmp_path):
    """``llm export --target qnn`` without an SDK runs itself again in QAIRT's environment: the
    first process says the notes, the second does not."""
    import os

    from qnn_custom_ops.runtime.simulator_sdk import MARK, SIMULATOR_QAIRT

    config = {"model_type": "gemma3_text", "sliding_window": 512}
    options = ("--ctx", "256", "--target", "qnn", "--soc", "SM8650")
    assert len(export_says(tmp_path, config, BPE, *options)) == 1
    (tmp_path / "ckpt").rename(tmp_path / "first")
    assert export_says(tmp_path, config, BPE, *options, env={**os.environ, MARK: SIMULATOR_QAIRT}) == []


def test_json_output_puts_id_lists_on_one_line_and_leaves_strings_as_they_are():
    from qnn_custom_ops.cli.llm_commands.common import json_text

    value = {"text": "[ 1, 2 ]\n[\n 3 ]", "ids": [1, 2, 3], "spread": {"runs": [1.5, float("inf")]}}
    text = json_text(value)
    assert '  "ids": [1, 2, 3],' in text.splitlines()
    assert json.loads(text) == {**value, "spread": {"runs": [1.5, "inf"]}}  # JSON has no infinity


@pytest.mark.parametrize("argv, message", [
    (["export", "x", "-o", "y", "--prefill", "0"],
     "llm export: argument --prefill: '0' is not a whole number of 1 or more"),
    (["generate", "x"], "llm generate: the following arguments are required: --prompt"),
    (["generate", "x", "--prompt", "hi", "--ids", "--json"],
     "llm generate: argument --json: not allowed with argument --ids"),
])
def test_an_option_argparse_refuses_is_one_line_too(argv, message):
    done = subprocess.run([sys.executable, "-m", "qnn_custom_ops", "llm", *argv], capture_output=True, text=True,
                          timeout=60)
    command = message.split(":")[0]
    assert (done.returncode, done.stdout, done.stderr.strip()) == (
        2, "", f"error: qnn-custom-ops {message}; see qnn-custom-ops {command} --help")


@pytest.mark.slow
def test_llm_export_trains_quantization_aware_with_8bit_caches_and_generate_runs_it(checkpoint, tmp_path,  # noqa: F811
                                                                                    capsys):
    """``--qat STEPS`` and ``--kv-bits 8`` reach the library: the export says its QAT steps, its
    program tells the runner 8-bit caches (``get_kv_io_bit_width``), and it generates."""
    from executorch.runtime import Runtime

    out = tmp_path / "out"
    assert main(["llm", "export", str(checkpoint), "-o", str(out), "--prefill", "8", "--ctx", "32", "--quant", "16a4w",
                 "--qat", "2", "--kv-bits", "8", "--progress"]) == 0
    err = capsys.readouterr().err
    assert re.search(r"QAT 16a4w: step 2 of 2, distill loss \d", err), err
    program = Runtime.get().load_program((out / "model.pte").read_bytes())
    assert program.load_method("get_kv_io_bit_width").execute([])[0] == 8
    assert main(["llm", "generate", str(out), "--prompt", "The host", "--max-new-tokens", "4", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["ids"]) == 4
    assert "--qat is for a quantized export" in cli_error(capsys, "llm", "export", str(checkpoint), "-o",
                                                          str(tmp_path / "x"), "--qat", "2")
