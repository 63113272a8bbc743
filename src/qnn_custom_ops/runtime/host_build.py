"""Build a package's host/ CMake project, cached by the content of what it compiles."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path


class HostBuildError(RuntimeError):
    """CMake or the compiler failed; the message carries the compiler's own lines."""


def cache_root() -> Path:
    """Where host builds live: $QCO_CACHE_DIR, else $XDG_CACHE_HOME or ~/.cache."""
    if os.environ.get("QCO_CACHE_DIR"):
        return Path(os.environ["QCO_CACHE_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "qnn_custom_ops"


def _content_key(package_dir: Path, options: dict[str, str]) -> str:
    digest = hashlib.sha256()
    for sub in ("kernels", "host"):
        for path in sorted((package_dir / sub).rglob("*")):
            if path.is_file() and "build" not in path.relative_to(package_dir).parts:
                digest.update(str(path.relative_to(package_dir)).encode() + b"\0" + path.read_bytes())
    for key, value in sorted(options.items()):
        digest.update(f"{key}={value}\0".encode())
    return digest.hexdigest()[:16]


def build_host_kernels(package_dir: str | Path, *, sanitize: str = "",
                       build_root: Path | None = None) -> Path:
    """Compile ``package_dir/host`` and return the shared library; reuse an identical build."""
    package_dir = Path(package_dir).resolve()
    name = package_dir.name
    if not (package_dir / "host" / "CMakeLists.txt").is_file():
        raise HostBuildError(f"{package_dir}: no host/CMakeLists.txt (run generate-op-package first)")
    options = {"QCO_SANITIZE": sanitize}
    build_dir = (build_root or cache_root() / "host") / f"{name}-{_content_key(package_dir, options)}"
    library = build_dir / f"libqco_{name}_kernels.so"
    if library.is_file():
        return library
    staging = build_dir.with_name(build_dir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    _run(["cmake", "-S", str(package_dir / "host"), "-B", str(staging), "-DCMAKE_BUILD_TYPE=Release",
          *(f"-D{k}={v}" for k, v in options.items())], name)
    _run(["cmake", "--build", str(staging), "--parallel", str(os.cpu_count() or 1)], name)
    shutil.rmtree(build_dir, ignore_errors=True)
    staging.rename(build_dir)
    return library


def _run(command: list[str], package: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        output = result.stdout + result.stderr
        errors = [line for line in output.splitlines() if "error" in line.lower()]
        raise HostBuildError(f"host build of {package} failed:\n" + "\n".join(errors or output.splitlines()[-20:]))
