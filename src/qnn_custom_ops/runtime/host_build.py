"""Build a package's own host/ CMake project: the kernels behind a C ABI, nothing else."""

from __future__ import annotations

import warnings
from pathlib import Path

from ..opdef import OpDefWarning, load_package
from .cmake_build import HostBuildError, cache_root, cached_build, content_key, files_under, work_dir


def package_name(package_dir: Path) -> str:
    """The PackageName of a generated package, from its config/ (the directory may be named
    anything): what its library and C ABI are named after."""
    configs = sorted(package_dir.glob("config/*.xml"))
    if not configs:
        raise HostBuildError(f"{package_dir}: no config/*.xml (is it a package made by generate-op-package?)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OpDefWarning)  # reported when the package was generated
        return load_package(*configs).name


def generated_package(package_dir: str | Path) -> Path:
    """``package_dir`` resolved, once it is known to hold what generate-op-package writes (its
    host/ project and kernels), which every build of its kernels compiles."""
    package_dir = Path(package_dir).resolve()
    if not (package_dir / "host" / "CMakeLists.txt").is_file():
        raise HostBuildError(f"{package_dir}: no host/CMakeLists.txt (run generate-op-package first)")
    return package_dir


def build_host_kernels(package_dir: str | Path, *, sanitize: str = "", build_root: Path | None = None) -> Path:
    """Compile ``package_dir/host`` and return the shared library; reuse an identical build."""
    package_dir = generated_package(package_dir)
    name = package_name(package_dir)
    options = {"QCO_SANITIZE": sanitize}
    key = content_key(package_dir, files_under(package_dir / "kernels", package_dir / "host"), options)
    root = build_root or cache_root() / "host"
    work = work_dir(root, name, package_dir, options)
    return cached_build(
        package_dir / "host",
        root / f"{name}-{key}",
        work,
        f"libqco_{name}_kernels.so",
        options,
        f"host build of {name}",
        keyed=package_dir,
    )
