"""The HTP half of every package, built with the generated Makefile's own x86 flavour.

Against the stand-in of the HTP API (``tests/htp_standin``, names and signatures only) in
every run, and against a real QNN SDK header tree when ``QNN_SDK_ROOT/include/QNN`` exists.
The HTP adapter then runs on stand-in tensors: encodings, dtypes, layouts, ranks, arities.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)

import qnn_custom_ops as qco
from qnn_custom_ops.generator import generate

from tests.conftest import DATA, FIXTURE_CONFIGS, OP_PACKAGES, STANDIN, shared_build

CONFIGS = FIXTURE_CONFIGS + [DATA / name for name in ("every_feature.xml", "every_arg_kind.xml", "quant_ops.xml",
                                                      "htp_fp16.xml", "hostile_names.xml")]
SHIPPED = sorted(p.name for p in OP_PACKAGES.iterdir() if (p / "Makefile").is_file())
REAL_SDK = Path(os.environ.get("QNN_SDK_ROOT") or "/nonexistent")
HAS_REAL_SDK = (REAL_SDK / "include/QNN/QnnSdkBuildId.h").is_file()
assert CONFIGS and SHIPPED


def load(path: Path) -> qco.OpPackage:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", qco.OpDefWarning)
        return qco.load_package(path)


@pytest.fixture(scope="session")
def clang() -> str:
    """clang++ with libc++, as the QNN SDK's x86 HTP build uses (``make test`` installs them)."""
    probe = subprocess.run(["clang++", "-stdlib=libc++", "-x", "c++", "-", "-o", os.devnull],
                           input="#include <vector>\nint main() { return std::vector<int>{}.size(); }\n",
                           capture_output=True, text=True) if shutil.which("clang++") else None
    if probe is None or probe.returncode != 0:
        pytest.fail("clang++ with libc++ is needed for the HTP x86 build: apt-get install clang libc++-dev "
                    "libc++abi-dev (make test does)")
    return "clang++"


def make_libnative(root: Path, hvx_protos: bool) -> Path:
    """A stand-in of the Hexagon SDK's libnative: an empty library, and for real SDK headers
    a ``hexagon_protos.h`` declaring the HVX types and the Q6_ intrinsics clang's own header lists."""
    (root / "include").mkdir(parents=True, exist_ok=True)
    (root / "lib").mkdir(exist_ok=True)
    subprocess.run(["ar", "rcs", str(root / "lib/libnative.a")], check=True)
    if hvx_protos:
        (root / "include/hexagon_protos.h").write_text(_hexagon_protos())
        (root / "include/hexagon_types.h").write_text('#pragma once\n#include "hexagon_protos.h"\n')
    return root


def _hexagon_protos() -> str:
    resource = subprocess.run(["clang++", "-print-resource-dir"], capture_output=True, text=True, check=True)
    include = Path(resource.stdout.strip()) / "include"
    prototypes: dict[str, str] = {}
    for header in ("hexagon_protos.h", "hvx_hexagon_protos.h"):
        for match in re.finditer(r"C Intrinsic Prototype:\s*(.+?\))\s*$", (include / header).read_text(), re.M):
            name = re.search(r"(\w+)\(", match.group(1)).group(1)
            prototypes.setdefault(name, match.group(1) + ";")
    assert prototypes, f"no intrinsic prototypes found under {include}"
    types = [
        "typedef int32_t Word32;", "typedef uint32_t UWord32;", "typedef int64_t Word64;",
        "typedef uint64_t UWord64;", "typedef uint8_t Byte;", "typedef float Float32;",
        "typedef double Float64;", "typedef void* Address;",
        "typedef long HVX_Vector __attribute__((__vector_size__(128), __aligned__(128)));",
        "typedef long HVX_VectorPair __attribute__((__vector_size__(256), __aligned__(128)));",
        "typedef long HVX_VectorPred __attribute__((__vector_size__(128), __aligned__(128)));",
        "typedef long HVX_UVector __attribute__((__vector_size__(128), __aligned__(4)));",
    ]
    return "\n".join(["#pragma once", "#include <stdint.h>", *types, *prototypes.values()]) + "\n"


def make(package_dir: Path, *targets: str, **variables: str | Path) -> subprocess.CompletedProcess:
    settings = [f"{key}={value}" for key, value in variables.items()]
    return subprocess.run(["make", "-C", str(package_dir), *settings, *targets], capture_output=True, text=True)


@pytest.fixture(scope="session")
def standin_builds(clang) -> dict[str, Path]:
    """Every config's and every shipped package's htp_x86 build against the stand-in (built
    once per run, shared by the xdist workers; tests that change a package copy it)."""
    configs = {config.name: (config, load(config).name) for config in CONFIGS}

    def build(root: Path) -> None:
        libnative = make_libnative(root / "libnative", hvx_protos=False)
        for config, _ in configs.values():
            generate(load(config), root / config.stem)
        for name in SHIPPED:
            shutil.copytree(OP_PACKAGES / name, root / "shipped" / name)
        packages = packages_under(root)
        with ThreadPoolExecutor(os.cpu_count() or 1) as pool:  # the other workers wait for this build
            results = pool.map(lambda d: make(d, "htp_x86", QNN_SDK_ROOT=STANDIN, X86_LIBNATIVE=libnative),
                               packages.values())
            for name, result in zip(packages, results):
                assert result.returncode == 0, f"{name}: make htp_x86 failed\n{result.stdout}\n{result.stderr}"

    def packages_under(root: Path) -> dict[str, Path]:
        return {**{name: root / config.stem / package for name, (config, package) in configs.items()},
                **{name: root / "shipped" / name for name in SHIPPED}}

    return packages_under(shared_build("htp-standin", build))


def library_of(package_dir: Path) -> Path:
    return next((package_dir / "build/x86_64-linux-clang").glob("libQnn*.so"))


@pytest.mark.slow
@pytest.mark.parametrize("name", [c.name for c in CONFIGS] + SHIPPED)
def test_every_htp_file_compiles_and_links_against_the_standin(standin_builds, name):
    package_dir = standin_builds[name]
    objects = {p.relative_to(package_dir / "build/x86_64-linux-clang").as_posix()
               for p in (package_dir / "build/x86_64-linux-clang").rglob("*.o")}
    sources = {p.relative_to(package_dir).with_suffix(".o").as_posix() for p in package_dir.glob("src/**/*.cpp")}
    assert objects == sources
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(library_of(package_dir))],
                             capture_output=True, text=True, check=True).stdout
    assert re.search(r"\bT \w+InterfaceProvider$", symbols, re.M)


@pytest.mark.skipif(not HAS_REAL_SDK, reason="skipped: no QNN SDK headers (set QNN_SDK_ROOT to a tree "
                                              "with include/QNN to compile against the real HTP API)")
@pytest.mark.parametrize("config", CONFIGS + [OP_PACKAGES / n for n in SHIPPED], ids=lambda p: p.name)
def test_every_htp_file_compiles_against_the_real_qnn_sdk(tmp_path, clang, config):
    libnative = make_libnative(tmp_path / "libnative", hvx_protos=True)
    if config.is_dir():
        package_dir = Path(shutil.copytree(config, tmp_path / config.name))
    else:
        package_dir = generate(load(config), tmp_path).package_dir
    result = make(package_dir, "htp_x86", QNN_SDK_ROOT=REAL_SDK, X86_LIBNATIVE=libnative)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert library_of(package_dir).is_file()


OLD_ADAPTER = """\
#include "HTP/core/tensor.h"
#include "qco/tensor_view.h"
namespace qco {
namespace htp {
inline qco::DType dtype_of(const Tensor& tensor) {
  switch (tensor.get_dtype()) {
    case %s::Float32: return qco::DType::kFloat32;
    default: return qco::DType::kInt8;
  }
}
}  // namespace htp
}  // namespace qco
"""


@pytest.mark.slow
@pytest.mark.parametrize("qualifier, compiles", [("DType", False), ("::DType", True)])
def test_the_standin_catches_the_shadowed_dtype_fault(tmp_path, clang, qualifier, compiles):
    """The first adapter named the HTP's DType unqualified inside qco::htp, where it is
    qco::DType: every op failed to compile against the real SDK. The stand-in sees it too."""
    source = tmp_path / "old_adapter.cpp"
    source.write_text(OLD_ADAPTER % qualifier)
    kernels = OP_PACKAGES / "ExampleOpPackage/kernels"
    result = subprocess.run([clang, "-std=c++17", "-stdlib=libc++", "-fsyntax-only", "-Werror",
                             f"-I{STANDIN / 'include/QNN'}", f"-I{kernels}", str(source)],
                            capture_output=True, text=True)
    assert (result.returncode == 0) is compiles, result.stderr
    if not compiles:
        assert "no member named 'Float32' in 'qco::DType'" in result.stderr


@pytest.fixture(scope="session")
def adapter_check(standin_builds, clang, tmp_path_factory) -> Path:
    """tests/htp_standin/adapter_check.cpp around the shipped ExampleCustomOp's HTP Impl."""
    package_dir = standin_builds["ExampleOpPackage"]
    binary = tmp_path_factory.mktemp("adapter") / "adapter_check"
    flags = make(package_dir, "-n", "-B", "htp_x86", QNN_SDK_ROOT=STANDIN, X86_LIBNATIVE="/unused").stdout
    compile_line = next(line for line in flags.splitlines() if "ExampleCustomOp.cpp" in line)
    command = compile_line.split()
    command = [arg for arg in command if arg not in ("-c", "-MMD", "-MP")]
    command = command[:command.index("src/ops/ExampleCustomOp.cpp")]
    op_source = package_dir / "src/ops/ExampleCustomOp.cpp"
    result = subprocess.run([*command, f'-DQCO_OP_SOURCE="{op_source}"', str(STANDIN / "adapter_check.cpp"),
                             "-o", str(binary)], cwd=package_dir, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return binary


def torch_mul3_reference(in_scale: float, in_zero_point: int, out_scale: float, out_zero_point: int) -> list[int]:
    """PyTorch's quantized reference of ExampleCustomOp, with the PT2E (de)quantize ops a
    converted model runs: dequantize, * 3, quantize to uint8."""
    decomposed = torch.ops.quantized_decomposed
    q = torch.arange(256, dtype=torch.uint8)
    real = decomposed.dequantize_per_tensor(q, in_scale, in_zero_point, 0, 255, torch.uint8) * 3
    return decomposed.quantize_per_tensor(real, out_scale, out_zero_point, 0, 255, torch.uint8).tolist()


@pytest.mark.parametrize("encoding", [(0.05, 37, 0.1, 37), (0.05, 37, 0.15, 0), (0.02, 128, 0.06, 200),
                                      (0.0137, 17, 0.0071, 231)])
@pytest.mark.slow
def test_htp_impl_converts_the_zero_point_to_qnn_offset(adapter_check, encoding):
    """A uint8 tensor whose HTP zero point is 37 goes through ExampleCustomOp's HTP Impl and
    equals PyTorch's quantized reference bit for bit (the old adapter passed the zero point
    as QNN's offset, real = scale * (q + 37) instead of scale * (q - 37))."""
    result = subprocess.run([str(adapter_check), "encoding", *map(str, encoding)],
                            capture_output=True, text=True, check=True)
    status, values = result.stdout.splitlines()
    assert status == "0"
    assert [int(v) for v in values.split()] == torch_mul3_reference(*encoding)


@pytest.mark.slow
def test_htp_adapter_refuses_what_it_cannot_hand_to_a_kernel(adapter_check):
    result = subprocess.run([str(adapter_check), "refusals"], capture_output=True, text=True, check=True)
    statuses = dict(line.split() for line in result.stdout.splitlines())
    success, dimensions, unsupported = "0", "2", "7"
    assert statuses == {
        "float32_flat": success,
        "float32_tcm": success,  # flat memory in TCM is still flat
        "crouton": unsupported,  # raw_data() would be the first block only
        "indirect": unsupported,
        "chunked": unsupported,
        "rank9": dimensions,  # never written past the view's 8 dims
        "int64": unsupported,  # not declared by the OpDef: never reinterpreted as int8
        "bfloat16": unsupported,
        "unknown": unsupported,
        "mixed": unsupported,  # the kernel's own refusal reaches the HTP status
    }


@pytest.fixture(scope="session")
def package_check(clang) -> Path:
    """tests/htp_standin/package_check.cpp, compiled once per run: it loads a package library
    and lists the arities each op accepts and registers."""

    def build(root: Path) -> None:
        subprocess.run([clang, "-std=c++17", "-stdlib=libc++", f"-I{STANDIN / 'include/QNN'}",
                        str(STANDIN / "package_check.cpp"), "-ldl", "-o", str(root / "package_check")], check=True)

    return shared_build("package-check", build) / "package_check"


def _op_specs(package: qco.OpPackage) -> list[str]:
    return [f"{op.name}:{len(op.inputs)}:{len(op.params)}:{len(op.outputs)}" for op in package.ops.values()]


@pytest.mark.slow
@pytest.mark.parametrize("name", [c.name for c in CONFIGS] + SHIPPED)
def test_every_accepted_arity_has_a_registered_implementation(standin_builds, package_check, name):
    package_dir = standin_builds[name]
    package = load(next(package_dir.glob("config/*.xml")))
    result = subprocess.run([str(package_check), str(library_of(package_dir)), package.name, *_op_specs(package)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    accepted = [r for r in records if "op" in r]
    registered = {(r["registered"], r["arity"]) for r in records if "registered" in r}
    for op in package.ops.values():
        counts = {(r["inputs"], r["params"], r["outputs"]) for r in accepted if r["op"] == op.name}
        mandatory_inputs = sum(t.mandatory for t in op.inputs)
        assert {c[2] for c in counts} == {len(op.outputs)}
        assert {c[0] for c in counts} == set(range(mandatory_inputs, len(op.inputs) + 1))
        assert all(c[1] >= sum(p.mandatory for p in op.params) for c in counts)
        # After the HTP applies the param order's defaults, every param is an input of the op.
        arities = {len(op.outputs) + inputs + len(op.params) for inputs, _, _ in counts}
        assert arities == {arity for op_name, arity in registered if op_name == op.name}


@pytest.mark.slow
def test_package_check_sees_an_op_without_its_implementation(standin_builds, package_check, tmp_path):
    """The arity check can fail: drop one registration and it is missing."""
    package_dir = Path(shutil.copytree(standin_builds["every_feature.xml"], tmp_path / "pkg"))
    op_source = package_dir / "src/ops/FusedNorm.cpp"
    text = op_source.read_text()
    registrations = re.findall(r"^DEF_PACKAGE_OP\(.*$", text, re.M)
    assert len(registrations) > 1, "FusedNorm has optional inputs: one implementation per input count"
    op_source.write_text(text.replace(registrations[-1], ""))
    libnative = make_libnative(tmp_path / "libnative", hvx_protos=False)
    assert make(package_dir, "htp_x86", QNN_SDK_ROOT=STANDIN, X86_LIBNATIVE=libnative).returncode == 0
    package = load(next(package_dir.glob("config/*.xml")))
    out = subprocess.run([str(package_check), str(library_of(package_dir)), package.name, *_op_specs(package)],
                         capture_output=True, text=True, check=True).stdout
    arities = {json.loads(line)["arity"] for line in out.splitlines() if '"registered": "FusedNorm"' in line}
    op = package.ops["FusedNorm"]
    every_count = range(sum(t.mandatory for t in op.inputs), len(op.inputs) + 1)
    expected = {len(op.outputs) + inputs + len(op.params) for inputs in every_count}
    assert arities < expected


@pytest.mark.slow
def test_an_edit_rebuilds_what_it_touches(standin_builds, tmp_path):
    """Objects per source, and every object depends on the package's headers: touching a
    kernel header makes the library out of date (a stale library never ships)."""
    package_dir = Path(shutil.copytree(standin_builds["every_feature.xml"], tmp_path / "pkg", symlinks=True))
    variables = {"QNN_SDK_ROOT": STANDIN, "X86_LIBNATIVE": make_libnative(tmp_path / "libnative", hvx_protos=False)}
    assert make(package_dir, "htp_x86", **variables).returncode == 0
    assert make(package_dir, "-q", "htp_x86", **variables).returncode == 0
    for header in ("kernels/TopTwo.h", "include/qco/htp_adapter.h", "kernels/qco/tensor_view.h"):
        os.utime(package_dir / header, None)
        assert make(package_dir, "-q", "htp_x86", **variables).returncode == 1, f"{header} touched, nothing to do"
        assert make(package_dir, "htp_x86", **variables).returncode == 0
    os.utime(package_dir / "src/ops/TopTwo.cpp", None)
    rebuilt = make(package_dir, "htp_x86", **variables).stdout
    assert [line.split(" -c ")[1].split()[0] for line in rebuilt.splitlines() if " -c " in line] == \
        ["src/ops/TopTwo.cpp"]


@pytest.mark.slow
def test_htp_fp16_package_declares_fp16_tensors(standin_builds):
    declared = (standin_builds["htp_fp16.xml"] / "include/qco/declared_dtypes.h").read_text()
    assert "static constexpr uint32_t x = qco::htp::bit(qco::DType::kFloat16);" in declared
    assert "static constexpr uint32_t factor = qco::htp::bit(qco::DType::kFloat32);" in declared
