"""The generated HTP op package: structure, C++ contents, regeneration rules, safety."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest

import qnn_custom_ops as qco
from qnn_custom_ops.generator import Action, UnsafeOutputError, generate

from .conftest import DATA, FIXTURE_CONFIGS, OP_PACKAGES, SHARED_FIXTURES, opdef_xml, simple_op

ALL_CONFIGS = FIXTURE_CONFIGS + [DATA / "every_feature.xml"]


def load(*paths):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", qco.OpDefWarning)
        return qco.load_package(*paths)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def feature_pkg(tmp_path):
    generate(load(DATA / "every_feature.xml"), tmp_path)
    return tmp_path / "FeaturePackage"


def test_tree_layout(tmp_path):
    result = generate(load(SHARED_FIXTURES / "example_op_package_htp.xml"), tmp_path)
    assert result.package_dir == tmp_path / "ExampleOpPackage"
    assert sorted(snapshot(result.package_dir)) == [
        "Makefile",
        "config/example_op_package_htp.xml",
        "host/CMakeLists.txt",
        "host/src/ExampleOpPackageCApi.cpp",
        "include/qco/htp_adapter.h",
        "kernels/ExampleCustomOp.h",
        "kernels/qco/tensor_view.h",
        "src/ExampleOpPackageInterface.cpp",
        "src/ops/ExampleCustomOp.cpp",
    ]
    assert (result.package_dir / "config/example_op_package_htp.xml").read_bytes() == \
        (SHARED_FIXTURES / "example_op_package_htp.xml").read_bytes()


def test_output_is_deterministic(tmp_path):
    generate(load(DATA / "every_feature.xml"), tmp_path / "a")
    generate(load(DATA / "every_feature.xml"), tmp_path / "b")
    assert snapshot(tmp_path / "a") == snapshot(tmp_path / "b")


def test_op_source_registers_op_with_impl_argument_order(feature_pkg):
    source = (feature_pkg / "src/ops/FusedNorm.cpp").read_text()
    assert "BEGIN_PKG_OP_DEFINITION(PKG_FusedNorm);" in source
    assert "END_PKG_OP_DEFINITION(PKG_FusedNorm);" in source
    assert 'DEF_PACKAGE_OP((fusedNormImpl<Tensor, Tensor, Tensor>), "FusedNorm")' in source
    signature = re.search(r"GraphStatus fusedNormImpl\((.*?)\);", source, re.S).group(1)
    names = [re.search(r"(\w+)$", arg.strip()).group(1) for arg in signature.split(",")]
    # outputs, then inputs, then params, each in XML order; the output 'indices' keeps its name
    assert names == ["indices", "in_0", "weight", "position_ids", "eps", "axis", "keep_dims", "mode",
                     "scales", "groups", "last", "block"]
    assert "TensorType& indices" in signature and "const TensorType1& in_0" in signature
    assert "const TensorType2& position_ids" in signature and "const Tensor& eps" in signature


def test_param_order_handles_optional_params_and_defaults(feature_pkg):
    source = (feature_pkg / "src/ops/FusedNorm.cpp").read_text()
    order = re.search(r'DEF_PACKAGE_PARAM_ORDER\("FusedNorm",(.*?)\)\n', source, re.S).group(1)
    entries = [tuple(part.strip() for part in line.strip().rstrip(",").split(","))
               for line in order.strip().splitlines()]
    assert entries == [
        ('"eps"', "false", "&sg_opDefaultFusedNorm_eps"),
        ('"axis"', "false", "&sg_opDefaultFusedNorm_axis"),
        ('"keep_dims"', "false", "&sg_opDefaultFusedNorm_keep_dims"),
        ('"mode"', "false", "&sg_opDefaultFusedNorm_mode"),
        ('"scales"', "false", "nullptr"),
        ('"groups"', "false", "nullptr"),  # optional without default stays optional
        ('"last"', "false", "nullptr"),  # 'N-1' never reaches C++
        ('"block"', "true", "nullptr"),
    ]
    assert "QNN_DATATYPE_FLOAT_32, .floatValue = 1e-06f" in source
    assert "QNN_DATATYPE_INT_32, .int32Value = -1}" in source
    assert "QNN_DATATYPE_BOOL_8, .bool8Value = 0}" in source  # "false" stays false
    assert "QNN_DATATYPE_UINT_32, .uint32Value = 1u}" in source  # enum 'rms' is index 1
    assert "N-1" not in source


def test_interface_validates_package_and_counts(feature_pkg):
    source = (feature_pkg / "src/FeaturePackageInterface.cpp").read_text()
    assert 'sg_opNames{{"FusedNorm", "TopTwo"}}' in source
    assert "DECLARE_PKG_OPS_OPTS_LIST(PKG_FusedNorm)" in source
    assert "std::string(sg_packageName) != opConfig.v1.packageName" in source
    assert ("opConfig.v1.numOfOutputs == 1 &&\n"
            "                          opConfig.v1.numOfInputs >= 1 && opConfig.v1.numOfInputs <= 3 &&\n"
            "                          opConfig.v1.numOfParams >= 1 && opConfig.v1.numOfParams <= 8") in source
    assert 'extern "C" {\n\nQnn_ErrorHandle_t FeaturePackageInterfaceProvider(' in source


def make(package_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("QNN_SDK_ROOT", "HEXAGON_SDK_ROOT", "ANDROID_NDK_ROOT")}
    return subprocess.run(["make", "-C", str(package_dir), *args], capture_output=True, text=True,
                          env={**environment, **env})


@pytest.mark.parametrize("target, out_dir, compiler", [
    ("htp_x86", "x86_64-linux-clang", "clang++"),
    ("htp_aarch64", "aarch64-android", "/ndk/toolchains/llvm/prebuilt/linux-x86_64/bin/clang++"),
    ("htp_v68", "hexagon-v68", "hexagon-clang++ -mv68"),
    ("htp_v75", "hexagon-v75", "hexagon-clang++ -mv75"),
    ("htp_v79", "hexagon-v79", "hexagon-clang++ -mv79"),
])
def test_makefile_targets_and_outputs(tmp_path, target, out_dir, compiler):
    generate(load(SHARED_FIXTURES / "example_op_package_htp.xml"), tmp_path)
    package_dir = tmp_path / "renamed_dir"  # the package name comes from the config, not the directory
    (tmp_path / "ExampleOpPackage").rename(package_dir)
    sdk = tmp_path / "qnn"
    (sdk / "include/QNN").mkdir(parents=True)
    result = make(package_dir, "-n", target, QNN_SDK_ROOT=str(sdk), HEXAGON_SDK_ROOT="/hexagon",
                  ANDROID_NDK_ROOT="/ndk")
    assert result.returncode == 0, result.stderr
    assert compiler in result.stdout
    assert f"-o build/{out_dir}/libQnnExampleOpPackage.so" in result.stdout
    assert "-DTHIS_PKG_NAME=ExampleOpPackage" in result.stdout
    assert "src/ExampleOpPackageInterface.cpp src/ops/ExampleCustomOp.cpp" in result.stdout


def test_makefile_without_sdk_says_what_is_missing(tmp_path):
    generate(load(SHARED_FIXTURES / "example_op_package_htp.xml"), tmp_path)
    result = make(tmp_path / "ExampleOpPackage", "htp_v75")
    assert result.returncode != 0
    assert "error: QNN_SDK_ROOT is not set" in result.stderr
    assert not (tmp_path / "ExampleOpPackage/build").exists()


def test_regeneration_is_idempotent_and_rewrites_nothing(feature_pkg):
    before = {p: p.stat().st_mtime_ns for p in feature_pkg.rglob("*") if p.is_file()}
    result = generate(load(DATA / "every_feature.xml"), feature_pkg.parent)
    assert {s.action for s in result.steps} == {Action.UNCHANGED}
    assert {p: p.stat().st_mtime_ns for p in feature_pkg.rglob("*") if p.is_file()} == before


def test_user_edits_survive_regeneration_and_force_replaces_them(feature_pkg):
    kernel = feature_pkg / "kernels/TopTwo.h"
    op_source = feature_pkg / "src/ops/TopTwo.cpp"
    generated = kernel.read_text()
    kernel.write_text("// my kernel\n")
    op_source.write_text("// my adapter\n")
    (feature_pkg / "Makefile").write_text("stale\n")
    result = generate(load(DATA / "every_feature.xml"), feature_pkg.parent)
    actions = {s.path.relative_to(feature_pkg).as_posix(): s.action for s in result.steps}
    assert actions["kernels/TopTwo.h"] is Action.KEEP and actions["src/ops/TopTwo.cpp"] is Action.KEEP
    assert actions["Makefile"] is Action.UPDATE
    assert kernel.read_text() == "// my kernel\n" and op_source.read_text() == "// my adapter\n"
    assert (feature_pkg / "Makefile").read_text().startswith("# FeaturePackage HTP op package")
    generate(load(DATA / "every_feature.xml"), feature_pkg.parent, force=True)
    assert kernel.read_text() == generated


def test_new_ops_are_added_and_removed_ops_reported_not_deleted(tmp_path):
    config = tmp_path / "pkg.xml"
    config.write_text(opdef_xml(simple_op("Keep") + simple_op("Gone")))
    out = tmp_path / "out"
    generate(load(config), out)
    config.write_text(opdef_xml(simple_op("Keep") + simple_op("Added")))
    result = generate(load(config), out)
    actions = {s.path.relative_to(out / "TestPackage").as_posix(): s.action for s in result.steps}
    assert actions["kernels/Added.h"] is Action.CREATE and actions["src/ops/Added.cpp"] is Action.CREATE
    assert actions["kernels/Gone.h"] is Action.STALE and actions["src/ops/Gone.cpp"] is Action.STALE
    assert (out / "TestPackage/kernels/Gone.h").exists()
    assert "Gone" not in (out / "TestPackage/src/TestPackageInterface.cpp").read_text()


def test_dry_run_writes_nothing(tmp_path):
    result = generate(load(DATA / "every_feature.xml"), tmp_path / "out", dry_run=True)
    assert not (tmp_path / "out").exists()
    assert result.dry_run and {s.action for s in result.steps} == {Action.CREATE}
    assert "would write 11 files" in result.summary()


def test_nothing_is_written_through_a_symlink_out_of_the_output_dir(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    (out / "ExampleOpPackage").mkdir(parents=True)
    (out / "ExampleOpPackage/src").symlink_to(outside)
    with pytest.raises(UnsafeOutputError, match="outside the output directory"):
        generate(load(SHARED_FIXTURES / "example_op_package_htp.xml"), out)
    assert list(outside.iterdir()) == []
    assert sorted(p.name for p in (out / "ExampleOpPackage").iterdir()) == ["src"]


def test_generation_touches_nothing_outside_the_output_dir(tmp_path):
    (tmp_path / "sibling.txt").write_text("x")
    before = snapshot(tmp_path)
    generate(load(DATA / "every_feature.xml"), tmp_path / "out")
    after = snapshot(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith("out/")} == before


def test_description_text_cannot_escape_its_comment(tmp_path):
    description = "ends a comment */ #error injected \\\nstill text ??/ " + "x" * 80 + " \\"
    config = tmp_path / "evil.xml"
    config.write_text(opdef_xml(simple_op("Evil").replace(
        "<Input>", f"<Description><Content>{description}</Content></Description><Input>", 1)))
    generate(load(config), tmp_path / "out")
    header = (tmp_path / "out/TestPackage/kernels/Evil.h").read_text()
    assert "*/" not in header and "#error" in header
    assert all(not line.endswith("\\") for line in header.splitlines())
    compile_only(tmp_path / "out/TestPackage/kernels/Evil.h", tmp_path / "out/TestPackage/kernels")


def compile_only(source: Path, *include_dirs: Path) -> None:
    """g++ -fsyntax-only, warnings as errors; a header is checked as the only include of a TU."""
    flags = ["-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror"]
    unit = ["-include", str(source), "-x", "c++", os.devnull] if source.suffix == ".h" else [str(source)]
    command = ["g++", *flags, *(f"-I{d}" for d in include_dirs), *unit]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, f"{source}:\n{result.stderr}"


@pytest.mark.parametrize("config", ALL_CONFIGS, ids=lambda p: p.name)
def test_every_generated_host_side_file_compiles(tmp_path, config):
    result = generate(load(config), tmp_path)
    root = result.package_dir
    sources = [*root.glob("kernels/*.h"), root / "kernels/qco/tensor_view.h", *root.glob("host/src/*.cpp")]
    assert len(sources) >= 3
    for source in sources:
        compile_only(source, root / "kernels")


@pytest.mark.parametrize("package", ["ExampleOpPackage", "SplitCustomOpPackage"])
def test_shipped_packages_are_in_sync_with_the_generator(tmp_path, package):
    copy = tmp_path / package
    shutil.copytree(OP_PACKAGES / package, copy)
    result = generate(load(copy / f"config/{package}.xml"), tmp_path)
    changed = {s.path.relative_to(copy).as_posix(): s.action for s in result.steps
               if s.action is not Action.UNCHANGED}
    assert set(changed.values()) <= {Action.KEEP}, changed
    assert set(changed) <= {p.relative_to(copy).as_posix() for p in copy.glob("kernels/*.h")}
