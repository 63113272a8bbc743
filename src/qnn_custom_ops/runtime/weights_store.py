"""A program's weights held once in memory, however many of its methods are loaded.

Measured on ExecuTorch 1.5.1's Python runtime with a host LLM export (Llama-3.2-1B's widths, 2
layers, float, 1.43 GiB ``.ptd``): loading ``prefill_forward`` then ``kv_forward`` took 5.2 GiB
resident, 3.6x the files, whether from one ``Program`` or two. Two causes, one per kind of memory:

- anonymous memory, +1.4 GiB per method: XNNPACK packs every weight it is given into its own
  layout when a delegate is initialised, once per method, because the wheel's XNNPACK backend
  is built with its weights cache off (no ``ENABLE_XNNPACK_WEIGHTS_CACHE``). Turned on
  (``share_packed_weights``: the backend option ``weight_cache_enabled``), the second method finds
  each weight already packed under its name; XNNPACK names a weight by the sha256 of its bytes,
  so programs sharing the cache share only equal weights.
- mapped file, +1.0 GiB per method: the runtime maps the ``.ptd`` with ``MmapDataLoader`` and
  ``mlock``s every region it maps. A process holding ``CAP_IPC_LOCK`` (root, as in most
  containers) is allowed to, so every method's load of the tied embedding (the gather reads it
  from the file) faults in and pins all of it, and ``VmRSS`` counts each method's mapping. An
  ordinary user's ``mlock`` fails past ``RLIMIT_MEMLOCK`` (8 MiB here) and the runtime goes on
  (``UseMlockIgnoreErrors``); ``pages_not_pinned`` loads the same way for root: only the pages a
  kernel reads become resident, shared through the page cache.

Both together: 1.80 GiB for both methods loaded (1.26x the files; 0.36 GiB of it is the
interpreter with torch before anything is loaded).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

from ..errors import ReportedError
from ..progress import Progress, silent
from .cmake_build import cache_root, cached_build, content_key, files_under, work_dir
from .loading import executorch_paths

SOURCES = Path(__file__).resolve().parent / "backend_options"
LIBRARY = "libqco_backend_options.so"
XNNPACK = b"XnnpackBackend"
#: XNNPACK's backend option (``XNNPACKBackend.h``: ``weight_cache_option_key``).
WEIGHT_CACHE = b"weight_cache_enabled"


class WeightsStoreError(ReportedError, RuntimeError):
    """The runtime refused to share a program's weights between its methods."""


def build_options_library(build_root: Path | None = None, progress: Progress = silent) -> Path:
    """Build (or reuse) the backend options library, keyed by its sources and the executorch
    version (a build is said to ``progress``)."""
    include, libexecutorch = executorch_paths()
    options = {"EXECUTORCH_INCLUDE": str(include), "EXECUTORCH_LIBRARY_DIR": str(libexecutorch.parent)}
    key = content_key(SOURCES, files_under(SOURCES), {**options, "executorch": version("executorch")})
    root = build_root or cache_root() / "executorch"
    work = work_dir(root, "qco_backend_options", SOURCES, options)
    return cached_build(
        SOURCES,
        root / f"qco_backend_options-{key}",
        work,
        LIBRARY,
        options,
        "backend options",
        keyed=SOURCES,
        progress=progress,
    )


@functools.cache
def _options_library(path: Path) -> ctypes.CDLL:
    """The built library at ``path``, loaded once."""
    library = ctypes.CDLL(str(path))
    library.qco_set_bool_option.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int)
    library.qco_get_bool_option.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int))
    return library


def packed_weights_shared(progress: Progress = silent) -> bool:
    """Whether XNNPACK's weights cache is on in this process (the options library built first
    if it is not, said to ``progress``)."""
    return _cache_enabled(_options_library(build_options_library(progress=progress)))


def _cache_enabled(library: ctypes.CDLL) -> bool:
    value = ctypes.c_int(-1)
    status = library.qco_get_bool_option(XNNPACK, WEIGHT_CACHE, ctypes.byref(value))
    return status == 0 and value.value == 1


def share_packed_weights(progress: Progress = silent) -> None:
    """Turn XNNPACK's weights cache on for this process, before a delegate is initialised: a
    weight packed for one method (or program) is the one every other method packing the same
    bytes uses, instead of a copy per method. Once per process; the options library is built
    first if it is not (said to ``progress``)."""
    _weights_cache_on(build_options_library(progress=progress))


@functools.cache
def _weights_cache_on(path: Path) -> None:
    """``share_packed_weights`` with the options library at ``path``: once per process."""
    from executorch.runtime import Runtime

    Runtime.get()  # the runtime's backends registered, XNNPACK among them
    library = _options_library(path)
    status = library.qco_set_bool_option(XNNPACK, WEIGHT_CACHE, 1)
    if status != 0 or not _cache_enabled(library):
        raise WeightsStoreError(
            f"the ExecuTorch runtime refused XNNPACK's option {WEIGHT_CACHE.decode()} (error 0x{status:x}): "
            "reinstall executorch (pip install --force-reinstall executorch)"
        )


#: ``linux/capability.h``: the header version of 64-bit capability sets, and the capability that
#: lets ``mlock`` ignore ``RLIMIT_MEMLOCK``.
_CAPABILITY_VERSION_3 = 0x20080522
_CAP_IPC_LOCK = 14


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32))


_LIBC = ctypes.CDLL(None, use_errno=True)
_PINNING = threading.Lock()


def _capabilities() -> tuple[_CapHeader, ctypes.Array] | None:
    """This thread's capability sets (pid 0: the calling thread), or None where they cannot be read."""
    header, data = _CapHeader(_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    if _LIBC.capget(ctypes.byref(header), data) != 0:
        return None
    return header, data


def _set_ipc_lock(held: tuple[_CapHeader, ctypes.Array], on: bool) -> bool:
    header, data = held
    bit = 1 << _CAP_IPC_LOCK
    data[0].effective = data[0].effective | bit if on else data[0].effective & ~bit
    return _LIBC.capset(ctypes.byref(header), data) == 0


@contextlib.contextmanager
def pages_not_pinned() -> Iterator[None]:
    """Load programs inside this block as an ordinary user's process does: without
    ``CAP_IPC_LOCK`` in this thread's effective set (given back after), so the runtime's ``mlock``
    of each region of the data file it maps fails quietly past ``RLIMIT_MEMLOCK`` instead of
    faulting in and pinning the whole region, once per method. The pages a kernel reads are
    still mapped from the page cache; a process without the capability loads as it always does.
    Capabilities are per thread: other threads keep theirs."""
    with _PINNING:
        held = _capabilities()
        dropped = held is not None and held[1][0].effective >> _CAP_IPC_LOCK & 1 and _set_ipc_lock(held, False)
        try:
            yield
        finally:
            if dropped and held is not None:
                _set_ipc_lock(held, True)
