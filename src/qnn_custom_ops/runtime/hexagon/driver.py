"""The program the Hexagon check runs: a package's kernels and the generated case driver built as
one static Hexagon program (cached by content, a cut-short copy rebuilt), and the driver's wire
format: the cases file it reads, the results file it writes."""

from __future__ import annotations

import hashlib
import shutil
import struct
import tempfile
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

import numpy as np
from filelock import FileLock

from ...generator.abi import KernelStatus
from ...generator.hexagon_driver import driver_ops, render_driver
from ...progress import Progress, silent
from ..cmake_build import cache_root, content_key, files_under, unusable_cache
from ..cost import KernelCase
from ..host_build import GeneratedPackage
from ..kernel_abi import KernelTensor
from .toolchain import HEXAGON_FLAGS, HexagonToolError, compile_for_hexagon


def build_hexagon_driver(
    package: str | Path | GeneratedPackage, ops: Sequence[str] | None = None, progress: Progress = silent
) -> Path:
    """The kernels of ``ops`` (default: the package's) and the case driver as one static Hexagon
    program; cached by the content of ``kernels/`` and ``host/``, the driver, the flags and the
    compiler's version. A build is said to ``progress``."""
    package = GeneratedPackage.at(package)
    package_dir, name = package.directory, package.name
    ops = driver_ops(package.ops) if ops is None else ops
    driver = render_driver(name, ops)
    extra = {"driver": driver, "flags": " ".join(HEXAGON_FLAGS), "ziglang": version("ziglang")}
    key = content_key(package_dir, files_under(package_dir / "kernels", package_dir / "host"), extra)
    entry = cache_root() / "hexagon" / f"{name}-{key}"
    try:
        return _cached_driver(package_dir, driver, ops, entry, progress)
    except OSError as exc:  # the compiler's failures are HexagonToolError; this is the cache directory
        raise HexagonToolError(unusable_cache(f"Hexagon build of {name}", entry.parent, exc)) from exc


def _cached_driver(package_dir: Path, driver: str, ops: Sequence[str], entry: Path, progress: Progress) -> Path:
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
                sources,
                staging / "driver",
                includes=[package_dir / "kernels", package_dir / "host/src"],
                progress=progress,
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
