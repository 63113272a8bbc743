"""The README's Python snippets run as written, so the README cannot drift from what works."""

from __future__ import annotations

import re

import pytest
import torch

import qnn_custom_ops as qco

from .conftest import REPO
from .torch_ops import EXAMPLE_PACKAGE, MUL3, ConvMul3

QD = torch.ops.quantized_decomposed


def readme_block(after: str) -> str:
    """The first ```python block of the README after the text ``after``."""
    (block,) = re.findall(re.escape(after) + r".*?```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    return block


@pytest.mark.slow  # the first QnnQuantizer of a process imports executorch's QNN backend
def test_the_readme_quantization_lines_quantize_a_bound_op_8a8w():
    """The Quantizer annotation section's PT2E lines, run on the seed model: the bound op
    ends up between dequantize and quantize nodes, and the converted model computes what the
    float one does, within 8-bit quantization error."""
    model = ConvMul3()
    inputs = (torch.randn(1, 3, 8, 8),)
    names = {"qco": qco, "binding": qco.bind(EXAMPLE_PACKAGE, {"ExampleCustomOp": MUL3}), "model": model,
             "example_inputs": inputs, "calibration_inputs": [inputs, (torch.randn(1, 3, 8, 8),)]}
    exec(readme_block("Quantizing is the PT2E flow"), names)
    converted = names["converted"]
    (mul3,) = [node for node in converted.graph.nodes if node.target == MUL3]
    assert mul3.args[0].target == QD.dequantize_per_tensor.default
    assert [user.target for user in mul3.users] == [QD.quantize_per_tensor.default]
    assert mul3.args[0].args[-1] == torch.uint8  # 8a8w activations
    with torch.no_grad():
        torch.testing.assert_close(converted(*inputs), model(*inputs), atol=0.02, rtol=0)


def test_every_qco_name_the_readme_and_examples_call_is_public():
    """``qco.X`` in the README's snippets and the examples is in ``qco.__all__`` (or a
    subpackage), so a user never reaches into a private module for what the README calls."""
    texts = [(REPO / "README.md").read_text(), *(path.read_text() for path in (REPO / "examples").glob("*.py"))]
    used = {name for text in texts for name in re.findall(r"\bqco\.(\w+)", text)}
    subpackages = {path.name for path in (REPO / "src" / "qnn_custom_ops").iterdir() if (path / "__init__.py").exists()}
    assert sorted(used - set(qco.__all__) - subpackages) == []


def test_a_quantized_output_is_compared_with_public_names_only():
    """``compare_outputs(..., encodings=...)`` as the README writes it, built from the package's
    public names: outputs one code apart are one step."""
    from qnn_custom_ops import Datatype, Encoding, Tolerance, compare_outputs

    encoding = Encoding(Datatype.UFIXED_POINT_8, scale=0.5, offset=-10)
    (report,) = compare_outputs([torch.tensor([1.0, 2.5])], [torch.tensor([1.0, 2.0])], Tolerance(), [encoding])
    assert (report.steps, report.passed) == (1, True)


def test_the_readme_torch_first_route_gives_its_op_the_out_variant(tmp_path):
    """The torch-first route's module, as the README writes it: the op it defines has the .out
    overload build-host needs, so binding it warns of nothing."""
    import warnings

    from qnn_custom_ops.torch_bridge.binding import MissingOutVariantWarning

    exec(readme_block("The torch-first route"), {})
    swish = torch.ops.my_ops.swish.default
    (tmp_path / "swish.xml").write_text(qco.opdef_from_torch(swish, package="SwishPackage", qnn_op_type="Swish"))
    package = qco.load_package(tmp_path / "swish.xml")
    with warnings.catch_warnings():
        warnings.simplefilter("error", MissingOutVariantWarning)
        qco.bind(package, {"Swish": swish})
