"""Our kernels inside Qualcomm's own HTP runtime: every shipped OpDef as a QHPI op package, built
once for x86 with no SDK, registered and executed by the real x86 ``libQnnHtp.so`` of QAIRT
2.47, 2.50.40 and 2.51 (PyPI's onnxruntime-qnn wheels, installed by ``make test``), compared bit
for bit with the host C ABI."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import qnn_custom_ops as qco
from executorch.backends.qualcomm.serialization.qc_schema import (
    QnnExecuTorchOpPackagePlatform,
    QnnExecuTorchOpPackageTarget,
)

from qnn_custom_ops.cli import main
from qnn_custom_ops.generator import generate
from qnn_custom_ops.generator.qhpi import MAX_SIGNATURES, abi_header_context, qhpi_op
from qnn_custom_ops.generator.render import template_environment
from qnn_custom_ops.lowering import CompileSpecError, OpPackageBuild, op_package_options
from qnn_custom_ops.lowering.compile_spec import makefile_builds
from qnn_custom_ops.qairt import QAIRT_VERSIONS
from qnn_custom_ops.runtime import htp
from qnn_custom_ops.runtime.dtype_cases import dtype_cases
from qnn_custom_ops.runtime.hexagon import hexagon_check

from tests.conftest import DATA, OP_PACKAGES, STANDIN
from tests.torch_ops import EXAMPLE_PACKAGE, MUL3

HEXAGON_CXX = STANDIN / "hexagon-clang++"
SHIPPED = ("ExampleOpPackage", "LlmOpPackage", "SplitCustomOpPackage")


def _package(directory: Path):
    return qco.load_package(*sorted(directory.glob("config/*.xml")))


@pytest.mark.slow
@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_package_is_bit_exact_in_every_qairt_with_one_build(name, capsys, monkeypatch):
    """The CLI's check: every case of the package at every declared datatype, on all three
    releases, each run loading the one x86 library the check built (hashed as it is used)."""
    loaded: dict[str, str] = {}
    run_on_htp = htp.run_on_htp

    def recording(library, package, cases, version, progress):
        loaded[version] = hashlib.sha256(Path(library).read_bytes()).hexdigest()
        return run_on_htp(library, package, cases, version, progress)

    monkeypatch.setattr(htp, "run_on_htp", recording)
    assert main(["htp-check", str(OP_PACKAGES / name)]) == 0
    lines = capsys.readouterr().out.splitlines()
    package = _package(OP_PACKAGES / name)
    declared = {(op.name, d.short_name) for op in package.ops.values() for d in op.datatypes(op.outputs[0], "HTP")}
    for version in QAIRT_VERSIONS:
        ran = [line.split() for line in lines[:-1] if line.startswith(f"{version} ")]
        assert ran and all(words[-1] == "ok" for words in ran), "\n".join(lines)
        assert {(words[1], words[2]) for words in ran} == declared  # every op at every datatype
    assert sorted(loaded) == sorted(QAIRT_VERSIONS) and len(set(loaded.values())) == 1
    runs = len(lines) - 1
    assert lines[-1].startswith(f"{runs} of {runs} case run(s) bit-exact"), lines[-1]


def _mutated_example(tmp_path: Path, body: str) -> Path:
    """ExampleOpPackage whose float32 loop computes ``body`` in the QHPI build only."""
    package_dir = Path(shutil.copytree(OP_PACKAGES / "ExampleOpPackage", tmp_path / "ExampleOpPackage"))
    kernel = package_dir / "kernels/ExampleCustomOp.h"
    original = "for (int64_t i = 0; i < n; ++i) y[i] = kFactor * x[i];"
    assert original in kernel.read_text()
    mutated = f"for (int64_t i = 0; i < n; ++i) {{\n#ifdef QCO_QHPI\n{body}\n#else\ny[i] = kFactor * x[i];\n#endif\n}}"
    kernel.write_text(kernel.read_text().replace(original, mutated))
    return package_dir


@pytest.mark.slow
def test_a_kernel_that_computes_otherwise_in_the_htp_runtime_is_caught(tmp_path, capsys):
    package_dir = _mutated_example(tmp_path, "y[i] = kFactor * x[i] + (i == 7 ? 1e-3f : 0.0f);")
    assert main(["htp-check", str(package_dir), "--qairt", "2.51"]) == 3
    lines = capsys.readouterr().out.splitlines()
    float_line = next(line for line in lines if "FLOAT_32" in line)
    assert "MISMATCH output 0 index 7 (1 differ): host " in float_line and "htp " in float_line, float_line
    assert next(line for line in lines if "UFIXED_POINT_8" in line).endswith("ok")
    assert lines[-1].startswith("1 of 2 case run(s) bit-exact")


@pytest.mark.slow
def test_a_package_that_cannot_load_is_one_line_naming_why(tmp_path, capsys):
    package_dir = _mutated_example(tmp_path, "y[i] = qco_nowhere_defined(x[i]);")
    kernel = package_dir / "kernels/ExampleCustomOp.h"
    kernel.write_text(kernel.read_text().replace("namespace ExampleOpPackage {", 'extern "C" float '
                                                 "qco_nowhere_defined(float);\nnamespace ExampleOpPackage {", 1))
    assert main(["htp-check", str(package_dir), "--qairt", "2.47"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: QAIRT 2.47: cannot load the package: "), err
    assert err[0].endswith("undefined symbol: qco_nowhere_defined"), err


@pytest.mark.slow
def test_what_a_kernel_prepares_ahead_runs_in_the_precompute_hook_and_is_counted_apart_on_hexagon(tmp_path, capsys):
    """A kernel whose calls refuse to run unless its <Op>Prepare ran first: bit-exact in every
    QAIRT (the precompute at graph load ran it), on Hexagon (the driver's prepare window) and on
    the host."""
    package_dir = _mutated_example(tmp_path, "y[i] = prepared_factor * x[i];")
    kernel = package_dir / "kernels/ExampleCustomOp.h"
    prepare = ("inline float prepared_factor = 0.0f;\n"
               "inline void ExampleCustomOpPrepare(qco::TensorView&, const qco::TensorView&) "
               "{ prepared_factor = kFactor; }\n\n")
    text = kernel.read_text().replace("// Arguments: outputs, then inputs", prepare + "// Arguments: outputs, then inputs", 1)
    refuse = "  if (input.dtype == qco::DType::kFloat32 && output.dtype == qco::DType::kFloat32) {\n"
    kernel.write_text(text.replace(refuse, refuse + "    if (prepared_factor == 0.0f) return qco::Status::kInvalidArgument;\n", 1))
    assert main(["htp-check", str(package_dir)]) == 0, capsys.readouterr().out
    package = _package(package_dir)
    results = {r.label.split()[0]: r for r in hexagon_check(package_dir, dtype_cases(package))}
    assert results["FLOAT_32"].passed and results["FLOAT_32"].prepare_packets > 0
    assert "(prepared ahead: " in str(results["FLOAT_32"])


def test_parameters_reach_the_kernel_as_trailing_inputs_with_defaults_for_those_left_out():
    package = _package(OP_PACKAGES / "LlmOpPackage")
    rms = qhpi_op(package.ops["RmsNorm"])
    assert rms.arities == [(2, 1), (2, 0)]  # eps may be left out: its default is applied
    assert rms.params[0].default is not None and rms.params[0].default.literal == "1e-06f"
    assert {k.inputs + k.params for k in rms.kernels} == {2, 3}
    for op in package.ops.values():
        made = qhpi_op(op)
        names = [k.signature_name for k in made.kernels]
        assert len(names) == len(set(names))  # QAIRT 2.50 refuses two kernels of one name
        for arity in made.arities:
            assert sum((k.inputs, k.params) == arity for k in made.kernels) <= MAX_SIGNATURES


#: Loads a library, closes it, and says whether it is still mapped in this process.
_UNLOADED = """
import ctypes, sys
handle = ctypes.CDLL(sys.argv[1])._handle
print("loaded")
assert ctypes.CDLL(None).dlclose(ctypes.c_void_p(handle)) == 0
print("unloaded")
print("still-mapped" if sys.argv[1] in open("/proc/self/maps").read() else "unmapped")
"""


@pytest.mark.slow
def test_generate_api_qhpi_writes_a_package_whose_makefile_builds_for_x86_and_hexagon(tmp_path):
    package = _package(OP_PACKAGES / "ExampleOpPackage")
    result = generate(package, tmp_path, api="qhpi")
    root = result.package_dir
    assert (root / "include/qco/qhpi_abi.h").is_file() and (root / "src/ops/ExampleCustomOp.cpp").is_file()
    assert not (root / "include/qco/htp_adapter.h").exists()
    shutil.copy(OP_PACKAGES / "ExampleOpPackage/kernels/ExampleCustomOp.h", root / "kernels/ExampleCustomOp.h")
    again = generate(package, tmp_path, api="qhpi")
    assert all(step.action.value in ("unchanged", "keep") for step in again.steps)  # the kernel stays yours
    backend = htp.qairt_backend("2.47")
    x86 = subprocess.run(["make", "-C", str(root), "htp_x86", "X86_CXX=g++", f"QNN_HTP_LIB={backend}"],
                         capture_output=True, text=True)
    assert x86.returncode == 0, x86.stderr
    library = root / "build/x86_64-linux-clang/libQnnExampleOpPackage.so"
    needed = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True).stdout
    assert "[libQnnHtp.so]" in needed  # how the qhpi_* functions are found in a host's RTLD_LOCAL backend
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True).stdout
    assert {"ExampleOpPackageInterfaceProvider", "qhpi_init"} <= {line.split()[-1] for line in symbols.splitlines()}
    # unloaded, it stays: the backend keeps pointers into what it registered past the backend's end
    stays = subprocess.run([sys.executable, "-c", _UNLOADED, str(library)], capture_output=True, text=True,
                           env={**os.environ, "LD_LIBRARY_PATH": str(backend.parent)})
    assert stays.stdout.split() == ["loaded", "unloaded", "still-mapped"], stays.stderr
    # ExecuTorch's compile spec takes it: the x86 build registers as CPU, the Hexagon one as HTP
    binding = qco.bind(EXAMPLE_PACKAGE, {"ExampleCustomOp": MUL3})
    infos = op_package_options(binding, makefile_builds(root, "ExampleOpPackage", 75, api="qhpi")).op_package_infos
    assert {(i.target, i.platform) for i in infos} == {
        (QnnExecuTorchOpPackageTarget.CPU, QnnExecuTorchOpPackagePlatform.X86_64),
        (QnnExecuTorchOpPackageTarget.HTP, QnnExecuTorchOpPackagePlatform.AARCH64_ANDROID)}
    with pytest.raises(CompileSpecError, match="a QHPI package registers on x86 as CPU"):
        op_package_options(binding, [OpPackageBuild("HTP", "x86_64", library)])
    hexagon = subprocess.run(["make", "-C", str(root), "htp_v68", f"HEXAGON_SDK_ROOT={tmp_path / 'no-sdk'}",
                              f"HEXAGON_CXX_V68={sys.executable} {HEXAGON_CXX}"], capture_output=True, text=True)
    assert hexagon.returncode == 0, hexagon.stderr
    assert (root / "build/hexagon-v68/libQnnExampleOpPackage.so").read_bytes()[18] == 164  # e_machine: Hexagon


def test_a_qhpi_build_without_a_backend_to_link_says_which_to_set(tmp_path):
    root = generate(_package(OP_PACKAGES / "ExampleOpPackage"), tmp_path, api="qhpi").package_dir
    made = subprocess.run(["make", "-C", str(root), "htp_x86", "QNN_SDK_ROOT=/nowhere"], capture_output=True,
                          text=True)
    assert made.returncode != 0
    assert "error: /nowhere/lib/x86_64-linux-clang/libQnnHtp.so does not exist (set QNN_SDK_ROOT" in made.stderr


def _probe(tmp_path: Path, name: str, flags: list[str]) -> str:
    program = tmp_path / name
    subprocess.run(["g++", "-std=c++17", *flags, str(DATA / "qhpi_layout_probe.cpp"), "-o", str(program)],
                   check=True)
    return subprocess.run([str(program)], capture_output=True, text=True, check=True).stdout


REAL_HEADERS = Path(os.environ.get("QNN_SDK_ROOT") or "/nowhere") / "include" / "QNN"


@pytest.mark.skipif(not (REAL_HEADERS / "HTP/core/qhpi.h").is_file(),
                    reason="skipped: no QNN SDK with HTP/core/qhpi.h (set QNN_SDK_ROOT to a QAIRT 2.44+ tree)")
def test_our_abi_declarations_match_the_real_qhpi_and_qnn_headers(tmp_path):
    """Every size, offset, bit field and enum value qco/qhpi_abi.h declares, against the SDK's."""
    (tmp_path / "qco").mkdir()
    header = template_environment().get_template("qhpi/abi.h.j2").render(**abi_header_context())
    (tmp_path / "qco" / "qhpi_abi.h").write_text(header)
    ours = _probe(tmp_path, "ours", [f"-I{tmp_path}"])
    real = _probe(tmp_path, "real", ["-DQCO_REAL", f"-I{REAL_HEADERS}"])
    assert ours.splitlines() == real.splitlines()
    assert len(ours.splitlines()) > 150


@pytest.mark.slow
def test_a_fresh_skeleton_is_not_checked_and_says_to_write_the_kernel(tmp_path, capsys):
    root = generate(_package(OP_PACKAGES / "ExampleOpPackage"), tmp_path, api="qhpi").package_dir
    assert main(["htp-check", str(root), "--qairt", "2.51"]) == 3
    lines = capsys.readouterr().out.splitlines()
    assert all("NOT CHECKED: the kernel refuses this case (not implemented), on both: write the op's math in "
               "kernels/ExampleCustomOp.h" in line for line in lines[:-1]), lines
    assert lines[-1].startswith("0 of 2 case run(s) bit-exact")
