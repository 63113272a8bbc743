"""Compile spec: tell ExecuTorch's QNN backend where each op package library lives.

The paths are baked into the .pte. For x86_64 builds that is the host path, which must
exist; for Android builds it is the device path under ``DEVICE_WORKSPACE``, where the
device runner pushes the library (``device_library_path`` is the one place it is decided).
"""

from __future__ import annotations

import enum
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from executorch.backends.qualcomm.serialization.qc_schema import (
    QcomChipset,
    QnnExecuTorchOpPackageInfo,
    QnnExecuTorchOpPackageOptions,
    QnnExecuTorchOpPackagePlatform,
    QnnExecuTorchOpPackageTarget,
)

from ..errors import ReportedError
from ..torch_bridge import OpPackageBinding

DEVICE_WORKSPACE = "/data/local/tmp/qnn_custom_ops"


class Target(str, enum.Enum):
    HTP = "HTP"
    CPU = "CPU"


class Platform(str, enum.Enum):
    X86_64 = "x86_64"
    AARCH64_ANDROID = "aarch64-android"


_TARGETS = {Target.HTP: QnnExecuTorchOpPackageTarget.HTP, Target.CPU: QnnExecuTorchOpPackageTarget.CPU}
_PLATFORMS = {
    Platform.X86_64: QnnExecuTorchOpPackagePlatform.X86_64,
    Platform.AARCH64_ANDROID: QnnExecuTorchOpPackagePlatform.AARCH64_ANDROID,
}
_TARGET_NAMES = {value: key for key, value in _TARGETS.items()}
_PLATFORM_NAMES = {value: key for key, value in _PLATFORMS.items()}


class CompileSpecError(ReportedError, ValueError):
    """Every problem of the op package builds, found before any QNN call."""


def device_library_path(package_name: str, target: Target | str) -> str:
    """Where an Android op package library lives on the device (pushed there by the runner)."""
    return f"{DEVICE_WORKSPACE}/libQnn{package_name}_{Target(target).value}.so"


@dataclass(frozen=True)
class OpPackageBuild:
    """One built op package library: ``make htp_x86`` -> (HTP or CPU, x86_64, build/x86_64-linux-clang/...),
    ``make htp_v75`` -> (HTP, aarch64-android, build/hexagon-v75/...),
    ``make htp_aarch64`` -> (CPU, aarch64-android, build/aarch64-android/...)."""

    target: Target
    platform: Platform
    library: Path  # on this machine

    def __post_init__(self) -> None:
        object.__setattr__(self, "target", Target(self.target))
        object.__setattr__(self, "platform", Platform(self.platform))
        object.__setattr__(self, "library", Path(self.library))

    def baked_path(self, package_name: str) -> str:
        """The path the .pte carries: the host path on x86_64, the device path on Android."""
        if self.platform is Platform.X86_64:
            return str(self.library.resolve())
        return device_library_path(package_name, self.target)


def makefile_builds(
    package_dir: str | Path, package_name: str, htp_arch: int, api: str = "classic"
) -> list[OpPackageBuild]:
    """The builds a generated package's Makefile produces for a device and for the simulator:
    ``make htp_v<arch>`` (HTP, device), ``make htp_aarch64`` (CPU, device), ``make htp_x86``.
    A QHPI package (``api="qhpi"``) has no aarch64 build, and its x86 build registers as CPU:
    QAIRT's x86 backend refuses a QHPI package registered for HTP (error 4003)."""
    build = Path(package_dir) / "build"
    library = f"libQnn{package_name}.so"
    if api == "qhpi":
        return [
            OpPackageBuild(Target.HTP, Platform.AARCH64_ANDROID, build / f"hexagon-v{htp_arch}" / library),
            OpPackageBuild(Target.CPU, Platform.X86_64, build / "x86_64-linux-clang" / library),
        ]
    return [
        OpPackageBuild(Target.HTP, Platform.AARCH64_ANDROID, build / f"hexagon-v{htp_arch}" / library),
        OpPackageBuild(Target.CPU, Platform.AARCH64_ANDROID, build / "aarch64-android" / library),
        OpPackageBuild(Target.HTP, Platform.X86_64, build / "x86_64-linux-clang" / library),
    ]


def device_libraries(package_name: str, builds: Iterable[OpPackageBuild]) -> dict[str, Path]:
    """Device path -> local library for every Android build: what the device runner pushes,
    to exactly the paths the compile spec bakes in."""
    return {b.baked_path(package_name): b.library for b in builds if b.platform is Platform.AARCH64_ANDROID}


def interface_provider(package_name: str) -> str:
    return f"{package_name}InterfaceProvider"


def op_package_options(
    binding: OpPackageBinding, builds: Iterable[OpPackageBuild] | QnnExecuTorchOpPackageOptions
) -> QnnExecuTorchOpPackageOptions:
    """One op package info per (bound op, build); raises ``CompileSpecError`` listing every problem.

    x86_64 libraries are loaded on this machine at compile time: they must exist and export
    ``<Pkg>InterfaceProvider``. Android libraries only need a device path here. ``builds`` may
    also be ExecuTorch's own options (``QnnCustomOpPackageBuilder.get_op_package_options()``):
    they are checked against the binding the same way and kept as they are, device paths included.
    """
    if isinstance(builds, QnnExecuTorchOpPackageOptions):
        return _checked_executorch_options(binding, builds)
    builds = list(builds)
    name = binding.package.name
    problems = _check_builds(interface_provider(name), builds)
    if not binding.ops:
        problems.append("the binding binds no op: bind at least one QNN op to a torch op")
    if problems:
        raise CompileSpecError(f"op package {name}:\n" + "\n".join(f"  {p}" for p in problems))
    infos = [
        QnnExecuTorchOpPackageInfo(
            op_package_name=name,
            op_package_path=build.baked_path(name),
            interface_provider=interface_provider(name),
            target=_TARGETS[build.target],
            custom_op_name=op.custom_op_name,
            qnn_op_type_name=op.qnn_op_type,
            platform=_PLATFORMS[build.platform],
        )
        for op in binding.ops.values()
        for build in builds
    ]
    return QnnExecuTorchOpPackageOptions(op_package_infos=infos)


def _checked_executorch_options(
    binding: OpPackageBinding, options: QnnExecuTorchOpPackageOptions
) -> QnnExecuTorchOpPackageOptions:
    """ExecuTorch's options for ``binding``'s package, or ``CompileSpecError`` listing every
    info that names another package or an op the binding does not bind as it does, every bound
    op without an implementation, and the problems of their libraries (as for our builds)."""
    infos = list(options.op_package_infos)
    provider = infos[0].interface_provider if infos else interface_provider(binding.package.name)
    builds = {
        OpPackageBuild(_TARGET_NAMES[i.target], _PLATFORM_NAMES[i.platform], Path(i.op_package_path)) for i in infos
    }
    problems = _check_builds(provider, sorted(builds, key=str)) + _binding_problems(binding, infos)
    if problems:
        raise CompileSpecError(f"op package {binding.package.name}:\n" + "\n".join(f"  {p}" for p in problems))
    return options


def _binding_problems(binding: OpPackageBinding, infos: list[QnnExecuTorchOpPackageInfo]) -> list[str]:
    """What in ``infos`` disagrees with ``binding``: the package, the op, the torch overload."""
    name, problems = binding.package.name, []
    for info in infos:
        op = binding.ops.get(info.qnn_op_type_name)
        if info.op_package_name != name:
            problems.append(f"an implementation names op package {info.op_package_name!r}: the binding's is {name!r}")
        elif op is None:
            problems.append(
                f"{info.qnn_op_type_name}: not bound (bound: {', '.join(binding.ops)}): bind it, or leave it out "
                "of the torch_op_name_map"
            )
        elif info.custom_op_name != op.custom_op_name:
            problems.append(
                f"{info.qnn_op_type_name}: custom_op_name {info.custom_op_name!r} is not the bound "
                f"{op.custom_op_name!r}: map it to the overload (torch.ops.ns.op.default)"
            )
    registered = {info.qnn_op_type_name for info in infos}
    problems += [
        f"{qnn_op}: bound but no implementation is registered (register_implementation for it)"
        for qnn_op in binding.ops
        if qnn_op not in registered
    ]
    return problems


def _check_builds(provider: str, builds: list[OpPackageBuild]) -> list[str]:
    problems, seen = [], set()
    libraries = {b: _library_problems(provider, b) for b in builds if b.platform is Platform.X86_64}
    qhpi_x86 = any(qhpi for _, qhpi in libraries.values())  # an x86 QHPI build serves the simulator as CPU
    if not qhpi_x86 and not any(b.target is Target.HTP for b in builds):
        problems.append(
            "no HTP build: add one for the library made by `make htp_vNN` (device) or `make htp_x86` "
            "(simulator): OpPackageBuild('HTP', ...), or ExecuTorch's register_implementation(...Target.HTP, ...)"
        )
    for build in builds:
        key = (build.target, build.platform)
        if key in seen:
            problems.append(f"two builds for {build.target.value} on {build.platform.value}: keep one")
        seen.add(key)
        # Android libraries are pushed by the device runner, which checks them then
        problems += libraries.get(build, ([], False))[0]
    return problems


def _library_problems(provider: str, build: OpPackageBuild) -> tuple[list[str], bool]:
    """What is wrong with an x86 build's library, and whether it is a QHPI package (``qhpi_init``)."""
    if not build.library.is_file():
        return [f"{build.library}: no such library (build it with the package Makefile)"], False
    exported = _exported_symbols(build.library)
    if exported is None:  # no nm on this machine: nothing to check with
        return [], False
    if isinstance(exported, str):
        return [exported], False
    problems = []
    if provider not in exported:
        problems.append(
            f"{build.library}: does not export {provider} (is it this package's library? "
            "THIS_PKG_NAME must be the config's PackageName)"
        )
    qhpi = "qhpi_init" in exported
    if qhpi and build.target is Target.HTP:
        problems.append(
            f"{build.library}: a QHPI package registers on x86 as CPU (QAIRT's x86 backend refuses HTP, "
            "error 4003): OpPackageBuild('CPU', 'x86_64', ...)"
        )
    return problems, qhpi


def _exported_symbols(library: Path) -> set[str] | str | None:
    """The dynamic symbols ``library`` defines (nm), the problem reading them, or None with no nm."""
    nm = shutil.which("nm")
    if nm is None:
        return None
    result = subprocess.run([nm, "-D", "--defined-only", str(library)], capture_output=True, text=True)
    if result.returncode != 0:
        return f"{library}: not a shared library nm can read ({result.stderr.strip()})"
    return {line.split()[-1] for line in result.stdout.splitlines() if line.split()}


def chipset(soc: str | QcomChipset) -> QcomChipset:
    if isinstance(soc, QcomChipset):
        return soc
    try:
        return QcomChipset[soc.upper()]
    except KeyError:
        known = ", ".join(c.name for c in QcomChipset if c.name != "UNKNOWN_SM")
        raise CompileSpecError(f"unknown SoC {soc!r}: use one of {known}") from None


def compile_spec(
    soc: str | QcomChipset,
    binding: OpPackageBinding,
    builds: Iterable[OpPackageBuild] | QnnExecuTorchOpPackageOptions,
    quant: bool = True,
    **options: object,
) -> list:
    """The full QNN HTP compile spec for ``to_edge_transform_and_lower``, op packages included
    (``builds``: ours, or ExecuTorch's ``QnnCustomOpPackageBuilder.get_op_package_options()``).

    ``quant=False`` compiles for the HTP's fp16 precision. Extra ``options`` go to
    executorch's ``generate_qnn_executorch_compiler_spec`` (e.g. ``online_prepare``).
    """
    from executorch.backends.qualcomm.utils.utils import (
        generate_htp_compiler_spec,
        generate_qnn_executorch_compiler_spec,
    )

    return generate_qnn_executorch_compiler_spec(
        soc_model=chipset(soc),
        backend_options=generate_htp_compiler_spec(use_fp16=not quant),
        op_package_options=op_package_options(binding, builds),
        **options,
    )
