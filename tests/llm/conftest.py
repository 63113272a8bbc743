"""The LLM tests' shared fixtures: a tiny Qwen3 checkpoint and its exports, a host runner of the
LlmOpPackage, and a model trained for seconds. Each is made once per run (``shared_build``) and
read-only; the helpers that make them are in ``exports.py`` and ``trained_model.py``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import qnn_custom_ops as qco
from qnn_custom_ops.llm_ops import llm_binding, package_dir
from qnn_custom_ops.runtime import HostRunner

from tests.conftest import shared_build


@pytest.fixture(scope="module")
def checkpoint() -> Path:
    """Made once per run, whichever xdist worker comes first (``shared_build``); read-only."""
    from tests.llm.exports import save_checkpoint

    return shared_build("llm-checkpoint", save_checkpoint)


@pytest.fixture(scope="module")
def float_export(checkpoint) -> Path:
    from tests.llm.exports import export

    return export(checkpoint, "llm-export-float")


@pytest.fixture(scope="module")
def quantized_export(checkpoint, tmp_path_factory) -> Path:
    """16a8w, calibrated on three lines of text (``--calibration``)."""
    from tests.llm.exports import export

    text = tmp_path_factory.mktemp("calibration") / "prompts.txt"
    text.write_text("The host runtime runs the program.\nqnn-custom-ops llm export\nA kernel for the HTP\n")
    return export(checkpoint, "llm-export-16a8w", "--quant", "16a8w", "--calibration", str(text))


@pytest.fixture(scope="module")
def runner() -> HostRunner:
    """The LlmOpPackage's host library, built once per run, in ExecuTorch's host runtime."""
    return HostRunner([qco.build_host_library(package_dir(), llm_binding())])


@pytest.fixture(scope="module")
def trained():
    """(model, tokenizer, held-out stream, 8 calibration prompts of ``PREFILL`` training tokens),
    trained on a tenth of the standard library's sources with one torch thread (deterministic),
    once per run (``shared_build``); each module gets its own copy of the model."""
    import transformers

    from tests.llm.trained_model import train_into

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        root = shared_build("llm-trained", train_into)
        model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config.from_pretrained(root / "model"))
        model.load_state_dict(torch.load(root / "weights.pt"))
        tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(root / "tokenizer")
        data = torch.load(root / "data.pt")
        yield model.eval(), tokenizer, data["held"], data["calibration"]
    finally:
        torch.set_num_threads(threads)
