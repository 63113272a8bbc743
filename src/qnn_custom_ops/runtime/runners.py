"""Run a .pte: on the host (ExecuTorch's Python runtime), on the QNN x86 simulator, or on a
phone through adb. Every target takes the same inputs and returns the same outputs; the
x86 and device targets speak ``qnn_executor_runner``'s raw-file protocol."""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..errors import ReportedError
from ..progress import Progress, silent
from ..qnn_sdk import require_sdk
from .isolation import call_isolated
from .loading import (
    clear_kernel_errors,
    last_kernel_error,
    trace_kernels,
)
from .program_checks import (
    check_data_file,
    host_operators,
    last_said,
    method_specs,
    refused_as_program_error,
    runtime_log_held,
    verified_program,
)
from .program_libraries import load_program_libraries
from .raw_io import INPUT_LIST, read_outputs, write_inputs
from .weights_store import pages_not_pinned, share_packed_weights

Inference = Sequence[torch.Tensor]
RUNNER = "qnn_executor_runner"
RUNNER_IN_BUILD = Path("examples/qualcomm/executor_runner") / RUNNER
BACKEND_IN_BUILD = Path("backends/qualcomm/libqnn_executorch_backend.so")


class RunnerError(ReportedError, RuntimeError):
    """A step of running a program failed; the message names the step."""


@dataclass
class HostRunner:
    """ExecuTorch's Python runtime with the host kernel libraries loaded.

    ``isolated=True`` runs the program in a child process (a fresh interpreter importing torch
    and executorch: a few seconds per ``run``): a kernel that crashes raises ``KernelCrashError``
    naming it, and this interpreter never loads the libraries. ``run``'s ``data`` is the data
    file (``.ptd``) of a program whose weights are kept beside it.

    The weights are held once, however many methods run (``weights_store``): every method of a
    program is loaded from one loaded program (one data map; host-only methods share its planned
    buffers), XNNPACK packs each weight once for all of them, and the data file is mapped, not
    pinned: peak memory about the program's bytes, not once per method.

    ``progress`` hears the builds a load needs first (the host speed kernels, the backend
    options library: once per machine); an isolated child says nothing.
    """

    libraries: Sequence[Path] = ()
    isolated: bool = False
    progress: Progress = field(default=silent, repr=False, compare=False)
    #: Methods loaded so far, by program, data file and name: a program is checked and loaded
    #: once, not on every call (a generation loop calls the same two methods hundreds of times).
    _loaded: dict[tuple[bytes, Path | None, str], Any] = field(default_factory=dict, repr=False, compare=False)
    #: The runtime's loaded programs, by program and data file: every method comes from one.
    _programs: dict[tuple[bytes, Path | None], Any] = field(default_factory=dict, repr=False, compare=False)

    def run(
        self, pte: bytes, inferences: Sequence[Inference], method: str = "forward", data: Path | None = None
    ) -> list[list[torch.Tensor]]:
        if self.isolated:
            return call_isolated(
                _run_on_host,
                list(self.libraries),
                pte,
                [list(i) for i in inferences],
                method,
                data,
                what="the program",
            )
        loaded = self.load(pte, method, data)
        return [self._execute(loaded, inputs) for inputs in inferences]

    def load(self, pte: bytes, method: str = "forward", data: Path | None = None) -> Any:
        """The program's method, checked and loaded once, then kept for every ``run`` (call it
        first to leave the loading out of a timed run; an isolated runner loads in each child)."""
        loaded = self._loaded.get((pte, data, method))
        if loaded is None:
            loaded = self._loaded[(pte, data, method)] = self._load(pte, method, data)
        return loaded

    def _load(self, pte: bytes, method: str, data: Path | None) -> Any:
        """The program's method, after every check: a file the runtime cannot load, a kernel no
        library registers, a data file missing, each one error."""
        method_specs(pte, method)  # a file the runtime cannot load is one error, before any library is loaded
        host_operators(pte, "program")
        check_data_file(pte, data)
        load_program_libraries(pte, self.libraries, self.progress)
        trace_kernels(self.libraries)
        share_packed_weights(self.progress)
        with refused_as_program_error("program" if data is None else f"program with data file {data}"):
            with pages_not_pinned():
                return self._program(pte, data).load_method(method)

    def _program(self, pte: bytes, data: Path | None) -> Any:
        """The runtime's program for ``pte`` with ``data``, loaded once for all its methods."""
        program = self._programs.get((pte, data))
        if program is None:
            program = self._programs[(pte, data)] = verified_program(pte, "program", data)
        return program

    def _execute(self, method, inputs: Inference) -> list[torch.Tensor]:
        """One inference; a kernel's failure is raised with its op and status, not a bare code."""
        clear_kernel_errors(self.libraries)
        try:
            with runtime_log_held() as log:
                return [t.clone() for t in method.execute(list(inputs))]
        except RuntimeError as exc:
            failure = last_kernel_error(self.libraries)
            if failure:
                raise RunnerError(f"kernel failed: {failure} (ExecuTorch: {exc})") from None
            said = last_said(log, str(exc))
            raise RunnerError(f"the program failed while running: {said} (ExecuTorch: {exc})") from None


def _run_on_host(
    libraries: list[Path], pte: bytes, inferences: list[list[torch.Tensor]], method: str, data: Path | None
) -> list[list[torch.Tensor]]:
    """``HostRunner.run`` in an isolated child."""
    return HostRunner(libraries).run(pte, inferences, method, data)


@dataclass
class X86Runner:
    """``qnn_executor_runner`` from a user's ExecuTorch x86 build, on the QNN HTP simulator."""

    build_folder: Path

    def run(self, pte: bytes, inferences: Sequence[Inference]) -> list[list[torch.Tensor]]:
        sdk = require_sdk("the x86 target")
        runner = self.build_folder / RUNNER_IN_BUILD
        if not runner.is_file():
            raise RunnerError(
                f"{runner}: not found (build ExecuTorch with the QNN backend for x86_64 and pass its build folder)"
            )
        _, output_specs = method_specs(pte)
        with tempfile.TemporaryDirectory(prefix="qco-x86-") as tmp:
            work = Path(tmp)
            (work / "model.pte").write_bytes(pte)
            input_list, _ = write_inputs(inferences, work / "inputs")
            library_path = os.pathsep.join(
                filter(
                    None,
                    [
                        str(sdk / "lib/x86_64-linux-clang"),
                        str(self.build_folder / BACKEND_IN_BUILD.parent),
                        os.environ.get("LD_LIBRARY_PATH", ""),
                    ],
                )
            )
            result = subprocess.run(
                [
                    str(runner),
                    "--model_path",
                    str(work / "model.pte"),
                    "--input_list_path",
                    str(input_list),
                    "--output_folder_path",
                    str(work / "outputs"),
                ],
                capture_output=True,
                text=True,
                cwd=work / "inputs",
                env={**os.environ, "LD_LIBRARY_PATH": library_path},
            )
            if result.returncode != 0:
                raise RunnerError(f"{RUNNER} exited with status {result.returncode}: {_tail(result)}")
            return [read_outputs(work / "outputs", i, output_specs) for i in range(len(inferences))]


def _tail(result: subprocess.CompletedProcess, lines: int = 5) -> str:
    text = (result.stderr or result.stdout or "").strip().splitlines()
    return " | ".join(text[-lines:]) or "no output"


@dataclass(frozen=True)
class DeviceFile:
    local: Path
    remote: str  # absolute path on the device


@dataclass
class DeviceRunner:
    """Push, run and pull with ``adb``: the program, runner, QNN and op package libraries.

    ``op_package_libraries`` maps each device path the compile spec baked in (see
    ``lowering.OpPackageBuild.baked_path``) to the local library pushed there.
    """

    serial: str
    soc: str
    build_folder: Path  # ExecuTorch built for Android with the QNN backend
    op_package_libraries: dict[str, Path] = field(default_factory=dict)
    adb_host: str | None = None
    workspace: str = ""

    def __post_init__(self) -> None:
        from ..lowering.compile_spec import DEVICE_WORKSPACE

        self.workspace = self.workspace or DEVICE_WORKSPACE

    def adb(self, *args: str) -> subprocess.CompletedProcess:
        command = ["adb", *(["-H", self.adb_host] if self.adb_host else []), "-s", self.serial, *args]
        try:
            return subprocess.run(command, capture_output=True, text=True)
        except FileNotFoundError:
            raise RunnerError("adb not found: install Android platform tools (Debian package 'adb')") from None

    def _checked(self, step: str, *args: str) -> subprocess.CompletedProcess:
        result = self.adb(*args)
        if result.returncode != 0:
            raise RunnerError(f"{step} failed on {self.serial} (adb exit {result.returncode}): {_tail(result)}")
        return result

    def htp_arch(self) -> int:
        from executorch.backends.qualcomm.utils.utils import get_soc_to_htp_arch_map

        try:
            return int(get_soc_to_htp_arch_map()[self.soc.upper()].value)
        except KeyError:
            raise RunnerError(f"unknown SoC {self.soc!r}: use one of {', '.join(get_soc_to_htp_arch_map())}") from None

    def files(self, sdk: Path, pte: Path) -> list[DeviceFile]:
        """Everything pushed besides the inputs, each to its device path."""
        arch = self.htp_arch()
        ws = self.workspace
        libs = sdk / "lib/aarch64-android"
        files = [
            DeviceFile(pte, f"{ws}/model.pte"),
            DeviceFile(self.build_folder / RUNNER_IN_BUILD, f"{ws}/{RUNNER}"),
            DeviceFile(self.build_folder / BACKEND_IN_BUILD, f"{ws}/{BACKEND_IN_BUILD.name}"),
            *(
                DeviceFile(libs / name, f"{ws}/{name}")
                for name in ("libQnnHtp.so", f"libQnnHtpV{arch}Stub.so", "libQnnHtpPrepare.so", "libQnnSystem.so")
            ),
            DeviceFile(sdk / f"lib/hexagon-v{arch}/unsigned/libQnnHtpV{arch}Skel.so", f"{ws}/libQnnHtpV{arch}Skel.so"),
            *(DeviceFile(Path(local), remote) for remote, local in self.op_package_libraries.items()),
        ]
        missing = [str(f.local) for f in files if not f.local.is_file()]
        if missing:
            raise RunnerError(f"files to push are missing: {', '.join(missing)}")
        outside = [f.remote for f in files if not f.remote.startswith(ws + "/")]
        if outside:
            raise RunnerError(f"device paths outside the workspace {ws}: {', '.join(outside)}")
        return files

    def run(self, pte: bytes, inferences: Sequence[Inference]) -> list[list[torch.Tensor]]:
        sdk = require_sdk("the device target")
        _, output_specs = method_specs(pte)
        state = self.adb("get-state")
        if state.returncode != 0 or state.stdout.strip() != "device":
            raise RunnerError(
                f"no device {self.serial}{' on ' + self.adb_host if self.adb_host else ''}: "
                f"{_tail(state)} (check `adb devices`)"
            )
        with tempfile.TemporaryDirectory(prefix="qco-device-") as tmp:
            work = Path(tmp)
            (work / "model.pte").write_bytes(pte)
            files = self.files(sdk, work / "model.pte")
            input_list, inputs = write_inputs(inferences, work / "inputs", prefix="inputs/")
            ws = self.workspace
            self._checked(
                "cleaning the workspace", "shell", f"rm -rf {shlex.quote(ws)} && mkdir -p {shlex.quote(ws)}/inputs"
            )
            for item in (
                files
                + [DeviceFile(p, f"{ws}/inputs/{p.name}") for p in inputs]
                + [DeviceFile(input_list, f"{ws}/{INPUT_LIST}")]
            ):
                self._checked(f"pushing {item.local.name}", "push", str(item.local), item.remote)
            command = (
                f"cd {shlex.quote(ws)} && chmod +x {RUNNER} && LD_LIBRARY_PATH=. ADSP_LIBRARY_PATH=. "
                f"./{RUNNER} --model_path model.pte --input_list_path {INPUT_LIST} --output_folder_path outputs"
            )
            result = self.adb("shell", command)
            if result.returncode != 0:
                raise RunnerError(f"{RUNNER} exited with status {result.returncode} on {self.serial}: {_tail(result)}")
            self._checked("pulling the outputs", "pull", f"{ws}/outputs", str(work))
            return [read_outputs(work / "outputs", i, output_specs) for i in range(len(inferences))]
