"""Cached CMake builds: one build directory per content hash of what it compiles."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterable, Mapping

from ..errors import ReportedError


class HostBuildError(ReportedError, RuntimeError):
    """CMake or the compiler failed; the message carries the compiler's own lines."""


def cache_root() -> Path:
    """Where host builds live: $QCO_CACHE_DIR, else $XDG_CACHE_HOME or ~/.cache."""
    if os.environ.get("QCO_CACHE_DIR"):
        return Path(os.environ["QCO_CACHE_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "qnn_custom_ops"


def content_key(files: Iterable[Path], extra: Mapping[str, str]) -> str:
    """A short hash of the files' names and bytes and of ``extra``."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(str(path).encode() + b"\0" + path.read_bytes() + b"\0")
    for key, value in sorted(extra.items()):
        digest.update(f"{key}={value}\0".encode())
    return digest.hexdigest()[:16]


def files_under(*directories: Path) -> list[Path]:
    """Every regular file below the directories, build outputs excluded."""
    return [p for d in directories for p in sorted(d.rglob("*"))
            if p.is_file() and "build" not in p.relative_to(d).parts]


def cached_build(source_dir: Path, build_dir: Path, library_name: str, options: Mapping[str, str],
                 what: str) -> Path:
    """Configure and build ``source_dir`` into ``build_dir`` unless ``library_name`` is there already.

    The build happens in a staging directory that is renamed into place only when it
    succeeded, so a failed or interrupted build never leaves a half-built cache entry.
    """
    library = build_dir / library_name
    if library.is_file():
        return library
    staging = build_dir.with_name(build_dir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    _run(["cmake", "-S", str(source_dir), "-B", str(staging), "-DCMAKE_BUILD_TYPE=Release",
          *(f"-D{k}={v}" for k, v in options.items())], what)
    _run(["cmake", "--build", str(staging), "--parallel", str(os.cpu_count() or 1)], what)
    shutil.rmtree(build_dir, ignore_errors=True)
    staging.rename(build_dir)
    return library


def _run(command: list[str], what: str) -> None:
    if shutil.which(command[0]) is None:
        raise HostBuildError(f"{what}: {command[0]} not found (install CMake and a C++17 compiler)")
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        output = (result.stdout + result.stderr).splitlines()
        errors = [line for line in output if "error" in line.lower() and "make" not in line.split(":")[0]]
        raise HostBuildError(f"{what} failed:\n" + "\n".join(errors or output[-20:]))
