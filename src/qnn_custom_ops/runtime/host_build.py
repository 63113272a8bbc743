"""Build a package's own host/ CMake project: the kernels behind a C ABI, nothing else."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

from ..opdef import OpDefWarning, OpPackage, load_package
from ..progress import Progress, silent
from .cmake_build import HostBuildError, cache_root, cached_build, content_key, files_under, work_dir


@dataclass(frozen=True)
class GeneratedPackage:
    """A package generate-op-package wrote, resolved once at the entry: its directory (holding the
    host/ project and kernels every build compiles) and its OpDef, whose PackageName the library
    and C ABI are named after and whose ops are the C ABI's. The host build, the Hexagon driver,
    the checks and ``cost`` take this value instead of reading the directory again."""

    directory: Path
    opdef: OpPackage

    def __post_init__(self) -> None:
        if not (self.directory / "host" / "CMakeLists.txt").is_file():
            raise HostBuildError(f"{self.directory}: no host/CMakeLists.txt (run generate-op-package first)")

    @classmethod
    def at(cls, where: str | Path | GeneratedPackage) -> GeneratedPackage:
        """The package in directory ``where`` (the directory may be named anything: its config/
        names it), or ``where`` itself when it is resolved already."""
        if isinstance(where, GeneratedPackage):
            return where
        directory = Path(where).resolve()
        configs = sorted(directory.glob("config/*.xml"))
        if not configs:
            raise HostBuildError(f"{directory}: no config/*.xml (is it a package made by generate-op-package?)")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OpDefWarning)  # reported when the package was generated
            return cls(directory, load_package(*configs))

    @property
    def name(self) -> str:
        return self.opdef.name

    @property
    def ops(self) -> tuple[str, ...]:
        """The OpDef's ops, sorted: the C ABI's (``host/src/ops/<Op>CApi.cpp``), in one order everywhere."""
        return tuple(sorted(self.opdef.ops))


def build_host_kernels(
    package: str | Path | GeneratedPackage,
    *,
    sanitize: str = "",
    build_root: Path | None = None,
    progress: Progress = silent,
) -> Path:
    """Compile the package's host/ project and return the shared library; reuse an identical build
    (a build is said to ``progress``)."""
    package = GeneratedPackage.at(package)
    package_dir, name = package.directory, package.name
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
        progress=progress,
    )
