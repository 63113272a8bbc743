"""examples/tiny_llama.py end to end, in-process: a 2-layer Llama-style decoder with the
library's ops swapped in, prefill and decode steps on the ExecuTorch runtime, float and
16a8w, compared with eager PyTorch and the converted model. Float and 16a8w are two tests,
so parallel workers can take one each."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "examples"))

import tiny_llama  # noqa: E402
from example_flow import parse_args  # noqa: E402

pytestmark = pytest.mark.slow


def step_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if "logits vs reference" in line]


def step_labels(quant: str) -> list[str]:
    return [f"{phase} {quant} step {step} ({'8 tokens' if step == 0 else '1 token'})"
            for step, phase in enumerate(["prefill", "decode", "decode", "decode"])]


def test_tiny_llama_float_prefills_and_decodes_on_executorch_like_eager(capsys):
    assert tiny_llama.main(["--quant", "none"]) == 0
    out = capsys.readouterr().out
    assert "swapped 7 modules: MLP -> qco_llm::silu_and_mul, RMSNorm -> qco_llm::rms_norm" in out
    steps = step_lines(out)
    assert [line.split(":")[0].strip() for line in steps] == step_labels("none")
    assert all(line.endswith("ok") for line in steps)
    assert out.rstrip().endswith("OK")


def test_tiny_llama_16a8w_decodes_within_steps_of_the_converted_model(capsys):
    args = parse_args("tiny llama", ["--quant", "16a8w"], default_quant="16a8w")
    assert tiny_llama.run_host(tiny_llama.Config(), args, ["16a8w"])
    out = capsys.readouterr().out
    steps = step_lines(out)
    assert [line.split(":")[0].strip() for line in steps] == step_labels("16a8w")
    assert all(line.endswith("ok") for line in steps)
    assert "steps of" in steps[-1]  # the quantized logits are judged in steps of their scale
    assert "No quant config" not in out
