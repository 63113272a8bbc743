"""Host kernel library, lowering, the ExecuTorch runtime, comparisons and the raw-file protocol."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import qnn_custom_ops as qco
from qnn_custom_ops.runtime.loading import library_kernels
from qnn_custom_ops.runtime import (
    HostRunner,
    KernelDType,
    KernelLibrary,
    KernelLoadError,
    KernelTensor,
    MissingKernelError,
    RawOutputError,
    TensorSpec,
    Tolerance,
    check_program_kernels,
    cmake_build,
    compare_outputs,
    load_host_library,
    read_outputs,
    registered_operators,
    write_inputs,
)

from tests.conftest import OP_PACKAGES, REPO
from tests.torch_ops import (
    EXAMPLE_PACKAGE,
    MUL3,
    QUANT_PACKAGE,
    SPLIT,
    SPLIT_PACKAGE,
    ConvMul3,
    SplitModel,
    pt2e_quantize,
)

EXAMPLE_DIR, SPLIT_DIR = OP_PACKAGES / "ExampleOpPackage", OP_PACKAGES / "SplitCustomOpPackage"


@pytest.fixture(scope="module")
def mul3():
    binding = qco.bind(EXAMPLE_PACKAGE, {"ExampleCustomOp": MUL3})
    return binding, qco.build_host_library(EXAMPLE_DIR, binding)


@pytest.fixture(scope="module")
def split():
    binding = qco.bind(SPLIT_PACKAGE, {"SplitCustomOp": SPLIT})
    return binding, qco.build_host_library(SPLIT_DIR, binding)


@pytest.mark.slow
def test_rebuilding_an_unchanged_library_reuses_it_without_cmake(mul3, monkeypatch):
    binding, library = mul3
    assert library.is_file() and library_kernels(library) == [
        "my_ops::mul3.out", "qco_quantized::my_ops__mul3.out"]

    def no_cmake(*args, **kwargs):
        raise AssertionError("cmake ran for an unchanged package")

    monkeypatch.setattr(cmake_build, "_run", no_cmake)
    assert qco.build_host_library(EXAMPLE_DIR, binding) == library


@pytest.mark.slow
def test_the_library_also_exports_the_c_abi(mul3):
    _, path = mul3
    kernels = KernelLibrary(path, "ExampleOpPackage")
    q = np.arange(256, dtype=np.uint8).reshape(1, 1, 16, 16)
    out = KernelTensor.empty(q.shape, KernelDType.UFixed8, 0.06, -128)
    kernels.run("ExampleCustomOp", [out], [KernelTensor(q, KernelDType.UFixed8, 0.02, -128)])
    expected = np.clip(np.rint((3 * np.float32(0.02) * (q.astype(np.int32) - 128).astype(np.float32))
                               / np.float32(0.06)) + 128, 0, 255)
    np.testing.assert_array_equal(out.array, expected.astype(np.uint8))


@pytest.mark.slow
def test_float_models_match_eager_and_lower_writes_the_pte(mul3, split, tmp_path):
    torch.manual_seed(0)
    for (binding, library), model, shape in ((mul3, ConvMul3(), (1, 3, 8, 8)), (split, SplitModel(), (2, 3, 8))):
        model = model.eval()
        inputs = (torch.randn(*shape),)
        eager = model(*inputs)
        eager = eager if isinstance(eager, tuple) else (eager,)
        pte = tmp_path / f"{type(model).__name__}.pte"
        program = qco.lower(model, inputs, binding, target="host", output=pte)
        assert pte.read_bytes() == program.buffer
        outputs = HostRunner([library]).run(program.buffer, [inputs])[0]
        reports = compare_outputs(outputs, eager, Tolerance(atol=1e-5))
        assert all(r.passed for r in reports), [str(r) for r in reports]


@pytest.mark.slow
def test_loading_the_same_library_twice_is_a_no_op(mul3):
    _, library = mul3
    assert load_host_library(library) is load_host_library(library)


@pytest.mark.slow
def test_a_second_library_with_the_same_kernels_is_refused(tmp_path):
    ops = qco.define_torch_ops(EXAMPLE_PACKAGE, "qco_clash", {"ExampleCustomOp": lambda input: input * 3},
                               names={"ExampleCustomOp": "mul3"})
    binding = qco.bind(EXAMPLE_PACKAGE, ops)
    first = qco.build_host_library(EXAMPLE_DIR, binding, build_root=tmp_path / "a")
    (tmp_path / "b").mkdir()
    second = Path(shutil.copy(first, tmp_path / "b" / first.name))  # a second file, the same kernels
    load_host_library(first)
    assert "qco_clash::mul3.out" in registered_operators()
    with pytest.raises(KernelLoadError, match=r"kernels qco_clash::mul3\.out, qco_quantized::qco_clash__mul3\.out are already registered by .*/a/"):
        load_host_library(second)


def test_a_copy_of_a_loaded_library_is_refused_from_its_own_contents(mul3, tmp_path):
    """No sidecar file: the kernel list is read from the library itself, so a renamed copy
    is refused with a clear error instead of aborting the interpreter on a re-registration."""
    _, library = mul3
    load_host_library(library)
    copy = Path(shutil.copy(library, tmp_path / "copy.so"))
    assert library_kernels(copy) == library_kernels(library)
    with pytest.raises(KernelLoadError, match=r"my_ops::mul3\.out.*already registered"):
        load_host_library(copy)


@pytest.mark.slow
def test_a_missing_kernel_is_named_before_running():
    # an op of its own namespace: no library of any test registers its kernel
    float_only = qco.define_torch_ops(QUANT_PACKAGE, "qco_unbuilt", {"FloatOnly": lambda x: torch.tanh(x) * 2})
    binding = qco.bind(QUANT_PACKAGE, float_only)

    class Model(torch.nn.Module):
        def forward(self, x):
            return float_only["FloatOnly"](x) + 1

    program = qco.lower(Model(), (torch.randn(4),), binding, target="host")
    with pytest.raises(MissingKernelError, match=r"not registered \(qco_unbuilt::float_only\.out: its op package's host"):
        check_program_kernels(program.buffer)
    with pytest.raises(MissingKernelError):
        HostRunner().run(program.buffer, [(torch.randn(4),)])


def test_host_lowering_refuses_unbound_custom_ops(mul3):
    binding, _ = mul3

    class Model(torch.nn.Module):
        def forward(self, x):
            return SPLIT(MUL3(x))

    with pytest.raises(qco.PreflightError, match="my_ops.split_half.default, which has no binding"):
        qco.lower(Model(), (torch.randn(1, 1, 1, 4),), binding, target="host")


@pytest.mark.slow
def test_qnn_lowering_without_the_sdk_says_so_in_one_line(mul3, tmp_path, monkeypatch):
    from tests.qnn_wrappers import fake_op_package_library

    monkeypatch.setenv("QNN_SDK_ROOT", "")
    binding, _ = mul3
    builds = [qco.OpPackageBuild("HTP", "x86_64", fake_op_package_library(tmp_path, "ExampleOpPackage"))]
    spec = qco.compile_spec("SM8650", binding, builds)
    with pytest.raises(qco.QnnSdkMissingError) as info:
        qco.lower(ConvMul3().eval(), (torch.randn(1, 3, 8, 8),), binding, target="qnn", compile_spec=spec)
    assert "\n" not in str(info.value) and "host target" in str(info.value)


def test_raw_protocol_round_trip_and_errors(tmp_path):
    inferences = [(torch.arange(6, dtype=torch.float32).reshape(2, 3), torch.tensor([1, 2], dtype=torch.int32)),
                  (torch.ones(2, 3), torch.tensor([3, 4], dtype=torch.int32))]
    input_list, files = write_inputs(inferences, tmp_path / "in", prefix="inputs/")
    assert input_list.read_text().splitlines() == ["inputs/input_0_0.raw inputs/input_0_1.raw",
                                                   "inputs/input_1_0.raw inputs/input_1_1.raw"]
    out = tmp_path / "out"
    out.mkdir()
    for inference, tensors in enumerate(inferences):
        for index, tensor in enumerate(tensors):
            (out / f"output_{inference}_{index}.raw").write_bytes(tensor.numpy().tobytes())
    specs = [TensorSpec((2, 3), torch.float32), TensorSpec((2,), torch.int32)]
    for inference, tensors in enumerate(inferences):
        assert all(torch.equal(a, b) for a, b in zip(read_outputs(out, inference, specs), tensors))
    (out / "output_1_1.raw").write_bytes(b"\0" * 3)
    with pytest.raises(RawOutputError, match=r"output_1_1.raw: 3 bytes, expected 8"):
        read_outputs(out, 1, specs)
    with pytest.raises(RawOutputError, match=r"output_2_0.raw: missing"):
        read_outputs(out, 2, specs)


def test_comparison_metrics():
    golden = torch.tensor([1.0, -2.0, 3.0, 4.0])
    (report,) = compare_outputs([golden + torch.tensor([0.0, 0.0, 0.0, 0.5])], [golden])
    assert report.max_abs == 0.5 and report.mean_abs == 0.125
    assert report.sqnr_db == pytest.approx(10 * math.log10(7.5 / 0.0625))
    assert report.cosine == pytest.approx(float(golden @ (golden + torch.tensor([0, 0, 0, 0.5])))
                                          / float(golden.norm() * (golden + torch.tensor([0, 0, 0, 0.5])).norm()))
    assert not report.passed
    assert compare_outputs([golden], [golden])[0].sqnr_db == math.inf
    (shape_mismatch,) = compare_outputs([golden], [golden.reshape(2, 2)], Tolerance(atol=math.inf))
    assert not shape_mismatch.passed and "golden is [2, 2]" in str(shape_mismatch)
    with pytest.raises(ValueError, match="2 output"):
        compare_outputs([golden, golden], [golden])


@pytest.mark.slow
def test_kernels_run_clean_under_address_and_undefined_behaviour_sanitizers(tmp_path):
    asan = subprocess.run(["g++", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    ubsan = subprocess.run(["g++", "-print-file-name=libubsan.so"], capture_output=True, text=True).stdout.strip()
    libraries = {name: qco_runtime_build(d, tmp_path) for name, d in (("ExampleOpPackage", EXAMPLE_DIR),
                                                                      ("SplitCustomOpPackage", SPLIT_DIR))}
    script = tmp_path / "kernels.py"
    script.write_text(textwrap.dedent(f"""
        import numpy as np
        from qnn_custom_ops.runtime import KernelDType as D, KernelLibrary, KernelTensor as T
        mul3 = KernelLibrary({str(libraries["ExampleOpPackage"])!r}, "ExampleOpPackage")
        split = KernelLibrary({str(libraries["SplitCustomOpPackage"])!r}, "SplitCustomOpPackage")
        x = np.linspace(-5, 5, 2 * 3 * 4 * 6, dtype=np.float32).reshape(2, 3, 4, 6)
        q = (np.arange(x.size) % 256).astype(np.uint8).reshape(x.shape)
        mul3.run("ExampleCustomOp", [T.empty(x.shape, D.Float32)], [T(x, D.Float32)])
        mul3.run("ExampleCustomOp", [T.empty(x.shape, D.UFixed8, 0.5, -3)], [T(q, D.UFixed8, 0.01, -128)])
        split.run("SplitCustomOp", [T.empty((2, 3, 4, 3), D.Float32), T.empty((2, 3, 4, 3), D.Float32)], [T(x, D.Float32)])
        split.run("SplitCustomOp", [T.empty((2, 3, 4, 3), D.UFixed8, 0.1, -128), T.empty((2, 3, 4, 3), D.UFixed8, 0.2, 0)],
                  [T(q, D.UFixed8, 0.1, -128)])
        print("clean", flush=True)  # the sanitizers halt on the first error: nothing came before
        # Then an output whose dims claim more than its buffer holds: the instrumentation is live.
        import ctypes
        from qnn_custom_ops.runtime.kernel_abi import CTensorView
        small = T.empty((2, 3, 4, 3), D.Float32)
        buffer = np.zeros(4, np.float32)
        dims = (ctypes.c_int64 * 4)(2, 3, 4, 3)
        small.view = lambda: (CTensorView(buffer.ctypes.data, dims, 4, int(D.Float32), 1.0, 0), dims)
        split.run("SplitCustomOp", [small, T.empty((2, 3, 4, 3), D.Float32)], [T(x, D.Float32)])
        print("overflow not caught")
    """))
    env = {**os.environ, "LD_PRELOAD": f"{asan} {ubsan}", "ASAN_OPTIONS": "detect_leaks=0",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert result.stdout.strip() == "clean", result.stderr[-2000:]  # every real call ran clean
    assert result.returncode != 0 and "AddressSanitizer" in result.stderr  # and the overflow was caught


def qco_runtime_build(package_dir, tmp_path):
    from qnn_custom_ops.runtime import build_host_kernels

    return build_host_kernels(package_dir, sanitize="address,undefined", build_root=tmp_path / "asan")


def run_example(name: str, *args: str, capsys) -> tuple[int, str]:
    """An example's main() in this process (its logic is what is tested here; `make demo`
    runs the real entry point)."""
    import runpy

    argv, path = sys.argv, list(sys.path)
    sys.argv, sys.path = [name, *args], [str(REPO / "examples"), *sys.path]
    try:
        namespace = runpy.run_path(str(REPO / "examples" / name))
        code = namespace["main"]()
    finally:
        sys.argv, sys.path[:] = argv, path
    return code, capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("example", ["custom_op_mul3.py", "split_multi_output.py"])
def test_examples_run_the_quantized_branch_on_the_host(example, tmp_path, capsys):
    code, out = run_example(example, "--target", "host", "--output-dir", str(tmp_path), capsys=capsys)
    assert code == 0, out
    assert out.strip().endswith("OK")
    assert "kernel runs on quantized tensors, as on the HTP" in out and "UFIXED_POINT_8 scale" in out
    assert "max abs 0 (0 steps of" in out  # the host program reproduces the converted model
    names = {"custom_op_mul3.py": ["softmax(mul3(conv(x)))"], "split_multi_output.py": ["relu(low)", "high * 4"]}
    for index, name in enumerate(names[example]):  # each figure says whose it is: the kernel's or an output's
        assert out.count(f"  output {index} ({name}): [") == 2, out
        assert f"  model output {index} ({name}): UFIXED_POINT_8 scale " in out, out


@pytest.mark.slow
def test_example_entry_point_runs_as_a_script(tmp_path):
    result = subprocess.run([sys.executable, str(REPO / "examples" / "custom_op_mul3.py"), "--target", "host",
                             "--output-dir", str(tmp_path)],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert result.stdout.strip().endswith("OK") and "kernel runs on quantized tensors" in result.stdout
    noise = ("Failed to load", "FutureWarning", "cpuinfo", "PassManager", "backend_opinfo", "No quant config")
    assert [n for n in noise if n in result.stdout + result.stderr] == []  # third-party noise is filtered


@pytest.mark.slow
def test_bound_ops_never_get_executorchs_no_quant_config_message(capsys):
    model = ConvMul3().eval()
    samples = [(torch.randn(1, 3, 8, 8),)]
    pt2e_quantize(model, samples, qco.bind(EXAMPLE_PACKAGE, {"ExampleCustomOp": MUL3}))
    assert "No quant config is implemented" not in capsys.readouterr().out


def test_a_method_loaded_before_a_timed_run_is_the_one_every_run_uses():
    from executorch.exir import to_edge_transform_and_lower

    model, x = torch.nn.Linear(4, 3).eval(), torch.randn(2, 4)
    pte = to_edge_transform_and_lower(torch.export.export(model, (x,))).to_executorch().buffer
    runner = HostRunner()
    method = runner.load(pte)
    assert runner.load(pte) is method
    (out,) = runner.run(pte, [(x,)])[0]
    torch.testing.assert_close(out, model(x).detach())
    assert runner.load(pte) is method
