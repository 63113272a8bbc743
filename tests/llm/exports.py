"""The LLM tests' checkpoint and exports: a tiny Qwen3 saved as a Hugging Face checkpoint with a
tokenizer trained here (nothing downloaded), its ``llm export`` made once per run, and what the
tests read back from an export."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
import torch

from qnn_custom_ops.cli import main

from tests.conftest import DOCS, shared_build

transformers = pytest.importorskip("transformers", reason="transformers is a dev extra (pip install -e '.[dev]')")
tokenizers = pytest.importorskip("tokenizers")

from tests.hf_models import COMMON  # noqa: E402  (after the dev extra)

#: The exports' prefill length and context.
PREFILL, CTX = 8, 64


def trained_tokenizer() -> transformers.PreTrainedTokenizerFast:
    """A byte-level BPE of 300 tokens trained on the README and docs/, with a chat template."""
    text = [line for page in DOCS for line in page.read_text().splitlines() if line.strip()]
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(text, trainer)
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>",
                                                     bos_token="<|endoftext|>")
    tokenizer.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                               "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return tokenizer


def save_checkpoint(directory: Path, dtype: torch.dtype = torch.float32, layers: int = 1) -> Path:
    """A Qwen3 (q/k norms) saved as a Hugging Face checkpoint with its tokenizer."""
    tokenizer = trained_tokenizer()
    config = transformers.Qwen3Config(**{**COMMON, "vocab_size": len(tokenizer)}, head_dim=16, num_hidden_layers=layers,
                                      bos_token_id=tokenizer.bos_token_id)
    config.eos_token_id = tokenizer.eos_token_id
    torch.manual_seed(0)
    transformers.Qwen3ForCausalLM(config).to(dtype).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def export(checkpoint: Path, name: str, *options: str) -> Path:
    """``llm export`` of the checkpoint, once per run (read-only)."""

    def run(root: Path) -> None:
        said = io.StringIO()
        with contextlib.redirect_stderr(said):
            status = main(["llm", "export", str(checkpoint), "-o", str(root / "out"), "--prefill", str(PREFILL),
                           "--ctx", str(CTX), "--progress", *options])
        assert status == 0, f"llm export {' '.join(options)} exited {status}:\n{said.getvalue()}"
        (root / "progress.txt").write_text(said.getvalue())

    return shared_build(name, run) / "out"


def program_of(directory: Path):
    from executorch.runtime import Runtime

    return Runtime.get().load_program((directory / "model.pte").read_bytes())


def progress_of(export_dir: Path) -> list[str]:
    """The progress lines ``llm export --progress`` printed, without their times."""
    lines = (export_dir.parent / "progress.txt").read_text().splitlines()
    return [re.sub(r"^\[ *[\d.]+s\] ", "", line) for line in lines]


def cli_error(capsys, *argv: str) -> str:
    capsys.readouterr()
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    return err
