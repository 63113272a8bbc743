"""A kernel that throws, segfaults or aborts: an error naming the op, never a dead interpreter.

The crashing kernel is ExampleOpPackage's op with its kernel replaced: the width of the last
dimension picks the fault (1 throws, 2 dereferences null, 3 aborts, 7 calls exit(0), 11 loops
forever), anything else multiplies by 3. Crashes are only ever run isolated, in a child process.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import qnn_custom_ops as qco
from qnn_custom_ops.cli import main
from qnn_custom_ops.runtime import HostRunner, KernelCrashError, KernelDType, KernelError, KernelLibrary, KernelTensor
from qnn_custom_ops.runtime import RunnerError, build_host_kernels

from tests.conftest import OP_PACKAGES, example_package_with_kernel
from tests.processes import children, running
from tests.torch_ops import EXAMPLE_PACKAGE, MUL3

FAULTY_KERNEL = """
#pragma once
#include <cstdlib>
#include <stdexcept>
#include "qco/tensor_view.h"

namespace ExampleOpPackage {

inline qco::Status ExampleCustomOp(qco::TensorView& output, const qco::TensorView& input) {
  switch (input.dims[input.rank - 1]) {
    case 1: throw std::out_of_range("row 7 is past the cache");
    case 2: *static_cast<volatile int*>(nullptr) = 1; break;
    case 3: std::abort();
    case 7: std::exit(0);
    case 11: for (;;) asm volatile("" ::: "memory");
  }
  for (int64_t i = 0; i < input.numel(); ++i) output.as<float>()[i] = 3.0f * input.as<const float>()[i];
  return qco::Status::kOk;
}

}  // namespace ExampleOpPackage
"""


@pytest.fixture(scope="module")
def faulty_package(tmp_path_factory):
    return example_package_with_kernel(tmp_path_factory.mktemp("faulty"), FAULTY_KERNEL)


@pytest.fixture(scope="module")
def faulty_library(faulty_package):
    return KernelLibrary(build_host_kernels(faulty_package), "ExampleOpPackage")


def _call(library: KernelLibrary, width: int, **kwargs) -> KernelTensor:
    x = KernelTensor(np.arange(2 * width, dtype=np.float32).reshape(1, 1, 2, width), KernelDType.Float32)
    y = KernelTensor.empty(x.array.shape, KernelDType.Float32)
    library.run("ExampleCustomOp", [y], [x], **kwargs)
    return y


@pytest.mark.slow
def test_a_cpp_exception_is_a_kernel_error_with_its_message(faulty_library):
    with pytest.raises(KernelError, match=r"^kernel ExampleCustomOp failed: it threw a C\+\+ exception: "
                                          r"row 7 is past the cache$"):
        _call(faulty_library, 1)
    assert np.array_equal(_call(faulty_library, 4).array.ravel(), 3 * np.arange(8))  # the library still works


@pytest.mark.slow
@pytest.mark.parametrize("width, signal", [(2, "SIGSEGV"), (3, "SIGABRT")])
def test_an_isolated_call_reports_the_crash_and_python_lives_on(faulty_library, width, signal):
    with pytest.raises(KernelCrashError, match=rf"^kernel ExampleCustomOp crashed: {signal} "):
        _call(faulty_library, width, isolated=True)


@pytest.mark.slow
def test_an_isolated_call_returns_the_outputs_and_the_kernels_errors(faulty_library):
    assert np.array_equal(_call(faulty_library, 5, isolated=True).array.ravel(), 3 * np.arange(10))
    with pytest.raises(KernelError, match="it threw a C\\+\\+ exception: row 7"):
        _call(faulty_library, 1, isolated=True)


@pytest.mark.slow
def test_cost_isolated_reports_a_crash_in_one_line(faulty_package, capsys):
    assert main(["cost", str(faulty_package), "--isolated", "--min-seconds", "0.001",
                 "--shape", "ExampleCustomOp:output=1x1x4x2,input=1x1x4x2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [err[0]] and err[0].startswith("error: kernel ExampleCustomOp crashed: SIGSEGV"), err


@pytest.mark.slow
def test_the_host_runner_isolated_names_the_kernel_that_crashed(faulty_package, tmp_path, capsys):
    """The program runs in a child: this interpreter never loads the faulty library, so its
    kernel names stay free."""
    binding = qco.bind(EXAMPLE_PACKAGE, {"ExampleCustomOp": MUL3})
    library = qco.build_host_library(faulty_package, binding, build_root=tmp_path / "cache")

    class Mul3(torch.nn.Module):
        def forward(self, x):
            return MUL3(x)

    runner = HostRunner([library], isolated=True)  # each run a fresh interpreter: the crash runs from the CLI below
    x = torch.randn(1, 1, 3, 1)
    program = qco.lower(Mul3(), (x,), binding)
    with pytest.raises(RunnerError, match="row 7 is past the cache"):
        runner.run(program.buffer, [(x,)])
    qco.lower(Mul3(), (torch.randn(1, 1, 3, 2),), binding, output=tmp_path / "w2.pte")
    x = torch.randn(1, 1, 3, 6)
    program = qco.lower(Mul3(), (x,), binding, output=tmp_path / "ok.pte")
    (output,) = runner.run(program.buffer, [(x,)])[0]
    assert torch.equal(output, x * 3)
    torch.save(torch.randn(1, 1, 3, 2), tmp_path / "x.pt")
    command = ["run", str(tmp_path / "w2.pte"), "--inputs", str(tmp_path / "x.pt"), "--library", str(library)]
    capsys.readouterr()
    assert main(command + ["--isolated"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [err[0]] and err[0].startswith("error: kernel ExampleCustomOp crashed: SIGSEGV"), err


def _cost(package_dir, width: int, *options: str) -> list[str]:
    return ["cost", str(package_dir), "--min-seconds", "0.001", *options,
            "--shape", f"ExampleCustomOp:output=1x1x4x{width},input=1x1x4x{width}"]


@pytest.mark.slow
@pytest.mark.parametrize("width, message", [
    (2, "kernel ExampleCustomOp crashed: SIGSEGV (run in an isolated process; the kernel's own output, if any, "
        "is above)"),
    (3, "kernel ExampleCustomOp crashed: SIGABRT (run in an isolated process; the kernel's own output, if any, "
        "is above)"),
    (7, "kernel ExampleCustomOp ended its isolated process with exit status 0 before returning (a kernel calling "
        "exit()?)"),
    (11, "kernel ExampleCustomOp did not return within its time limit of 2 s in an isolated process: an endless "
         "loop? (give it longer with --time-limit SECONDS)"),
])
def test_cost_reports_a_kernel_that_crashes_exits_or_never_returns_without_isolated(faulty_package, capsys,
                                                                                     width, message):
    """Without --isolated it was rc 139/134 with nothing printed, rc 0 for exit(0), or a hang:
    the CLI measures in a child process now (0.4 s)."""
    assert main(_cost(faulty_package, width, "--time-limit", "2")) == 2
    assert capsys.readouterr().err.strip() == f"error: {message}"


@pytest.mark.slow
def test_hexagon_check_runs_the_host_half_isolated(tmp_path, capsys):
    """A kernel that crashes only on the host was rc 139 with nothing printed (its host half ran in-process)."""
    package_dir = tmp_path / "ExampleOpPackage"
    shutil.copytree(OP_PACKAGES / "ExampleOpPackage", package_dir, ignore=shutil.ignore_patterns("build"))
    kernel = package_dir / "kernels/ExampleCustomOp.h"
    kernel.write_text(FAULTY_KERNEL.replace("switch (input.dims[input.rank - 1]) {",
                                            "switch (input.dims[input.rank - 1]) {\n#ifndef __hexagon__\n"
                                            "    case 9: *static_cast<volatile int*>(nullptr) = 1; break;\n#endif"))
    assert main(["hexagon-check", str(package_dir)]) == 2  # the default dims end in 9
    assert capsys.readouterr().err.strip() == (
        "error: kernel ExampleCustomOp crashed: SIGSEGV (run in an isolated process; the kernel's own output, if any, "
        "is above)")


@pytest.mark.slow
@pytest.mark.parametrize("signal_number", [signal.SIGTERM, signal.SIGKILL])
def test_the_isolated_child_ends_with_the_cli(faulty_package, tmp_path, signal_number):
    """It outlived its killed parent at 100 % of a core, leaving qco-isolated-* directories."""
    (tmp_path / "tmp").mkdir()
    cli = subprocess.Popen([sys.executable, "-m", "qnn_custom_ops", *_cost(faulty_package, 11)],
                           stderr=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path / "tmp")})
    deadline = time.monotonic() + 120
    while not (spawned := children(cli.pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert spawned, "the isolated child never started"
    time.sleep(2)
    cli.send_signal(signal_number)
    returncode = cli.wait(30)
    time.sleep(0.5)
    assert not any(running(pid) for pid in spawned)
    if signal_number == signal.SIGTERM:
        assert (returncode, cli.stderr.read().strip()) == (128 + signal.SIGTERM, "terminated (SIGTERM)")
        assert not list((tmp_path / "tmp").iterdir())


CRASHING_COMMAND = """
import os, signal, sys
from pathlib import Path
from qnn_custom_ops.runtime.isolation import faults_logged
faults_logged()
def a_native_call():
    os.kill(os.getpid(), signal.SIGSEGV)
def run_out_of_memory():
    os.kill(os.getpid(), signal.SIGKILL)
def crash_the_first_time():
    runs = Path(sys.argv[2])
    runs.write_text(runs.read_text() + "run\\n")
    if runs.read_text().count("run") == 1:
        a_native_call()
print("said before")
sys.stdout.flush()
{"segv": a_native_call, "kill": run_out_of_memory, "once": crash_the_first_time, "ok": lambda: None}[sys.argv[1]]()
"""


@pytest.mark.parametrize("how, attempts, said", [
    ("segv", 1, r"crashed: SIGSEGV in a_native_call \(<string>:7\)$"),
    ("segv", 2, r"crashed: SIGSEGV in a_native_call \(<string>:7\)$"),
    ("kill", 2, r"crashed: SIGKILL \(killed: out of memory\?\)$"),
])
def test_a_command_of_ours_that_dies_by_a_signal_is_reported_with_the_function_it_died_in(how, attempts, said):
    """``llm export --target qnn`` runs itself again on QAIRT's libraries: a crash there is one
    line naming the signal and where, never a bare negative exit status; a process killed is not
    run again."""
    from qnn_custom_ops.runtime.isolation import run_command_reporting_crashes

    command, warnings = [sys.executable, "-c", CRASHING_COMMAND], []
    with pytest.raises(KernelCrashError, match=rf"^the command {said}"):
        run_command_reporting_crashes([*command, how], dict(os.environ), "the command", warnings.append, attempts)
    assert len(warnings) == (attempts - 1 if how == "segv" else 0), warnings


def test_a_command_that_crashes_once_is_run_again_and_says_so(tmp_path):
    """QAIRT's x86 lowering crashed now and then: a second attempt, announced."""
    from qnn_custom_ops.runtime.isolation import run_command_reporting_crashes

    runs, warnings = tmp_path / "runs", []
    runs.write_text("")
    child = run_command_reporting_crashes([sys.executable, "-c", CRASHING_COMMAND, "once", str(runs)],
                                          dict(os.environ), "the command", warnings.append, attempts=2)
    assert child.stdout == "said before\n" and runs.read_text() == "run\nrun\n"
    assert warnings == ["warning: the command crashed: SIGSEGV in a_native_call (<string>:7); running it again (2 of 2)"]
