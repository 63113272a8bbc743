"""Memory freed but still held, given back: Python's unreachable cycles, and the C heap under
Python's objects (what glibc keeps of the memory freed)."""

from __future__ import annotations

import ctypes
import gc


def heap_trimmed() -> None:
    """glibc's free heap pages given back to the system (``malloc_trim``): memory Python and torch
    freed stays resident until then. Nothing to do without glibc."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def garbage_given_back() -> None:
    """Python's unreachable cycles (a dropped graph and its nodes) collected, then the heap trimmed:
    a stage that drops graphs starts the next from what is alive, not from what was."""
    gc.collect()
    heap_trimmed()
