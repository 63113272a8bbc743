"""The kernel ABI shared by the generated C++ (tensor_view.h) and Python (ctypes).

Defined once here; ``kernels/qco/tensor_view.h`` is rendered from these enums, so the
two sides cannot drift apart.
"""

from __future__ import annotations

import enum

ABI_VERSION = 1


class KernelDType(enum.IntEnum):
    """``qco::DType``: the element type of a ``qco::TensorView``."""

    Float32 = 0
    Float16 = 1
    UFixed8 = 2
    SFixed8 = 3
    UFixed16 = 4
    SFixed16 = 5
    Int32 = 6
    UInt32 = 7
    Int64 = 8
    Bool = 9
    Int8 = 10
    UInt8 = 11
    Int16 = 12
    UInt16 = 13
    SFixed32 = 14
    UFixed32 = 15
    Float64 = 16
    UInt64 = 17


class KernelStatus(enum.IntEnum):
    """``qco::Status``: what a kernel returns."""

    Ok = 0
    NotImplemented = 1
    InvalidArgument = 2
    UnsupportedDtype = 3
    ShapeMismatch = 4

    @property
    def description(self) -> str:
        """Lower-case words, e.g. "not implemented" (also the C++ status_name())."""
        return "".join(f" {c.lower()}" if c.isupper() else c for c in self.name).strip()
