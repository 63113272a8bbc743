"""Lowering to QNN for real, with no SDK: ExecuTorch's own QnnPartitioner and compiler on this
machine (its wheel's QNN adaptor, over QAIRT 2.51's x86 backend through our shim), our package
registered as QHPI, and ExecuTorch's runtime executing the context binary on the x86 HTP
simulator, compared with the converted model."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from qnn_custom_ops.cli import main
from qnn_custom_ops.qairt import QairtError
from qnn_custom_ops.runtime.loading import program_facts
from qnn_custom_ops.runtime.simulator import SimulatorRunError, SimulatorRunner, SimulatorSession

from tests.conftest import REPO


@pytest.mark.slow
def test_the_demo_lowers_through_executorchs_qnn_partitioner_and_runs_on_the_x86_simulator(tmp_path, capsys):
    environment = {key: value for key, value in os.environ.items() if key not in ("QNN_SDK_ROOT", "LD_LIBRARY_PATH")}
    result = subprocess.run([sys.executable, str(REPO / "examples/custom_op_mul3.py"), "--target", "x86",
                             "--output-dir", str(tmp_path)], capture_output=True, text=True, env=environment)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr[-2000:]
    assert "by ExecuTorch's QnnPartitioner, ExampleOpPackage as QHPI" in out
    # my_ops::mul3 within one step inside the program; the model output's larger steps after it, named
    assert "the bound ops' own outputs in the program" in out
    probe_line = next(line for line in out.splitlines() if line.startswith("  output 0: "))
    assert probe_line.endswith(" ok") and "(1 step of" in probe_line or "(0 steps of" in probe_line, probe_line
    assert "from QNN's built-in softmax" in out and out.rstrip().endswith("OK")
    pte = (tmp_path / "mul3_x86.pte").read_bytes()
    facts = program_facts(pte)
    assert facts.backends == {"QnnBackend"} and not any("my_ops" in op for op in facts.operators)  # mul3 is in QNN

    torch.save(torch.randn(1, 3, 16, 16), tmp_path / "x.pt")
    assert main(["run", str(tmp_path / "mul3_x86.pte"), "--target", "x86", "--inputs", str(tmp_path / "x.pt")]) == 0
    assert capsys.readouterr().out.startswith("output 0: [1, 8, 16, 16] float32")


def test_a_damaged_qairt_backend_is_one_line_naming_the_fix(tmp_path, monkeypatch):
    release = tmp_path / "2.51" / "onnxruntime_qnn"
    release.mkdir(parents=True)
    for name in ("libQnnHtp.so", "libQnnSystem.so"):
        (release / name).write_bytes(b"cut short")
    monkeypatch.setenv("QCO_QAIRT_DIR", str(tmp_path))
    with pytest.raises(QairtError) as raised:
        SimulatorRunner().run(b"", [])
    assert str(raised.value) == (f"{release / 'libQnnHtp.so'}: not a shared library (damaged?): delete "
                                 f"{tmp_path / '2.51'} and it is installed again")


@pytest.mark.slow
def test_a_quantized_llms_transposes_keep_one_datatype_as_qnn_requires():
    """QNN refuses a Transpose whose input and output datatypes differ (3110): the new K and V
    rows, unsigned 16-bit codes out of RoPE and the projections, are requantized to the cache's
    signed encoding before they are transposed, in both programs."""
    from qnn_custom_ops.llm import export_llm
    from qnn_custom_ops.llm.quantization import quantize_llm

    from tests.hf_models import hf_model

    programs = export_llm(hf_model("qwen3", num_hidden_layers=1), prefill_len=8, ctx_len=32, cache="runner")
    for converted in quantize_llm(programs, "16a8w", [[1, 5, 9, 20, 33, 7]], 4):
        moves = [n for n in converted.graph.nodes if n.target in (torch.ops.aten.transpose.int,
                                                                  torch.ops.aten.permute.default)]
        assert moves
        for node in moves:
            (dequantize,) = [a for a in node.args if isinstance(a, torch.fx.Node)]
            quantizes = [u for u in node.users if "quantize_per_tensor" in str(u.target)]
            assert quantizes and all(q.args[-1] == dequantize.args[-1] for q in quantizes), node.name


@pytest.mark.slow
def test_a_program_the_simulator_refuses_is_one_line_per_call_and_the_session_goes_on():
    """The child answers each call; a program its runtime cannot load is said for each call, and
    the session keeps serving (no hang, no traceback)."""
    with SimulatorSession(b"not a program") as session:
        for method in ("forward", "kv_forward"):
            with pytest.raises(SimulatorRunError) as raised:
                session.run(method, [torch.zeros(1)])
            said = str(raised.value)
            assert said.startswith("the program did not run on QAIRT 2.51's HTP simulator: Failed to load program")
            assert "\n" not in said


PROBE = """
import json, torch
import qnn_custom_ops as qco
from qnn_custom_ops.llm import export_llm
from qnn_custom_ops.llm_ops import llm_binding, package_dir
from qnn_custom_ops.llm.quantization import quantize_llm
from qnn_custom_ops.lowering import OpPackageBuild, compile_spec
from qnn_custom_ops.runtime.htp import build_qhpi_package
from qnn_custom_ops.runtime.probe import first_parting, probe_differences
from tests.hf_models import hf_model

torch.manual_seed(0)
programs = export_llm(hf_model("qwen3", num_hidden_layers=1), prefill_len=8, ctx_len=32, cache="runner")
prefill, _ = quantize_llm(programs, "16a4w_block", [[1, 5, 9, 20, 33, 7, 11, 40, 2, 3, 19]], 4)
binding = llm_binding()
spec = compile_spec("SM8650", binding, [OpPackageBuild("CPU", "x86_64", build_qhpi_package(package_dir(), binding.package))])
inputs = (torch.tensor([[7, 3, 90, 41, 5, 18, 60, 2]], dtype=torch.int32), *programs.prefill.example_inputs[1:])
differences = probe_differences(prefill, inputs, binding, spec)
parting = first_parting(differences)
print("PROBE", json.dumps({"parting": None if parting is None else vars(parting),
                           "differences": [vars(d) for d in differences]}))
"""


@pytest.mark.slow
def test_a_16a4w_block_llm_on_qnn_stays_within_a_tenth_of_a_percent_of_the_host_op_by_op():
    """Every quantized op output of a one-layer 16a4w_block Qwen3's prefill, on the simulator
    against the converted model (the probe program, lowered in a process started with the
    simulator's environment): none parts from it, the per-block projections included, which QNN
    computes right as 1x1 convolutions only (``lowering/block_linears.py``; as FullyConnected the
    MLP's gate/up projection was 65117 steps off)."""
    import json

    from qnn_custom_ops.runtime.simulator_sdk import simulator_environment

    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=REPO,
                            env={**os.environ, **simulator_environment()})
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("PROBE ")]
    found = json.loads(line.removeprefix("PROBE "))
    differences = found["differences"]
    assert found["parting"] is None, found["parting"]
    modules = {d["module"] for d in differences}
    assert {"layers.0.mlp.gate_up_proj", "layers.0.mlp.down_proj", "lm_head"} <= modules
    assert {d["op"] for d in differences} >= {"qco_llm.rms_norm.default", "qco_llm.rope.default",
                                              "qco_llm.silu_and_mul.default", "aten.linear.default"}
    assert max(d["steps"] / d["codes"] for d in differences) < 0.002, max(differences, key=lambda d: d["steps"])


def test_the_first_op_past_its_share_of_the_range_is_where_a_program_parts():
    from qnn_custom_ops.runtime.probe import OpDifference, first_parting

    differences = [OpDifference("rms_norm", "qco_llm.rms_norm.default", "norm", 3, 65535),
                   OpDifference("softmax", "aten.softmax.int", "attn", 50, 65535),
                   OpDifference("linear_4", "aten.linear.default", "mlp.gate_up_proj", 900, 65535),
                   OpDifference("silu_and_mul", "qco_llm.silu_and_mul.default", "mlp", 40000, 65535)]
    assert first_parting(differences) == differences[2]
    assert str(differences[2]) == "linear_4 (aten.linear.default, mlp.gate_up_proj): 900 steps of 65535"
    assert first_parting(differences[:2]) is None and first_parting(differences[:2], fraction=0.0005) is differences[1]
