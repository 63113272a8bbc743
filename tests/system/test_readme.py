"""The Python snippets of the README and docs/ run as written, so they cannot drift from what works."""

from __future__ import annotations

import re

import pytest
import torch

import qnn_custom_ops as qco

from tests.conftest import DOCS, REPO, doc_block
from tests.torch_ops import EXAMPLE_PACKAGE, MUL3, ConvMul3

QD = torch.ops.quantized_decomposed


@pytest.mark.slow  # quantizes, builds the host library and lowers
def test_the_readme_python_quick_start_runs_and_prints_outputs_within_one_step(monkeypatch, capsys):
    """The README's quick start, run from the checkout as it says: the bound op's program on the
    host matches the converted model within one quantization step."""
    monkeypatch.chdir(REPO)
    names: dict = {}
    exec(doc_block("README.md", "**From Python**"), names)
    inputs, program = names["inputs"], names["program"]
    assert [e.datatype for e in program.output_encodings] == [qco.Datatype.UFIXED_POINT_8]
    (report,) = qco.compare_outputs(names["outputs"], [names["converted"](*inputs)], qco.Tolerance(),
                                    program.output_encodings)
    assert report.passed and report.steps <= 1, report
    assert capsys.readouterr().out.strip() == str(report)


@pytest.mark.slow  # the first QnnQuantizer of a process imports executorch's QNN backend
def test_the_docs_quantization_lines_quantize_a_bound_op_8a8w():
    """The Quantizer annotation section's PT2E lines, run on the seed model: the bound op
    ends up between dequantize and quantize nodes, and the converted model computes what the
    float one does, within 8-bit quantization error."""
    model = ConvMul3()
    inputs = (torch.randn(1, 3, 8, 8),)
    names = {"qco": qco, "binding": qco.bind(EXAMPLE_PACKAGE, {"ExampleCustomOp": MUL3}), "model": model,
             "example_inputs": inputs, "calibration_inputs": [inputs, (torch.randn(1, 3, 8, 8),)]}
    exec(doc_block("docs/python-api.md", "Quantizing is the PT2E flow"), names)
    converted = names["converted"]
    (mul3,) = [node for node in converted.graph.nodes if node.target == MUL3]
    assert mul3.args[0].target == QD.dequantize_per_tensor.default
    assert [user.target for user in mul3.users] == [QD.quantize_per_tensor.default]
    assert mul3.args[0].args[-1] == torch.uint8  # 8a8w activations
    with torch.no_grad():
        torch.testing.assert_close(converted(*inputs), model(*inputs), atol=0.02, rtol=0)


def test_every_qco_name_the_readme_and_examples_call_is_public():
    """``qco.X`` in the README's and docs' snippets and the examples is in ``qco.__all__`` (or a
    subpackage), so a user never reaches into a private module for what the pages call."""
    texts = [*(page.read_text() for page in DOCS), *(path.read_text() for path in (REPO / "examples").glob("*.py"))]
    used = {name for text in texts for name in re.findall(r"\bqco\.(\w+)", text)}
    subpackages = {path.name for path in (REPO / "src" / "qnn_custom_ops").iterdir() if (path / "__init__.py").exists()}
    assert sorted(used - set(qco.__all__) - subpackages) == []


def test_a_quantized_output_is_compared_with_public_names_only():
    """``compare_outputs(..., encodings=...)`` as the docs write it, built from the package's
    public names: outputs one code apart are one step."""
    from qnn_custom_ops import Datatype, Encoding, Tolerance, compare_outputs

    encoding = Encoding(Datatype.UFIXED_POINT_8, scale=0.5, offset=-10)
    (report,) = compare_outputs([torch.tensor([1.0, 2.5])], [torch.tensor([1.0, 2.0])], Tolerance(), [encoding])
    assert (report.steps, report.passed) == (1, True)


def test_the_docs_torch_first_route_gives_its_op_the_out_variant(tmp_path):
    """The torch-first route's module, as docs/op-packages.md writes it: the op it defines has the .out
    overload build-host needs, so binding it warns of nothing."""
    import warnings

    from qnn_custom_ops.torch_bridge.binding import MissingOutVariantWarning

    exec(doc_block("docs/op-packages.md", "The torch-first route"), {})
    swish = torch.ops.my_ops.swish.default
    (tmp_path / "swish.xml").write_text(qco.opdef_from_torch(swish, package="SwishPackage", qnn_op_type="Swish"))
    package = qco.load_package(tmp_path / "swish.xml")
    with warnings.catch_warnings():
        warnings.simplefilter("error", MissingOutVariantWarning)
        qco.bind(package, {"Swish": swish})


def _table_rows(text: str) -> list[list[str]]:
    """The cells of each row of the markdown tables in ``text``, their header rules left out."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in text.splitlines()]
    return [row for row in rows if len(row) > 1 and not set(row[0]) <= {"-"}]


def test_the_readme_size_figures_are_the_benchmark_rows_of_docs():
    """The README's sizes (peak RSS, programs' bytes, their ratio; ``llm generate``'s peak) are
    ``bench_llm_sizes``' as docs/benchmarks.md records them, so the front door cannot drift from
    what was measured."""
    readme = (REPO / "README.md").read_text().split("**Sizes.**")[1].split("##")[0]
    docs = (REPO / "docs" / "benchmarks.md").read_text()
    ((ratio, peak),) = re.findall(r"peaks at ([\d.]+x) its files \(([\d.]+ GiB)\)", readme)
    assert f"{peak}, {ratio}" in docs, "README's llm generate figure is not docs/benchmarks.md's"
    rows = _table_rows(docs)
    measured = {(row[0], row[1]): row for row in rows if len(row) == 11}
    shown = [row for row in _table_rows(readme) if row[0] != "model"]
    assert shown, "the README's **Sizes.** table has no rows"
    for model, quant, peak, programs, ratio, _ in shown:
        bench = measured[(model.split()[0], quant)]
        assert (peak, programs) == (bench[7], bench[9]), f"README's {model} {quant} row differs from docs/benchmarks.md"
        assert float(ratio.rstrip("x")) == pytest.approx(float(peak.split()[0]) / float(programs.split()[0]), abs=0.01)
