"""Render the package tree in memory: relative path -> bytes, nothing written yet."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import PurePosixPath

import jinja2

from ..opdef import Datatype, OpPackage
from ..opdef.datatypes import HTP_DTYPES, kernel_rows
from .abi import ABI_VERSION, KernelDType, KernelStatus
from .context import MIN_QNN_SDK, PackageContext, package_context
from .qhpi import qhpi_files


@dataclass(frozen=True)
class PlannedFile:
    """One file of the generated package. ``user_owned`` files are the user's after creation."""

    path: PurePosixPath
    content: bytes
    user_owned: bool = False
    signature: str = ""  # for a user-owned file: the declaration it must keep to compile with the rest


@cache
def template_environment() -> jinja2.Environment:
    """The Jinja environment of the generator's templates/: strict, and whitespace as written."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("qnn_custom_ops.generator", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def _render(template: str, **context: object) -> bytes:
    return template_environment().get_template(template).render(**context).encode("utf-8")


def abi_context() -> dict[str, list[tuple]]:
    """The ABI enums as (name, value[, description]) rows for tensor_view.h, and how
    ``load_real``/``store_real`` read and write each dtype with a C++ type."""
    return {
        "dtypes": [(d.name, d.value) for d in KernelDType],
        "statuses": [(s.name, s.value, s.description) for s in KernelStatus],
        "real_access": [
            _real_access(r.kernel_tag, r.c_type, r.datatype.is_float) for r in kernel_rows() if r.c_type is not None
        ]
        + [_HALF_ACCESS],
    }


#: fp16 has no portable C++ type: its bits are stored as uint16_t and converted in software.
_HALF_ACCESS = ("Float16", "half_to_float(view.as<uint16_t>()[i])", "view.as<uint16_t>()[i] = float_to_half(real)")


def _real_access(kernel: str, c_type: str, is_float: bool) -> tuple[str, str, str]:
    element = f"view.as<{c_type}>()[i]"
    if is_float:
        return kernel, f"static_cast<float>({element})", f"{element} = static_cast<{c_type}>(real)"
    if c_type == "bool":
        return kernel, f"{element} ? 1.0f : 0.0f", f"{element} = real != 0.0f"
    load = f"view.scale * static_cast<float>(static_cast<int64_t>({element}) + view.offset)"
    return kernel, load, f"{element} = quantize<{c_type}>(real, view)"


def adapter_context() -> dict[str, object]:
    """The HTP adapter's tables: the kernel dtypes each HTP dtype carries (fixed point first),
    and the HTP status of each kernel status. HTP dtypes that carry none (UNKNOWN, BFloat16,
    which SDK 2.25 lacks, anything newer) are refused by the switch's default."""
    carriers = []
    for htp in HTP_DTYPES:
        rows = [r for r in kernel_rows() if r.htp == htp]
        rows.sort(key=lambda r: (not r.datatype.is_fixed_point, r.datatype is Datatype.BOOL_8, r.abi_value))
        if rows:
            carriers.append((htp, [r.kernel for r in rows]))
    return {
        "carriers": carriers,
        "statuses": [(s.name, s.htp_status) for s in KernelStatus],
        "min_sdk": MIN_QNN_SDK,
    }


#: The op package interfaces a package can be generated for: the HTP's C++ one (the SDK's
#: generator's, compiled against the HTP core headers of one QNN SDK) and QHPI (a C ABI).
APIS = ("classic", "qhpi")


def render_package(package: OpPackage, api: str = "classic") -> list[PlannedFile]:
    """Every file of ``<PackageName>/``, deterministic for a given package and ``api``."""
    config_names = _config_names(package)
    ctx: PackageContext = package_context(package, config_names)
    name = ctx.name
    files = (
        render_qhpi_sources(package, config_names)
        if api == "qhpi"
        else [
            PlannedFile(PurePosixPath("Makefile"), _render("htp/Makefile.j2", package=ctx)),
            PlannedFile(PurePosixPath("include/qco/htp_adapter.h"), _render("htp/adapter.h.j2", **adapter_context())),
            PlannedFile(
                PurePosixPath("include/qco/declared_dtypes.h"), _render("htp/declared_dtypes.h.j2", package=ctx)
            ),
            PlannedFile(PurePosixPath(f"src/{name}Interface.cpp"), _render("htp/interface.cpp.j2", package=ctx)),
        ]
    )
    files += [
        PlannedFile(PurePosixPath("kernels/qco/tensor_view.h"), _render("kernels/tensor_view.h.j2", **abi_context())),
        PlannedFile(PurePosixPath("kernels/qco/access.h"), _render("kernels/access.h.j2")),
        PlannedFile(PurePosixPath("kernels/qco/math.h"), _render("kernels/math.h.j2")),
        PlannedFile(PurePosixPath("kernels/qco/hvx.h"), _render("kernels/hvx.h.j2")),
        PlannedFile(PurePosixPath("kernels/qco/prepare.h"), _render("kernels/prepare.h.j2")),
        PlannedFile(PurePosixPath("host/CMakeLists.txt"), _render("host/CMakeLists.txt.j2", package=ctx)),
        PlannedFile(PurePosixPath("host/src/capi.h"), _render("host/capi.h.j2", package=ctx)),
        PlannedFile(
            PurePosixPath(f"host/src/{name}CApi.cpp"), _render("host/capi.cpp.j2", package=ctx, abi_version=ABI_VERSION)
        ),
    ]
    files += [
        PlannedFile(
            PurePosixPath(f"host/src/ops/{op.name}CApi.cpp"), _render("host/op_capi.cpp.j2", package=ctx, op=op)
        )
        for op in ctx.ops
    ]
    files += [
        PlannedFile(PurePosixPath("config") / config_name, source)
        for config_name, source in zip(config_names, package.sources)
    ]
    for op in ctx.ops:
        if api != "qhpi":
            files.append(
                PlannedFile(
                    PurePosixPath(f"src/ops/{op.name}.cpp"),
                    _render("htp/op.cpp.j2", package=ctx, op=op),
                    user_owned=True,
                    signature=f"static GraphStatus {op.body}({', '.join(op.body_params)})",
                )
            )
        kernel_args = ", ".join(f"{a.qualifier}qco::TensorView& {a.name}" for a in op.args)
        files.append(
            PlannedFile(
                PurePosixPath(f"kernels/{op.name}.h"),
                _render("kernels/op.h.j2", package=ctx, op=op),
                user_owned=True,
                signature=f"inline qco::Status {op.name}({kernel_args})",
            )
        )
    return files


def render_qhpi_sources(package: OpPackage, config_names: list[str] | None = None) -> list[PlannedFile]:
    """The QHPI flavour's own files (Makefile, ABI and adapter headers, interface, one adapter
    per op), all regenerated: its math is the user's ``kernels/<Op>.h``, shared by every build."""
    names = _config_names(package) if config_names is None else config_names
    carriers = adapter_context()["carriers"]
    return [
        PlannedFile(path, _render(template, **context))
        for path, template, context in qhpi_files(package, names, carriers)  # type: ignore[arg-type]
    ]


def _config_names(package: OpPackage) -> list[str]:
    """Config file names under config/, made unique when two inputs share a base name."""
    names: list[str] = []
    for index, path in enumerate(package.paths):
        name = path.name
        if name in names:
            name = f"{path.stem}_{index}{path.suffix}"
        names.append(name)
    return names
