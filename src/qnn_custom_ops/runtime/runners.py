"""Run a .pte: on the host (ExecuTorch's Python runtime), on the QNN x86 simulator, or on a
phone through adb. Every target takes the same inputs and returns the same outputs; the
x86 and device targets speak ``qnn_executor_runner``'s raw-file protocol."""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from ..errors import ReportedError
from ..opdef.datatypes import DATATYPES
from ..qnn_sdk import require_sdk
from ..quiet import native_stderr_held
from .isolation import call_isolated
from .loading import (
    clear_kernel_errors,
    last_kernel_error,
    program_backends,
    program_facts,
    program_needs_data,
    program_operators,
    trace_kernels,
)
from .program_libraries import load_program_libraries
from .raw_io import INPUT_LIST, TensorSpec, read_outputs, write_inputs
from .weights_store import pages_not_pinned, share_packed_weights

Inference = Sequence[torch.Tensor]
RUNNER = "qnn_executor_runner"
RUNNER_IN_BUILD = Path("examples/qualcomm/executor_runner") / RUNNER
BACKEND_IN_BUILD = Path("backends/qualcomm/libqnn_executorch_backend.so")

# ExecuTorch ScalarType codes (as c10's) -> torch dtypes.
_TORCH_DTYPES = {
    r.scalar_type[1]: getattr(torch, r.torch)
    for r in DATATYPES.values()
    if r.scalar_type is not None and r.torch is not None
}


class RunnerError(ReportedError, RuntimeError):
    """A step of running a program failed; the message names the step."""


class ProgramError(ReportedError, ValueError):
    """Bytes that are not an ExecuTorch program the installed runtime can load."""


@functools.lru_cache(maxsize=1)
def _program_identifier() -> bytes:
    """The flatbuffer file identifier of the installed runtime's programs (``ET12``), from its schema."""
    schema = resources.files("executorch") / "exir/_serialize/program.fbs"
    found = re.search(rb'file_identifier\s+"([^"]{4})"', schema.read_bytes())
    if found is None:
        raise ProgramError(f"{schema}: no file_identifier in the installed executorch's program schema")
    return found[1]


@contextlib.contextmanager
def _runtime_log_held() -> Iterator[list[str]]:
    """Hold what the runtime logs inside the block (through file descriptor 2 and through
    ``sys.stderr``, whatever it is): replayed after it on success, handed to the caller instead
    when the block raises."""
    held: list[str] = []
    python_side = io.StringIO()
    try:
        with native_stderr_held() as native, contextlib.redirect_stderr(python_side):
            yield held
    except BaseException:
        held += native + python_side.getvalue().splitlines(keepends=True)
        raise
    sys.stderr.write("".join(native) + python_side.getvalue())


def check_program(pte: bytes, where: str = "program") -> None:
    """Refuse bytes that are not an ExecuTorch program before the runtime reads them: its
    loader logs a bad file identifier raw, and a non-UTF-8 one aborts the interpreter."""
    expected = _program_identifier()
    if len(pte) < 8 or pte[4:8] != expected:
        raise ProgramError(
            f"{where}: not an ExecuTorch program (no {expected.decode()} identifier at byte 4); "
            "pass a .pte written by lower(..., output=...)"
        )


def _last_said(log: list[str], fallback: str) -> str:
    """The runtime's last log line without its ``[file.cpp:N]`` prefix, or ``fallback``."""
    return re.sub(r"^\[[\w.]+:\d+\]\s*", "", log[-1].strip()) if log else fallback


@contextlib.contextmanager
def _refused_as_program_error(where: str) -> Iterator[None]:
    """Whatever the runtime's loader raises for a damaged file (RuntimeError, IndexError,
    KeyError, MemoryError, UnicodeDecodeError, ...) as one ``ProgramError`` naming ``where``
    and the runtime's last log line; its log held back."""
    try:
        with _runtime_log_held() as log:
            yield
    except ReportedError:
        raise
    except Exception as exc:
        reason = _last_said(log, f"{type(exc).__name__}: {exc}")
        raise ProgramError(
            f"{where}: not an ExecuTorch program the installed runtime can load ({reason}); pass "
            "a .pte written by lower(..., output=...)"
        ) from None


def _verified(pte: bytes, where: str, data: Path | None = None) -> Any:
    """The runtime's program, its internal consistency verified (every offset and index in range)
    and its planned memory within this machine's; with ``data``, the data file its weights are in."""
    from executorch.runtime import Runtime, Verification

    _check_planned_memory(pte, where)
    return Runtime.get().load_program(pte, verification=Verification.InternalConsistency, data_path=data)


def _check_planned_memory(pte: bytes, where: str) -> None:
    """Refuse a program whose planned buffers exceed this machine's memory before the runtime
    allocates them: its loader does so first, and a damaged size (one flipped bit can turn a
    buffer count into garbage) had it touch 17 GB for half a minute before ``std::bad_alloc``."""
    try:
        planned_bytes = program_facts(pte).planned_bytes
    except Exception:  # damage of another kind: the runtime's verification names it better
        return
    machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for method, planned in planned_bytes.items():
        if planned > machine:
            raise ProgramError(
                f"{where}: method {method!r} plans {planned / 2**30:.3g} GiB of buffers, more than this "
                f"machine's {machine / 2**30:.3g} GiB: the file is damaged, or it needs a bigger machine"
            )


def method_specs(
    pte: bytes, method: str = "forward", where: str = "program"
) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """(input specs, output specs) of a program's method, read from the .pte; ``ProgramError``
    (naming ``where``, with the runtime's reason) for a file the runtime cannot load."""
    check_program(pte, where)

    def spec(info) -> TensorSpec:
        return TensorSpec(tuple(info.sizes()), _TORCH_DTYPES[int(info.dtype())])

    with _refused_as_program_error(where):
        meta = _verified(pte, where).metadata(method)
        return (
            [spec(meta.input_tensor_meta(i)) for i in range(meta.num_inputs())],
            [spec(meta.output_tensor_meta(i)) for i in range(meta.num_outputs())],
        )


#: An operator's name in a program: ``ns::op`` and an overload; anything else is a damaged file.
_OPERATOR_NAME = re.compile(r"[A-Za-z_][\w]*::[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)?")
#: Backends the host target does not run (executorch's Python runtime registers QnnBackend,
#: which then fails to find the SDK's libraries), and the targets that run them.
_BACKEND_TARGETS = {"QnnBackend": "--target x86 (the QNN HTP simulator) or --target device"}


def _host_operators(pte: bytes, where: str) -> set[str]:
    """The program's operators, once its names are known to be names and every backend it is
    delegated to is one the host runtime has."""
    from executorch.runtime import Runtime

    with _refused_as_program_error(where):
        operators = program_operators(pte)
        backends = program_backends(pte)
    damaged = sorted(name for name in operators if not _OPERATOR_NAME.fullmatch(name))
    if damaged:
        raise ProgramError(
            f"{where}: not an ExecuTorch program the installed runtime can load (operator name {damaged[0]!r}); "
            "pass a .pte written by lower(..., output=...)"
        )
    registered = set(Runtime.get().backend_registry.registered_backend_names)
    missing = sorted(name for name in backends if name in _BACKEND_TARGETS or name not in registered)
    if missing:
        raise ProgramError(
            f"{where}: delegated to {missing[0]}, which the host target does not run: run it with "
            f"{_BACKEND_TARGETS.get(missing[0], 'a runtime built with that backend')}"
        )
    return operators


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
    """

    libraries: Sequence[Path] = ()
    isolated: bool = False
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
        _host_operators(pte, "program")
        _check_data_file(pte, data)
        load_program_libraries(pte, self.libraries)
        trace_kernels(self.libraries)
        share_packed_weights()
        with _refused_as_program_error("program" if data is None else f"program with data file {data}"):
            with pages_not_pinned():
                return self._program(pte, data).load_method(method)

    def _program(self, pte: bytes, data: Path | None) -> Any:
        """The runtime's program for ``pte`` with ``data``, loaded once for all its methods."""
        program = self._programs.get((pte, data))
        if program is None:
            program = self._programs[(pte, data)] = _verified(pte, "program", data)
        return program

    def _execute(self, method, inputs: Inference) -> list[torch.Tensor]:
        """One inference; a kernel's failure is raised with its op and status, not a bare code."""
        clear_kernel_errors(self.libraries)
        try:
            with _runtime_log_held() as log:
                return [t.clone() for t in method.execute(list(inputs))]
        except RuntimeError as exc:
            failure = last_kernel_error(self.libraries)
            if failure:
                raise RunnerError(f"kernel failed: {failure} (ExecuTorch: {exc})") from None
            said = _last_said(log, str(exc))
            raise RunnerError(f"the program failed while running: {said} (ExecuTorch: {exc})") from None


def _check_data_file(pte: bytes, data: Path | None) -> None:
    """A program whose weights are in a data file is given one that exists (the runtime's own
    word for its absence is "external_data_map is null")."""
    if data is None and program_needs_data(pte):
        raise ProgramError(
            "program: its weights are in a data file (.ptd) beside the .pte; pass that file "
            "(HostRunner.run(..., data=PATH))"
        )
    if data is not None and not data.is_file():
        raise ProgramError(f"{data}: no such data file; pass the .ptd written with the .pte")


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
