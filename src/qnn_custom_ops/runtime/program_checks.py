"""Is this a program the installed runtime can load and the host can run? Checked before the
runtime reads it: its identifier, its planned memory against this machine's, its operators'
names and backends, its data file; the runtime's own refusals as one ``ProgramError`` naming the
file and the runtime's reason, its log held back."""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import sys
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from ..errors import ReportedError
from ..opdef.datatypes import DATATYPES
from ..quiet import native_stderr_held
from .loading import program_backends, program_facts, program_needs_data, program_operators
from .raw_io import TensorSpec

# ExecuTorch ScalarType codes (as c10's) -> torch dtypes.
_TORCH_DTYPES = {
    r.scalar_type[1]: getattr(torch, r.torch)
    for r in DATATYPES.values()
    if r.scalar_type is not None and r.torch is not None
}


class ProgramError(ReportedError, ValueError):
    """Bytes that are not an ExecuTorch program the installed runtime can load."""


@functools.lru_cache(maxsize=1)
def _program_identifier() -> bytes:
    """The flatbuffer file identifier of the installed runtime's programs (``ET12``), from its schema."""
    schema = resources.files("executorch") / "exir/_serialize/program.fbs"
    found = re.search(rb'file_identifier\s+"([^"]{4})"', schema.read_bytes())
    if found is None:
        raise ProgramError(f"{schema}: no file_identifier in the installed executorch's program schema")
    return found[1]


@contextlib.contextmanager
def runtime_log_held() -> Iterator[list[str]]:
    """Hold what the runtime logs inside the block (through file descriptor 2 and through
    ``sys.stderr``, whatever it is): replayed after it on success, handed to the caller instead
    when the block raises."""
    held: list[str] = []
    python_side = io.StringIO()
    try:
        with native_stderr_held() as native, contextlib.redirect_stderr(python_side):
            yield held
    except BaseException:
        held += native + python_side.getvalue().splitlines(keepends=True)
        raise
    sys.stderr.write("".join(native) + python_side.getvalue())


def check_program(pte: bytes, where: str = "program") -> None:
    """Refuse bytes that are not an ExecuTorch program before the runtime reads them: its
    loader logs a bad file identifier raw, and a non-UTF-8 one aborts the interpreter."""
    expected = _program_identifier()
    if len(pte) < 8 or pte[4:8] != expected:
        raise ProgramError(
            f"{where}: not an ExecuTorch program (no {expected.decode()} identifier at byte 4); "
            "pass a .pte written by lower(..., output=...)"
        )


def last_said(log: list[str], fallback: str) -> str:
    """The runtime's last log line without its ``[file.cpp:N]`` prefix, or ``fallback``."""
    return re.sub(r"^\[[\w.]+:\d+\]\s*", "", log[-1].strip()) if log else fallback


@contextlib.contextmanager
def refused_as_program_error(where: str) -> Iterator[None]:
    """Whatever the runtime's loader raises for a damaged file (RuntimeError, IndexError,
    KeyError, MemoryError, UnicodeDecodeError, ...) as one ``ProgramError`` naming ``where``
    and the runtime's last log line; its log held back."""
    try:
        with runtime_log_held() as log:
            yield
    except ReportedError:
        raise
    except Exception as exc:
        reason = last_said(log, f"{type(exc).__name__}: {exc}")
        raise ProgramError(
            f"{where}: not an ExecuTorch program the installed runtime can load ({reason}); pass "
            "a .pte written by lower(..., output=...)"
        ) from None


def verified_program(pte: bytes, where: str, data: Path | None = None) -> Any:
    """The runtime's program, its internal consistency verified (every offset and index in range)
    and its planned memory within this machine's; with ``data``, the data file its weights are in."""
    from executorch.runtime import Runtime, Verification

    _check_planned_memory(pte, where)
    return Runtime.get().load_program(pte, verification=Verification.InternalConsistency, data_path=data)


def _check_planned_memory(pte: bytes, where: str) -> None:
    """Refuse a program whose planned buffers exceed this machine's memory before the runtime
    allocates them: its loader does so first, and a damaged size (one flipped bit can turn a
    buffer count into garbage) had it touch 17 GB for half a minute before ``std::bad_alloc``."""
    try:
        planned_bytes = program_facts(pte).planned_bytes
    except Exception:  # damage of another kind: the runtime's verification names it better
        return
    machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for method, planned in planned_bytes.items():
        if planned > machine:
            raise ProgramError(
                f"{where}: method {method!r} plans {planned / 2**30:.3g} GiB of buffers, more than this "
                f"machine's {machine / 2**30:.3g} GiB: the file is damaged, or it needs a bigger machine"
            )


def method_specs(
    pte: bytes, method: str = "forward", where: str = "program"
) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """(input specs, output specs) of a program's method, read from the .pte; ``ProgramError``
    (naming ``where``, with the runtime's reason) for a file the runtime cannot load."""
    check_program(pte, where)

    def spec(info) -> TensorSpec:
        return TensorSpec(tuple(info.sizes()), _TORCH_DTYPES[int(info.dtype())])

    with refused_as_program_error(where):
        meta = verified_program(pte, where).metadata(method)
        return (
            [spec(meta.input_tensor_meta(i)) for i in range(meta.num_inputs())],
            [spec(meta.output_tensor_meta(i)) for i in range(meta.num_outputs())],
        )


#: An operator's name in a program: ``ns::op`` and an overload; anything else is a damaged file.
_OPERATOR_NAME = re.compile(r"[A-Za-z_][\w]*::[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)?")
#: Backends the host target does not run (executorch's Python runtime registers QnnBackend,
#: which then fails to find the SDK's libraries), and the targets that run them.
_BACKEND_TARGETS = {"QnnBackend": "--target x86 (the QNN HTP simulator) or --target device"}


def host_operators(pte: bytes, where: str) -> set[str]:
    """The program's operators, once its names are known to be names and every backend it is
    delegated to is one the host runtime has."""
    from executorch.runtime import Runtime

    with refused_as_program_error(where):
        operators = program_operators(pte)
        backends = program_backends(pte)
    damaged = sorted(name for name in operators if not _OPERATOR_NAME.fullmatch(name))
    if damaged:
        raise ProgramError(
            f"{where}: not an ExecuTorch program the installed runtime can load (operator name {damaged[0]!r}); "
            "pass a .pte written by lower(..., output=...)"
        )
    registered = set(Runtime.get().backend_registry.registered_backend_names)
    missing = sorted(name for name in backends if name in _BACKEND_TARGETS or name not in registered)
    if missing:
        raise ProgramError(
            f"{where}: delegated to {missing[0]}, which the host target does not run: run it with "
            f"{_BACKEND_TARGETS.get(missing[0], 'a runtime built with that backend')}"
        )
    return operators


def check_data_file(pte: bytes, data: Path | None) -> None:
    """A program whose weights are in a data file is given one that exists (the runtime's own
    word for its absence is "external_data_map is null")."""
    if data is None and program_needs_data(pte):
        raise ProgramError(
            "program: its weights are in a data file (.ptd) beside the .pte; pass that file "
            "(HostRunner.run(..., data=PATH))"
        )
    if data is not None and not data.is_file():
        raise ProgramError(f"{data}: no such data file; pass the .ptd written with the .pte")
