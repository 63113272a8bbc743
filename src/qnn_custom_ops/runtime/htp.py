"""The HTP check: a package's kernels as a QHPI op package inside Qualcomm's own HTP runtime.

The x86 ``libQnnHtp.so`` of a QAIRT release (shipped in PyPI's ``onnxruntime-qnn`` wheels)
prepares QNN graphs and runs them on its HTP simulator; a QHPI package (``generate-op-package
--api qhpi``, a C ABI) loads into any QAIRT that has QHPI. Each case becomes a one-node graph
built through QNN's C API by a small harness of ours (``htp_harness/harness.cpp``: it sets
every tensor's datatype, encoding and static-ness exactly, which an ONNX route through
onnxruntime's QNN EP would decide for us), and its outputs are compared bit for bit with the
host C ABI's. One x86 build of the package serves every QAIRT version.

What this proves beyond the Hexagon check: the op package ABI (registration, op config
validation, kernel selection by signature), how the runtime hands tensors, encodings and
parameters to a kernel, and that the kernel's bits survive it. What it does not: Hexagon code
(x86 simulation), VTCM, timing.
"""

from __future__ import annotations

import hashlib
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from filelock import FileLock

from ..errors import ReportedError
from ..generator.abi import KernelDType, KernelStatus
from ..generator.qhpi import abi_header_context
from ..generator.render import render_qhpi_sources, template_environment
from ..opdef import OpPackage, TensorDef
from ..opdef.datatypes import kernel_rows
from ..progress import Progress, silent
from ..qairt import LINK_QAIRT, QairtError, qairt_backend
from .cmake_build import cache_root, content_key, files_under, unusable_cache
from .cost import KernelCase
from .hexagon import case_time_limit, first_mismatch, host_results, refusal_fix
from .host_build import GeneratedPackage, build_host_kernels
from .isolation import call_isolated, ending_with_parent

HARNESS = Path(__file__).parent / "htp_harness" / "harness.cpp"
_QNN_DATATYPE = {KernelDType[r.kernel_tag]: r.datatype for r in kernel_rows()}


class HtpCheckError(ReportedError, RuntimeError):
    """The package or the harness could not be built, or the backend could not run them."""


def build_harness() -> Path:
    """The harness program (g++), cached by its source and the ABI header it includes."""
    header = template_environment().get_template("qhpi/abi.h.j2").render(**abi_header_context())
    key = hashlib.sha256(HARNESS.read_bytes() + header.encode()).hexdigest()[:16]
    entry = cache_root() / "htp" / f"harness-{key}"
    program = entry / "harness"
    entry.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(entry) + ".lock"):
        if program.is_file():
            return program
        with tempfile.TemporaryDirectory(prefix=".harness-", dir=entry.parent) as tmp:
            staging = Path(tmp) / "entry"
            (staging / "qco").mkdir(parents=True)
            (staging / "qco" / "qhpi_abi.h").write_text(header)
            command = ["g++", "-std=c++17", "-O2", "-Wall", "-Werror", f"-I{staging}", str(HARNESS), "-ldl"]
            _build([*command, "-o", str(staging / "harness")], "the htp-check harness")
            staging.rename(entry)
    return program


def _build(command: list[str], what: str, cwd: Path | None = None) -> None:
    """Run a compiler or make; on failure, one error naming ``what`` with the tool's error lines."""
    result = subprocess.run(command, capture_output=True, text=True, cwd=cwd)
    if result.returncode != 0:
        lines = (result.stdout + result.stderr).strip().splitlines()
        errors = [line for line in lines if "error" in line.lower()] or lines[-10:]
        raise HtpCheckError(f"{what} did not build:\n" + "\n".join(errors[:20]))


def build_qhpi_package(package_dir: Path, package: OpPackage, progress: Progress = silent) -> Path:
    """The package's QHPI flavour built for x86 with its own Makefile (g++ for ``X86_CXX``),
    linked against QAIRT ``LINK_QAIRT``'s backend: the one binary every version loads. A classic
    package gets its QHPI sources rendered beside a copy of its kernels; cached by content. The
    build (and the backend's install, the first time) is said to ``progress``."""
    sources = render_qhpi_sources(package)
    kernels = files_under(package_dir / "kernels")
    extra = {str(f.path): hashlib.sha256(f.content).hexdigest() for f in sources}
    key = content_key(package_dir, kernels, {**extra, "cxx": _compiler_version()})
    entry = cache_root() / "htp" / f"{package.name}-{key}"
    library = entry / "build" / "x86_64-linux-clang" / f"libQnn{package.name}.so"
    entry.parent.mkdir(parents=True, exist_ok=True)
    link_with = qairt_backend(LINK_QAIRT, progress)
    try:
        with FileLock(str(entry) + ".lock"):
            if library.is_file():
                return library
            progress(f"building {package.name} as a QHPI package for x86 (its Makefile, g++)")
            with tempfile.TemporaryDirectory(prefix=f".{package.name}-", dir=entry.parent) as tmp:
                staging = Path(tmp) / "package"
                shutil.copytree(package_dir / "kernels", staging / "kernels")
                for planned in sources:
                    path = staging / planned.path
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(planned.content)
                command = ["make", "-s", "htp_x86", "X86_CXX=g++", f"QNN_HTP_LIB={link_with}"]
                _build(command, f"{package.name}: the QHPI package", cwd=staging)
                staging.rename(entry)
    except OSError as exc:
        raise HtpCheckError(unusable_cache(f"QHPI build of {package.name}", entry.parent, exc)) from exc
    return library


def _compiler_version() -> str:
    result = subprocess.run(["g++", "--version"], capture_output=True, text=True)
    return result.stdout.splitlines()[0] if result.returncode == 0 else "g++ missing"


def _tensor_record(tensor, qnn_type: int, with_data: bool) -> bytes:
    """One tensor of the harness's cases file: datatype, tensor type, encoding, dims, bytes."""
    array = tensor.array
    datatype = _QNN_DATATYPE[tensor.dtype]
    record = struct.pack(
        "<IIIfiI", datatype.qnn_code, qnn_type, datatype.is_fixed_point, tensor.scale, tensor.offset, array.ndim
    )
    record += struct.pack(f"<{array.ndim}I", *array.shape) + struct.pack("<Q", array.nbytes)
    return record + (array.tobytes() if with_data else b"")


_APP_WRITE, _APP_READ, _STATIC = 0, 1, 4


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<I", len(data)) + data


def encode_cases(package: OpPackage, cases: Sequence[KernelCase]) -> bytes:
    """The harness's cases file: per case the op, its outputs, inputs (static as the OpDef says)
    and parameters (named, scalar or tensor, in OpDef order)."""
    stream = bytearray(struct.pack("<II", 0x48434F51, len(cases)))
    for case in cases:
        op = package.ops[case.op]
        stream += _string(package.name) + _string(op.name)
        stream += struct.pack("<III", len(case.outputs), len(case.inputs), len(case.params))
        for tensor in case.outputs:
            stream += _tensor_record(tensor, _APP_READ, with_data=False)
        for tensor, definition in zip(case.inputs, op.inputs):
            stream += _tensor_record(tensor, _STATIC if definition.is_static else _APP_WRITE, with_data=True)
        for tensor, definition in zip(case.params, op.params):
            stream += _string(definition.name) + struct.pack("<I", _is_scalar(definition))
            stream += _tensor_record(tensor, _STATIC, with_data=True)
    return bytes(stream)


def _is_scalar(param: TensorDef) -> bool:
    return param.shape.rank == 0 or param.is_enum


@dataclass(frozen=True)
class HtpRun:
    build: str  # the backend's build id
    outcomes: list[tuple[str, str, list[np.ndarray]]]  # per case: failed step ("" ran), the backend's words, outputs


def decode_results(data: bytes, cases: Sequence[KernelCase]) -> HtpRun:
    def string(at: int) -> tuple[str, int]:
        (size,) = struct.unpack_from("<I", data, at)
        return data[at + 4 : at + 4 + size].decode("utf-8", "replace"), at + 4 + size

    if data[:4] != b"QCOR":
        raise HtpCheckError("the htp-check harness wrote no results")
    build, at = string(4)
    outcomes = []
    for case in cases:
        step, at = string(at)
        at += 8  # the error code: the step and the backend's words say more
        said, at = string(at)
        outputs = []
        for tensor in case.outputs:
            (size,) = struct.unpack_from("<Q", data, at)
            at += 8
            array = tensor.array
            outputs.append(np.frombuffer(data[at : at + size], dtype=array.dtype).reshape(array.shape if size else 0))
            at += size
        outcomes.append((step, said, outputs))
    return HtpRun(build, outcomes)


def run_on_htp(
    library: Path, package: OpPackage, cases: Sequence[KernelCase], version: str, progress: Progress = silent
) -> HtpRun:
    """Run ``cases`` in QAIRT ``version``'s x86 HTP backend (a child process per version: a
    backend is loaded once per process; its install, the first time, said to ``progress``)."""
    backend = qairt_backend(version, progress)
    with tempfile.TemporaryDirectory(prefix="qco-htp-") as tmp:
        work = Path(tmp)
        (work / "cases").write_bytes(encode_cases(package, cases))
        provider = f"{package.name}InterfaceProvider"
        command = [
            str(build_harness()),
            str(backend),
            str(library),
            provider,
            str(work / "cases"),
            str(work / "results"),
        ]
        limit = 60 + sum(case_time_limit(case) for case in cases)
        try:
            result = subprocess.run(
                command, capture_output=True, text=True, timeout=limit, preexec_fn=ending_with_parent()
            )
        except subprocess.TimeoutExpired as exc:
            raise HtpCheckError(f"QAIRT {version}: the HTP backend did not finish within {limit:.0f} s") from exc
        if result.returncode != 0:
            raise HtpCheckError(f"QAIRT {version}: {_harness_failure(result)}")
        return decode_results((work / "results").read_bytes(), cases)


def _harness_failure(result: subprocess.CompletedProcess) -> str:
    """The harness's own one line (the backend or the package could not be loaded), or how it ended."""
    said = [line for line in result.stderr.splitlines() if not line.startswith("qco-htp:")]
    reason = next((line.removeprefix("error: ") for line in said if line.startswith("error: ")), "")
    if reason:
        return reason
    ending = f"signal {-result.returncode}" if result.returncode < 0 else f"exit {result.returncode}"
    return f"the harness ended with {ending}: " + " | ".join(said[-3:])


@dataclass(frozen=True)
class HtpResult:
    """One case on one QAIRT version, compared with the host kernel."""

    version: str
    op: str
    label: str
    host_status: int
    failed_step: str  # "" when the backend ran the node
    said: str
    mismatch: str
    default_shape: bool = False

    @property
    def passed(self) -> bool:
        return self.host_status == KernelStatus.Ok and not self.failed_step and not self.mismatch

    @property
    def both_refused(self) -> bool:
        """The host kernel refuses the case, and the backend did not run it either."""
        return self.host_status != KernelStatus.Ok and bool(self.failed_step)

    @property
    def not_applicable(self) -> bool:
        return self.default_shape and self.host_status == KernelStatus.ShapeMismatch and bool(self.failed_step)

    def __str__(self) -> str:
        where = f"{self.version:<8}{self.op:<16}{self.label:<48} "
        if self.passed:
            return where + "ok"
        if self.not_applicable:
            return where + f"not applicable: the default dims are not a shape {self.op} takes"
        if self.both_refused:
            return where + (
                f"NOT CHECKED: the kernel refuses this case ({_status(self.host_status)}), on both: "
                + refusal_fix(self.host_status, self.op)
            )
        if self.failed_step:
            return (
                where
                + f"MISMATCH: the HTP backend failed at {self.failed_step}: {self.said or 'no word why'}"
                + ("" if self.host_status == KernelStatus.Ok else f" (the host kernel: {_status(self.host_status)})")
            )
        if self.host_status != KernelStatus.Ok:
            return where + f"MISMATCH status: host {_status(self.host_status)}, the HTP ran it"
        return where + f"MISMATCH {self.mismatch}"


def _status(status: int) -> str:
    try:
        return KernelStatus(status).description
    except ValueError:
        return f"status {status}"


def htp_check(
    package: str | Path | GeneratedPackage,
    cases: Sequence[KernelCase],
    versions: Sequence[str],
    progress: Progress = silent,
) -> tuple[Path, list[HtpResult]]:
    """Build the package once as QHPI for x86, run ``cases`` in each QAIRT version's HTP backend
    and on the host; the library built and one result per version and case. The builds, the
    backends' installs and each version's run are said to ``progress``."""
    package = GeneratedPackage.at(package)
    library = build_qhpi_package(package.directory, package.opdef, progress)
    host_library = build_host_kernels(package, progress=progress)
    host = call_isolated(host_results, host_library, package.name, cases, None, what="the host half of the HTP check")
    results = []
    for version in versions:
        run = run_on_htp(library, package.opdef, cases, version, progress=progress)
        progress(f"htp: {len(cases)} case(s) run in QAIRT {version} ({run.build})")
        for case, (step, said, outputs), (host_status, host_outputs) in zip(cases, run.outcomes, host):
            mismatch = ""
            if not step and host_status == KernelStatus.Ok:
                mismatch = next(
                    (
                        m
                        for i, (t, h, x) in enumerate(zip(case.outputs, host_outputs, outputs))
                        if (m := first_mismatch(h, x, t, i).replace("hexagon", "htp"))
                    ),
                    "",
                )
            results.append(
                HtpResult(version, case.op, case.label, host_status, step, said, mismatch, case.default_shape)
            )
    return library, results


__all__ = ["HtpCheckError", "HtpResult", "QairtError", "htp_check"]
