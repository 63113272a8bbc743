"""16a4w and 16a4w_block, as ExecuTorch's Qualcomm LLM scripts quantize: 4-bit projections (per
output channel, or per block of 32 input channels), the lm_head and the library's ops at 16a8w,
run on the host (weights dequantized once, at lowering) and checked against the converted model
and float. One tiny layer, one calibration prompt, the decode method alone: each mode costs one
quantization and one lowering."""

from __future__ import annotations

import statistics

import pytest
import torch

pytest.importorskip("transformers", reason="transformers is a dev extra (pip install -e '.[dev]')")

from qnn_custom_ops.llm import RunnerLoop, export_llm, quantize_llm  # noqa: E402
from qnn_custom_ops.llm.steps import eager_step  # noqa: E402
from qnn_custom_ops.quantizer import QUANT_MODES  # noqa: E402
from qnn_custom_ops.lowering.block_linears import block_linears_as_convolutions  # noqa: E402
from qnn_custom_ops.quantizer.block_scales import block_scales_on_qnn_grid  # noqa: E402
from qnn_custom_ops.torch_bridge.quantized import encoding_of, is_dequantize  # noqa: E402

from tests.hf_models import hf_model, lowered_steps  # noqa: E402
from tests.conftest import sqnr_db  # noqa: E402
from tests.llm.exports import cli_error  # noqa: E402

TOKENS = [5, 17, 42, 9, 77, 3, 64, 21, 90, 33, 11, 58]
#: Each projection's dequantized weights against float: 4-bit codes of random normal weights,
#: measured 18.3-19.6 dB per channel and 20.1-20.5 dB in blocks of 32 (the lm_head at 8 bits: 44.6).
MIN_WEIGHT_SQNR_DB = 17.0
#: Teacher-forced logits at each position: the host program against the converted model it was
#: lowered from (the same integers but for float rounding: measured 76 dB to exact), and their
#: median against float, calibrated on the scored tokens (measured 9.7 dB per channel and 8.6 in
#: blocks, 15.2 for 16a8w: a random model whose weights spread 0.5 gives activations far wider
#: than a trained one's; the README's accuracy table gives a trained model's figures).
MIN_SQNR_CONVERTED_DB, MEDIAN_SQNR_FLOAT_DB = 40.0, 6.0


@pytest.fixture(scope="module")
def programs():
    return export_llm(hf_model("llama", num_hidden_layers=1), prefill_len=8, ctx_len=32, cache="runner")


def linear_weights(module: torch.fx.GraphModule) -> dict[str, tuple[torch.fx.Node, torch.Tensor]]:
    """Per linear layer (its module path), the dequantize node of its weight and the weight's codes."""
    found = {}
    for node in module.graph.nodes:
        if node.target == torch.ops.aten.linear.default:
            path = list(node.meta["nn_module_stack"].values())[-1][0]
            dequantize = node.args[1]
            found[path] = (dequantize, getattr(module, dequantize.args[0].target))
    return found


def dequantized(module: torch.fx.GraphModule, dequantize: torch.fx.Node) -> torch.Tensor:
    """A weight's dequantize node evaluated on its constants."""
    args = [getattr(module, a.target) if isinstance(a, torch.fx.Node) else a for a in dequantize.args]
    return dequantize.target(*args, **dequantize.kwargs)


def check_4bit(module: torch.fx.GraphModule, block: int | None, weights: dict[str, torch.Tensor]) -> None:
    """The projections' codes are 4-bit ([-7, 7], symmetric as QNN's), per channel or in blocks of
    ``block`` input channels, and close to the float ``weights``; the lm_head keeps 8 bits."""
    layers = linear_weights(module)
    _, head = layers.pop("lm_head")
    assert head.dtype == torch.int8 and int(head.abs().max()) > 7
    assert len(layers) == 6  # q, k, v, o, gate_up (the swapped MLP's fused projection), down
    for path, (dequantize, codes) in layers.items():
        assert codes.dtype == torch.int8 and int(codes.abs().max()) <= 7, path
        if block is None:
            assert "dequantize_per_channel" in str(dequantize.target), path
        else:
            scales = getattr(module, dequantize.args[2].target)
            assert tuple(dequantize.args[1]) == (1, block), path
            assert tuple(scales.shape) == (codes.shape[0], codes.shape[1] // block), path
            assert_on_qnn_grid(scales)
        assert sqnr_db(weights[f"{path}.weight"], dequantized(module, dequantize)) >= MIN_WEIGHT_SQNR_DB, path


def assert_on_qnn_grid(scales: torch.Tensor) -> None:
    """``scales`` are what QNN stores of them: ExecuTorch's QNN builder (``make_qnn_per_block_config``)
    keeps per channel the largest scale / 16 and per block a multiple of it, round(scale / unit)
    clamped to 1..16; the decomposition must give back every scale."""
    unit = scales.amax(dim=-1, keepdim=True) / 16
    multiples = torch.clamp(torch.round(scales / unit), 1, 16)
    torch.testing.assert_close(multiples * unit, scales, rtol=1e-6, atol=0)


def test_block_scales_move_up_onto_qnns_grid_never_down():
    scales = torch.tensor([[0.8, 0.05, 0.33, 0.8], [1e-4, 2e-3, 3e-3, 1e-3]])
    moved = block_scales_on_qnn_grid(scales)
    assert_on_qnn_grid(moved)
    unit = scales.amax(dim=-1, keepdim=True) / 16
    assert bool((moved >= scales).all()) and bool((moved - scales < unit).all())  # no code leaves 4 bits
    assert moved[0, 1] == unit[0, 0] and moved[1, 0] == unit[1, 0]  # below one unit: one unit
    torch.testing.assert_close(block_scales_on_qnn_grid(moved), moved, rtol=1e-6, atol=0)


#: The datatypes each library op of the model takes, as 16a8w gives them (its OpDef declares no
#: 4-bit tensor): 16-bit activations, and the norms' gains as UFIXED_POINT_8.
OP_DATATYPES = {
    "rms_norm": {"UFIXED_POINT_16", "UFIXED_POINT_8"},
    "fused_add_rms_norm": {"UFIXED_POINT_16", "UFIXED_POINT_8"},
    "rope": {"UFIXED_POINT_16"},
    "silu_and_mul": {"UFIXED_POINT_16"},
}


def op_datatypes(module: torch.fx.GraphModule) -> dict[str, set[str]]:
    """Per library op of the graph, the datatypes of its quantized inputs."""
    found: dict[str, set[str]] = {}
    for node in module.graph.nodes:
        if str(node.target).startswith("qco_llm."):
            inputs = [a for a in node.args if is_dequantize(a)]
            found.setdefault(node.target._opname, set()).update(encoding_of(a).datatype.name for a in inputs)
    return found


def check_as_convolutions(module: torch.fx.GraphModule, programs) -> None:
    """What QNN lowers of a 16a4w_block program: each per-block projection a 1x1 convolution over
    the same codes (no copy), computing what the linear does; the program itself unchanged."""
    before = str(module.graph)
    rewritten = block_linears_as_convolutions(module)
    assert str(module.graph) == before
    kinds = [n.target for n in rewritten.graph.nodes if n.op == "call_function"]
    assert kinds.count(torch.ops.aten.conv2d.default) == 6 and kinds.count(torch.ops.aten.linear.default) == 1
    codes = {t.untyped_storage().data_ptr() for t in module.state_dict().values() if t.dtype == torch.int8}
    assert all(t.untyped_storage().data_ptr() in codes for t in rewritten.state_dict().values() if t.dtype == torch.int8)
    inputs = programs.decode.example_inputs
    with torch.no_grad():
        for want, got in zip(module(*inputs), rewritten(*inputs)):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def check_weights_held_once(converted: tuple, float_module: torch.nn.Module) -> None:
    """The two programs read one copy of each weight's codes, and neither holds a float
    projection weight (what lets a 3B model's float weights be freed before lowering)."""
    prefill = {t.untyped_storage().data_ptr() for t in converted[0].state_dict().values()}
    codes = [t for t in converted[1].state_dict().values() if not t.is_floating_point() and t.dim() == 2]
    assert codes and all(t.untyped_storage().data_ptr() in prefill for t in codes)
    projections = {tuple(p.shape) for n, p in float_module.named_parameters() if n.endswith("proj.weight")}
    for module in converted:
        kept = [n for n, t in module.state_dict().items() if t.is_floating_point() and tuple(t.shape) in projections]
        assert kept == [], f"float weights kept beside their codes: {kept}"


@pytest.mark.slow
@pytest.mark.parametrize("quant, fold_weights", [("16a4w", False), ("16a4w_block", True)])
def test_4bit_programs_hold_4bit_weights_and_run_on_the_host_as_converted(quant, fold_weights, programs,
                                                                          runner):  # noqa: F811
    """Folded into float32 when lowered, or kept as codes (as for a model too large to fold),
    the host program computes what the converted model does."""
    converted = quantize_llm(programs, quant, [TOKENS], 4)
    check_4bit(converted[1], QUANT_MODES[quant].block_size, programs.decode.module.state_dict())
    check_weights_held_once(converted, programs.decode.module)
    assert op_datatypes(converted[1]) == OP_DATATYPES
    if QUANT_MODES[quant].block_size is not None:
        check_as_convolutions(converted[1], programs)
    (step,) = lowered_steps(programs, runner, methods=("kv_forward",), converted=converted, fold_weights=fold_weights)
    host = RunnerLoop(programs.shape, None, step).score(TOKENS)
    eager = RunnerLoop(programs.shape, None, eager_step(converted[1])).score(TOKENS)
    reference = RunnerLoop(programs.shape, None, eager_step(programs.decode.module)).score(TOKENS)
    against_converted = [sqnr_db(e, h) for e, h in zip(eager, host)]
    against_float = [sqnr_db(f, h) for f, h in zip(reference, host)]
    print(f"{quant} logits SQNR (dB) against converted:", " ".join(f"{s:.1f}" for s in against_converted))
    print(f"{quant} logits SQNR (dB) against float:", " ".join(f"{s:.1f}" for s in against_float))
    assert min(against_converted) >= MIN_SQNR_CONVERTED_DB
    assert statistics.median(against_float) >= MEDIAN_SQNR_FLOAT_DB


@pytest.mark.parametrize("quant", ["16a4w", "16a4w_block"])
def test_llm_export_accepts_the_4bit_modes(quant, tmp_path, capsys):
    """--quant is checked first: a 4-bit mode passes it, and the next check (--target) refuses."""
    err = cli_error(capsys, "llm", "export", str(tmp_path), "-o", str(tmp_path / "out"), "--quant", quant,
                    "--target", "phone")
    assert "--target 'phone'" in err
