"""The Hexagon check: a package's kernels built for the Hexagon ISA, run under an emulator,
compared bit for bit with the host build, and their executed VLIW packets counted.

Toolchain without the SDK: PyPI ``ziglang`` is a clang with musl and libc++ for
``hexagon-linux-musl`` (v66, HVX 128-byte vectors); Debian's ``qemu-user`` runs the static
program (``qemu-hexagon -cpu v67``, Linux user mode, HVX integer instructions included). The
program is the package's C ABI (the same ``kernels/*.h`` the HTP build and the host build
compile) and a generated driver reading cases from a file. What this proves: the kernel's math
on the Hexagon ISA (32-bit, its compiler, HVX) computes the host's bits. What it does not: the
HTP graph runtime, VTCM, threads, timing -- packets are counted on a functional emulator,
they are not cycles on a phone.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import numpy as np
from filelock import FileLock

from ..errors import ReportedError
from ..generator.abi import KernelDType, KernelStatus
from ..generator.hexagon_driver import driver_ops, render_driver
from ..opdef.datatypes import kernel_rows
from .cmake_build import cache_root, content_key, files_under, unusable_cache
from .cost import KernelCase
from .host_build import build_host_kernels, generated_package, package_name
from .kernel_abi import KernelError, KernelLibrary, KernelTensor

#: The CPU the programs are built for: HTP v66 scalar core with 128-byte HVX (integer).
HEXAGON_CPU = "hexagonv66+hvxv66+hvx_length128b"
#: The emulator's CPU model: qemu 7.2 does not read v68+ ELF flags; v67 runs v66 code.
QEMU_CPU = "v67"
#: The floating-point contract of every build of a kernel: no contraction of a*b+c into FMA,
#: which compilers do in different places for different targets (different float32 bits).
FP_CONTRACT = "-ffp-contract=off"
HEXAGON_FLAGS = ("-target", "hexagon-linux-musl", f"-mcpu={HEXAGON_CPU}", "-O2", "-std=c++17", FP_CONTRACT, "-static")

_FIXED_POINT = {KernelDType[r.kernel_tag] for r in kernel_rows() if r.datatype.is_fixed_point}


class HexagonToolError(ReportedError, RuntimeError):
    """The Hexagon compiler or emulator is missing or failed."""


def zig_cache_dir() -> Path:
    """zig's own cache (libc++ and musl built for Hexagon, ~3 CPU-minutes once): shared by
    every build cache of the user, ``$QCO_ZIG_CACHE_DIR`` moves it."""
    if os.environ.get("QCO_ZIG_CACHE_DIR"):
        return Path(os.environ["QCO_ZIG_CACHE_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "qnn_custom_ops" / "zig"


def hexagon_compiler() -> list[str]:
    """``zig c++`` of the installed ``ziglang``."""
    if importlib.util.find_spec("ziglang") is None:
        raise HexagonToolError("the Hexagon compiler is missing: pip install 'ziglang==0.17.1' (make test installs it)")
    return [sys.executable, "-m", "ziglang", "c++"]


def emulator() -> str:
    path = shutil.which("qemu-hexagon")
    if path is None:
        raise HexagonToolError("qemu-hexagon is missing: apt-get install qemu-user (make test installs it)")
    return path


def compile_for_hexagon(
    sources: Sequence[Path], output: Path, includes: Sequence[Path] = (), extra: Sequence[str] = ()
) -> None:
    """Compile and link ``sources`` into a static Hexagon program (``-c`` in ``extra``: an object)."""
    command = [
        *hexagon_compiler(),
        *HEXAGON_FLAGS,
        *(f"-I{d}" for d in includes),
        *extra,
        *map(str, sources),
        "-o",
        str(output),
    ]
    env = {**os.environ, "ZIG_GLOBAL_CACHE_DIR": str(zig_cache_dir())}
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        lines = (result.stdout + result.stderr).strip().splitlines()
        errors = [line for line in lines if "error" in line.lower()] or lines[-20:]
        raise HexagonToolError("Hexagon build failed:\n" + "\n".join(errors))


def check_toolchain() -> str:
    """Build and run a tiny program for Hexagon, and a tiny shared library: both tools work, and
    zig's libc++ for Hexagon, static and position-independent, is built (the first time, some
    CPU-minutes) before any check or ``make htp_v*`` needs it. Returns the program's output."""
    with tempfile.TemporaryDirectory(prefix="qco-hexagon-toolchain-") as tmp:
        source = Path(tmp) / "hello.cpp"
        source.write_text(
            "#include <cstdio>\n#include <vector>\nint main() { std::vector<long> v(3, 1);\n"
            '  std::printf("hexagon ok: sizeof(long) %zu\\n", sizeof(v[0])); }\n'
        )
        compile_for_hexagon([source], Path(tmp) / "hello")
        compile_for_hexagon([source], Path(tmp) / "libhello.so", extra=["-shared", "-fPIC"])
        result = subprocess.run(
            [emulator(), "-cpu", QEMU_CPU, str(Path(tmp) / "hello")], capture_output=True, text=True
        )
    if result.returncode != 0:
        raise HexagonToolError(f"qemu-hexagon could not run a Hexagon program: {result.stderr.strip()[-300:]}")
    return result.stdout.strip()


def build_hexagon_driver(package_dir: str | Path) -> Path:
    """The package's kernels and the case driver as one static Hexagon program; cached by the
    content of ``kernels/`` and ``host/``, the driver, the flags and the compiler's version."""
    package_dir = generated_package(package_dir)
    name = package_name(package_dir)
    driver = render_driver(package_dir, name)
    extra = {"driver": driver, "flags": " ".join(HEXAGON_FLAGS), "ziglang": version("ziglang")}
    key = content_key(package_dir, files_under(package_dir / "kernels", package_dir / "host"), extra)
    entry = cache_root() / "hexagon" / f"{name}-{key}"
    try:
        return _cached_driver(package_dir, driver, entry)
    except OSError as exc:  # the compiler's failures are HexagonToolError; this is the cache directory
        raise HexagonToolError(unusable_cache(f"Hexagon build of {name}", entry.parent, exc)) from exc


def _cached_driver(package_dir: Path, driver: str, entry: Path) -> Path:
    """``entry/driver``, built from ``driver`` and the package's C ABI unless a whole copy is there."""
    program = entry / "driver"
    entry.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(entry) + ".lock"):
        if _is_whole(program):
            return program
        shutil.rmtree(entry, ignore_errors=True)  # a broken entry is rebuilt
        staging = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", suffix=".partial", dir=entry.parent))
        try:
            (staging / "driver.cpp").write_text(driver)
            sources = [
                staging / "driver.cpp",
                *sorted((package_dir / "host/src").glob("*CApi.cpp")),
                *sorted((package_dir / "host/src/ops").glob("*CApi.cpp")),
            ]
            compile_for_hexagon(
                sources, staging / "driver", includes=[package_dir / "kernels", package_dir / "host/src"]
            )
            _hash_record(staging / "driver").write_text(_sha256(staging / "driver"))
            staging.rename(entry)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return program


def _hash_record(program: Path) -> Path:
    return program.with_name(f"{program.name}.sha256")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _is_whole(program: Path) -> bool:
    """The cached program is the one built: a copy cut short (a crash, a full disk) would fail
    every later run with qemu's "Error mapping file", so its recorded hash is checked."""
    record = _hash_record(program)
    return program.is_file() and record.is_file() and record.read_text() == _sha256(program)


def _write_tensor(stream: bytearray, tensor: KernelTensor) -> None:
    array = tensor.array
    stream += struct.pack("<iifii", 1, int(tensor.dtype), float(tensor.scale), int(tensor.offset), array.ndim)
    stream += struct.pack(f"<{array.ndim}q", *array.shape)
    stream += struct.pack("<Q", array.nbytes) + array.tobytes()


def encode_cases(cases: Sequence[KernelCase], ops: Sequence[str]) -> bytes:
    """The driver's cases file."""
    stream = bytearray(b"QCOC" + struct.pack("<I", len(cases)))
    for case in cases:
        stream += struct.pack("<4I", ops.index(case.op), len(case.outputs), len(case.inputs), len(case.params))
        for tensor in (*case.outputs, *case.inputs, *case.params):
            _write_tensor(stream, tensor)
    return bytes(stream)


def decode_results(data: bytes, cases: Sequence[KernelCase]) -> list[tuple[int, list[np.ndarray]]]:
    """(status, output arrays) per case, from the driver's results file."""
    if data[:4] != b"QCOR":
        raise HexagonToolError("the Hexagon driver wrote no results (see its output above)")
    position, results = 4, []
    for case in cases:
        (status,) = struct.unpack_from("<i", data, position)
        position += 4
        outputs = []
        for tensor in case.outputs:
            (nbytes,) = struct.unpack_from("<Q", data, position)
            position += 8
            outputs.append(
                np.frombuffer(data[position : position + nbytes], dtype=tensor.array.dtype).reshape(tensor.array.shape)
            )
            position += nbytes
        results.append((status, outputs))
    return results


@dataclass(frozen=True)
class HexagonRun:
    results: list[tuple[int, list[np.ndarray]]]
    packets: list[int]  # executed packets of each case's kernel call


def run_on_hexagon(program: Path, cases: Sequence[KernelCase], ops: Sequence[str]) -> HexagonRun:
    """Run the cases under qemu-hexagon, logging every executed translation block, and count
    the packets executed between each call's begin and end marks."""
    with tempfile.TemporaryDirectory(prefix="qco-hexagon-") as tmp:
        work = Path(tmp)
        (work / "cases").write_bytes(encode_cases(cases, ops))
        command = [
            emulator(),
            "-cpu",
            QEMU_CPU,
            "-d",
            "in_asm,exec,nochain",
            "-D",
            str(work / "log"),
            str(program),
            str(work / "cases"),
            str(work / "results"),
        ]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise HexagonToolError(
                f"the Hexagon program failed under qemu-hexagon (exit {result.returncode}): "
                f"{(result.stderr or result.stdout).strip()[-500:]}"
            )
        marks = dict(re.findall(r"(qco_call_begin|qco_call_end)=0x([0-9a-f]+)", result.stdout))
        packets = count_packets(work / "log", int(marks["qco_call_begin"], 16), int(marks["qco_call_end"], 16))
        return HexagonRun(decode_results((work / "results").read_bytes(), cases), packets)


_BLOCK = re.compile(r"^IN: ")
_INSTRUCTION = re.compile(r"^0x([0-9a-f]{8}):\s+0x[0-9a-f]{8}\s+(\{)?")
_EXEC = re.compile(r"^Trace \d+: 0x[0-9a-f]+ \[[0-9a-f]+/([0-9a-f]+)/")


def count_packets(log: Path, begin: int, end: int) -> list[int]:
    """Per window between an execution of ``begin`` and the next of ``end``: executed packets
    (each translation block's packets, from ``in_asm``, times its executions)."""
    sizes: dict[int, int] = {}
    packets: list[int] = []
    block_start, block_packets = None, 0
    counting = False
    with open(log, errors="replace") as lines:
        for line in lines:
            if _BLOCK.match(line):
                block_start, block_packets = None, 0
                continue
            instruction = _INSTRUCTION.match(line)
            if instruction:
                block_start = block_start if block_start is not None else int(instruction[1], 16)
                block_packets += bool(instruction[2])
                sizes[block_start] = block_packets
                continue
            executed = _EXEC.match(line)
            if not executed:
                continue
            pc = int(executed[1], 16)
            if pc == begin:
                counting = True
                packets.append(0)
            elif pc == end:
                counting = False
            elif counting:
                packets[-1] += sizes.get(pc, 0)
    return packets


@dataclass(frozen=True)
class CheckResult:
    """One case compared: the host's and Hexagon's statuses and first differing element."""

    op: str
    label: str
    host_status: int
    hexagon_status: int
    mismatch: str  # "" when bit-exact
    packets: int
    elements: int  # output elements, for packets per element
    default_shape: bool = False  # the case's dims are the default, not asked for

    @property
    def passed(self) -> bool:
        """Bit-exact on a call the kernel accepted: a refusal checks nothing."""
        return not self.mismatch and self.host_status == self.hexagon_status == KernelStatus.Ok

    @property
    def not_applicable(self) -> bool:
        """The default dims, refused as a shape on both sides: the op's, not a failure of it."""
        return self.default_shape and self.host_status == self.hexagon_status == KernelStatus.ShapeMismatch

    def __str__(self) -> str:
        per_element = f"{self.packets / self.elements:8.2f}/element" if self.elements else "no elements"
        cost = f"{self.packets:>10} packets  {per_element}"
        if self.host_status != self.hexagon_status:
            return (
                f"{self.op:<16}{self.label:<48}MISMATCH status: host {_status(self.host_status)}, "
                f"hexagon {_status(self.hexagon_status)}"
            )
        if self.mismatch:
            return f"{self.op:<16}{self.label:<48}MISMATCH {self.mismatch}"
        if self.not_applicable:
            return (
                f"{self.op:<16}{self.label:<48}not applicable: the default dims are not a shape {self.op} "
                f"takes (check it with --shape {self.op}:TENSOR=DIMS,...)"
            )
        if self.host_status != KernelStatus.Ok:
            return (
                f"{self.op:<16}{self.label:<48}NOT CHECKED: the kernel refuses this case on both "
                f"({_status(self.host_status)}): {_refusal_fix(self.host_status, self.op)}"
            )
        return f"{self.op:<16}{self.label:<48}ok  {cost}"


def _refusal_fix(status: int, op: str) -> str:
    """What to do about a case the kernel refuses, by the status it returned."""
    if status == KernelStatus.NotImplemented:
        return f"write the op's math in kernels/{op}.h (the generated skeleton returns this)"
    if status == KernelStatus.ShapeMismatch:
        return f"give shapes it takes with --shape {op}:TENSOR=DIMS,..."
    if status == KernelStatus.UnsupportedDtype:
        return "make it take every datatype its OpDef declares, or drop the datatype from the OpDef"
    return f"give shapes and values it takes with --shape {op}:TENSOR=DIMS,..."


def _status(status: int) -> str:
    try:
        return KernelStatus(status).description
    except ValueError:
        return f"status {status}"


def first_mismatch(host: np.ndarray, hexagon: np.ndarray, tensor: KernelTensor, index: int) -> str:
    """ "" if the two outputs are the same bits; else where they first differ, in values and,
    for fixed point, in steps."""
    flat_host, flat_hexagon = host.ravel(), hexagon.ravel()
    width = flat_host.dtype.itemsize  # bytes per element, so a tensor with no elements compares too
    host_bytes = flat_host.view(np.uint8).reshape(flat_host.size, width)
    hexagon_bytes = flat_hexagon.view(np.uint8).reshape(flat_hexagon.size, width)
    differs = np.flatnonzero((host_bytes != hexagon_bytes).any(axis=1))
    if not differs.size:
        return ""
    at = int(differs[0])
    got, want = flat_hexagon[at], flat_host[at]
    steps = f" ({int(got) - int(want):+d} steps)" if tensor.dtype in _FIXED_POINT else ""
    return f"output {index} index {at} ({len(differs)} differ): host {want}, hexagon {got}{steps}"


def hexagon_packets(package_dir: str | Path, cases: Sequence[KernelCase]) -> list[int]:
    """Executed packets of each case's kernel call on Hexagon (emulated)."""
    package_dir = generated_package(package_dir)
    return run_on_hexagon(build_hexagon_driver(package_dir), cases, driver_ops(package_dir)).packets


def hexagon_check(package_dir: str | Path, cases: Sequence[KernelCase]) -> list[CheckResult]:
    """Run ``cases`` through the host build and under the emulator; one result per case."""
    package_dir = generated_package(package_dir)
    name = package_name(package_dir)
    ops = driver_ops(package_dir)
    run = run_on_hexagon(build_hexagon_driver(package_dir), cases, ops)
    library = KernelLibrary(build_host_kernels(package_dir), name)
    results = []
    for case, (hexagon_status, hexagon_outputs), packets in zip(cases, run.results, run.packets):
        outputs = [KernelTensor(t.array.copy(), t.dtype, t.scale, t.offset) for t in case.outputs]
        host_status = _host_status(library, case, outputs)
        mismatch = (
            ""
            if host_status != KernelStatus.Ok
            else next(
                (
                    m
                    for i, (t, h) in enumerate(zip(outputs, hexagon_outputs))
                    if (m := first_mismatch(t.array, h, t, i))
                ),
                "",
            )
        )
        results.append(
            CheckResult(
                case.op,
                case.label,
                host_status,
                hexagon_status,
                mismatch,
                packets,
                sum(t.array.size for t in case.outputs),
                case.default_shape,
            )
        )
    return results


def _host_status(library: KernelLibrary, case: KernelCase, outputs: list[KernelTensor]) -> int:
    """The kernel's status on the host (a refusal is a result to compare, not an error)."""
    try:
        library.run(case.op, outputs, case.inputs, case.params)
    except KernelError as error:
        return error.status
    return KernelStatus.Ok
