"""Everything a host program needs registered in ExecuTorch's runtime, loaded in one call: the
op packages' host libraries given, ExecuTorch's quantized kernels and our speed kernels where
the program names them. A program lowered with ``lower(..., target="host")`` then runs on
ExecuTorch's own ``Runtime`` as it does in ``HostRunner``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..progress import Progress, silent
from .loading import (
    MissingKernelError,
    load_host_library,
    load_quantized_kernels,
    program_operators,
    registered_operators,
)
from .speed_library import NAMESPACE as SPEED_NAMESPACE
from .speed_library import load_speed_kernels

QUANTIZED_NAMESPACE = "quantized_decomposed::"


def _provider(operator: str) -> str:
    """What registers ``operator``, as a missing kernel's error names it."""
    if operator.startswith(SPEED_NAMESPACE):
        return "the host speed kernels"
    if operator.startswith(QUANTIZED_NAMESPACE):
        return "ExecuTorch's quantized kernels"
    return "its op package's host library (build_host_library)"


def check_program_kernels(pte: bytes, where: str = "program") -> None:
    """Raise ``MissingKernelError`` naming every kernel the program needs that is not registered,
    and the library that registers it."""
    missing = sorted(program_operators(pte) - registered_operators())
    if missing:
        needs = "; ".join(f"{op}: {_provider(op)}" for op in missing)
        raise MissingKernelError(
            f"{where} needs kernels that are not registered ({needs}): load them all with "
            "qnn_custom_ops.load_program_libraries(program, [the op package's host library])"
        )


def load_program_libraries(
    program: bytes | str | Path, libraries: Sequence[str | Path] = (), progress: Progress = silent
) -> None:
    """Load what ``program`` (a .pte's bytes or path) calls: each op-package host library of
    ``libraries`` (``build_host_library``), then ExecuTorch's quantized kernels and the host speed
    kernels (built once per machine, said to ``progress``) where it names them;
    ``MissingKernelError`` naming any kernel still missing and the library it belongs to."""
    pte = program if isinstance(program, bytes) else Path(program).read_bytes()
    for library in libraries:
        load_host_library(library)
    operators = program_operators(pte)
    if any(op.startswith(QUANTIZED_NAMESPACE) for op in operators):
        load_quantized_kernels()
    if any(op.startswith(SPEED_NAMESPACE) for op in operators):
        load_speed_kernels(progress)
    check_program_kernels(pte)
