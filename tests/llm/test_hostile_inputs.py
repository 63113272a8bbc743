"""Bad input of every class a user or an attacker hands the LLM route -- a checkpoint's config and
weights, its tokenizer, a manifest, a prompt, standard output, a ``cost`` shape -- is one line
in our words and exit 2, before transformers or the runtime fail on it (tests of the export's
own files: llm/test_export_files.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from qnn_custom_ops.llm.config_checks import check_config, check_weights
from qnn_custom_ops.llm.manifest_json import checksum

from tests.conftest import OP_PACKAGES

pytest.importorskip("transformers", reason="transformers is a dev extra (pip install -e '.[dev]')")

from qnn_custom_ops.cli import main  # noqa: E402

from tests.llm.exports import cli_error  # noqa: E402


def edit_config(**values: object) -> Callable[[Path], None]:
    def edit(directory: Path) -> None:
        config = json.loads((directory / "config.json").read_text())
        (directory / "config.json").write_text(json.dumps({**config, **values}))

    return edit


def edit_header(change: Callable[[dict], None]) -> Callable[[Path], None]:
    """Rewrite model.safetensors' header, keeping its length (padded with spaces, as safetensors does)."""

    def edit(directory: Path) -> None:
        path = directory / "model.safetensors"
        data = path.read_bytes()
        length = int.from_bytes(data[:8], "little")
        header = json.loads(data[8 : 8 + length])
        change(header)
        text = json.dumps(header, separators=(",", ":")).encode()
        assert len(text) <= length
        path.write_bytes(data[:8] + text.ljust(length) + data[8 + length :])

    return edit


def first_tensor(header: dict) -> dict:
    return next(value for name, value in sorted(header.items()) if name != "__metadata__")


def write(name: str, data: bytes) -> Callable[[Path], None]:
    return lambda directory: (directory / name).write_bytes(data)


def index_to(target: str) -> Callable[[Path], None]:
    return write("model.safetensors.index.json", json.dumps({"weight_map": {"lm_head.weight": target}}).encode())


def edit_weights(change: Callable[[dict], None]) -> Callable[[Path], None]:
    """model.safetensors written again, its tensors changed."""

    def edit(directory: Path) -> None:
        from safetensors.torch import load_file, save_file

        tensors = load_file(directory / "model.safetensors")
        change(tensors)
        save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})

    return edit


def remove_tokenizer(directory: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (directory / name).unlink(missing_ok=True)


CHECKPOINT_CASES = {
    # config.json: values transformers would divide by, index with, allocate or refuse in its own words
    "hidden_size 0": (edit_config(hidden_size=0), "config.json: hidden_size is 0 (a number), not a whole number"),
    "negative intermediate_size": (edit_config(intermediate_size=-128), "intermediate_size is -128"),
    "no layers": (edit_config(num_hidden_layers=0), "num_hidden_layers is 0"),
    "heads that do not divide": (edit_config(num_attention_heads=3), "num_attention_heads 3 is not a multiple of"),
    "head_dim 7": (edit_config(head_dim=7), "head_dim 7 is odd"),
    "garbage rope_scaling": (edit_config(rope_scaling="yes"), "rope_scaling is \"yes\" (a string), not an object"),
    "a rope factor that is text": (edit_config(rope_parameters={"rope_type": "linear", "factor": "two"}),
                                   "rope_parameters.factor is \"two\" (a string), not a number"),
    "a size given as text": (edit_config(hidden_size="64"), "hidden_size is '64', where qwen3 takes a number"),
    "a flag given as text": (edit_config(tie_word_embeddings="yes"), "tie_word_embeddings is 'yes', where qwen3 takes a boolean"),
    "a vocabulary the weights do not have": (edit_config(vocab_size=200), "the config is not these weights'"),
    "an unknown family": (edit_config(model_type="gpt9"), "model_type 'gpt9' is not supported; supported: llama"),
    "config.json not JSON": (write("config.json", b"{"), "config.json: not JSON"),
    # the weights
    "empty weights": (write("model.safetensors", b""), "model.safetensors: 0 bytes, whose header length"),
    "truncated weights": (lambda d: os.truncate(d / "model.safetensors", (d / "model.safetensors").stat().st_size - 9),
                          "(truncated?)"),
    "a header that is not JSON": (edit_header(lambda h: h.clear() or h.update({"x": "{"})), "tensor x is"),
    "bad offsets": (edit_header(lambda h: first_tensor(h)["data_offsets"].reverse()), "data_offsets are"),
    "an integer weight": (edit_header(lambda h: first_tensor(h).update(dtype="I32")), "is I32, an integer dtype"),
    "a weight missing": (edit_weights(lambda t: t.pop("model.layers.0.mlp.down_proj.weight")),
                         "the weights lack model.layers.0.mlp.down_proj.weight (1 in all), which the model would get as "
                         "random values"),
    "a weight of another shape": (edit_weights(lambda t: t.update({"model.norm.weight": t["model.norm.weight"][:8]})),
                                  "the weights have another shape for model.norm.weight (1 in all)"),
    "a NaN weight": (edit_weights(lambda t: t["model.norm.weight"].__setitem__(3, float("nan"))),
                     "weight model.norm.weight holds NaN or infinite values"),
    "an index outside the checkpoint": (index_to("../../etc/passwd"), "weight_map.lm_head.weight is '../../etc/"),
    "an index naming a missing file": (index_to("model-2.safetensors"), "names model-2.safetensors, which is not in"),
    # the tokenizer
    "no tokenizer": (remove_tokenizer, "no tokenizer (tokenizer.json, tokenizer.model, vocab.json); save one"),
    "a damaged tokenizer": (write("tokenizer.json", b'{"model": 7}'), "no tokenizer transformers can load"),
}


#: What real checkpoints hold that a check must not refuse (Llama 3's eos list and rope_scaling,
#: Gemma 3's per-layer-type RoPE, Phi-4-mini's longrope lists, a float where the default is whole).
VALID_CONFIGS = {
    "eos ids as a list": dict(eos_token_id=[1, 2]),
    "llama3 rope_scaling": dict(rope_scaling=dict(factor=32.0, high_freq_factor=4.0, low_freq_factor=1.0,
                                                  original_max_position_embeddings=8192, rope_type="llama3")),
    "rope per layer type": dict(rope_parameters=dict(full_attention=dict(rope_type="default", rope_theta=1e6),
                                                     sliding_attention=dict(rope_type="default", rope_theta=1e4))),
    "longrope lists": dict(rope_scaling=dict(type="longrope", short_factor=[1.0, 1.5], long_factor=[2.0, 3.0])),
    "a null window": dict(sliding_window=None, use_sliding_window=False),
}


@pytest.mark.parametrize("case", VALID_CONFIGS)
def test_what_real_checkpoints_hold_passes_the_checks(case, checkpoint, tmp_path):  # noqa: F811
    copy = shutil.copytree(checkpoint, tmp_path / "checkpoint")
    edit_config(**VALID_CONFIGS[case])(copy)
    check_weights(copy, check_config(copy))


@pytest.mark.parametrize("case", CHECKPOINT_CASES)
def test_a_bad_checkpoint_is_one_line_naming_the_file_and_value(case, checkpoint, tmp_path, capsys):  # noqa: F811
    damage, said = CHECKPOINT_CASES[case]
    copy = shutil.copytree(checkpoint, tmp_path / "checkpoint")
    damage(copy)
    error = cli_error(capsys, "llm", "export", str(copy), "-o", str(tmp_path / "out"), "--ctx", "64", "--prefill", "8")
    assert error.startswith("error: ") and said in error, error
    assert "internal error" not in error and not (tmp_path / "out").exists()


@pytest.mark.parametrize("positions, ctx, said", [
    (128, 10**9, "--ctx 1000000000: past the 128 positions the model was made for (max_position_embeddings in"),
    (2**31 - 1, 2**30, "--ctx 1073741824: the KV caches the export makes would take 550 GB, more than this machine's"),
])
def test_a_context_past_the_model_or_the_machine_is_one_line(positions, ctx, said, checkpoint, tmp_path,  # noqa: F811
                                                             capsys):
    copy = shutil.copytree(checkpoint, tmp_path / "checkpoint")
    edit_config(max_position_embeddings=positions)(copy)
    error = cli_error(capsys, "llm", "export", str(copy), "-o", str(tmp_path / "out"), "--ctx", str(ctx))
    assert said in error, error


def manifest_body() -> dict:
    """A float host export's manifest as llm export writes it (its files listed, sealed)."""
    sha = "0" * 64
    body = {
        "model_type": "qwen3", "decoder_model_version": "qwen3", "quant": "none", "target": "host",
        "shape": {"layers": 1, "kv_heads": 2, "head_dim": 16, "vocab": 300, "ctx_len": 64, "prefill_len": 8,
                  "cache": "runner", "batch": 1, "window": None},
        "eos_ids": [2], "encodings": None, "program_data": "model.ptd",
        "files": [{"path": "model.pte", "size": 1, "sha256": sha}, {"path": "model.ptd", "size": 1, "sha256": sha}],
    }
    return {**body, "checksum": checksum(body)}


def sealed(change: Callable[[dict], None]) -> Callable[[Path], None]:
    """The manifest changed and its checksum made again: an attacker's manifest."""

    def write_manifest(directory: Path) -> None:
        body = manifest_body()
        change(body)
        (directory / "manifest.json").write_text(json.dumps({**body, "checksum": checksum(body)}))

    return write_manifest


def shape(**values: object) -> Callable[[dict], None]:
    return lambda body: body["shape"].update(values)


MANIFEST_CASES = {
    "nested too deeply": (write("manifest.json", b"[" * 100_000), "nested too deeply to be read"),
    "not an object": (write("manifest.json", b"[1]"), "holds [1] (a list), not a JSON object"),
    "ctx_len a string": (sealed(shape(ctx_len="64")), "shape.ctx_len is \"64\" (a string), not a whole number"),
    "ctx_len 1e9": (sealed(shape(ctx_len=1e9)), "shape.ctx_len is 1000000000.0 (a number), not a whole number"),
    "ctx_len past int32": (sealed(shape(ctx_len=2**40)), "shape.ctx_len is 1099511627776 (a number)"),
    "a prefill longer than the context": (sealed(shape(prefill_len=65)), "shape.prefill_len 65 is longer than"),
    "a field no shape has": (sealed(shape(rows=3)), "shape.rows is not a value of an LlmShape"),
    "empty encodings": (sealed(lambda b: b.update(encodings={})), "encodings names no method, not prefill_forward"),
    "an encoding of no datatype": (
        sealed(lambda b: b.update(encodings={m: {"inputs": [{"datatype": "INT_3", "scale": 1, "offset": 0}],
                                                 "outputs": []} for m in ("prefill_forward", "kv_forward")})),
        "datatype is 'INT_3', not a QNN datatype"),
    "weights outside the export": (sealed(lambda b: b.update(program_data="../../etc/passwd")),
                                   "program_data is '../../etc/passwd', not a path inside the export directory"),
    "a listed file outside the export": (sealed(lambda b: b["files"][0].update(path="/etc/passwd")),
                                         "files[].path is '/etc/passwd', not a path inside"),
    "a quant no export has": (sealed(lambda b: b.update(quant="2a2w")), "quant is '2a2w', not one of none, 8a8w"),
    "a runner version no runner has": (sealed(lambda b: b.update(decoder_model_version="llama9")),
                                       "decoder_model_version is 'llama9', not one of llama2, llama3,"),
    "a family we do not export": (sealed(lambda b: b.update(model_type="gpt2")), "model_type is 'gpt2', not one of"),
    "a value changed, not sealed": (lambda d: (d / "manifest.json").write_text(
        json.dumps({**manifest_body(), "eos_ids": [7]})), "its values were changed after llm export wrote them"),
    "written before the file table": (lambda d: (d / "manifest.json").write_text(json.dumps(
        {k: v for k, v in manifest_body().items() if k not in ("files", "checksum")})),
        "written before exports listed their files"),
    "no file table, sealed": (sealed(lambda b: b.pop("files")), "written before exports listed their files"),
}


@pytest.mark.parametrize("case", MANIFEST_CASES)
def test_a_bad_manifest_is_one_line_before_anything_is_sized_by_it(case, tmp_path, capsys):
    damage, said = MANIFEST_CASES[case]
    damage(tmp_path)
    error = cli_error(capsys, "llm", "generate", str(tmp_path), "--prompt", "hi")
    assert error.startswith(f"error: {tmp_path}/manifest.json: ") and said in error, error


def test_a_prompt_that_is_not_utf8_is_one_line(tmp_path, capsys):
    prompt = os.fsdecode(b"caf\xe9")  # what Python makes of a Latin-1 byte on the command line
    error = cli_error(capsys, "llm", "generate", str(tmp_path), "--prompt", prompt)
    assert error == "error: --prompt: byte 0xe9 at character 3 is not UTF-8; give the text in UTF-8"


@pytest.mark.slow
def test_a_broken_chat_template_is_one_line_naming_the_tokenizer(float_export, tmp_path, capsys):  # noqa: F811
    copy = shutil.copytree(float_export, tmp_path / "export")
    (copy / "tokenizer" / "chat_template.jinja").write_text("{% for m in messages %}")
    capsys.readouterr()
    code = main(["llm", "generate", str(copy), "--prompt", "hi", "--chat", "hf", "--no-verify"])
    said = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and said[-1].startswith(f"error: {copy}/tokenizer: its chat template fails (TemplateSyntaxError: ")
    assert not any(line.startswith(("internal error", "Traceback")) for line in said), said


CLOSED = ("error: standard output: closed (started with >&-), so nothing can be printed; give it somewhere to write "
          "(> FILE, or > /dev/null)")


def closed_stdout_run(*argv: str) -> subprocess.CompletedProcess:
    """The CLI started as ``qnn-custom-ops ARGV >&-``."""
    return subprocess.run([sys.executable, "-m", "qnn_custom_ops", *argv], stderr=subprocess.PIPE, text=True,
                          preexec_fn=lambda: os.close(1))


def test_a_closed_standard_output_is_one_line_and_no_file_takes_its_place(tmp_path):
    result = closed_stdout_run("validate", str(OP_PACKAGES / "LlmOpPackage/config/LlmOpPackage.xml"))
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [CLOSED]
    # a file the command opens before it prints would get descriptor 1, where native code prints
    written = tmp_path / "program.pte"
    child = ("import argparse, os; from qnn_custom_ops.cli.process import run_handler\n"
             "def opens_a_file(args):\n"
             f"    with open({str(written)!r}, 'wb') as f:\n"
             "        os.write(1, b'native print'); f.write(b'program')\n"
             "    return 0\n"
             "run_handler(opens_a_file, argparse.Namespace())")
    result = subprocess.run([sys.executable, "-c", child], stderr=subprocess.PIPE, preexec_fn=lambda: os.close(1))
    assert result.returncode == 0 and written.read_bytes() == b"program", result.stderr


@pytest.mark.slow
def test_llm_generate_into_a_closed_standard_output_is_one_line(float_export):  # noqa: F811
    result = closed_stdout_run("llm", "generate", str(float_export), "--prompt", "hi", "--max-new-tokens", "2")
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == CLOSED, result.stderr


@pytest.mark.parametrize("dims", ["0x99999999999999999999", "2147483648"])
def test_a_cost_shape_past_what_a_tensor_takes_is_one_line(dims, capsys):
    shape = f"RmsNorm:y={dims},x=1x8,weight=8"
    error = cli_error(capsys, "cost", str(OP_PACKAGES / "LlmOpPackage"), "--shape", shape)
    assert "is past the largest a tensor takes (2147483647)" in error, error
