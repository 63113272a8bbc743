"""What the ``llm`` commands share: their choices, checked before any heavy import (the
checkpoint's config.json and tokenizer files, an export directory, text files), their argument
types, one-line warnings, and JSON output."""

from __future__ import annotations

import argparse
import importlib
import json
import math
import re
from contextlib import AbstractContextManager
from pathlib import Path
from types import ModuleType
from typing import Any

from ...errors import UsageError
from ..process import our_warnings_one_line

EXIT_OK = 0


def llm_module(name: str) -> ModuleType:
    """``llm.<name>``: the light modules (the registries, the export directory's files, the
    sampling options) import nothing heavy, and ``llm`` imports its names on first use."""
    return importlib.import_module(f"...llm.{name}", __package__)


#: ``--quant``'s names (float, and ``quantizer.QUANT_MODES``, which imports executorch; the
#: tests hold the two equal) and ``--target``'s (``manifest.TARGETS``): checked at once.
QUANT_CHOICES = ("none", "8a8w", "16a8w", "16a16w", "16a4w", "16a4w_block")


#: The modes with 4-bit weights (``QuantMode.kept`` set): what ``--keep-8bit`` keeps parts of at 8.
FOUR_BIT_CHOICES = ("16a4w", "16a4w_block")


TARGET_CHOICES = ("host", "qnn")


def check_choice(option: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UsageError(f"{option} {value!r}: use one of {', '.join(choices)}")


def check_checkpoint_directory(directory: str) -> dict[str, Any]:
    """A checkpoint directory's config.json, read for its family (refused in one line unless
    exported), with its tokenizer's files beside it; before any heavy import."""
    checkpoint = Path(directory)
    config = checkpoint / "config.json"
    if not config.is_file():
        raise UsageError(f"{checkpoint}: no config.json; pass a Hugging Face checkpoint directory")
    checks, values = llm_module("config_checks"), llm_module("json_values")
    try:
        body = values.load_object(config, checks.CONFIG_LIMIT)
        model_type = values.string(values.required(body, "model_type"), "model_type")
    except values.JsonValueError as exc:
        raise UsageError(f"{config}: {exc}; fix it, or save the config again (config.save_pretrained)") from None
    llm_module("families").family_of(model_type)
    checks.check_tokenizer_files(checkpoint)
    return body


def check_export_directory(option: str, directory: str) -> Path:
    """An export directory: one holding a manifest (read and checked in full later)."""
    path, manifest = Path(directory), llm_module("export_files").MANIFEST
    if not (path / manifest).is_file():
        raise UsageError(f"{option}{directory}: no {manifest}; pass a directory written by qnn-custom-ops llm export")
    return path


def own_warnings_as_lines(verbose: bool = False) -> AbstractContextManager[None]:
    """``process.our_warnings_one_line`` as the llm commands use it: the route's warnings (a dtype
    cast, a module left native, a token the runner lacks, a quantization short of its target) each
    time they are raised; third parties' (torch's, transformers') only with ``--verbose``."""
    from ...llm.checkpoint import LlmQuantWarning
    from ...llm.hf import LlmDtypeWarning
    from ...llm.runner_text import RunnerTokenWarning
    from ...llm_ops.swap import SwapWarning

    return our_warnings_one_line(
        others_shown=verbose, always=(LlmDtypeWarning, SwapWarning, RunnerTokenWarning, LlmQuantWarning)
    )


def calibration_lines(path: str | None) -> list[str] | None:
    if path is None:
        return None
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"--calibration {path}: no such file; give a text file, one prompt a line")
    try:
        return file.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise UsageError(f"--calibration {path}: not UTF-8 text; give a text file, one prompt a line") from None


def text_file(option: str, path: str) -> str:
    """A UTF-8 text file's contents, or one line saying what is wrong with it."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"{option} {path}: no such file; give a UTF-8 text file")
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{option} {path}: byte {exc.start} is not UTF-8; give a UTF-8 text file") from None


def json_text(value: object) -> str:
    """``value`` as indented JSON, a list of numbers (token ids) on one line."""
    text = json.dumps(_json_ready(value), indent=2)  # a string's own newlines are escaped: "[\n" is a list's
    return re.sub(r"\[\n\s+([-\d.e+,\s]+?)\n\s*\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text)


def _json_ready(value: object) -> object:
    """``value`` with every float JSON can hold: infinity (an SQNR where the logits are equal) as
    the string "inf"."""
    if isinstance(value, dict):
        return {key: _json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def whole(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 0 or more")
    return value


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 1 or more")
    return value


def _memory_gib(text: str) -> float:
    """``--max-memory``: GiB above 0 (``memory_budget.parse_gib``), one line when not."""
    try:
        return llm_module("memory_budget").parse_gib(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_memory_flag(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--max-memory",
        type=_memory_gib,
        metavar="GB",
        help=f"the memory budget in GiB: {what}; default: what is free when the command starts (MemAvailable)",
    )
