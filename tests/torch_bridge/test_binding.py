"""Torch bridge: schema alignment, the QnnOpSpec builder, op wrappers from edge graphs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import qnn_custom_ops as qco
from qnn_custom_ops.torch_bridge import OpMappingError

from tests.conftest import OP_PACKAGES
from tests.torch_ops import (
    ARG_KIND_PACKAGE, EXAMPLE_PACKAGE, HALVES, MUL3, SINK, SPLIT, SPLIT_PACKAGE, bound_nodes, edge_program)


@pytest.fixture(scope="module")
def sink_binding():
    return qco.bind(ARG_KIND_PACKAGE, {"KitchenSink": SINK, "TwoHalves": HALVES})


def test_shipped_example_package_binds_to_mul3():
    binding = qco.bind(EXAMPLE_PACKAGE, {"ExampleCustomOp": MUL3})
    op = binding.ops["ExampleCustomOp"]
    assert op.custom_op_name == "my_ops.mul3.default"
    assert [a.schema_name for a in op.inputs] == ["input"]


def test_an_overload_packet_is_refused_with_the_overload_to_use():
    with pytest.raises(qco.AlignmentError, match=r"bind an overload: my_ops::mul3\.default"):
        qco.bind(EXAMPLE_PACKAGE, {"ExampleCustomOp": torch.ops.my_ops.mul3})


class SinkModel(torch.nn.Module):
    def __init__(self, with_bias: bool):
        super().__init__()
        self.with_bias = with_bias

    def forward(self, x, bias):
        return SINK(x, bias if self.with_bias else None, -3, True, [0.25, 4.0], mode="max", axis=-2)


@pytest.mark.slow
def test_every_argument_kind_maps_with_exact_datatypes_and_values(sink_binding):
    program = edge_program(SinkModel(with_bias=True), torch.randn(2, 4), torch.randn(4))
    (node,) = bound_nodes(sink_binding, program)
    spec = sink_binding.qnn_op_spec(node)
    assert (spec.package_name, spec.type_name, spec.name) == ("ArgKindPackage", "KitchenSink", node.name)
    assert [n.name for n in spec.inputs] == ["x", "bias"]
    params = {p.name: p for p in spec.params}
    assert list(params) == ["alpha", "axis", "flag", "mode", "scales", "shift", "sizes"]  # XML order
    expected = {
        "alpha": ("QNN_DATATYPE_FLOAT_32", np.float32(0.5)),  # defaulted: taken from the schema
        "axis": ("QNN_DATATYPE_INT_32", np.int32(-2)),  # keyword-only, negative
        "flag": ("QNN_DATATYPE_BOOL_8", np.bool_(True)),  # a bool is BOOL_8, not UINT_32
        "mode": ("QNN_DATATYPE_UINT_32", np.uint32(2)),  # "max" is enum index 2
        "scales": ("QNN_DATATYPE_FLOAT_32", np.array([0.25, 4.0], dtype=np.float32)),
        "shift": ("QNN_DATATYPE_INT_32", np.int32(-3)),  # negative int works
        "sizes": ("QNN_DATATYPE_INT_32", np.array([1, 2], dtype=np.int32)),  # default list, int32 elements
    }
    for name, (datatype, value) in expected.items():
        assert params[name].datatype == datatype, name
        assert params[name].value.dtype == value.dtype, name
        np.testing.assert_array_equal(params[name].value, value)
    assert spec.outputs[0].shape == (2, 4) and spec.outputs[0].dtype == torch.float32


@pytest.mark.slow
def test_optional_trailing_input_passed_as_none_is_omitted(sink_binding):
    program = edge_program(SinkModel(with_bias=False), torch.randn(2, 4), torch.randn(4))
    (node,) = bound_nodes(sink_binding, program)
    assert [n.name for n in sink_binding.qnn_op_spec(node).inputs] == ["x"]


@pytest.mark.slow
def test_multi_output_op_maps_each_output(sink_binding):
    class Halves(torch.nn.Module):
        def forward(self, x):
            a, b = HALVES(x)
            return a + 1, b * 2

    program = edge_program(Halves(), torch.randn(1, 2, 3, 8))
    (node,) = bound_nodes(sink_binding, program)
    spec = sink_binding.qnn_op_spec(node)
    assert [(o.index, o.name, o.shape) for o in spec.outputs] == [(0, "first", (1, 2, 3, 4)),
                                                                   (1, "second", (1, 2, 3, 4))]


@pytest.mark.slow
def test_node_of_an_unbound_op_is_an_error_naming_it(sink_binding):
    program = edge_program(torch.nn.ReLU(), torch.randn(2))
    node = next(n for n in program.graph.nodes if n.op == "call_function")
    with pytest.raises(OpMappingError, match=f"node {node.name} .* is not a bound op"):
        sink_binding.qnn_op_spec(node)


@pytest.mark.parametrize("shift, scales, message", [
    (2**31, [1.0], r"param 'shift' = 2147483648 fits none of its datatypes INT_32"),
    (1, [], r"param 'scales' is an empty list"),
    (1, [1e300], r"param 'scales' = 1e\+300 fits none of its datatypes FLOAT_32"),
])
@pytest.mark.slow
def test_values_the_opdef_cannot_hold_are_errors(sink_binding, shift, scales, message):
    class Bad(torch.nn.Module):
        def forward(self, x):
            return SINK(x, None, shift, False, scales)

    program = edge_program(Bad(), torch.randn(3))
    (node,) = bound_nodes(sink_binding, program)
    with pytest.raises(OpMappingError, match=message), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the error alone: no numpy overflow warning beside it
        sink_binding.qnn_op_spec(node)


@pytest.mark.slow
def test_enum_value_outside_the_enumeration_is_an_error(sink_binding):
    class Bad(torch.nn.Module):
        def forward(self, x):
            return SINK(x, None, 1, False, [1.0], mode="median")

    (node,) = bound_nodes(sink_binding, edge_program(Bad(), torch.randn(3)))
    with pytest.raises(OpMappingError, match=r"'median', not one of its enum values mean, rms, max"):
        sink_binding.qnn_op_spec(node)


def test_misaligned_schema_reports_every_problem_at_once():
    library = torch.library.Library("qco_misaligned", "FRAGMENT")
    library.define("sink(Tensor x, Tensor bias, float shift, int flag, int[] scales, float alpha=0.25, "
                   "int extra=0, *, int axis=-1) -> (Tensor, Tensor)")
    with pytest.raises(qco.AlignmentError) as info:
        qco.bind(ARG_KIND_PACKAGE, {"KitchenSink": torch.ops.qco_misaligned.sink.default,
                                    "TwoHalves": torch.ops.qco_misaligned.sink.default,
                                    "Missing": SINK})
    problems = [str(p) for p in info.value.problems]
    expected = [
        "KitchenSink: input bias (schema bias): the XML says Mandatory=false, the schema says Tensor",
        "KitchenSink: param flag: the XML says BOOL_8, the schema says int (use an integer datatype",
        "KitchenSink: param mode: the XML says a parameter, the schema says no argument of that name",
        "KitchenSink: param scales: the XML says FLOAT_32, the schema says List[int]",
        "KitchenSink: param shift: the XML says INT_32, the schema says float (use a FLOAT_* datatype)",
        "KitchenSink: param sizes: the XML says a parameter, the schema says no argument of that name",
        "KitchenSink: param alpha: the XML says Default '0.5', the schema says default 0.25",
        "KitchenSink: argument extra: the XML says no parameter of that name, the schema says int",
        "KitchenSink: outputs: the XML says 1 output(s), the schema says 2 return(s)",
        "TwoHalves: op: the XML says QNN op TwoHalves, the schema says my_ops",
        "Missing: op: the XML says nothing (no such OpDef)",
    ]
    for line in expected[:-2]:
        assert sum(p.startswith(line) for p in problems) == 1, (line, problems)
    assert any(p.startswith("TwoHalves: op:") and "already bound to KitchenSink" in p for p in problems)
    assert any(p.startswith(expected[-1]) for p in problems)
    assert len(problems) == 11


def test_opdef_from_torch_generates_a_config_that_loads_binds_and_generates(tmp_path):
    from qnn_custom_ops.generator import generate

    xml = qco.opdef_from_torch(SINK, package="SinkPackage", qnn_op_type="KitchenSink",
                               enums={"mode": ["mean", "rms", "max"]})
    config = tmp_path / "sink.xml"
    config.write_text(xml)
    package = qco.load_package(config)
    op = package.ops["KitchenSink"]
    assert [t.name for t in op.inputs] == ["x", "bias"] and not op.inputs[1].mandatory
    assert op.outputs[0].datatypes == (qco.Datatype.FLOAT_32, qco.Datatype.UFIXED_POINT_8)
    binding = qco.bind(package, {"KitchenSink": SINK})
    assert binding.ops["KitchenSink"].custom_op_name == "qco_test.kitchen_sink.default"
    result = generate(package, tmp_path / "out")
    assert (result.package_dir / "kernels/KitchenSink.h").is_file()


def test_opdef_from_torch_needs_enum_values_for_str_arguments():
    with pytest.raises(ValueError, match=r"str argument 'mode' needs its allowed values"):
        qco.opdef_from_torch(SINK, package="SinkPackage")


def test_define_torch_ops_makes_functional_out_and_fake_variants():
    assert str(MUL3._schema) == "my_ops::mul3(Tensor input) -> Tensor"
    assert str(torch.ops.my_ops.mul3.out._schema) == "my_ops::mul3.out(Tensor input, *, Tensor(a!) out) -> Tensor(a!)"
    x = torch.randn(1, 2, 2, 3)
    assert torch.equal(MUL3(x), x * 3)
    out = torch.empty_like(x)
    torch.ops.my_ops.mul3.out(x, out=out)
    assert torch.equal(out, x * 3)
    first, second = SPLIT(torch.arange(8.0).reshape(1, 1, 2, 4))
    assert first.shape == (1, 1, 2, 2) and second[0, 0, 0].tolist() == [2.0, 3.0]

    class Split(torch.nn.Module):
        def forward(self, x):
            return SPLIT(x)

    exported = torch.export.export(Split(), (torch.randn(1, 1, 1, 4),))  # the fake kernel traces
    assert any(n.target is SPLIT for n in exported.graph.nodes)


def test_define_torch_ops_schema_binds_to_its_own_opdef():
    binding = qco.bind(SPLIT_PACKAGE, {"SplitCustomOp": SPLIT})
    assert binding.ops["SplitCustomOp"].custom_op_name == "my_ops.split_half.default"


@pytest.mark.slow
def test_a_custom_op_without_out_variant_gets_the_one_line_fix_and_then_builds(tmp_path):
    """torch.library.custom_op defines no .out overload; binding says how to add it, and
    register_out_variant makes the host library build."""
    import warnings

    from qnn_custom_ops.torch_bridge.binding import MissingOutVariantWarning

    @torch.library.custom_op("qco_custom::triple", mutates_args=())
    def triple(input: torch.Tensor) -> torch.Tensor:
        return input * 3

    @triple.register_fake
    def _(input):
        return torch.empty_like(input)

    overload = torch.ops.qco_custom.triple.default
    with pytest.warns(MissingOutVariantWarning, match=r"qnn_custom_ops\.register_out_variant\("
                                                      r"torch\.ops\.qco_custom\.triple\.default\)"):
        binding = qco.bind(EXAMPLE_PACKAGE, {"ExampleCustomOp": overload})
    from qnn_custom_ops.generator.executorch_library import UnsupportedHostKernelError

    with pytest.raises(UnsupportedHostKernelError, match=r"register_out_variant\(torch\.ops\.qco_custom\.triple"):
        qco.build_host_library(OP_PACKAGES / "ExampleOpPackage", binding, build_root=tmp_path)
    out_variant = qco.register_out_variant(overload)
    out = torch.empty(2)
    assert out_variant(torch.ones(2), out=out) is out and out.tolist() == [3.0, 3.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", MissingOutVariantWarning)
        binding = qco.bind(EXAMPLE_PACKAGE, {"ExampleCustomOp": overload})
    assert qco.build_host_library(OP_PACKAGES / "ExampleOpPackage", binding, build_root=tmp_path).is_file()
