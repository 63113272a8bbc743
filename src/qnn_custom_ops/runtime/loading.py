"""Load kernel libraries into the ExecuTorch runtime safely, and check programs against it.

ExecuTorch aborts the interpreter when a kernel name is registered twice, and reports a
missing kernel only as ``error 0x14`` at load time. Both are checked here first.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import ReportedError
from ..generator.abi import KERNEL_LIST_MARKER
from .cmake_build import is_valid_library
from .isolation import trace_into

_LOADED: dict[Path, ctypes.CDLL] = {}
_OWNERS: dict[str, Path] = {}  # kernel name -> library that registered it
_LOCK = threading.Lock()


def library_kernels(path: Path) -> list[str] | None:
    """The kernels a host library registers, read from the file itself (no loading), or None
    for a library that is not one of ours."""
    data = path.read_bytes()
    start = data.find(KERNEL_LIST_MARKER.encode())
    if start < 0:
        return None
    end = data.index(b"\0", start)
    listed = data[start + len(KERNEL_LIST_MARKER) : end].decode("utf-8", "replace")
    return [name for name in listed.split(";") if name]


def executorch_paths() -> tuple[Path, Path]:
    """(include directory, libexecutorch.so) of the installed executorch wheel."""
    import executorch

    root = Path(list(executorch.__path__)[0])  # a namespace package: no __file__
    return root / "include", root / "lib" / "libexecutorch.so"


class KernelLoadError(ReportedError, RuntimeError):
    """A library that cannot be loaded without harm."""


class MissingKernelError(ReportedError, RuntimeError):
    """A program needs kernels that nothing registered."""


def registered_operators() -> set[str]:
    """Names (``ns::op.overload``) of every kernel in the ExecuTorch runtime registry."""
    from executorch.runtime import Runtime

    return set(Runtime.get().operator_registry.operator_names)


def load_host_library(path: str | Path, declared_ops: list[str] | None = None) -> ctypes.CDLL:
    """Load a kernel library once; refuse one whose kernels another library already registered.

    ``declared_ops`` names the kernels the library registers (``ns::op.out``); libraries built
    by ``build_host_library`` list them inside (read before loading, so a copy of a loaded
    library is refused too). A second load of the same file is a no-op returning the same handle.
    """
    path = Path(path).resolve()
    with _LOCK:
        if path in _LOADED:
            return _LOADED[path]
        if not path.is_file():
            raise KernelLoadError(f"{path}: no such kernel library")
        if not is_valid_library(path):
            raise KernelLoadError(f"{path}: not a shared library (build it with build_host_library or build-host)")
        ops = declared_ops if declared_ops is not None else (library_kernels(path) or [])
        clashes = sorted(op for op in ops if op in registered_operators())
        if clashes:
            owners = sorted({str(_OWNERS.get(op, "another library")) for op in clashes})
            raise KernelLoadError(
                f"{path}: kernels {', '.join(clashes)} are already registered by "
                f"{', '.join(owners)}; loading a second copy would abort the interpreter "
                "(restart Python to switch libraries)"
            )
        library = ctypes.CDLL(str(path))
        _LOADED[path] = library
        for op in ops:
            _OWNERS[op] = path
        return library


def load_quantized_kernels() -> None:
    """ExecuTorch's quantized_decomposed kernels (quantize/dequantize), for quantized programs."""
    _, libexecutorch = executorch_paths()
    path = libexecutorch.parent / "libexecutorch_kernels_quantized.so"
    if path.resolve() in _LOADED or "quantized_decomposed::quantize_per_tensor.out" in registered_operators():
        return
    load_host_library(path, declared_ops=[])


@dataclass(frozen=True)
class ProgramFacts:
    """What the checks read of a .pte, taken from one parse: parsing it in Python takes a quarter
    of a second for a small LLM's program, and loading one method asked five times."""

    operators: frozenset[str]  # the kernels it calls outside its delegates (``ns::op.overload``)
    backends: frozenset[str]  # the backends it is delegated to (``QnnBackend``, ...)
    needs_data: bool  # it keeps tensors in a data file beside it (a ``.ptd``)
    planned_bytes: dict[str, int]  # per method, the buffers its memory plan allocates


@functools.lru_cache(maxsize=2)
def program_facts(pte: bytes) -> ProgramFacts:
    """The .pte's ``ProgramFacts``, as executorch's schema reads it (the last two programs' kept)."""
    from executorch.exir._serialize._program import deserialize_pte_binary
    from executorch.exir.schema import Tensor, TensorDataLocation

    parsed = deserialize_pte_binary(pte)
    plans = getattr(parsed, "program", parsed).execution_plan
    return ProgramFacts(
        operators=frozenset(
            f"{op.name}.{op.overload}" if op.overload else op.name for p in plans for op in p.operators
        ),
        backends=frozenset(delegate.id for p in plans for delegate in p.delegates),
        needs_data=any(
            isinstance(value.val, Tensor)
            and value.val.extra_tensor_info is not None
            and value.val.extra_tensor_info.location == TensorDataLocation.EXTERNAL
            for p in plans
            for value in p.values
        ),
        planned_bytes={p.name: sum(p.non_const_buffer_sizes) for p in plans},
    )


def program_operators(pte: bytes) -> set[str]:
    """The kernels a .pte program calls outside its delegates (``ns::op.overload``)."""
    return set(program_facts(pte).operators)


def program_backends(pte: bytes) -> set[str]:
    """The backends a .pte program is delegated to (``QnnBackend``, ...)."""
    return set(program_facts(pte).backends)


def program_needs_data(pte: bytes) -> bool:
    """Whether the .pte keeps tensors in a data file beside it (a ``.ptd``: ``lower_methods(...,
    external_weights=True)``), which the runtime must be given to load its methods."""
    return program_facts(pte).needs_data


def _library_functions(libraries: Sequence[str | Path], name: str) -> list:
    """``qco_<Pkg>_<name>`` of each loaded host library (``libqco_<Pkg>_executorch.so``)."""
    functions = []
    for path in libraries:
        handle = _LOADED.get(Path(path).resolve())
        stem = Path(path).name
        if handle is None or not (stem.startswith("libqco_") and stem.endswith("_executorch.so")):
            continue
        package = stem[len("libqco_") : -len("_executorch.so")]
        function = getattr(handle, f"qco_{package}_{name}", None)
        if function is not None:
            functions.append(function)
    return functions


def trace_kernels(libraries: Sequence[str | Path]) -> None:
    """In an isolated child, let each loaded host library name the op it runs (crash reports)."""
    for function in _library_functions(libraries, "trace_into"):
        trace_into(function)


def clear_kernel_errors(libraries: Sequence[str | Path]) -> None:
    for function in _library_functions(libraries, "clear_error"):
        function()


def last_kernel_error(libraries: Sequence[str | Path]) -> str:
    """The message of the last kernel failure in these libraries on this thread, or ""."""
    for function in _library_functions(libraries, "last_error"):
        function.restype = ctypes.c_char_p
        message = function()
        if message:
            return message.decode("utf-8", "replace")
    return ""
