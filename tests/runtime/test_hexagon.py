"""The NPU half without the SDK: kernels built for Hexagon (zig's clang, v66 + HVX 128B), run
under qemu-hexagon and compared with the host build bit for bit; the HTP sources built by the
generated Makefile's Hexagon target (``make htp_v68``) with a stand-in of the SDK's compiler."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import qnn_custom_ops as qco
from qnn_custom_ops.cli import main
from qnn_custom_ops.generator import generate
from qnn_custom_ops.runtime.dtype_cases import dtype_cases
from qnn_custom_ops.runtime.hexagon import hexagon_check

from tests.conftest import (
    DATA, FIXTURE_CONFIGS, OP_PACKAGES, STANDIN, doc_block, example_package_with_kernel, opdef_xml, shared_build)
from tests.processes import children, running

HEXAGON_CXX = STANDIN / "hexagon-clang++"
SHAPES = {"ExampleOpPackage": [], "LlmOpPackage": [], "SplitCustomOpPackage": []}  # each passes by default


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_every_shipped_package_is_bit_exact_on_hexagon(name, capsys):
    assert main(["hexagon-check", str(OP_PACKAGES / name), *SHAPES[name]]) == 0
    lines = capsys.readouterr().out.splitlines()
    package = qco.load_package(*sorted((OP_PACKAGES / name).glob("config/*.xml")))
    checked = {(line.split()[0], line.split()[1]) for line in lines[:-1] if " ok " in line}
    declared = {(op.name, d.short_name) for op in package.ops.values()
                for d in op.datatypes(op.outputs[0], "HTP")}
    assert checked == declared, "\n".join(lines)  # every op at every datatype its output declares
    assert all("packets" in line for line in lines[:-1])
    assert lines[-1].startswith(f"{len(lines) - 1} of {len(lines) - 1} case(s) bit-exact")


#: Kernels that compute other bits on Hexagon than on the host, each in one way.
MUTATIONS = {
    # a stride computed in `long`: 64 bits on the host, 32 on Hexagon, where the product wraps
    "long": "const long spread = static_cast<long>(i) * 2654435761L; const int64_t j = (spread % n + n) % n;\n"
            "y[i] = kFactor * x[j];",
    # a Hexagon-only fast path fusing a*b+c into one rounding (an FMA)
    "fma": "#ifdef __hexagon__\ny[i] = __builtin_fmaf(kFactor, x[i], 0.1f * x[i]);\n#else\n"
           "y[i] = kFactor * x[i] + 0.1f * x[i];\n#endif",
}


@pytest.mark.slow
@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_a_kernel_that_computes_otherwise_on_hexagon_is_caught(mutation, tmp_path):
    package_dir = Path(shutil.copytree(OP_PACKAGES / "ExampleOpPackage", tmp_path / "ExampleOpPackage",
                                       ignore=shutil.ignore_patterns("build")))
    kernel = package_dir / "kernels/ExampleCustomOp.h"
    original = "for (int64_t i = 0; i < n; ++i) y[i] = kFactor * x[i];"
    assert original in kernel.read_text()
    kernel.write_text(kernel.read_text().replace(original, "for (int64_t i = 0; i < n; ++i) {\n"
                                                           f"{MUTATIONS[mutation]}\n}}"))
    package = qco.load_package(package_dir / "config/ExampleOpPackage.xml")
    results = {r.label.split()[0]: r for r in hexagon_check(package_dir, dtype_cases(package))}
    assert results["UFIXED_POINT_8"].passed  # the mutated loop is the float32 branch
    failed = results["FLOAT_32"]
    assert not failed.passed
    text = str(failed)
    assert text.startswith("ExampleCustomOp ") and "MISMATCH output 0 index " in text and "host " in text, text


def _hexagon_make(package_dir: Path) -> subprocess.CompletedProcess:
    """``make htp_v68`` as a user runs it, the SDK's hexagon-clang++ stood in for by zig's."""
    return subprocess.run(["make", "-C", str(package_dir), "htp_v68", f"QNN_SDK_ROOT={STANDIN}",
                           f"HEXAGON_SDK_ROOT={package_dir / 'no-hexagon-sdk'}",
                           f"HEXAGON_CXX_V68={sys.executable} {HEXAGON_CXX}"], capture_output=True, text=True)


CONFIGS = FIXTURE_CONFIGS + [DATA / name for name in ("every_feature.xml", "every_arg_kind.xml", "quant_ops.xml",
                                                      "htp_fp16.xml", "hostile_names.xml")]


@pytest.mark.slow
def test_every_htp_source_builds_for_hexagon_with_the_makefiles_hexagon_flags():
    """Every src/*.cpp and src/ops/*.cpp of every shipped and test package, 32-bit, HVX on,
    -DPREPARE_DISABLED, linked into the package's Hexagon library."""
    def build(root: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", qco.OpDefWarning)
            for config in CONFIGS:
                generate(qco.load_package(config), root / config.stem)
        for name in SHAPES:
            shutil.copytree(OP_PACKAGES / name, root / "shipped" / name, ignore=shutil.ignore_patterns("build"))

    root = shared_build("hexagon-htp", build)
    packages = [p.parent for p in sorted(root.glob("*/*/Makefile"))]
    assert len(packages) == len(CONFIGS) + len(SHAPES)
    for package_dir in packages:
        result = _hexagon_make(package_dir)
        assert result.returncode == 0, f"{package_dir.name}: make htp_v68 failed\n{result.stdout[-2000:]}\n" \
                                       f"{result.stderr[-3000:]}"
        build_dir = package_dir / "build/hexagon-v68"
        objects = {p.relative_to(build_dir).with_suffix(".cpp").as_posix() for p in build_dir.rglob("*.o")}
        assert objects == {p.relative_to(package_dir).as_posix() for p in package_dir.glob("src/**/*.cpp")}
        (library,) = build_dir.glob("libQnn*.so")
        assert library.read_bytes()[:4] == b"\x7fELF" and library.read_bytes()[18] == 164  # EM_QDSP6: Hexagon


@pytest.mark.slow
def test_cost_counts_executed_packets_on_hexagon(capsys):
    """Packets grow with the elements: the same op on 4x and 16x the elements."""
    assert main(["cost", str(OP_PACKAGES / "ExampleOpPackage"), "--hexagon", "--min-seconds", "0.001",
                 "--dtype", "FLOAT_32", "--shape", "ExampleCustomOp:output=1x1x4x64,input=1x1x4x64",
                 "--shape", "ExampleCustomOp:output=1x1x16x64,input=1x1x16x64"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "executed VLIW packets per call on qemu-hexagon" in lines[0] and lines[1].split()[-1] == "packets"
    small, large = (int(line.split()[-1]) for line in lines[2:4])
    assert 3 * small < large < 5 * small


@pytest.mark.slow
def test_an_hvx_rounding_shift_off_by_one_is_caught(hvx_changed_package):
    """The HVX rounding shift at the wrong bit (shift instead of shift - 1): the uint8 and uint16
    RmsNorm, whose HVX paths use it, differ from the portable path the host runs."""
    package_dir = hvx_changed_package(
        "LlmOpPackage", [("qco/hvx.h", "Q6_Vw_vasr_VwR(words, shift - 1)", "Q6_Vw_vasr_VwR(words, shift)")])
    package = qco.load_package(*sorted(package_dir.glob("config/*.xml")))
    cases = dtype_cases(package, ["RmsNorm:y=3x769,x=3x769,weight=769"])
    results = {r.label.split()[0]: r for r in hexagon_check(package_dir, cases)}
    assert results["FLOAT_32"].passed  # no HVX path there
    for dtype in ("UFIXED_POINT_8", "UFIXED_POINT_16"):
        assert not results[dtype].passed and "MISMATCH output 0 index " in str(results[dtype]), str(results[dtype])


TRIPLE_CONFIG = opdef_xml("""
    <OpDef>
      <Name>Triple</Name>
      <Input><Name>x</Name><Mandatory>true</Mandatory><Datatype>QNN_DATATYPE_UFIXED_POINT_8</Datatype>
        <Shape><Rank>ND</Rank></Shape></Input>
      <Output><Name>y</Name><Mandatory>true</Mandatory><Datatype>QNN_DATATYPE_UFIXED_POINT_8</Datatype>
        <Shape><Rank>ND</Rank></Shape></Output>
      <SupportedBackend>HTP</SupportedBackend>
    </OpDef>""", package="ReadmeHvxPackage")


def readme_hvx_package(tmp_path: Path, edit=lambda code: code) -> Path:
    """A package generated from TRIPLE_CONFIG whose kernel skeleton is replaced by docs/kernels.md's
    worked HVX example (passed through ``edit``)."""
    tmp_path.mkdir()
    config = tmp_path / "triple.xml"
    config.write_text(TRIPLE_CONFIG)
    package_dir = generate(qco.load_package(config), tmp_path).package_dir
    example = doc_block("docs/kernels.md", "## An HVX path for your kernel", "cpp")
    kernel = package_dir / "kernels/Triple.h"
    kernel.write_text(re.sub(r"inline qco::Status Triple\(.*?\n}\n", lambda _: edit(example), kernel.read_text(),
                             flags=re.S))
    return package_dir


#: The docs' HVX example's cases: 1000 codes (7 vectors and a tail of 104) and 395 (3 and a tail of 11).
EXAMPLE_SHAPES = ["Triple:y=1x1x2x500,x=1x1x2x500", "Triple:y=395,x=395"]


@pytest.mark.slow
def test_the_readme_hvx_example_is_bit_exact_on_hexagon_and_a_changed_hvx_path_is_caught(tmp_path):
    package_dir = readme_hvx_package(tmp_path / "readme")
    package = qco.load_package(package_dir / "config/triple.xml")
    results = hexagon_check(package_dir, dtype_cases(package, EXAMPLE_SHAPES))
    assert len(results) == 2 and all(r.passed for r in results), [str(r) for r in results]
    mutated_dir = readme_hvx_package(tmp_path / "mutated",
                                     lambda code: code.replace("m, -out_offset)", "m, 1 - out_offset)"))
    mutated = hexagon_check(mutated_dir, dtype_cases(package, EXAMPLE_SHAPES))
    assert not any(r.passed for r in mutated)  # the HVX branch is what runs on Hexagon


@pytest.mark.slow
def test_a_fresh_skeleton_is_not_checked_and_says_to_write_the_kernel(tmp_path, capsys):
    """A generated package before its kernel is written: nothing passes, and the line says why."""
    package_dir = generate(qco.load_package(OP_PACKAGES / "ExampleOpPackage/config/ExampleOpPackage.xml"),
                           tmp_path).package_dir
    assert main(["hexagon-check", str(package_dir)]) == 3
    lines = capsys.readouterr().out.splitlines()
    assert "NOT CHECKED" in lines[0] and "write the op's math in kernels/ExampleCustomOp.h" in lines[0], lines
    assert lines[-1].startswith("0 of 2 case(s) bit-exact")


@pytest.mark.slow
def test_a_default_shape_the_op_cannot_take_is_not_applicable_not_a_failure(capsys, monkeypatch):
    """SplitCustomOp halves an even last dimension: the default dims (2x3x5x9 for every tensor)
    are no shape it takes. Those cases say so; they fail nothing, and checked nothing."""
    package_dir = OP_PACKAGES / "SplitCustomOpPackage"
    package = qco.load_package(*package_dir.glob("config/*.xml"))
    results = hexagon_check(package_dir, dtype_cases(package))
    assert [(r.not_applicable, r.passed) for r in results] == [(True, False)] * 2
    assert all("not applicable: the default dims" in str(r) and "--shape SplitCustomOp:" in str(r) for r in results)
    given = hexagon_check(package_dir, dtype_cases(package, ["SplitCustomOp:first_half=2x3,second_half=2x3,input=2x5"]))
    assert [r.not_applicable for r in given] == [False] * 2  # a shape asked for and refused is the user's to fix
    from qnn_custom_ops.cli.shipped_cases import SHIPPED_CASES

    monkeypatch.delitem(SHIPPED_CASES, "SplitCustomOpPackage")  # as a package of the user's: default dims
    assert main(["hexagon-check", str(package_dir)]) == 2
    captured = capsys.readouterr()
    assert captured.out.count("not applicable") == 2
    assert captured.err.strip() == (f"error: {package_dir}: nothing was checked: the default dims are no shape its "
                                    "ops take (give shapes with --shape OP:TENSOR=DIMS,...)")


@pytest.mark.slow
def test_cost_on_hexagon_measures_every_datatype_the_op_declares(capsys):
    """As the Hexagon check does: one row per datatype of the op's output (FLOAT_32 and
    UFIXED_POINT_8 for mul3), each with its host time and packets."""
    assert main(["cost", str(OP_PACKAGES / "ExampleOpPackage"), "--hexagon", "--min-seconds", "0.001",
                 "--shape", "ExampleCustomOp:output=1x1x4x64,input=1x1x4x64"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert [row[1:3] for row in rows] == [["FLOAT_32", "1x1x4x64"], ["UFIXED_POINT_8", "1x1x4x64"]]
    assert all(int(row[-1]) > 0 for row in rows)


@pytest.mark.slow
def test_a_package_is_resolved_once_and_its_ops_are_its_opdefs(tmp_path, monkeypatch):
    """The check is given the package as a value (directory and OpDef) and reads no config again;
    its driver calls the OpDef's ops, not whatever ``*CApi.cpp`` files lie in host/src/ops."""
    from qnn_custom_ops.runtime import host_build
    from qnn_custom_ops.runtime.hexagon import build_hexagon_driver, hexagon_packets
    from qnn_custom_ops.runtime.host_build import GeneratedPackage

    copy = Path(shutil.copytree(OP_PACKAGES / "ExampleOpPackage", tmp_path / "Example",
                                ignore=shutil.ignore_patterns("build")))
    (copy / "host/src/ops/StrayCApi.cpp").write_text("#error no op of the OpDef is named Stray\n")
    package = GeneratedPackage.at(copy)
    assert (package.name, package.ops) == ("ExampleOpPackage", ("ExampleCustomOp",))

    def read_again(*configs):
        raise AssertionError(f"a config read again: {configs}")

    monkeypatch.setattr(host_build, "load_package", read_again)
    assert build_hexagon_driver(package).is_file()  # Stray's file would not compile
    ((_, call),) = hexagon_packets(package, dtype_cases(package.opdef)[:1])
    assert call > 0


@pytest.mark.slow
def test_a_truncated_cached_driver_is_rebuilt(tmp_path, monkeypatch):
    """A cached Hexagon program cut short (a crash, a full disk) would fail every later run with
    qemu's "Error mapping file": it is rebuilt instead."""
    from qnn_custom_ops.runtime.hexagon import build_hexagon_driver, hexagon_packets

    monkeypatch.setenv("QCO_CACHE_DIR", str(tmp_path / "cache"))
    package_dir = OP_PACKAGES / "ExampleOpPackage"
    program = build_hexagon_driver(package_dir)
    whole = program.read_bytes()
    program.write_bytes(whole[:4096])
    cases = dtype_cases(qco.load_package(*package_dir.glob("config/*.xml")))
    assert all(call > 0 for _, call in hexagon_packets(package_dir, cases))
    assert build_hexagon_driver(package_dir) == program and program.stat().st_size == len(whole)  # rebuilt whole


def test_outputs_with_a_zero_sized_dim_are_compared_as_equal():
    """``--shape Op:y=0x4,...``: nothing to differ in (it was an internal error reshaping them)."""
    from qnn_custom_ops.runtime.hexagon import first_mismatch
    from qnn_custom_ops.runtime.kernel_abi import KernelDType, KernelTensor

    empty = np.zeros((0, 4), np.uint8)
    assert first_mismatch(empty, empty.copy(), KernelTensor(empty, KernelDType.UFixed8), 0) == ""


@pytest.mark.parametrize("copied", [("config",), ("config", "kernels")])
def test_hexagon_check_of_a_directory_that_is_no_generated_package_is_one_line(copied, tmp_path, capsys):
    """A config alone (was a raw compiler error) or no host/ (was ValueError: 'Segv' is not in list)."""
    for name in copied:
        shutil.copytree(OP_PACKAGES / "ExampleOpPackage" / name, tmp_path / name)
    assert main(["hexagon-check", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {tmp_path}: no host/CMakeLists.txt (run generate-op-package first)"


@pytest.mark.parametrize("cache, reason", [
    ("a file", "Not a directory"),
    ("/proc/self", "No such file or directory"),  # a directory nobody can write, root included
])
def test_hexagon_check_with_a_cache_directory_that_cannot_hold_builds_is_one_line(
        tmp_path, monkeypatch, capsys, cache, reason):
    if cache == "a file":
        cache = tmp_path / "cache"
        cache.write_text("not a directory")
    monkeypatch.setenv("QCO_CACHE_DIR", str(cache))
    assert main(["hexagon-check", str(OP_PACKAGES / "ExampleOpPackage")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: Hexagon build of ExampleOpPackage: cannot build in the cache {cache}/hexagon: {reason} "
        f"({cache}/hexagon) (set QCO_CACHE_DIR to a writable directory)")


ENDLESS_KERNEL = """
#pragma once
#include "qco/tensor_view.h"

namespace ExampleOpPackage {

inline qco::Status ExampleCustomOp(qco::TensorView& output, const qco::TensorView& input) {
  for (;;) asm volatile("" ::: "memory");  // never returns
}

}  // namespace ExampleOpPackage
"""


@pytest.fixture(scope="module")
def endless_package(tmp_path_factory):
    """ExampleOpPackage whose kernel loops forever."""
    return example_package_with_kernel(tmp_path_factory.mktemp("endless"), ENDLESS_KERNEL)


@pytest.mark.slow
def test_a_kernel_that_never_returns_is_stopped_at_the_time_limit(endless_package, capsys):
    """It hung without limit while qemu's instruction log filled the disk at 20-60 MB/s."""
    assert main(["hexagon-check", str(endless_package), "--time-limit", "2"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: kernel ExampleCustomOp (FLOAT_32 2x3x5x9) did not return within 2 s under qemu-hexagon: an "
        "endless loop? (give it longer with --time-limit SECONDS)")


def _du(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


@pytest.mark.slow
@pytest.mark.parametrize("signal_number", [signal.SIGTERM, signal.SIGKILL])
def test_the_emulator_ends_with_the_cli_and_writes_no_log(endless_package, tmp_path, signal_number):
    """Killed (SIGTERM: its temporary files removed too), the CLI leaves no emulator running;
    while it runs, the packet count's log takes no disk."""
    (tmp_path / "tmp").mkdir()
    cli = subprocess.Popen([sys.executable, "-m", "qnn_custom_ops", "hexagon-check", str(endless_package)],
                           stderr=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path / "tmp")})
    deadline = time.monotonic() + 300
    while not (emulators := children(cli.pid, "qemu-hexagon")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert emulators, "the emulator never started"
    time.sleep(1)  # the log would have grown by 20-60 MB
    assert _du(tmp_path / "tmp") < 1 << 20
    cli.send_signal(signal_number)
    returncode = cli.wait(30)
    time.sleep(0.5)
    assert not any(running(pid) for pid in emulators)
    if signal_number == signal.SIGTERM:
        assert (returncode, cli.stderr.read().strip()) == (128 + signal.SIGTERM, "terminated (SIGTERM)")
        assert not list((tmp_path / "tmp").iterdir())


@pytest.mark.slow
def test_progress_lines_on_a_terminal_only_and_not_with_quiet(tmp_path, monkeypatch, capsys):
    """The first check ran minutes silently: each build and each case is one line on stderr."""
    package_dir = Path(shutil.copytree(OP_PACKAGES / "ExampleOpPackage", tmp_path / "ExampleOpPackage",
                                       ignore=shutil.ignore_patterns("build")))
    (package_dir / "kernels/ExampleCustomOp.h").write_text(
        (package_dir / "kernels/ExampleCustomOp.h").read_text() + "\n// a new build\n")
    assert main(["hexagon-check", str(package_dir)]) == 0
    assert capsys.readouterr().err == ""  # not a terminal
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["hexagon-check", str(package_dir), "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    (package_dir / "kernels/ExampleCustomOp.h").write_text(
        (package_dir / "kernels/ExampleCustomOp.h").read_text() + "// another\n")
    assert main(["hexagon-check", str(package_dir)]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "building ExampleOpPackage for Hexagon (zig c++)",
        "hexagon: 1 of 2 case(s) run under qemu-hexagon",
        "hexagon: 2 of 2 case(s) run under qemu-hexagon",
        "host build of ExampleOpPackage: building (cmake; a minute or so the first time, seconds after an edit)",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("script, message", [
    ("#!/bin/sh\nexit 0\n", "exited 0 having run 0 of 2 case(s): it is no working qemu-hexagon (apt-get install "
                            "qemu-user)"),
    ("not a program", ": cannot be run (Exec format error): reinstall it (apt-get install qemu-user)"),
])
def test_a_broken_emulator_is_one_line(tmp_path, monkeypatch, capsys, script, message):
    """Was KeyError: 'qco_call_begin' (exits 0 without running) or a raw Exec format error."""
    from qnn_custom_ops.runtime.hexagon import emulation  # the module whose globals run_on_hexagon reads

    fake = tmp_path / "qemu-hexagon"
    fake.write_text(script)
    fake.chmod(0o755)
    monkeypatch.setattr(emulation, "emulator", lambda: str(fake))
    assert main(["hexagon-check", str(OP_PACKAGES / "ExampleOpPackage")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {fake}") and err.endswith(message), err


HEXAGON_FAULTS = {  # kernels that fail on Hexagon only
    "*static_cast<volatile int*>(nullptr) = 1;": "crashed on Hexagon (qemu-hexagon): SIGSEGV; a C++ exception "
                                                 "thrown on Hexagon ends this way too (catch it in the kernel)",
    "throw 7;": "crashed on Hexagon (qemu-hexagon): SIGSEGV; a C++ exception thrown on Hexagon ends this way too "
                "(catch it in the kernel)",  # zig's Hexagon runtime cannot unwind it
    "std::exit(0);": "ended the Hexagon program with exit status 0: a kernel returns a status, it does not call exit()",
}


@pytest.mark.slow
@pytest.mark.parametrize("fault", sorted(HEXAGON_FAULTS))
def test_a_kernel_failing_on_hexagon_is_named_with_what_happened(fault, tmp_path, capsys):
    """Was "exit -11: qco_call_begin=0x2b580", without the op or the signal."""
    package_dir = Path(shutil.copytree(OP_PACKAGES / "ExampleOpPackage", tmp_path / "ExampleOpPackage",
                                       ignore=shutil.ignore_patterns("build")))
    kernel = package_dir / "kernels/ExampleCustomOp.h"
    kernel.write_text("#include <cstdlib>\n" + kernel.read_text().replace(
        "for (int64_t i = 0; i < n; ++i) y[i] = kFactor * x[i];",
        f"#ifdef __hexagon__\n{fault}\n#endif\nfor (int64_t i = 0; i < n; ++i) y[i] = kFactor * x[i];"))
    assert main(["hexagon-check", str(package_dir)]) == 2
    assert capsys.readouterr().err.strip() == f"error: kernel ExampleCustomOp (FLOAT_32 2x3x5x9) {HEXAGON_FAULTS[fault]}"
