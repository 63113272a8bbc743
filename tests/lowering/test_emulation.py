"""The host runs what the HTP runs: quantized kernels on quantized tensors with QNN's
encodings, integer inputs as QNN's lowering casts them, kernel failures with their reason.

Real PT2E (QnnQuantizer + our annotation), real lowering, the real ExecuTorch runtime.
"""

from __future__ import annotations

import shutil
import warnings

import pytest
import torch

import qnn_custom_ops as qco
from qnn_custom_ops.runtime.loading import library_kernels, program_operators
from qnn_custom_ops.generator import generate
from qnn_custom_ops.torch_bridge.quantized import Encoding
from qnn_custom_ops.opdef import Datatype
from qnn_custom_ops.runtime import CompareError, HostRunner, RunnerError, Tolerance, compare_outputs

from tests.conftest import DATA, OP_PACKAGES
from tests.torch_ops import (
    EXAMPLE_PACKAGE, MUL3, QUANT_OPS, QUANT_PACKAGE, SPLIT, SPLIT_PACKAGE, ConvMul3, SplitModel, pt2e_quantize)

GATHER, SCALE_ROWS, HALVES = (QUANT_OPS[k] for k in ("GatherRows", "ScaleRows", "Halves"))


@pytest.fixture(scope="module")
def quant_package(tmp_path_factory):
    """QuantTestPackage generated from tests/data/quant_ops.xml, with the test kernels of
    tests/data/quant_kernels (ScaleRows' float branch is wrong on purpose)."""
    out = tmp_path_factory.mktemp("quant-package")
    (out / "QuantTestPackage/kernels").mkdir(parents=True)
    for kernel in (DATA / "quant_kernels").glob("*.h"):
        shutil.copy(kernel, out / "QuantTestPackage/kernels" / kernel.name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", qco.OpDefWarning)
        package_dir = generate(qco.load_package(DATA / "quant_ops.xml"), out).package_dir
    binding = qco.bind(QUANT_PACKAGE, QUANT_OPS)
    return binding, qco.build_host_library(package_dir, binding)


@pytest.fixture(scope="module")
def mul3():
    binding = qco.bind(EXAMPLE_PACKAGE, {"ExampleCustomOp": MUL3})
    return binding, qco.build_host_library(OP_PACKAGES / "ExampleOpPackage", binding)


@pytest.fixture(scope="module")
def split():
    binding = qco.bind(SPLIT_PACKAGE, {"SplitCustomOp": SPLIT})
    return binding, qco.build_host_library(OP_PACKAGES / "SplitCustomOpPackage", binding)


def samples_of(*shapes, count=4, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [tuple(torch.randn(*s, generator=generator) for s in shapes) for _ in range(count)]


def as_tuple(value):
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def run(model, inputs, binding, library, **lower_options):
    program = qco.lower(model, inputs, binding, target="host", **lower_options)
    return program, HostRunner([library]).run(program.buffer, [inputs])[0]


class ScaleModel(torch.nn.Module):
    """linear -> ScaleRows (a static weight) -> + 0.5: activations with non-zero zero points."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.weight = torch.nn.Parameter(torch.linspace(-2.0, 3.0, 8))

    def forward(self, x):
        return SCALE_ROWS(self.linear(x), self.weight) + 0.5


@pytest.mark.parametrize("quant_dtype, activation", [("8a8w", Datatype.UFIXED_POINT_8),
                                                      ("16a8w", Datatype.UFIXED_POINT_16)])
@pytest.mark.slow
def test_quantized_models_run_the_quantized_branch(quant_package, quant_dtype, activation):
    """ScaleRows' float branch adds 1000 on purpose: matching the converted model within one
    step proves the kernel ran on the quantized tensors, with their zero points."""
    _, library = quant_package
    binding = qco.bind(QUANT_PACKAGE, {"ScaleRows": SCALE_ROWS})  # GatherRows has no 16-bit datatype
    samples = samples_of((4, 8))
    converted = pt2e_quantize(ScaleModel().eval(), samples, binding, quant_dtype)
    program, outputs = run(converted, samples[0], binding, library)
    # the linear's weight is dequantized and transposed once, when lowered, not on every call
    assert {op.split("::")[-1].split(".")[0] for op in program_operators(program.buffer)}.isdisjoint(
        {"dequantize_per_channel", "permute_copy", "t_copy"})
    (emulated,) = program.emulated
    encodings = dict(emulated.tensors)
    assert emulated.qnn_op_type == "ScaleRows"
    assert encodings["x"].datatype is activation and encodings["y"].datatype is activation
    weight = Datatype.SFIXED_POINT_8 if quant_dtype == "8a8w" else Datatype.UFIXED_POINT_8
    assert encodings["weight"].datatype is weight
    assert encodings["x"].offset != 0 and encodings["y"].offset != 0  # asymmetric activations
    if quant_dtype == "16a8w":
        assert encodings["weight"].offset == -128  # 16a8w weights: uint8 with zero point 128
    reference = as_tuple(converted(*samples[0]))
    reports = compare_outputs(outputs, reference, Tolerance(atol=0), encodings=program.output_encodings)
    assert all(r.passed for r in reports), [str(r) for r in reports]
    assert "steps of" in str(reports[0])

    # The float branch (the wrong one) is what emulate="float" runs: far from the reference.
    float_program, float_outputs = run(converted, samples[0], binding, library, emulate="float")
    assert float_program.emulated == ()
    (far,) = compare_outputs(float_outputs, reference, Tolerance(atol=0), encodings=program.output_encodings)
    assert not far.passed and far.steps > 10


@pytest.fixture(scope="module")
def mul3_8a8w(mul3, tmp_path_factory):
    """ConvMul3 quantized 8a8w and lowered once for this module, written with its encodings:
    (samples, eager model, converted model, program, path of the .pte)."""
    binding, _ = mul3
    samples = samples_of((1, 3, 8, 8))
    model = ConvMul3().eval()
    converted = pt2e_quantize(model, samples, binding, "8a8w")
    pte = tmp_path_factory.mktemp("mul3-8a8w") / "m.pte"
    return samples, model, converted, qco.lower(converted, samples[0], binding, output=pte), pte


@pytest.mark.slow
def test_shipped_mul3_runs_its_uint8_branch(mul3, mul3_8a8w):
    _, library = mul3
    samples, model, converted, program, _ = mul3_8a8w
    outputs = HostRunner([library]).run(program.buffer, [samples[0]])[0]
    (emulated,) = program.emulated
    assert {str(e.datatype.short_name) for _, e in emulated.tensors} == {"UFIXED_POINT_8"}
    reports = compare_outputs(outputs, as_tuple(converted(*samples[0])), Tolerance(atol=0),
                              encodings=program.output_encodings)
    assert all(r.passed for r in reports), [str(r) for r in reports]
    (against_float,) = compare_outputs(outputs, as_tuple(model(*samples[0])))
    assert against_float.sqnr_db > 20, str(against_float)  # the quantization error, for scale


@pytest.mark.slow
def test_split_runs_with_two_output_encodings(split):
    binding, library = split
    samples = samples_of((2, 3, 8))
    model = SplitModel().eval()
    converted = pt2e_quantize(model, samples, binding, "8a8w")
    program, outputs = run(converted, samples[0], binding, library)
    # the linear's weight is dequantized and transposed once, when lowered, not on every call
    assert {op.split("::")[-1].split(".")[0] for op in program_operators(program.buffer)}.isdisjoint(
        {"dequantize_per_channel", "permute_copy", "t_copy"})
    (emulated,) = program.emulated
    encodings = dict(emulated.tensors)
    assert encodings["first_half"] != encodings["second_half"]
    reports = compare_outputs(outputs, as_tuple(converted(*samples[0])), Tolerance(atol=0),
                              encodings=program.output_encodings)
    assert len(reports) == 2 and all(r.passed for r in reports), [str(r) for r in reports]
    assert all(r.sqnr_db > 20 for r in compare_outputs(outputs, as_tuple(model(*samples[0]))))


class GatherModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(6, 4, generator=torch.Generator().manual_seed(1)))

    def forward(self, indices):
        return GATHER(self.table * 1.0, indices)


@pytest.mark.slow
def test_int64_indices_reach_the_kernel_as_int32_as_on_qnn(quant_package):
    """QNN's lowering casts int64 graph inputs to int32; the kernel (INT_32 only) sees int32."""
    binding, library = quant_package
    indices = torch.tensor([5, 0, 3], dtype=torch.int64)
    _, outputs = run(GatherModel().eval(), (indices,), binding, library)
    torch.testing.assert_close(outputs[0], GatherModel().eval()(indices), rtol=0, atol=0)


@pytest.mark.slow
def test_a_dtype_the_opdef_forbids_is_refused_before_lowering(quant_package):
    """int64 computed in the graph stays int64 on QNN (only inputs and constants are cast)."""
    binding, _ = quant_package

    class Computed(GatherModel):
        def forward(self, indices):
            return GATHER(self.table * 1.0, indices * 2)

    with pytest.raises(qco.PreflightError, match=r"input 'indices' is INT_64, but QuantTestPackage::GatherRows "
                                                 r"allows only INT_32 on HTP"):
        qco.lower(Computed().eval(), (torch.tensor([1, 2]),), binding, target="host")


@pytest.mark.slow
def test_a_kernel_failure_reaches_python_with_its_op_and_status(quant_package):
    binding, library = quant_package

    class Odd(torch.nn.Module):
        def forward(self, x):
            low, high = HALVES(x)
            return low, high

    with pytest.raises(RunnerError, match=r"kernel failed: qco_quant::halves\.out: shape mismatch"):
        run(Odd(), (torch.randn(2, 5),), binding, library)


def test_compare_in_steps_passes_one_step_and_fails_two():
    encoding = Encoding(Datatype.UFIXED_POINT_8, 0.01, -128)
    golden = torch.zeros(4)
    one_step, two_steps = golden + 0.01, golden + 0.02
    tolerance = Tolerance(atol=0)
    assert compare_outputs([one_step], [golden], tolerance, encodings=[encoding])[0].passed
    report = compare_outputs([two_steps], [golden], tolerance, encodings=[encoding])[0]
    assert not report.passed and report.steps == 2
    assert compare_outputs([two_steps], [golden], Tolerance(atol=0, lsb=2), encodings=[encoding])[0].passed
    assert not compare_outputs([one_step], [golden], tolerance)[0].passed  # no encoding: absolute only


@pytest.mark.parametrize("datatype", [Datatype.UFIXED_POINT_16, Datatype.SFIXED_POINT_16, Datatype.UFIXED_POINT_8])
def test_outputs_one_code_apart_are_one_step_whatever_the_float_error(datatype):
    """Dequantized in float32, codes one apart measure 1.0001-1.0011 scales apart at 16 bit (a
    correct 16a8w kernel was reported FAIL): compared in codes they are exactly one step."""
    scale, zero_point = 0.00012317, 3 if datatype.is_signed else 31000
    low, high = datatype.integer_range
    codes_want = torch.randint(low, high, (4096,), dtype=torch.int64)
    codes_got = (codes_want + torch.randint(-1, 2, codes_want.shape)).clamp(low, high)
    golden, output = ((c - zero_point).float() * scale for c in (codes_want, codes_got))
    assert float((output.double() - golden.double()).abs().max()) / scale > 1.0001  # the float view overshoots
    report = compare_outputs([output], [golden], Tolerance(atol=0), [Encoding(datatype, scale, -zero_point)])[0]
    assert report.passed and report.steps == 1
    assert "(1 step of" in str(report)
    saturated = compare_outputs([golden + 50 * scale * high], [golden], Tolerance(atol=0),
                                [Encoding(datatype, scale, -zero_point)])[0]
    assert not saturated.passed and saturated.steps <= high - low


def test_compare_refuses_a_dtype_mismatch():
    report = compare_outputs([torch.zeros(2, dtype=torch.int32)], [torch.zeros(2)])[0]
    assert not report.passed and report.problem == "dtype int32 but the golden is float32"


@pytest.mark.slow
def test_cli_run_compares_in_steps_of_the_encodings_lower_recorded(mul3, mul3_8a8w, tmp_path, capsys):
    from qnn_custom_ops import cli

    _, library = mul3
    samples, _, converted, program, pte = mul3_8a8w
    (encoding,) = program.output_encodings
    assert encoding is not None and pte.with_name("m.pte.encodings.json").is_file()
    torch.save(samples[0][0], tmp_path / "x.pt")
    golden = converted(*samples[0])
    low, high = encoding.datatype.integer_range
    one_step = golden + encoding.scale * torch.where(golden / encoding.scale - encoding.offset < high, 1, -1)
    torch.save(one_step, tmp_path / "one_step.pt")  # one step off everywhere, inside the range
    command = ["run", str(pte), "--inputs", str(tmp_path / "x.pt"), "--library", str(library),
               "--golden", str(tmp_path / "one_step.pt"), "--atol", "0"]
    assert cli.main(command) == 0
    assert "(1 step of" in capsys.readouterr().out
    assert cli.main(command + ["--lsb", "0.5"]) == 3
    assert capsys.readouterr().out.strip().endswith("FAIL")


@pytest.mark.slow
def test_the_host_library_compiles_for_names_that_collide_with_ours_or_cpp(tmp_path):
    """Two ops with an enum param `mode`, arguments named ctx, status, check, int64_t, h_ctx,
    NULL, EOF: every generated file compiles (the HTP side: tests/generator/test_htp_build.py)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", qco.OpDefWarning)
        package = qco.load_package(DATA / "hostile_names.xml")
    package_dir = generate(package, tmp_path).package_dir
    ops = qco.define_torch_ops(package, "qco_hostile", {"First": lambda ctx, h_ctx, mode="fast", check=False,
                                                          int64_t=-2: ctx + h_ctx,
                                                          "Second": lambda NULL_, mode="slow": NULL_ * 2})
    library = qco.build_host_library(package_dir, qco.bind(package, ops), build_root=tmp_path / "cache")
    assert library_kernels(library) == [
        "qco_hostile::first.out", "qco_quantized::qco_hostile__first.out",
        "qco_hostile::second.out", "qco_quantized::qco_hostile__second.out"]


def test_a_named_output_says_its_name_in_its_report():
    golden = torch.tensor([0.5, 1.0])
    (report,) = compare_outputs([golden], [golden], names=["softmax"])
    assert str(report).startswith("output 0 (softmax): [2] float32")
    with pytest.raises(CompareError, match="1 output\\(s\\) but 2 name\\(s\\)"):
        compare_outputs([golden], [golden], names=["a", "b"])
