"""Cached CMake builds: one build directory per content hash of what it compiles."""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from filelock import FileLock

from ..atomic_files import write_atomic
from ..errors import ReportedError
from ..progress import Progress


class HostBuildError(ReportedError, RuntimeError):
    """CMake or the compiler failed; the message carries the compiler's own lines."""


#: Beside each cached library: the files it was compiled from that its key does not cover
#: (headers included from outside the package), with their hashes; a change rebuilds it.
DEPENDENCIES = "dependencies.sha256"
# Installed headers: the toolchain's, and the Python environment's (whose versions are keyed).
_INSTALLED = tuple(Path(p) for p in {"/usr/include", "/usr/lib", "/usr/lib64", sys.prefix, sys.base_prefix})


def cache_root() -> Path:
    """Where host builds live: $QCO_CACHE_DIR, else $XDG_CACHE_HOME or ~/.cache."""
    if os.environ.get("QCO_CACHE_DIR"):
        return Path(os.environ["QCO_CACHE_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "qnn_custom_ops"


@functools.cache
def host_cpu() -> str:
    """This machine's CPU model and instruction-set flags, hashed: host builds use
    ``-march=native``, so a cache shared with another kind of CPU must not hand its builds over."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    wanted = [line for line in lines if line.startswith(("model name", "flags", "Features", "CPU part"))]
    identity = "\n".join(sorted(set(wanted))) or platform.processor() or platform.machine()
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def content_key(root: Path, files: Iterable[Path], extra: Mapping[str, str]) -> str:
    """A short hash of the files' names (relative to ``root``: a moved checkout keeps its key),
    their bytes, ``extra`` and this machine's CPU."""
    digest = hashlib.sha256(f"cpu={host_cpu()}\0".encode())
    for path in sorted(files):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    for key, value in sorted(extra.items()):
        digest.update(f"{key}={value}\0".encode())
    return digest.hexdigest()[:16]


def work_dir(root: Path, name: str, source: Path, options: Mapping[str, str]) -> Path:
    """The build tree kept across edits of one package checkout (and build options)."""
    digest = hashlib.sha256(repr((str(source), sorted(options.items()), host_cpu())).encode()).hexdigest()[:16]
    return root / f"{name}-work-{digest}"


def files_under(*directories: Path) -> list[Path]:
    """Every regular file below the directories, build outputs excluded."""
    return [
        p for d in directories for p in sorted(d.rglob("*")) if p.is_file() and "build" not in p.relative_to(d).parts
    ]


def cached_build(
    project: Path | Mapping[str, str],
    build_dir: Path,
    work_dir: Path,
    library_name: str,
    options: Mapping[str, str],
    what: str,
    keyed: Path,
    progress: Progress,
) -> Path:
    """``build_dir/library_name``, built from ``project`` (a CMake source directory, or the
    files of one, relative path -> text) unless a valid, current copy is there already.

    ``keyed`` is the directory whose files the key of ``build_dir`` covers; any other header
    the compiler read (outside the installed toolchain and Python environment) is recorded
    with its hash, and a change to it rebuilds the entry.
    Process-safe: one lock per ``work_dir``; whoever waited on it reuses the winner's
    result. Incremental: ``work_dir`` keeps the CMake build tree, so an edited kernel
    recompiles only what includes it. Atomic: the library is published into ``build_dir``
    by one rename, so nobody ever sees a half-written library; a broken entry is rebuilt.
    A build (not a reuse) is said to ``progress`` as it starts.
    """
    library = build_dir / library_name
    if _is_current(library):
        return library
    try:
        return _build_locked(project, build_dir, work_dir, library_name, options, what, keyed, progress)
    except OSError as exc:  # the compiler's failures are HostBuildError; this is the cache directory
        raise HostBuildError(unusable_cache(what, build_dir.parent, exc)) from exc


def unusable_cache(what: str, cache: Path, error: OSError) -> str:
    """The one line for a cache directory that cannot hold builds (a file, read-only, full)."""
    where = f" ({error.filename})" if error.filename else ""
    return (
        f"{what}: cannot build in the cache {cache}: {error.strerror or error}{where} "
        "(set QCO_CACHE_DIR to a writable directory)"
    )


def _build_locked(
    project: Path | Mapping[str, str],
    build_dir: Path,
    work_dir: Path,
    library_name: str,
    options: Mapping[str, str],
    what: str,
    keyed: Path,
    progress: Progress,
) -> Path:
    library = build_dir / library_name
    work_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(work_dir) + ".lock"):
        if _is_current(library):
            return library
        progress(f"{what}: building (cmake; a minute or so the first time, seconds after an edit)")
        try:
            built, outside = _build_in(project, work_dir, library_name, options, what, keyed)
        except KeyboardInterrupt:  # a half-configured tree would confuse the next build: start it afresh
            shutil.rmtree(work_dir, ignore_errors=True)
            raise
        _publish(built, build_dir, _hash_lines(outside))
    return library


def _build_in(
    project: Path | Mapping[str, str],
    work_dir: Path,
    library_name: str,
    options: Mapping[str, str],
    what: str,
    keyed: Path,
) -> tuple[Path, list[Path]]:
    """Configure (once) and build in ``work_dir``: the library, and the headers it read from
    outside the directories the cache key covers."""
    source_dir = project if isinstance(project, Path) else _write_sources(work_dir / "src", project)
    binary_dir = work_dir / "build"
    if not (binary_dir / "CMakeCache.txt").is_file():
        _run(
            [
                "cmake",
                "-S",
                str(source_dir),
                "-B",
                str(binary_dir),
                "-DCMAKE_BUILD_TYPE=Release",
                *(f"-D{k}={v}" for k, v in options.items()),
            ],
            what,
        )
    _run(["cmake", "--build", str(binary_dir), "--parallel", str(os.cpu_count() or 1)], what)
    covered = (keyed.resolve(), work_dir.resolve(), *_INSTALLED)
    return binary_dir / library_name, [p for p in _compiled_headers(binary_dir) if not _is_under(p, covered)]


def _is_current(library: Path) -> bool:
    """A valid library whose recorded outside headers still hash as they did when it was built."""
    if not is_valid_library(library):
        return False
    recorded = library.parent / DEPENDENCIES
    if not recorded.is_file():
        return True
    lines = recorded.read_text().splitlines()
    return _hash_lines([Path(line.split("  ", 1)[1]) for line in lines if "  " in line]) == lines


def _hash_lines(paths: Iterable[Path]) -> list[str]:
    """``sha256  path`` per file (``missing`` for one that is gone)."""
    return [f"{hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else 'missing'}  {p}" for p in paths]


def _compiled_headers(binary_dir: Path) -> list[Path]:
    """Every file the compiler read, from the make-style dependency files (``*.o.d``) it wrote."""
    found: set[Path] = set()
    for depfile in binary_dir.rglob("*.o.d"):
        _, _, prerequisites = depfile.read_text(errors="replace").replace("\\\n", " ").partition(": ")
        found.update(
            Path(token.replace("\\ ", " ")).resolve()
            for token in re.split(r"(?<!\\)\s+", prerequisites.strip())
            if token
        )
    return sorted(found)


def _is_under(path: Path, directories: Iterable[Path]) -> bool:
    return any(path.is_relative_to(directory) for directory in directories)


def is_valid_library(path: Path) -> bool:
    """A complete ELF shared object, not a truncated or foreign file."""
    try:
        with path.open("rb") as file:
            header = file.read(64)
    except OSError:
        return False
    return len(header) == 64 and header[:4] == b"\x7fELF" and path.stat().st_size > 1024


def _write_sources(directory: Path, files: Mapping[str, str]) -> Path:
    """Write generated sources, touching only files whose text changed (keeps make incremental)."""
    for relative, text in files.items():
        path = directory / relative
        if not path.is_file() or path.read_text() != text:
            write_atomic(path, text.encode())
    return directory


def _publish(built: Path, build_dir: Path, dependencies: list[str]) -> None:
    """Copy the library (and its outside dependencies' hashes) into a private staging directory
    and rename it into place."""
    build_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{build_dir.name}.", suffix=".partial", dir=build_dir.parent))
    try:
        shutil.copy2(built, staging / built.name)
        if dependencies:
            (staging / DEPENDENCIES).write_text("".join(line + "\n" for line in dependencies))
        shutil.rmtree(build_dir, ignore_errors=True)
        staging.rename(build_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _interrupted(result: subprocess.CompletedProcess) -> bool:
    """The step died of Ctrl-C (SIGINT reaches the whole foreground group: make reports it and
    exits 2, before Python's own KeyboardInterrupt may be raised)."""
    return result.returncode in (-signal.SIGINT, 128 + signal.SIGINT) or (
        result.returncode != 0 and "Interrupt" in result.stdout + result.stderr
    )


def _run(command: list[str], what: str) -> str:
    """Run a CMake step; its output, or ``HostBuildError`` with the compiler's error lines."""
    if shutil.which(command[0]) is None:
        raise HostBuildError(f"{what}: {command[0]} not found (install CMake and a C++17 compiler)")
    result = subprocess.run(command, capture_output=True, text=True)
    if _interrupted(result):
        raise KeyboardInterrupt
    if result.returncode != 0:
        output = (result.stdout + result.stderr).splitlines()
        errors = [
            line
            for line in output
            if ("error" in line.lower() or "undefined reference" in line) and "make" not in line.split(":")[0]
        ]
        raise HostBuildError(f"{what} failed:\n" + "\n".join(errors or output[-20:]))
    return result.stdout
