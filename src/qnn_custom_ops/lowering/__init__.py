"""Lowering: the compile spec (op package options), our custom op builder (fx node -> QNN node),
the QNN partitioner with its preflight, host passes, and `lower` to a program."""

from ..qnn_sdk import guard_sdk_download

guard_sdk_download()  # before anything imports executorch's QNN code

from .compile_spec import (  # noqa: E402
    DEVICE_WORKSPACE,
    CompileSpecError,
    OpPackageBuild,
    Platform,
    Target,
    compile_spec,
    device_libraries,
    device_library_path,
    makefile_builds,
    op_package_options,
)
from .partitioner import QnnCustomOpPartitioner  # noqa: E402
from .preflight import PreflightError, preflight  # noqa: E402
from .program import lower  # noqa: E402

__all__ = [
    "DEVICE_WORKSPACE",
    "CompileSpecError",
    "OpPackageBuild",
    "Platform",
    "PreflightError",
    "QnnCustomOpPartitioner",
    "Target",
    "compile_spec",
    "device_libraries",
    "device_library_path",
    "lower",
    "makefile_builds",
    "op_package_options",
    "preflight",
]
