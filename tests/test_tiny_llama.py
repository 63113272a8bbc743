"""examples/tiny_llama.py end to end, in-process: a 2-layer Llama-style decoder with the
library's ops swapped in, prefill and decode steps on the ExecuTorch runtime, float and
16a8w, compared with eager PyTorch and the converted model."""

from __future__ import annotations

import sys

from .conftest import REPO

sys.path.insert(0, str(REPO / "examples"))

import tiny_llama  # noqa: E402


def test_tiny_llama_prefills_and_decodes_on_executorch_like_eager(capsys):
    assert tiny_llama.main(["--quant", "16a8w"]) == 0
    out = capsys.readouterr().out
    assert "swapped 7 modules: MLP -> qco_llm::silu_and_mul, RMSNorm -> qco_llm::rms_norm" in out
    steps = [line for line in out.splitlines() if "logits vs reference" in line]
    assert [line.split(":")[0].strip() for line in steps] == [
        f"{phase} {quant} step {step} ({'8 tokens' if step == 0 else '1 token'})"
        for quant in ("none", "16a8w") for step, phase in enumerate(["prefill", "decode", "decode", "decode"])]
    assert all(line.endswith("ok") for line in steps)
    assert "steps of" in steps[-1]  # the quantized logits are judged in steps of their scale
    assert out.rstrip().endswith("OK")
    assert "No quant config" not in out
