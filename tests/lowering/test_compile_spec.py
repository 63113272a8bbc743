"""Compile spec op package options, the partitioner's preflight, and the SDK boundary."""

from __future__ import annotations


import pytest
import torch
from executorch.backends.qualcomm.partition.utils import generate_qnn_executorch_option
from executorch.backends.qualcomm.serialization.qc_schema import (
    QcomChipset,
    QnnExecuTorchHtpPrecision,
    QnnExecuTorchOpPackagePlatform,
    QnnExecuTorchOpPackageTarget,
)
from executorch.backends.qualcomm.serialization.qc_schema_serialize import flatbuffer_to_option
from executorch.exir import to_edge_transform_and_lower

import qnn_custom_ops as qco
from qnn_custom_ops.lowering import op_package_options
from qnn_custom_ops.lowering.op_builder import BoundOpVisitor, bound_visitors
from qnn_custom_ops.lowering import (
    DEVICE_WORKSPACE,
    CompileSpecError,
    OpPackageBuild,
    PreflightError,
    QnnCustomOpPartitioner,
    device_library_path,
)

from tests.conftest import REPO
from tests.qnn_wrappers import fake_op_package_library, op_wrappers
from tests.torch_ops import HALVES, SINK, bound_nodes, edge_program
from tests.torch_ops import ARG_KIND_PACKAGE, EXAMPLE_PACKAGE, MUL3


@pytest.fixture(scope="module")
def mul3_binding():
    return qco.bind(EXAMPLE_PACKAGE, {"ExampleCustomOp": MUL3})


@pytest.fixture
def builds(tmp_path):
    x86 = fake_op_package_library(tmp_path, "ExampleOpPackage")
    device = fake_op_package_library(tmp_path, "ExampleOpPackage", "libQnnHexagonFake.so")
    return [OpPackageBuild("HTP", "x86_64", x86), OpPackageBuild("HTP", "aarch64-android", device),
            OpPackageBuild("CPU", "x86_64", x86)]


def decoded(spec):
    return flatbuffer_to_option(generate_qnn_executorch_option(spec))


def test_compile_spec_round_trips_through_executorchs_serializer(mul3_binding, builds):
    spec = qco.compile_spec("SM8650", mul3_binding, builds)
    options = decoded(spec)
    assert options.soc_info.soc_model == QcomChipset.SM8650
    assert options.backend_options.htp_options.precision == QnnExecuTorchHtpPrecision.kHtpQuantized
    infos = options.op_package_options.op_package_infos
    assert [(i.target, i.platform, i.op_package_path) for i in infos] == [
        (QnnExecuTorchOpPackageTarget.HTP, QnnExecuTorchOpPackagePlatform.X86_64, str(builds[0].library.resolve())),
        (QnnExecuTorchOpPackageTarget.HTP, QnnExecuTorchOpPackagePlatform.AARCH64_ANDROID,
         f"{DEVICE_WORKSPACE}/libQnnExampleOpPackage_HTP.so"),
        (QnnExecuTorchOpPackageTarget.CPU, QnnExecuTorchOpPackagePlatform.X86_64, str(builds[0].library.resolve())),
    ]
    for info in infos:
        assert info.op_package_name == "ExampleOpPackage"
        assert info.interface_provider == "ExampleOpPackageInterfaceProvider"
        assert info.custom_op_name == "my_ops.mul3.default"  # the overload, or it never matches
        assert info.qnn_op_type_name == "ExampleCustomOp"
    assert infos[1].op_package_path == device_library_path("ExampleOpPackage", "HTP")


def test_fp16_compile_spec(mul3_binding, builds):
    options = decoded(qco.compile_spec("SM8750", mul3_binding, builds, quant=False))
    assert options.backend_options.htp_options.precision == QnnExecuTorchHtpPrecision.kHtpFp16


def test_build_problems_are_reported_together(mul3_binding, tmp_path):
    wrong = fake_op_package_library(tmp_path, "OtherPackage")
    builds = [OpPackageBuild("CPU", "x86_64", tmp_path / "missing.so"),
              OpPackageBuild("CPU", "x86_64", wrong),
              OpPackageBuild("CPU", "aarch64-android", wrong),
              OpPackageBuild("CPU", "aarch64-android", wrong)]
    with pytest.raises(CompileSpecError) as info:
        op_package_options(mul3_binding, builds)
    message = str(info.value)
    assert "no HTP build" in message
    assert f"{tmp_path / 'missing.so'}: no such library" in message
    assert "does not export ExampleOpPackageInterfaceProvider" in message
    assert "two builds for CPU on aarch64-android" in message


def test_unknown_soc_names_the_known_ones(mul3_binding, builds):
    with pytest.raises(CompileSpecError, match=r"unknown SoC 'SM0000': use one of .*SM8650"):
        qco.compile_spec("SM0000", mul3_binding, builds)


@pytest.fixture
def arg_kind_builds(tmp_path):
    return [OpPackageBuild("HTP", "x86_64", fake_op_package_library(tmp_path, "ArgKindPackage"))]


@pytest.mark.slow
def test_lowering_uses_our_visitor_and_builds_the_op_wrapper(arg_kind_builds):
    binding = qco.bind(ARG_KIND_PACKAGE, {"KitchenSink": SINK, "TwoHalves": HALVES})
    infos = op_package_options(binding, arg_kind_builds).op_package_infos

    class Model(torch.nn.Module):
        def forward(self, x, bias):
            a, b = HALVES(SINK(x, bias, -3, True, [0.25, 4.0]))
            return a, b

    program = edge_program(Model(), torch.randn(1, 1, 2, 8), torch.randn(8))
    from executorch.backends.qualcomm.builders.node_visitor_manager import get_node_visitors

    with bound_visitors(binding):  # as during our partitioning and lowering
        visitors = get_node_visitors(program, op_package_infos=infos)
    assert isinstance(visitors["qco_test.kitchen_sink.default"], BoundOpVisitor)
    assert not isinstance(get_node_visitors(program, op_package_infos=infos)["qco_test.kitchen_sink.default"],
                          BoundOpVisitor)  # and only then
    sink, halves = op_wrappers(program, infos, bound_nodes(binding, program), binding)
    assert (sink.package, sink.type) == ("ArgKindPackage", "KitchenSink")
    assert [(t.dims, t.datatype) for t in sink.inputs] == [([1, 1, 2, 8], "QNN_DATATYPE_FLOAT_32"),
                                                            ([8], "QNN_DATATYPE_FLOAT_32")]
    assert sink.params == [("alpha", "scalar"), ("axis", "scalar"), ("flag", "scalar"), ("mode", "scalar"),
                           ("scales", "tensor"), ("shift", "scalar"), ("sizes", "tensor")]
    assert halves.type == "TwoHalves" and [t.dims for t in halves.outputs] == [[1, 1, 2, 4], [1, 1, 2, 4]]
    assert halves.inputs[0].name == sink.outputs[0].name


def partitioner_for(binding, builds):
    return QnnCustomOpPartitioner(qco.compile_spec("SM8650", binding, builds[:1]), binding)


@pytest.mark.slow
def test_preflight_reports_every_problem_before_any_qnn_call(arg_kind_builds):
    binding = qco.bind(ARG_KIND_PACKAGE, {"KitchenSink": SINK})

    class Model(torch.nn.Module):
        def forward(self, x, ints):
            y = SINK(x, None, 1, False, [1.0], mode="median")  # enum value outside the OpDef
            z = SINK(ints, None, 1, False, [1.0])  # int32 input: the OpDef allows FLOAT_32/UFIXED_POINT_8
            a, _ = HALVES(x)  # custom op without a binding
            return y, z, a

    program = edge_program(Model(), torch.randn(1, 1, 1, 4), torch.ones(1, 1, 1, 4, dtype=torch.int32))
    with pytest.raises(PreflightError) as info:
        partitioner_for(binding, arg_kind_builds).partition(program)
    problems = info.value.problems
    assert len(problems) == 4
    assert "'median', not one of its enum values" in problems[0]
    assert ("input 'x' is INT_32, but ArgKindPackage::KitchenSink allows only FLOAT_32, UFIXED_POINT_8 on HTP"
            in problems[1])
    assert "output 'y' is INT_32" in problems[2]
    assert "calls custom op qco_test.two_halves.default, which has no binding" in problems[3]


@pytest.mark.slow
def test_without_the_sdk_partitioning_says_so_in_one_line(mul3_binding, builds, monkeypatch):
    monkeypatch.setenv("QNN_SDK_ROOT", "")

    class Model(torch.nn.Module):
        def forward(self, x):
            return MUL3(x)

    exported = torch.export.export(Model(), (torch.randn(1, 2, 2, 4),))
    with pytest.raises(qco.QnnSdkMissingError) as info:
        to_edge_transform_and_lower(exported, partitioner=[partitioner_for(mul3_binding, builds)])
    message = str(info.value)
    assert "\n" not in message
    assert "needs the QNN SDK" in message and "QNN_SDK_ROOT" in message and "host target" in message


@pytest.fixture
def executorch_builder(monkeypatch):
    """ExecuTorch's own ``QnnCustomOpPackageBuilder``, whose constructor imports the QNN SDK's
    Python op package generator: a TEST DOUBLE of that generator (reading the config with our
    reader) stands in for it; the builder's own code runs as it is."""
    import sys
    import types

    class QnnOpPackageGeneratorDouble:
        def parse_config(self, paths):
            package = qco.load_package(paths[0])
            operators = [types.SimpleNamespace(type_name=op) for op in package.ops]
            self.package_infos = [types.SimpleNamespace(name=package.name, operators=operators)]

    generator = types.ModuleType("qti.aisw.op_package_generator.generator")
    generator.QnnOpPackageGenerator = QnnOpPackageGeneratorDouble
    monkeypatch.setitem(sys.modules, "qti.aisw.op_package_generator.generator", generator)
    monkeypatch.delitem(sys.modules, "executorch.backends.qualcomm.custom_op.interface", raising=False)
    from executorch.backends.qualcomm.custom_op.interface import QnnCustomOpPackageBuilder

    return QnnCustomOpPackageBuilder


def test_executorchs_own_op_package_options_are_taken_where_our_builds_are(mul3_binding, builds,
                                                                          executorch_builder):
    """What ExecuTorch's docs teach (QnnCustomOpPackageBuilder) goes where our builds go, checked
    against the binding as ours are and kept as it is: its device path stays its own."""
    config = next(p for p in (REPO / "op_packages/ExampleOpPackage/config").glob("*.xml"))
    options = (executorch_builder(str(config), {"ExampleCustomOp": MUL3})
               .register_implementation(QnnExecuTorchOpPackageTarget.HTP, QnnExecuTorchOpPackagePlatform.X86_64,
                                        str(builds[0].library))
               .register_implementation(QnnExecuTorchOpPackageTarget.HTP,
                                        QnnExecuTorchOpPackagePlatform.AARCH64_ANDROID, "/data/local/tmp/mine.so")
               .get_op_package_options())
    infos = decoded(qco.compile_spec("SM8650", mul3_binding, options)).op_package_options.op_package_infos
    assert [(i.platform, i.op_package_path, i.custom_op_name) for i in infos] == [
        (QnnExecuTorchOpPackagePlatform.X86_64, str(builds[0].library), "my_ops.mul3.default"),
        (QnnExecuTorchOpPackagePlatform.AARCH64_ANDROID, "/data/local/tmp/mine.so", "my_ops.mul3.default"),
    ]


def test_executorchs_options_that_disagree_with_the_binding_are_reported_together(mul3_binding, tmp_path,
                                                                                 executorch_builder):
    config = next(p for p in (REPO / "op_packages/ExampleOpPackage/config").glob("*.xml"))
    options = (executorch_builder(str(config), {"ExampleCustomOp": torch.ops.my_ops.mul3})  # the packet, not .default
               .register_implementation(QnnExecuTorchOpPackageTarget.CPU, QnnExecuTorchOpPackagePlatform.X86_64,
                                        str(tmp_path / "missing.so"))
               .get_op_package_options())
    with pytest.raises(CompileSpecError) as info:
        qco.compile_spec("SM8650", mul3_binding, options)
    assert str(info.value).splitlines() == [
        "op package ExampleOpPackage:",
        "  no HTP build: add one for the library made by `make htp_vNN` (device) or `make htp_x86` (simulator): "
        "OpPackageBuild('HTP', ...), or ExecuTorch's register_implementation(...Target.HTP, ...)",
        f"  {tmp_path / 'missing.so'}: no such library (build it with the package Makefile)",
        "  ExampleCustomOp: custom_op_name 'my_ops.mul3' is not the bound 'my_ops.mul3.default': map it to the "
        "overload (torch.ops.ns.op.default)",
    ]
