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
import threading
import time
from collections import deque
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
from ..progress import progress
from .cmake_build import cache_root, content_key, files_under, unusable_cache
from .cost import KernelCase
from .host_build import build_host_kernels, generated_package, package_name
from .isolation import call_isolated, ending_with_parent, set_time_limit, signal_name
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
    if not zig_cache_dir().is_dir():
        progress(
            f"building libc++ and musl for Hexagon into {zig_cache_dir()}, once for every package "
            "(about 3 CPU-minutes: some minutes here)"
        )
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


def build_hexagon_driver(package_dir: str | Path, ops: Sequence[str] | None = None) -> Path:
    """The kernels of ``ops`` (default: the package's) and the case driver as one static Hexagon
    program; cached by the content of ``kernels/`` and ``host/``, the driver, the flags and the
    compiler's version."""
    package_dir = generated_package(package_dir)
    name = package_name(package_dir)
    ops = driver_ops(package_dir) if ops is None else ops
    driver = render_driver(name, ops)
    extra = {"driver": driver, "flags": " ".join(HEXAGON_FLAGS), "ziglang": version("ziglang")}
    key = content_key(package_dir, files_under(package_dir / "kernels", package_dir / "host"), extra)
    entry = cache_root() / "hexagon" / f"{name}-{key}"
    try:
        return _cached_driver(package_dir, driver, ops, entry)
    except OSError as exc:  # the compiler's failures are HexagonToolError; this is the cache directory
        raise HexagonToolError(unusable_cache(f"Hexagon build of {name}", entry.parent, exc)) from exc


def _cached_driver(package_dir: Path, driver: str, ops: Sequence[str], entry: Path) -> Path:
    """``entry/driver``, built from ``driver`` and the package's C ABI unless a whole copy is there."""
    program = entry / "driver"
    entry.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(entry) + ".lock"):
        if _is_whole(program):
            return program
        shutil.rmtree(entry, ignore_errors=True)  # a broken entry is rebuilt
        progress(f"building {entry.name.rsplit('-', 1)[0]} for Hexagon (zig c++)")
        staging = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", suffix=".partial", dir=entry.parent))
        try:
            (staging / "driver.cpp").write_text(driver)
            sources = [
                staging / "driver.cpp",
                *sorted((package_dir / "host/src").glob("*CApi.cpp")),
                *(package_dir / f"host/src/ops/{op}CApi.cpp" for op in ops),
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


def decode_results(data: bytes, cases: Sequence[KernelCase]) -> list[tuple[int, list[np.ndarray], bool]]:
    """(status, output arrays, whether the kernel prepared anything ahead) per case, from the
    driver's results file."""
    if data[:4] != b"QCOR":
        raise HexagonToolError("the Hexagon driver wrote no results (see its output above)")
    position, results = 4, []
    for case in cases:
        prepare_status, status = struct.unpack_from("<ii", data, position)
        position += 8
        outputs = []
        for tensor in case.outputs:
            (nbytes,) = struct.unpack_from("<Q", data, position)
            position += 8
            outputs.append(
                np.frombuffer(data[position : position + nbytes], dtype=tensor.array.dtype).reshape(tensor.array.shape)
            )
            position += nbytes
        results.append((status, outputs, prepare_status != KernelStatus.NotImplemented))
    return results


@dataclass(frozen=True)
class HexagonRun:
    results: list[tuple[int, list[np.ndarray], bool]]  # status, outputs, whether it prepared anything ahead
    packets: list[int]  # executed packets of each case's kernel call
    prepare_packets: list[int]  # of what each case's kernel prepares ahead (its <Op>Prepare; 0 without one)


#: A case's time limit under the emulator (which logs every executed block): a fixed allowance
#: (starting qemu, translating the program, reading the case) and a time per element of its
#: tensors, a few times what the slowest shipped kernel takes; ``time_limit`` replaces both.
CASE_SECONDS = 30.0
ELEMENT_SECONDS = 2e-3


def case_time_limit(case: KernelCase) -> float:
    """Seconds ``case`` may take under the emulator before it is taken for a kernel that never returns."""
    return CASE_SECONDS + ELEMENT_SECONDS * sum(t.array.size for t in (*case.outputs, *case.inputs, *case.params))


def run_on_hexagon(
    program: Path, cases: Sequence[KernelCase], ops: Sequence[str], time_limit: float | None = None
) -> HexagonRun:
    """Run the cases under qemu-hexagon, its log of every executed translation block counted as
    it streams (never stored), and count the packets executed between each call's begin and end
    marks. A case past its time limit (``case_time_limit``, or ``time_limit`` seconds) ends
    the emulator; so does this process's end."""
    limits = [time_limit or case_time_limit(case) for case in cases]
    with tempfile.TemporaryDirectory(prefix="qco-hexagon-") as tmp:
        work = Path(tmp)
        (work / "cases").write_bytes(encode_cases(cases, ops))
        command = [emulator(), "-cpu", QEMU_CPU, "-d", "in_asm,exec,nochain"]
        counter = PacketCounter()
        returncode, expired = _emulate(
            [*command, str(program), str(work / "cases"), str(work / "results")], counter, limits
        )
        failure = _failure(returncode, expired, counter, cases, limits)
        if failure:
            raise HexagonToolError(failure)
        results = (work / "results").read_bytes() if (work / "results").is_file() else b""
        decoded = decode_results(results, cases)
        prepared = [count if ran else 0 for count, (_, _, ran) in zip(counter.prepare_packets, decoded)]
        return HexagonRun(decoded, counter.packets, prepared)


def _emulate(command: list[str], counter: PacketCounter, limits: Sequence[float]) -> tuple[int, bool]:
    """Run ``command``, its standard error (qemu's log, the program's and qemu's own lines) fed to
    ``counter`` line by line; killed when a case outlives its limit. (exit status, killed for time)."""
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=ending_with_parent(),
        )
    except OSError as exc:
        raise HexagonToolError(
            f"{command[0]}: cannot be run ({exc.strerror}): reinstall it (apt-get install qemu-user)"
        ) from exc
    done, expired, reported = threading.Event(), threading.Event(), 0
    watchdog = threading.Thread(target=_watch, args=(process, counter, limits, done, expired), daemon=True)
    watchdog.start()
    try:
        assert process.stderr is not None
        for line in process.stderr:
            counter.feed(line)
            if counter.ended > reported:
                reported = counter.ended
                progress(f"hexagon: {reported} of {len(limits)} case(s) run under qemu-hexagon")
        process.wait()
    finally:
        done.set()
        process.kill()  # still running only if this process is being interrupted
        process.wait()
        watchdog.join()
    return process.returncode, expired.is_set()


def _watch(
    process: subprocess.Popen,
    counter: PacketCounter,
    limits: Sequence[float],
    done: threading.Event,
    expired: threading.Event,
) -> None:
    """Kill ``process`` when the case it is on (the one after the last ended) outlives its limit;
    each case's clock starts when the one before it ends, so reading a case counts too."""
    case, deadline = 0, time.monotonic() + (limits[0] if limits else CASE_SECONDS)
    while not done.wait(0.1):
        if counter.ended > case:
            case = counter.ended
            deadline = time.monotonic() + (limits[case] if case < len(limits) else CASE_SECONDS)
        elif time.monotonic() > deadline:
            expired.set()
            process.kill()
            return


def _failure(
    returncode: int, expired: bool, counter: PacketCounter, cases: Sequence[KernelCase], limits: Sequence[float]
) -> str:
    """What went wrong with the emulator's run, as one line naming the op and what to do; "" if nothing."""
    case = cases[counter.ended] if counter.ended < len(cases) else None
    where = f"kernel {case.op} ({case.label})" if case else "the Hexagon driver"
    inside = counter.inside  # a kernel call (or its preparation) begun and not ended
    said = "; ".join(counter.other)[-300:]
    if expired:
        limit = limits[counter.ended] if case else CASE_SECONDS
        return (
            f"{where} did not return within {limit:.0f} s under qemu-hexagon: an endless loop? "
            "(give it longer with --time-limit SECONDS)"
        )
    if returncode < 0:
        return f"{where} crashed on Hexagon (qemu-hexagon): {signal_name(-returncode)}" + (
            "; a C++ exception thrown on Hexagon ends this way too (catch it in the kernel)" if inside else f": {said}"
        )
    if inside:
        return (
            f"{where} ended the Hexagon program with exit status {returncode}: a kernel returns a "
            "status, it does not call exit()"
        )
    if returncode != 0:
        return f"the Hexagon program failed under qemu-hexagon (exit {returncode}): {said}"
    if counter.ended < len(cases):
        return (
            f"{emulator()} exited 0 having run {counter.ended} of {len(cases)} case(s): it is no working "
            "qemu-hexagon (apt-get install qemu-user)"
        )
    return ""


_IN = re.compile(rb"^IN: (\S*)")
_INSTRUCTION = re.compile(rb"^0x([0-9a-f]{8}):\s+0x[0-9a-f]{8}\s+(\{)?")
_EXEC = re.compile(rb"^Trace \d+: 0x[0-9a-f]+ \[[0-9a-f]+/([0-9a-f]+)/")
_BEGIN, _END = b"qco_call_begin", b"qco_call_end"
_PREPARE_BEGIN, _PREPARE_END = b"qco_prepare_begin", b"qco_prepare_end"
_MARKS = (_BEGIN, _END, _PREPARE_BEGIN, _PREPARE_END)


class PacketCounter:
    """Per window between an execution of ``qco_call_begin`` and the next of ``qco_call_end``
    (and apart, per window of ``qco_prepare_begin`` and ``qco_prepare_end``): executed packets
    (each translation block's packets, from ``in_asm``, times its executions), counted line by
    line as qemu's log streams. What is kept: each block's packet count, the marks' addresses
    (from the blocks' symbol names) and the last lines that are not the log's."""

    def __init__(self) -> None:
        self.packets: list[int] = []  # one per window begun
        self.prepare_packets: list[int] = []  # one per prepare window begun
        self.ended = 0  # windows ended
        self.other: deque[str] = deque(maxlen=5)  # the program's and qemu's own last lines
        self._sizes: dict[int, int] = {}
        self._marks: dict[int, bytes] = {}
        self._name, self._start = b"", -1
        self._counting: list[int] | None = None  # the list whose last window is open

    def feed(self, line: bytes) -> None:
        executed = _EXEC.match(line)
        if executed:
            self._executed(int(executed[1], 16))
            return
        instruction = _INSTRUCTION.match(line)
        if instruction:
            if self._start < 0:
                self._start = int(instruction[1], 16)
                self._sizes[self._start] = 0
                if self._name in _MARKS:
                    self._marks[self._start] = self._name
            self._sizes[self._start] += bool(instruction[2])
            return
        block = _IN.match(line)
        if block:
            self._name, self._start = block[1], -1
        elif line.strip() and not line.startswith(b"----"):
            self.other.append(line.decode("utf-8", "replace").strip())

    @property
    def inside(self) -> bool:
        """A window begun and not ended: the program stopped inside a kernel's call or preparation."""
        return self._counting is not None

    def _executed(self, pc: int) -> None:
        mark = self._marks.get(pc)
        if mark in (_BEGIN, _PREPARE_BEGIN):
            self._counting = self.packets if mark == _BEGIN else self.prepare_packets
            self._counting.append(0)
        elif mark in (_END, _PREPARE_END):
            self._counting = None
            self.ended += mark == _END
        elif self._counting is not None:
            self._counting[-1] += self._sizes.get(pc, 0)


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
    prepare_packets: int = 0  # of what the kernel prepares ahead of the call (its <Op>Prepare)

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
        prepared = f"  (prepared ahead: {self.prepare_packets} packets)" if self.prepare_packets else ""
        cost = f"{self.packets:>10} packets  {per_element}{prepared}"
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
                f"({_status(self.host_status)}): {refusal_fix(self.host_status, self.op)}"
            )
        return f"{self.op:<16}{self.label:<48}ok  {cost}"


def refusal_fix(status: int, op: str) -> str:
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


#: libm functions whose last bit differs between the host's glibc and Hexagon's musl, and what
#: a kernel calls instead (qco/math.h computes the same bits on both). sqrt, fabs, floor, round,
#: nearbyint, fmin and the like are exact (one correctly rounded result) and not listed.
LIBM_REPLACEMENTS = {
    "exp": "qco::exp, or qco::sigmoid for 1 / (1 + exp(-x))",
    "log": "qco::log",
    "tanh": "qco::tanh",
    "erf": "qco::erf",
    "erfc": "1 - qco::erf(x)",
    "pow": "qco::pow",
    **{name: "qco::exp or qco::log of your own argument" for name in ("exp2", "expm1", "log2", "log10", "log1p")},
    **{
        name: "no qco:: equivalent: a polynomial in + - * / computes the same bits on both"
        for name in "sin cos tan asin acos atan atan2 sinh cosh cbrt hypot tgamma lgamma".split()
    },
}
_LIBM_CALL = re.compile(
    rf"(?<![\w.>])((?:\w*::)*)({'|'.join(sorted(LIBM_REPLACEMENTS, key=len, reverse=True))})([fl]?)\s*\("
)
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
_FLOAT_DTYPES = {KernelDType.Float32, KernelDType.Float16}


def libm_calls(package_dir: Path, op: str) -> list[str]:
    """Where ``kernels/<op>.h`` and the package's headers it includes (not the generated qco/)
    call libm's transcendental functions, as "kernels/File.h:LINE calls NAME: use REPLACEMENT"."""
    root = package_dir.resolve()
    kernels = root / "kernels"
    pending, seen, calls = [kernels / f"{op}.h"], set(), []
    while pending:
        source = pending.pop()
        inside = source.is_relative_to(kernels) and source.relative_to(kernels).parts[0] != "qco"
        if source in seen or not inside or not source.is_file():
            continue
        seen.add(source)
        text = _COMMENT.sub(lambda m: "\n" * m[0].count("\n"), source.read_text(errors="replace"))
        for call in _LIBM_CALL.finditer(text):
            if call[1] in ("", "std::", "::"):
                line = text.count("\n", 0, call.start()) + 1
                name = f"{call[1]}{call[2]}{call[3]}"
                calls.append(f"{source.relative_to(root)}:{line} calls {name}: use {LIBM_REPLACEMENTS[call[2]]}")
        pending += [(source.parent / name).resolve() for name in _LOCAL_INCLUDE.findall(text)]
    return calls


def libm_hint(package_dir: Path, op: str) -> str:
    """For a float output that differs: the kernel's libm calls, the likely cause, named with their
    qco:: replacements (qco/math.h); "" when it calls none."""
    calls = libm_calls(package_dir, op)
    if not calls:
        return ""
    more = f"; {len(calls) - 5} more" if len(calls) > 5 else ""
    return f"; libm differs in the last bit between the host and Hexagon: {'; '.join(calls[:5])}{more} (qco/math.h)"


def hexagon_packets(
    package_dir: str | Path, cases: Sequence[KernelCase], time_limit: float | None = None
) -> list[tuple[int, int]]:
    """Executed packets on Hexagon (emulated) of each case: what its kernel prepares ahead (its
    ``<Op>Prepare``; 0 without one), then its call."""
    package_dir = generated_package(package_dir)
    ops = driver_ops(package_dir, (case.op for case in cases))
    run = run_on_hexagon(build_hexagon_driver(package_dir, ops), cases, ops, time_limit)
    return list(zip(run.prepare_packets, run.packets))


def hexagon_check(
    package_dir: str | Path, cases: Sequence[KernelCase], time_limit: float | None = None
) -> list[CheckResult]:
    """Run ``cases`` through the host build and under the emulator; one result per case.
    ``time_limit``: seconds per case under the emulator (default: ``case_time_limit``)."""
    package_dir = generated_package(package_dir)
    name = package_name(package_dir)
    ops = driver_ops(package_dir, (case.op for case in cases))
    run = run_on_hexagon(build_hexagon_driver(package_dir, ops), cases, ops, time_limit)
    library = build_host_kernels(package_dir)
    host = call_isolated(host_results, library, name, cases, time_limit, what="the host half of the Hexagon check")
    results = []
    for case, (hexagon_status, hexagon_outputs, _), (host_status, host_outputs), packets, prepared in zip(
        cases, run.results, host, run.packets, run.prepare_packets
    ):
        mismatch = (
            ""
            if host_status != KernelStatus.Ok
            else next(
                (
                    m
                    for i, (t, h, x) in enumerate(zip(case.outputs, host_outputs, hexagon_outputs))
                    if (m := first_mismatch(h, x, t, i))
                ),
                "",
            )
        )
        if mismatch and any(t.dtype in _FLOAT_DTYPES for t in case.outputs):
            mismatch += libm_hint(package_dir, case.op)
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
                prepared,
            )
        )
    return results


def host_results(
    library_path: Path, package_name: str, cases: Sequence[KernelCase], time_limit: float | None
) -> list[tuple[int, list[np.ndarray]]]:
    """(status, output arrays) of each case on the host: what ``hexagon_check`` runs in an
    isolated process, so a kernel that crashes, exits or loops on the host only is reported."""
    library = KernelLibrary(library_path, package_name)
    results = []
    for case in cases:
        set_time_limit(time_limit or case_time_limit(case))
        outputs = [KernelTensor(t.array.copy(), t.dtype, t.scale, t.offset) for t in case.outputs]
        results.append((_host_status(library, case, outputs), [t.array for t in outputs]))
    return results


def _host_status(library: KernelLibrary, case: KernelCase, outputs: list[KernelTensor]) -> int:
    """The kernel's status on the host, after what it prepares ahead, as every other build runs
    it (a refusal is a result to compare, not an error)."""
    try:
        library.prepare_ahead(case.op, outputs, case.inputs, case.params)
        library.run(case.op, outputs, case.inputs, case.params)
    except KernelError as error:
        return error.status
    return KernelStatus.Ok
