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
from qnn_custom_ops.generator.writer import SignatureChangedError
from qnn_custom_ops.generator.context import MIN_QNN_SDK

from tests.conftest import DATA, FIXTURE_CONFIGS, OP_PACKAGES, FIXTURES, opdef_xml, simple_op

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
    result = generate(load(FIXTURES / "example_op_package_htp.xml"), tmp_path)
    assert result.package_dir == tmp_path / "ExampleOpPackage"
    assert sorted(snapshot(result.package_dir)) == [
        ".qco-generated",  # what we wrote to your files: unedited ones are regenerated
        "Makefile",
        "config/example_op_package_htp.xml",
        "host/CMakeLists.txt",
        "host/src/ExampleOpPackageCApi.cpp",
        "host/src/capi.h",
        "host/src/ops/ExampleCustomOpCApi.cpp",  # one translation unit per op
        "include/qco/declared_dtypes.h",
        "include/qco/htp_adapter.h",
        "kernels/ExampleCustomOp.h",
        "kernels/qco/access.h",  # fast element access for kernels: float32 loops that vectorize
        "kernels/qco/hvx.h",  # fixed-point requantization, portable and on HVX, bit for bit alike
        "kernels/qco/math.h",  # exp and erfc that vectorize
        "kernels/qco/prepare.h",  # what a kernel prepares ahead of its calls (QHPI's precompute)
        "kernels/qco/tensor_view.h",
        "src/ExampleOpPackageInterface.cpp",
        "src/ops/ExampleCustomOp.cpp",
    ]
    assert (result.package_dir / "config/example_op_package_htp.xml").read_bytes() == \
        (FIXTURES / "example_op_package_htp.xml").read_bytes()


def test_output_is_deterministic(tmp_path):
    generate(load(DATA / "every_feature.xml"), tmp_path / "a")
    generate(load(DATA / "every_feature.xml"), tmp_path / "b")
    assert snapshot(tmp_path / "a") == snapshot(tmp_path / "b")


def test_op_source_registers_one_impl_per_input_count_in_impl_argument_order(feature_pkg):
    source = (feature_pkg / "src/ops/FusedNorm.cpp").read_text()
    assert "BEGIN_PKG_OP_DEFINITION(PKG_FusedNorm);" in source
    assert "END_PKG_OP_DEFINITION(PKG_FusedNorm);" in source
    # in_0 is mandatory, weight and position_ids optional: 3, 2 and 1 inputs
    assert re.findall(r"^DEF_PACKAGE_OP\((\w+), \"FusedNorm\"\)$", source, re.M) == [
        "fusedNormImpl", "fusedNormImpl_2Inputs", "fusedNormImpl_1Inputs"]
    signature = re.search(r"static GraphStatus fusedNormImpl\((.*?)\) \{", source, re.S).group(1)
    names = [re.search(r"(\w+)$", arg.strip()).group(1) for arg in signature.split(",")]
    # outputs, then inputs, then params, each in XML order; the output 'indices' keeps its name
    assert names == ["indices", "in_0", "weight", "position_ids", "eps", "axis", "keep_dims", "mode",
                     "scales", "groups", "last", "block"]
    assert "Tensor& indices" in signature and "const Tensor& in_0" in signature
    one_input = re.search(r"static GraphStatus fusedNormImpl_1Inputs\((.*?)\) \{\n(.*?)\n\}", source, re.S)
    assert "weight" not in one_input.group(1) and "position_ids" not in one_input.group(1)
    assert "fusedNormImplBody(indices, &in_0, nullptr, nullptr, &eps," in one_input.group(2)


def test_declared_dtypes_tell_the_htp_adapter_what_each_argument_is(feature_pkg):
    declared = (feature_pkg / "include/qco/declared_dtypes.h").read_text()
    fused = re.search(r"struct FusedNorm \{(.*?)\};", declared, re.S).group(1)
    masks = dict(re.findall(r"static constexpr uint32_t (\w+) = (.*);", fused))
    assert masks["position_ids"] == "qco::htp::bit(qco::DType::kInt32)"
    assert masks["keep_dims"] == "qco::htp::bit(qco::DType::kBool)"
    assert masks["mode"] == "qco::htp::bit(qco::DType::kUInt32)"  # an enum arrives as its UINT_32 index
    adapter = (feature_pkg / "include/qco/htp_adapter.h").read_text()
    assert "case DType::" not in adapter  # always the HTP's global ::DType
    assert "view.offset = -static_cast<int32_t>(encoding.offset);" in adapter


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
            "                          opConfig.v1.numOfParams >= 4 && opConfig.v1.numOfParams <= 8") in source
    assert 'extern "C" {\n\nQnn_ErrorHandle_t FeaturePackageInterfaceProvider(' in source


def make(package_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("QNN_SDK_ROOT", "HEXAGON_SDK_ROOT", "ANDROID_NDK_ROOT")}
    return subprocess.run(["make", "-C", str(package_dir), *args], capture_output=True, text=True,
                          env={**environment, **env})


def sdk_tree(root: Path, version: str = "2.43.0") -> Path:
    """An empty QNN SDK tree whose version header says ``version``."""
    (root / "include/QNN").mkdir(parents=True)
    (root / "include/QNN/QnnSdkBuildId.h").write_text(f'#define QNN_SDK_BUILD_ID "v{version}.0_1"\n')
    return root


X86_FLAGS = ["-stdlib=libc++", "-D__HVXDBL__", "-I/hexagon/tools/HEXAGON_Tools/8.7.03/Tools/libnative/include"]
HEXAGON_FLAGS = ["-DPREPARE_DISABLED", '-DQNN_API="__attribute__((visibility(\\"default\\")))"', "-mhvx",
                 "-I/hexagon/incs", "-I/hexagon/incs/stddef"]


@pytest.mark.parametrize("target, out_dir, compile_flags, link_flags", [
    ("htp_x86", "x86_64-linux-clang", ["clang++", "-Werror", *X86_FLAGS],
     ["-Wl,--whole-archive -L/hexagon/tools/HEXAGON_Tools/8.7.03/Tools/libnative/lib -lnative "
      "-Wl,--no-whole-archive -lpthread"]),
    ("htp_aarch64", "aarch64-android", ["/ndk/toolchains/llvm/prebuilt/linux-x86_64/bin/clang++", *X86_FLAGS],
     ["-stdlib=libc++ -static-libstdc++", "-lQnnHtp -lQnnHtpPrepare"]),
    ("htp_v68", "hexagon-v68", ["/hexagon/tools/HEXAGON_Tools/8.4.09/Tools/bin/hexagon-clang++ -mv68",
                                *HEXAGON_FLAGS, "-I/hexagon/rtos/qurt/computev68/include/qurt"], []),
    ("htp_v75", "hexagon-v75", ["HEXAGON_Tools/8.7.03/Tools/bin/hexagon-clang++ -mv75", *HEXAGON_FLAGS,
                                "-I/hexagon/rtos/qurt/computev75/include/posix"], []),
    ("htp_v79", "hexagon-v79", ["HEXAGON_Tools/8.8.02/Tools/bin/hexagon-clang++ -mv79", *HEXAGON_FLAGS], []),
])
def test_makefile_builds_like_the_sdk(tmp_path, target, out_dir, compile_flags, link_flags):
    """The flags of the QNN SDK's HTP Makefile, per target; one object per source."""
    generate(load(FIXTURES / "example_op_package_htp.xml"), tmp_path)
    package_dir = tmp_path / "renamed_dir"  # the package name comes from the config, not the directory
    (tmp_path / "ExampleOpPackage").rename(package_dir)
    result = make(package_dir, "-n", target, QNN_SDK_ROOT=str(sdk_tree(tmp_path / "qnn")),
                  HEXAGON_SDK_ROOT="/hexagon", ANDROID_NDK_ROOT="/ndk")
    assert result.returncode == 0, result.stderr
    compiles = [line for line in result.stdout.splitlines() if " -c " in line]
    assert [line.split(" -c ")[1].split()[0] for line in compiles] == [
        "src/ExampleOpPackageInterface.cpp", "src/ops/ExampleCustomOp.cpp"]
    for line in compiles:
        assert all(flag in line for flag in compile_flags), (line, compile_flags)
        assert "-DTHIS_PKG_NAME=ExampleOpPackage" in line
        assert "HtpPrepare" not in line
    link = next(line for line in result.stdout.splitlines() if f"-o build/{out_dir}/libQnnExampleOpPackage.so" in line)
    assert all(flag in link for flag in link_flags), link
    if target == "htp_x86":
        assert "HtpPrepare" not in link  # the SDK's x86 build does not link it (not every SDK ships it)


def test_makefile_refuses_an_sdk_older_than_it_supports(tmp_path):
    generate(load(FIXTURES / "example_op_package_htp.xml"), tmp_path)
    result = make(tmp_path / "ExampleOpPackage", "htp_x86", QNN_SDK_ROOT=str(sdk_tree(tmp_path / "old", "2.13.0")),
                  HEXAGON_SDK_ROOT="/hexagon")
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[0] == (
        f"error: QNN SDK 2.13 in {tmp_path}/old/include/QNN; this package needs QNN SDK {MIN_QNN_SDK} or newer")
    assert not (tmp_path / "ExampleOpPackage/build").exists()


def test_makefile_without_sdk_says_what_is_missing(tmp_path):
    generate(load(FIXTURES / "example_op_package_htp.xml"), tmp_path)
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


def test_your_helper_headers_are_not_stale_but_a_foreign_config_is(tmp_path):
    """Only files we generated for an op that left the config are stale: a header of yours
    beside the kernels is not; a config/*.xml that is not the package's is reported."""
    config = tmp_path / "pkg.xml"
    config.write_text(opdef_xml(simple_op("Keep")))
    out = tmp_path / "out"
    generate(load(config), out)
    (out / "TestPackage/kernels/my_helpers.h").write_text("#pragma once\n")
    (out / "TestPackage/config/old_name.xml").write_text("<OpDefCollection/>\n")
    result = generate(load(config), out)
    stale = {s.path.relative_to(out / "TestPackage").as_posix(): s.note for s in result.steps if s.action is Action.STALE}
    assert stale == {"config/old_name.xml": "not a config of this package; not deleted, the Makefile ignores it"}


def test_dry_run_writes_nothing(tmp_path):
    result = generate(load(DATA / "every_feature.xml"), tmp_path / "out", dry_run=True)
    assert not (tmp_path / "out").exists()
    assert result.dry_run and {s.action for s in result.steps} == {Action.CREATE}
    assert "would write 19 files" in result.summary()


def test_nothing_is_written_through_a_symlink_out_of_the_output_dir(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    (out / "ExampleOpPackage").mkdir(parents=True)
    (out / "ExampleOpPackage/src").symlink_to(outside)
    with pytest.raises(UnsafeOutputError, match="outside the output directory"):
        generate(load(FIXTURES / "example_op_package_htp.xml"), out)
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


@pytest.mark.slow
@pytest.mark.parametrize("config", ALL_CONFIGS, ids=lambda p: p.name)
def test_every_generated_host_side_file_compiles(tmp_path, config):
    result = generate(load(config), tmp_path)
    root = result.package_dir
    sources = [*root.glob("kernels/*.h"), *root.glob("kernels/qco/*.h"), *root.glob("host/src/*.cpp")]
    assert len(sources) >= 5
    for source in sources:
        compile_only(source, root / "kernels")


@pytest.mark.parametrize("package", ["ExampleOpPackage", "SplitCustomOpPackage", "LlmOpPackage"])
def test_shipped_packages_are_in_sync_with_the_generator(tmp_path, package):
    copy = tmp_path / package
    shutil.copytree(OP_PACKAGES / package, copy)
    result = generate(load(copy / f"config/{package}.xml"), tmp_path)
    changed = {s.path.relative_to(copy).as_posix(): s.action for s in result.steps
               if s.action is not Action.UNCHANGED}
    assert set(changed.values()) <= {Action.KEEP}, changed
    assert set(changed) <= {p.relative_to(copy).as_posix() for p in copy.glob("kernels/*.h")}


def _param_config(datatype: str, default: str) -> str:
    return opdef_xml(simple_op("Op", f"""<Parameter><Name>p</Name><Mandatory>false</Mandatory>
        <Datatype>{datatype}</Datatype><Shape><Rank>SCALAR</Rank></Shape><Default>{default}</Default></Parameter>"""))


@pytest.mark.parametrize("datatype, default, range_text", [
    ("UINT_8", "300", "UINT_8 takes integers 0..255 (300 given)"),
    ("UINT_8", "-5", "UINT_8 takes integers 0..255 (-5 given)"),
    ("INT_32", "1.5", "INT_32 takes integers -2147483648..2147483647 (1.5 given)"),
    ("BOOL_8", "5", "BOOL_8 takes true, false, 1 or 0 (5 given)"),
    ("FLOAT_32", "1e300", "FLOAT_32 takes finite numbers up to 3.40282e+38 in magnitude (1e+300 given)"),
])
def test_a_default_the_datatype_cannot_hold_is_an_error_with_its_range(write_config, datatype, default, range_text):
    path = write_config(_param_config(datatype, default))
    with pytest.raises(qco.OpDefError) as info:
        load(path)
    assert f"{path.name}:" in str(info.value) and range_text in str(info.value)


@pytest.mark.parametrize("datatype, default, literal", [
    ("INT_64", "-9223372036854775808", ".int64Value = (-9223372036854775807LL - 1)}"),
    ("UINT_8", "255", ".uint8Value = 255u}"),
    ("UINT_64", "18446744073709551615", ".uint64Value = 18446744073709551615ULL}"),
])
def test_representable_defaults_are_emitted_exactly(tmp_path, write_config, datatype, default, literal):
    source = (generate(load(write_config(_param_config(datatype, default))), tmp_path).package_dir
              / "src/ops/Op.cpp").read_text()
    assert literal in source


def test_unedited_files_follow_the_opdef_and_edited_ones_report_a_changed_signature(tmp_path, write_config):
    config = write_config(opdef_xml(simple_op("Foo")))
    package_dir = generate(load(config), tmp_path).package_dir
    kernel, op_source = package_dir / "kernels/Foo.h", package_dir / "src/ops/Foo.cpp"
    param = """<Parameter><Name>alpha</Name><Mandatory>true</Mandatory><Datatype>FLOAT_32</Datatype>
        <Shape><Rank>SCALAR</Rank></Shape></Parameter>"""
    config.write_text(opdef_xml(simple_op("Foo", param)))
    result = generate(load(config), tmp_path)  # never edited: regenerated with the new param
    actions = {s.path.relative_to(package_dir).as_posix(): s.action for s in result.steps}
    assert actions["kernels/Foo.h"] is Action.UPDATE and "const qco::TensorView& alpha" in kernel.read_text()

    kernel.write_text(kernel.read_text().replace("kNotImplemented", "kOk"))  # the user implements it
    before = snapshot(package_dir)
    config.write_text(opdef_xml(simple_op("Foo", param.replace("alpha", "beta"))))
    with pytest.raises(SignatureChangedError) as info:
        generate(load(config), tmp_path)
    assert "kernels/Foo.h: edited by you, and the OpDef changed what it must declare" in str(info.value)
    assert "const qco::TensorView& beta)" in str(info.value)
    assert snapshot(package_dir) == before  # nothing written, not even the unedited src/ops/Foo.cpp
    assert "alpha" in op_source.read_text()


@pytest.mark.slow
def test_two_generators_into_one_directory_take_turns(tmp_path, write_config):
    """A generator waits while another holds the output directory, then writes a whole tree."""
    import threading

    from qnn_custom_ops.generator.writer import output_lock

    package = load(write_config(opdef_xml(simple_op("Waits"))))
    done = threading.Event()
    worker = threading.Thread(target=lambda: (generate(package, tmp_path), done.set()))
    with output_lock(tmp_path):
        worker.start()
        assert not done.wait(timeout=1.0), "the generator did not wait for the lock"
        assert not (tmp_path / "TestPackage").exists()
    worker.join(timeout=30)
    assert done.is_set() and (tmp_path / "TestPackage/kernels/Waits.h").is_file()


@pytest.mark.slow
def test_concurrent_generators_leave_one_whole_tree(tmp_path):
    """Four processes, two versions of one package, one output directory: the result holds the
    whole tree of one version (the last to run), never a mix of the two."""
    versions = {"one": simple_op("First"), "two": simple_op("First") + simple_op("Second")}
    configs = []
    for version, ops in versions.items():
        (tmp_path / version).mkdir()
        configs.append(tmp_path / version / "pkg.xml")
        configs[-1].write_text(opdef_xml(ops))
    shared = tmp_path / "shared"
    runs = [subprocess.Popen([str(Path(os.sys.executable).parent / "generate-op-package"), str(config), "-o",
                              str(shared)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            for config in configs * 2]
    assert all(run.wait(timeout=60) == 0 for run in runs), [run.stderr.read() for run in runs]
    result = snapshot(shared / "TestPackage")
    for config in configs:
        generate(load(config), config.parent)
    whole = [version for version, config in zip(versions, configs)
             if all(result.get(name) == content for name, content in snapshot(config.parent / "TestPackage").items()
                    if name != ".qco-generated")]
    assert whole, "the shared tree is a mix of both versions"


def test_temporary_files_of_a_killed_run_are_removed_by_the_next(tmp_path, write_config):
    config = write_config(opdef_xml(simple_op("Left")))
    generate(load(config), tmp_path)
    root = tmp_path / "TestPackage"
    leftovers = [root / "kernels/.Left.h.k3j_x9a2.tmp", root / "..qco-generated.abcdefgh.tmp"]
    yours = [root / "kernels/.notes.txt.12345678.tmp", root / "kernels/.Left.h.tmp"]
    for path in leftovers + yours:
        path.write_text("half")
    result = generate(load(config), tmp_path)
    assert not any(path.exists() for path in leftovers) and all(path.exists() for path in yours)
    assert set(result.leftovers) == set(leftovers) and "removed 2 temporary file(s)" in result.summary()


def test_an_output_directory_nothing_can_be_created_in_is_refused_up_front(tmp_path, write_config):
    config = write_config(opdef_xml(simple_op()))
    for out in (tmp_path / "config.xml", Path("/proc/self")):
        with pytest.raises(UnsafeOutputError, match="choose another -o"):
            generate(load(config), out)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(UnsafeOutputError, match="cannot be used as the output directory"):
        generate(load(config), dangling)
    assert not (tmp_path / "nowhere").exists()
