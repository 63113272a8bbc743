"""The shipped kernels, built with CMake for the host and called through the C ABI,
checked against PyTorch."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

import qnn_custom_ops as qco

from pathlib import Path

from qnn_custom_ops.runtime import (
    HostBuildError,
    KernelDType,
    KernelError,
    KernelLibrary,
    KernelTensor,
    build_host_kernels,
    build_host_library,
    cmake_build,
)

from tests.conftest import OP_PACKAGES, opdef_xml

U8 = KernelDType.UFixed8


@pytest.fixture(scope="module")
def build_root(tmp_path_factory):
    return tmp_path_factory.mktemp("host-builds")


@pytest.fixture(scope="module")
def example(build_root):
    path = build_host_kernels(OP_PACKAGES / "ExampleOpPackage", build_root=build_root)
    return KernelLibrary(path, "ExampleOpPackage")


@pytest.fixture(scope="module")
def split(build_root):
    path = build_host_kernels(OP_PACKAGES / "SplitCustomOpPackage", build_root=build_root)
    return KernelLibrary(path, "SplitCustomOpPackage")


def torch_requantize(q: torch.Tensor, in_scale: float, in_offset: int, out_scale: float, out_offset: int,
                     fn) -> torch.Tensor:
    """PyTorch reference with QNN's convention real = scale * (q + offset), in float32."""
    real = torch.tensor(in_scale, dtype=torch.float32) * (q.to(torch.int32) + in_offset).to(torch.float32)
    inverse = 1 / torch.tensor(out_scale, dtype=torch.float32)  # as torch.quantize_per_tensor
    out = torch.round(fn(real) * inverse) - float(out_offset)
    return out.clamp(0, 255).to(torch.uint8)


@pytest.mark.slow
def test_mul3_float32_matches_torch(example):
    x = torch.randn(2, 3, 4, 5, generator=torch.Generator().manual_seed(0)) * 100
    out = KernelTensor.empty(x.shape, KernelDType.Float32)
    example.run("ExampleCustomOp", [out], [KernelTensor(x.numpy(), KernelDType.Float32)])
    assert torch.equal(torch.from_numpy(out.array), x * 3)


ENCODINGS = [  # (in_scale, in_offset, out_scale, out_offset)
    (0.02, -128, 0.06, -128),  # symmetric around 0, same range after *3
    (0.05, 0, 0.05, 0),  # saturates at 255 from 85 up
    (0.1, -200, 0.1, -50),  # negative reals saturate at 0
    (0.0137, -17, 0.0071, -231),  # odd scales, both ends saturate
    (1.0, -128, 3.0, -128),  # exact thirds: ties never hit, values land exactly
    (0.5, -100, 1.0, -128),  # 1.5 * k: many exact .5 ties, round half to even
]


@pytest.mark.slow
@pytest.mark.parametrize("in_scale, in_offset, out_scale, out_offset", ENCODINGS)
def test_mul3_uint8_requantizes_with_offsets_rounding_and_saturation(example, in_scale, in_offset,
                                                                   out_scale, out_offset):
    q = torch.arange(256, dtype=torch.uint8).reshape(1, 4, 8, 8)  # every possible input value
    out = KernelTensor.empty(q.shape, U8, out_scale, out_offset)
    example.run("ExampleCustomOp", [out], [KernelTensor(q.numpy(), U8, in_scale, in_offset)])
    expected = torch_requantize(q, in_scale, in_offset, out_scale, out_offset, lambda r: 3 * r)
    assert torch.equal(torch.from_numpy(out.array), expected)


def test_mul3_uint8_saturates_at_both_ends(example):
    q = torch.tensor([0, 1, 127, 128, 254, 255], dtype=torch.uint8).reshape(1, 1, 1, 6)
    out = KernelTensor.empty(q.shape, U8, 0.01, -128)
    example.run("ExampleCustomOp", [out], [KernelTensor(q.numpy(), U8, 0.01, -128)])
    assert out.array.ravel().tolist() == [0, 0, 125, 128, 255, 255]  # q=127: 3*(-0.01) -> -3 + 128


def test_mul3_round_half_to_even(example):
    # real = 0.5 * q; 3 * real / 1.0 = 1.5 q: q=1 -> 1.5 -> 2, q=3 -> 4.5 -> 4, q=5 -> 7.5 -> 8
    q = np.array([1, 3, 5], dtype=np.uint8).reshape(1, 1, 1, 3)
    out = KernelTensor.empty(q.shape, U8, 1.0, 0)
    example.run("ExampleCustomOp", [out], [KernelTensor(q, U8, 0.5, 0)])
    assert out.array.ravel().tolist() == [2, 4, 8]


@pytest.mark.slow
def test_kernel_errors_are_named(example):
    x = KernelTensor(np.zeros((1, 2, 2, 2), np.float32), KernelDType.Float32)
    with pytest.raises(KernelError, match="ExampleCustomOp failed: shape mismatch"):
        example.run("ExampleCustomOp", [KernelTensor.empty((1, 2, 2, 3), KernelDType.Float32)], [x])
    with pytest.raises(KernelError, match="unsupported dtype"):
        example.run("ExampleCustomOp", [KernelTensor.empty((1, 2, 2, 2), U8)], [x])
    with pytest.raises(KernelError, match="invalid argument"):
        example.run("ExampleCustomOp", [KernelTensor.empty((1, 2, 2, 2), KernelDType.Float32)], [])


def test_a_read_only_output_is_refused_before_the_kernel_writes_into_it(example):
    x = np.ones((1, 2, 2, 2), np.float32)
    frozen = np.frombuffer(bytes(x.nbytes), np.float32).reshape(x.shape)  # truly read-only memory
    with pytest.raises(ValueError, match=r"ExampleCustomOp: output\(s\) \[0\] are read-only arrays"):
        example.run("ExampleCustomOp", [KernelTensor(frozen, KernelDType.Float32)], [KernelTensor(x, KernelDType.Float32)])
    assert not frozen.any()


@pytest.mark.slow
def test_split_float32_matches_torch(split):
    x = torch.randn(2, 3, 4, 6, generator=torch.Generator().manual_seed(1))
    first = KernelTensor.empty((2, 3, 4, 3), KernelDType.Float32)
    second = KernelTensor.empty((2, 3, 4, 3), KernelDType.Float32)
    split.run("SplitCustomOp", [first, second], [KernelTensor(x.numpy(), KernelDType.Float32)])
    expected_first, expected_second = torch.chunk(x, 2, dim=-1)
    assert torch.equal(torch.from_numpy(first.array), expected_first)
    assert torch.equal(torch.from_numpy(second.array), expected_second)


def test_split_uint8_keeps_or_requantizes_each_output_encoding(split):
    q = torch.arange(256, dtype=torch.uint8).reshape(1, 2, 4, 32)
    first = KernelTensor.empty((1, 2, 4, 16), U8, 0.1, -128)  # same encoding as the input: a copy
    second = KernelTensor.empty((1, 2, 4, 16), U8, 0.05, -100)  # its own encoding: requantized
    split.run("SplitCustomOp", [first, second], [KernelTensor(q.numpy(), U8, 0.1, -128)])
    expected_first, second_in = torch.chunk(q, 2, dim=-1)
    assert torch.equal(torch.from_numpy(first.array), expected_first)
    assert torch.equal(torch.from_numpy(second.array),
                       torch_requantize(second_in, 0.1, -128, 0.05, -100, lambda r: r))


def test_split_rejects_odd_channels(split):
    x = KernelTensor(np.zeros((1, 1, 1, 5), np.float32), KernelDType.Float32)
    outs = [KernelTensor.empty((1, 1, 1, 2), KernelDType.Float32) for _ in range(2)]
    with pytest.raises(KernelError, match="shape mismatch"):
        split.run("SplitCustomOp", outs, [x])


@pytest.mark.slow
def test_build_is_cached_by_content(tmp_path, build_root):
    import shutil

    package = tmp_path / "ExampleOpPackage"
    shutil.copytree(OP_PACKAGES / "ExampleOpPackage", package)
    first = build_host_kernels(package, build_root=build_root)
    assert build_host_kernels(package, build_root=build_root) == first
    kernel = package / "kernels/ExampleCustomOp.h"
    kernel.write_text(kernel.read_text().replace("kFactor = 3.0f", "kFactor = 4.0f"))
    rebuilt = build_host_kernels(package, build_root=build_root)
    assert rebuilt != first and rebuilt.is_file()
    library = KernelLibrary(rebuilt, "ExampleOpPackage")
    out = KernelTensor.empty((1, 1, 1, 2), KernelDType.Float32)
    library.run("ExampleCustomOp", [out], [KernelTensor(np.ones((1, 1, 1, 2), np.float32), KernelDType.Float32)])
    assert out.array.ravel().tolist() == [4.0, 4.0]


@pytest.mark.slow
def test_a_header_included_from_outside_the_package_rebuilds_the_library_when_it_changes(tmp_path, build_root):
    import shutil

    package = Path(shutil.copytree(OP_PACKAGES / "ExampleOpPackage", tmp_path / "ExampleOpPackage"))
    helper = tmp_path / "team_headers/factor.h"
    helper.parent.mkdir()
    helper.write_text("#pragma once\nconstexpr float kTeamFactor = 3.0f;\n")
    kernel = package / "kernels/ExampleCustomOp.h"
    kernel.write_text(kernel.read_text().replace("constexpr float kFactor = 3.0f;",
                                                 '#include "../../team_headers/factor.h"\n'
                                                 "constexpr float kFactor = kTeamFactor;"))
    first = build_host_kernels(package, build_root=build_root)
    built = first.read_bytes()
    recorded = (first.parent / cmake_build.DEPENDENCIES).read_text()
    assert recorded.splitlines() == [f"{hashlib.sha256(helper.read_bytes()).hexdigest()}  {helper.resolve()}"]
    assert build_host_kernels(package, build_root=build_root) == first and first.read_bytes() == built

    helper.write_text("#pragma once\nconstexpr float kTeamFactor = 5.0f;\n")
    rebuilt = build_host_kernels(package, build_root=build_root)
    assert rebuilt.read_bytes() != built and str(helper.resolve()) in (rebuilt.parent / cmake_build.DEPENDENCIES).read_text()


@pytest.mark.slow
def test_build_error_shows_the_compiler_message(tmp_path, build_root):
    import shutil

    package = tmp_path / "ExampleOpPackage"
    shutil.copytree(OP_PACKAGES / "ExampleOpPackage", package)
    (package / "kernels/ExampleCustomOp.h").write_text("#pragma once\nint broken( {\n")
    with pytest.raises(HostBuildError, match=r"ExampleCustomOp\.h:2:\d+: error"):
        build_host_kernels(package, build_root=build_root)


@pytest.mark.slow
def test_a_kernel_calling_an_undefined_function_fails_the_build_naming_it_and_caches_nothing(tmp_path):
    import shutil

    package = Path(shutil.copytree(OP_PACKAGES / "ExampleOpPackage", tmp_path / "ExampleOpPackage"))
    kernel = package / "kernels/ExampleCustomOp.h"
    kernel.write_text(kernel.read_text().replace("constexpr float kFactor = 3.0f;",
                                                 "float team_factor();  // declared, defined nowhere\n"
                                                 "static const float kFactor = team_factor();"))
    with pytest.raises(HostBuildError, match=r"undefined reference to .*team_factor\(\)"):
        build_host_kernels(package, build_root=tmp_path / "cache")
    assert not [p for p in (tmp_path / "cache").glob("ExampleOpPackage-*") if "-work-" not in p.name]


@pytest.mark.parametrize("cache", ["a file", "/proc/self"])
def test_a_cache_directory_that_cannot_hold_builds_is_named_with_the_fix(tmp_path, monkeypatch, cache):
    if cache == "a file":
        cache = tmp_path / "cache"
        cache.write_text("not a directory")
    monkeypatch.setenv("QCO_CACHE_DIR", str(cache))
    with pytest.raises(HostBuildError, match=f"cannot build in the cache {cache}/host: .*set QCO_CACHE_DIR to a "
                                             "writable directory"):
        build_host_kernels(OP_PACKAGES / "ExampleOpPackage")


def _build_in_child(package, build_root):
    return str(build_host_kernels(package, build_root=build_root))


@pytest.mark.slow
def test_concurrent_builds_into_one_empty_cache_all_succeed(tmp_path):
    """Four processes build one package into an empty cache at once: all get the same valid
    library (the others wait on the lock and reuse the winner's)."""
    import multiprocessing
    import shutil

    package = Path(shutil.copytree(OP_PACKAGES / "ExampleOpPackage", tmp_path / "ExampleOpPackage"))
    with multiprocessing.get_context("fork").Pool(4) as pool:
        paths = pool.starmap(_build_in_child, [(package, tmp_path / "cache")] * 4)
    assert len(set(paths)) == 1 and cmake_build.is_valid_library(Path(paths[0]))
    assert not list((tmp_path / "cache").glob("*.partial"))


@pytest.mark.slow
def test_an_edit_reuses_the_build_tree_and_a_moved_checkout_reuses_the_build(tmp_path, monkeypatch):
    import shutil

    package = Path(shutil.copytree(OP_PACKAGES / "ExampleOpPackage", tmp_path / "a" / "ExampleOpPackage"))
    outputs = record_build_steps(monkeypatch)
    build_host_kernels(package, build_root=tmp_path / "cache")
    assert [step for step, _ in outputs] == ["-S", "--build"]  # configure, then build

    outputs.clear()
    (package / "kernels/NOTES.txt").write_text("not compiled\n")  # a new content key ...
    build_host_kernels(package, build_root=tmp_path / "cache")
    assert [step for step, _ in outputs] == ["--build"]  # ... the same build tree, no configure,
    assert "Building CXX object" not in outputs[0][1]  # and nothing to recompile

    outputs.clear()
    moved = Path(shutil.move(tmp_path / "a", tmp_path / "b")) / "ExampleOpPackage"
    build_host_kernels(moved, build_root=tmp_path / "cache")
    assert outputs == []  # the key does not depend on where the checkout is


@pytest.mark.slow
def test_a_corrupt_cache_entry_is_rebuilt(tmp_path):
    import shutil

    package = Path(shutil.copytree(OP_PACKAGES / "ExampleOpPackage", tmp_path / "ExampleOpPackage"))
    library = build_host_kernels(package, build_root=tmp_path / "cache")
    library.write_bytes(library.read_bytes()[:100])  # truncated, as by a crash or a full disk
    assert not cmake_build.is_valid_library(library)
    assert build_host_kernels(package, build_root=tmp_path / "cache") == library
    assert cmake_build.is_valid_library(library)


RMS_NORM_CONFIG = opdef_xml("""
    <OpDef>
      <Name>RmsNorm</Name>
      <Input><Name>x</Name><Mandatory>true</Mandatory><Datatype>QNN_DATATYPE_FLOAT_32</Datatype>
        <Datatype>QNN_DATATYPE_UFIXED_POINT_8</Datatype><Shape><Rank>ND</Rank></Shape></Input>
      <Input><Name>weight</Name><Mandatory>true</Mandatory><Datatype>QNN_DATATYPE_FLOAT_32</Datatype>
        <Datatype>QNN_DATATYPE_UFIXED_POINT_8</Datatype><Shape><Rank>1D</Rank></Shape></Input>
      <Output><Name>y</Name><Mandatory>true</Mandatory><Datatype>QNN_DATATYPE_FLOAT_32</Datatype>
        <Datatype>QNN_DATATYPE_UFIXED_POINT_8</Datatype><Shape><Rank>ND</Rank></Shape></Output>
      <Parameter><Name>eps</Name><Mandatory>false</Mandatory><Datatype>QNN_DATATYPE_FLOAT_32</Datatype>
        <Shape><Rank>SCALAR</Rank></Shape><Default>1e-6</Default></Parameter>
      <SupportedBackend>HTP</SupportedBackend>
    </OpDef>""", package="ReadmePackage")


def readme_rms_norm(tmp_path: Path) -> KernelLibrary:
    """A package generated from RMS_NORM_CONFIG whose kernel skeleton is filled with docs/kernels.md's
    worked RMSNorm, built for the host."""
    import re

    from qnn_custom_ops.generator import generate

    from tests.conftest import doc_block

    config = tmp_path / "rms_norm.xml"
    config.write_text(RMS_NORM_CONFIG)
    package = generate(qco.load_package(config), tmp_path).package_dir
    assert (package / "kernels/qco/access.h").is_file() and (package / "kernels/qco/math.h").is_file()
    example = doc_block("docs/kernels.md", "A worked normalization", "cpp")
    kernel = package / "kernels/RmsNorm.h"
    kernel.write_text(re.sub(r"inline qco::Status RmsNorm\(.*?\n}\n", lambda _: example, kernel.read_text(), flags=re.S))
    return KernelLibrary(build_host_kernels(package, build_root=tmp_path / "cache"), "ReadmePackage")


def torch_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as a user writes it in PyTorch: the reference the kernel must compute."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


@pytest.mark.slow
def test_the_readme_kernel_built_from_the_generated_fast_helpers_matches_torch(tmp_path):
    """docs/kernels.md's RMSNorm (qco/access.h: one template, float32 and every encoding) in a
    freshly generated package: float32 with and without eps, uint8 within one step."""
    library = readme_rms_norm(tmp_path)
    g = torch.Generator().manual_seed(3)
    x, weight = torch.randn(3, 5, 37, generator=g) * 2, torch.rand(37, generator=g) + 0.5  # 37: 8 lanes + a tail
    for params, eps in (([], 1e-6), ([KernelTensor(np.array(0.5, np.float32), KernelDType.Float32)], 0.5)):
        y = KernelTensor.empty(x.shape, KernelDType.Float32)
        library.run("RmsNorm", [y], [KernelTensor(x.numpy(), KernelDType.Float32),
                                     KernelTensor(weight.numpy(), KernelDType.Float32)], params)
        torch.testing.assert_close(torch.from_numpy(y.array), torch_rms_norm(x, weight, eps), rtol=1e-5, atol=1e-6)

    qx = torch.randint(0, 256, x.shape, generator=g, dtype=torch.uint8)
    qw = torch.randint(0, 256, weight.shape, generator=g, dtype=torch.uint8)
    y = KernelTensor.empty(x.shape, U8, 0.02, -128)
    library.run("RmsNorm", [y], [KernelTensor(qx.numpy(), U8, 0.05, -120), KernelTensor(qw.numpy(), U8, 0.01, -10)])
    real = torch_rms_norm(0.05 * (qx.double() - 120), 0.01 * (qw.double() - 10), 1e-6)
    expected = (torch.round(real / 0.02) + 128).clamp(0, 255)
    assert (torch.from_numpy(y.array).double() - expected).abs().max() <= 1


def record_build_steps(monkeypatch) -> list[tuple[str, str]]:
    """Run CMake as usual, recording each step (``-S`` configure, ``--build``) and its output."""
    steps: list[tuple[str, str]] = []
    real_run = cmake_build._run

    def recording_run(command: list[str], what: str) -> str:
        steps.append((command[1], real_run(command, what)))
        return steps[-1][1]

    monkeypatch.setattr(cmake_build, "_run", recording_run)
    return steps


def compiled_objects(outputs: list[tuple[str, str]]) -> list[str]:
    """The objects make compiled, from the build steps' output."""
    return sorted(line.rsplit("/", 1)[-1] for _, text in outputs for line in text.splitlines()
                  if "Building CXX object" in line)


@pytest.mark.slow
def test_a_one_kernel_edit_recompiles_only_that_ops_object(tmp_path, monkeypatch):
    """Each op's C ABI is its own translation unit, and the ExecuTorch host library calls the
    kernels through it: editing kernels/ScaleRows.h recompiles ScaleRowsCApi.cpp.o, nothing else."""
    import shutil

    from qnn_custom_ops.generator import generate

    from tests.conftest import DATA
    from tests.torch_ops import QUANT_OPS, QUANT_PACKAGE

    package = generate(QUANT_PACKAGE, tmp_path).package_dir
    for kernel in (DATA / "quant_kernels").glob("*.h"):
        shutil.copy(kernel, package / "kernels" / kernel.name)
    outputs = record_build_steps(monkeypatch)
    cache = tmp_path / "cache"
    build_host_kernels(package, build_root=cache)
    library = build_host_library(package, qco.bind(QUANT_PACKAGE, QUANT_OPS), build_root=cache)
    # per op: its C ABI in both builds; the package's CApi in both; the ExecuTorch kernels once
    assert len(compiled_objects(outputs)) == 2 * len(QUANT_OPS) + 3

    outputs.clear()
    kernel = package / "kernels/ScaleRows.h"
    kernel.write_text(kernel.read_text() + "\n// an edit\n")
    build_host_kernels(package, build_root=cache)
    assert compiled_objects(outputs) == ["ScaleRowsCApi.cpp.o"]
    outputs.clear()
    rebuilt = build_host_library(package, qco.bind(QUANT_PACKAGE, QUANT_OPS), build_root=cache)
    assert compiled_objects(outputs) == ["ScaleRowsCApi.cpp.o"]  # the ExecuTorch side calls it through the C ABI
    assert rebuilt != library and cmake_build.is_valid_library(rebuilt)


def test_the_shipped_vector_exp_has_no_undefined_behaviour_at_nan_infinities_or_the_clamps(tmp_path):
    """qco::vector_exp under UBSan (float-to-int overflow included, every report fatal): a NaN
    stays NaN and the extremes saturate, with no int conversion of NaN or shift of a negative."""
    import shutil
    import subprocess

    compiler = shutil.which("g++") or pytest.skip("no g++")
    program = tmp_path / "exp.cpp"
    program.write_text('#include <cstdio>\n#include <limits>\n#include "qco/math.h"\n'
                       "int main() {\n  const float inf = std::numeric_limits<float>::infinity();\n"
                       "  volatile float xs[] = {std::numeric_limits<float>::quiet_NaN(), -inf, inf, -1000.f, 1000.f, 0.f};\n"
                       '  for (float x : xs) std::printf("%g\\n", qco::vector_exp(x));\n}\n')
    binary = tmp_path / "exp"
    subprocess.run([compiler, "-std=c++17", "-O1", "-fsanitize=undefined,float-cast-overflow", "-fno-sanitize-recover=all",
                    "-I", str(OP_PACKAGES / "ExampleOpPackage/kernels"), str(program), "-o", str(binary)], check=True)
    run = subprocess.run([str(binary)], capture_output=True, text=True)
    assert run.returncode == 0 and not run.stderr, run.stderr
    values = [float(v) for v in run.stdout.split()]
    assert np.isnan(values[0]) and values[1] == values[3] and 0 <= values[1] < 1e-37 and values[5] == 1.0
    assert values[2] == values[4] and values[2] > 1e38
