"""The C heap under Python's objects: what glibc keeps of the memory freed, given back."""

from __future__ import annotations

import ctypes


def heap_trimmed() -> None:
    """glibc's free heap pages given back to the system (``malloc_trim``): memory Python and torch
    freed stays resident until then. Nothing to do without glibc."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
