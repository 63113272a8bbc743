"""Which parts need more bits (issue 41, item 3): the parts of a static LLM program
(``llm.parts``), each quantized alone and ranked (``sensitivity.analyze``, ``llm analyze``),
and the parts a 4-bit mode keeps at 8-bit weights, named or chosen to meet a target
(``quantize_llm(keep_8bit=...)``, ``sensitivity.choose_kept``, ``llm export --keep-8bit``).
Checked on a tiny random Qwen3, and ranked on the suite's tiny Qwen3 trained here for seconds
(the ``trained`` fixture)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

pytest.importorskip("transformers", reason="transformers is a dev extra (pip install -e '.[dev]')")

from qnn_custom_ops.cli import main  # noqa: E402
from qnn_custom_ops.llm import export_llm, quantize_llm  # noqa: E402
from qnn_custom_ops.llm.quantization import llm_quantizer, quantized_prefill  # noqa: E402
from qnn_custom_ops.llm.hf import LlmExportError  # noqa: E402
from qnn_custom_ops.llm.parts import in_parts, keepable, part_of, parts_in, resolve_kept  # noqa: E402
from qnn_custom_ops.llm.sensitivity import _OnlyParts, analyze, choose_kept  # noqa: E402

from tests.hf_models import hf_model  # noqa: E402

PREFILL, CTX, WINDOW = 16, 64, 48
PER_LAYER = ("q_proj", "k_proj", "v_proj", "o_proj", "mlp", "ops", "activations")
PROMPTS = [[1, 5, 9, 14, 30, 2, 77, 100, 3, 8], [1, 60, 61, 62, 7, 7, 120]]


@pytest.fixture(scope="module")
def programs():
    return export_llm(hf_model("qwen3", num_hidden_layers=2), prefill_len=8, ctx_len=32, cache="runner")


def weight_bits(module: torch.fx.GraphModule) -> dict[str, int]:
    """Each quantized projection's part -> its weight's bits, told by the largest code of the
    dequantize its linear takes the weight through (symmetric: 7 for 4 bits, 127 for 8)."""
    bits = {}
    for node in module.graph.nodes:
        if node.target is torch.ops.aten.linear.default and isinstance(node.args[1], torch.fx.Node):
            dequantize = node.args[1]
            if "dequantize" in str(dequantize.target):
                bits[part_of(node).name] = {7: 4, 127: 8}[dequantize.args[-2]]
    return bits


def test_parts_are_each_layers_projections_mlp_ops_and_activations_and_the_head(programs):
    names = [part.name for part in parts_in(programs.prefill.exported.graph)]
    for layer in range(programs.shape.layers):
        assert {f"layers.{layer}.{kind}" for kind in PER_LAYER} <= set(names), names
    assert {"embedding", "lm_head", "norm"} <= set(names)
    kept = [part.name for part in keepable(parts_in(programs.prefill.exported.graph))]
    assert kept == [f"layers.{layer}.{kind}" for layer in range(programs.shape.layers) for kind in PER_LAYER[:5]]


def test_a_kind_names_every_layers_part_and_an_unknown_name_is_one_line(programs):
    graph = programs.prefill.exported.graph
    assert resolve_kept(["v_proj", "layers.0.mlp"], graph) == {"layers.0.v_proj", "layers.1.v_proj", "layers.0.mlp"}
    with pytest.raises(LlmExportError, match=r"^--keep-8bit v_prj,lm_head: no such part with 4-bit weights; name "
                                             r"parts \(layers\.0\.q_proj, .*\) or kinds \(q_proj, k_proj, v_proj, "
                                             r"o_proj, mlp\); `qnn-custom-ops llm analyze` lists them$"):
        resolve_kept(["v_prj", "lm_head"], graph)


@pytest.mark.slow  # a quantization or lowering (seconds): kept out of the fast tier's 40 s
def test_a_part_quantized_alone_leaves_every_other_projection_float(programs):
    quantizer = _OnlyParts(llm_quantizer("16a4w"), in_parts({"layers.0.v_proj"}))
    alone = weight_bits(quantized_prefill(programs, quantizer, PROMPTS))
    assert alone == {"layers.0.v_proj": 4}
    everything = weight_bits(quantized_prefill(programs, llm_quantizer("16a4w"), PROMPTS))
    assert len(everything) == 11 and everything["lm_head"] == 8 and everything["layers.1.mlp"] == 4


@pytest.mark.slow  # a quantization or lowering (seconds): kept out of the fast tier's 40 s
def test_keep_8bit_gives_the_named_parts_8bit_weights_and_the_rest_their_4_bits(programs):
    prefill, decode = quantize_llm(programs, "16a4w", PROMPTS, 2, keep_8bit=["v_proj", "layers.1.mlp"])
    for module in (prefill, decode):
        bits = weight_bits(module)
        eight = {name for name, width in bits.items() if width == 8}
        assert eight == {"layers.0.v_proj", "layers.1.v_proj", "layers.1.mlp", "lm_head"}, bits
        assert len(bits) == 11 and all(width == 4 for name, width in bits.items() if name not in eight)
    with pytest.raises(LlmExportError, match="^--keep-8bit: 16a8w has no 4-bit weights to keep at 8 bits; use it "
                                             "with 16a4w or 16a4w_block$"):
        quantize_llm(programs, "16a8w", PROMPTS, 2, keep_8bit=["v_proj"])


@pytest.mark.slow
def test_analyze_ranks_every_part_kind_and_the_whole_and_choose_kept_meets_its_target(trained):  # noqa: F811
    """Everything at once costs the most; a target between 16a4w's agreement and what keeping
    every projection at 8 bits gives is met by the fewest of the ranking's first parts."""
    model, _, held, calibration = trained
    programs = export_llm(model, prefill_len=PREFILL, ctx_len=CTX, cache="runner")
    text, calibration = held[: 3 * WINDOW].view(3, WINDOW).tolist(), calibration[:3]
    said = []
    rows = analyze(programs, "16a4w", calibration, text, said.append)
    parts = [part.name for part in parts_in(programs.prefill.exported.graph)]
    assert {row.part for row in rows} == {*parts, *(f"{k} (every layer)" for k in PER_LAYER), "all"}
    assert [row.sqnr_db for row in rows] == sorted(row.sqnr_db for row in rows)
    assert rows[0].part == "all" and rows[0].top1_agreement < 1
    assert len(said) == len(rows) and said[-1].startswith(f"analyze: {len(rows)} of {len(rows)} quantized alone")
    keepable_names = {part.name for part in keepable(parts_in(programs.prefill.exported.graph))}
    ranking = [row.part for row in rows if row.part in keepable_names]
    none = choose_kept(programs, "16a4w", calibration, text, 0.0, ranking=ranking)
    assert none.kept == () and none.reached
    every = choose_kept(programs, "16a4w", calibration, text, 1.01, ranking=ranking)
    assert not every.reached and every.kept == tuple(ranking) and every.weight_share == pytest.approx(1.0)
    target = (none.top1_agreement + every.top1_agreement) / 2
    chosen = choose_kept(programs, "16a4w", calibration, text, target, ranking=ranking)
    assert chosen.reached and chosen.top1_agreement >= target and chosen.kept == tuple(ranking[: len(chosen.kept)])
    fewer = choose_kept(programs, "16a4w", calibration, text, 1.01, ranking=ranking[: len(chosen.kept) - 1])
    assert fewer.top1_agreement < target


@pytest.mark.parametrize("argv, message", [
    (["export", "{ckpt}", "-o", "{tmp}/out", "--quant", "16a8w", "--keep-8bit", "v_proj"],
     "--keep-8bit: 16a8w's weights are 8 bits or more already; use it with --quant 16a4w or 16a4w_block"),
    (["export", "{ckpt}", "-o", "{tmp}/out", "--keep-8bit", "auto"],
     "--keep-8bit is for a quantized export: give --quant (e.g. 16a4w_block)"),
    (["analyze", "{ckpt}", "--quant", "none"],
     "--quant 'none': use one of 8a8w, 16a8w, 16a16w, 16a4w, 16a4w_block"),
    (["analyze", "{tmp}/nothing", "--quant", "16a4w"],
     "{tmp}/nothing: no config.json; pass a Hugging Face checkpoint directory"),
])
def test_keep_8bit_and_analyze_refuse_what_cannot_work_in_one_line_before_torch(tmp_path, argv, message):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text('{"model_type": "qwen3"}')
    (tmp_path / "ckpt" / "tokenizer.json").write_text("{}")
    argv = ["llm", *(a.format(tmp=tmp_path, ckpt=tmp_path / "ckpt") for a in argv)]
    code = f"import sys; from qnn_custom_ops.cli import main; print(main({argv!r}), 'torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.stdout.strip(), done.stderr.strip()) == ("2 False", "error: " + message.format(tmp=tmp_path))


@pytest.mark.parametrize("value", ["0", "101", "most"])
def test_keep_target_is_a_percentage(value):
    done = subprocess.run([sys.executable, "-m", "qnn_custom_ops", "llm", "export", "x", "-o", "y", "--keep-target",
                           value], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr.strip()) == (2, (
        f"error: qnn-custom-ops llm export: argument --keep-target: {value!r} is not a percentage above 0 and at "
        "most 100; see qnn-custom-ops llm export --help"))


@pytest.mark.slow
def test_llm_analyze_prints_the_ranking_and_export_trains_with_the_parts_auto_chose(checkpoint, tmp_path, capsys):  # noqa: F811
    assert main(["llm", "analyze", str(checkpoint), "--quant", "16a4w", "--prefill", "8", "--ctx", "32", "--json",
                 "--progress"]) == 0
    out, err = capsys.readouterr()
    analysis = json.loads(out)
    assert analysis["quant"] == "16a4w" and analysis["text"] == "the calibration text"
    assert analysis["rows"][0]["part"] == "all" and "analyze: 1 of " in err
    assert main(["llm", "export", str(checkpoint), "-o", str(tmp_path / "out"), "--prefill", "8", "--ctx", "32",
                 "--quant", "16a4w", "--qat", "2", "--keep-8bit", "auto", "--keep-target", "100", "--progress"]) == 0
    err = capsys.readouterr().err
    assert "keep-8bit auto: kept layers." in err and "target 100.0%" in err
    assert err.index("keep-8bit auto: kept") < err.index("QAT 16a4w: step 2 of 2")  # chosen, then trained with them
