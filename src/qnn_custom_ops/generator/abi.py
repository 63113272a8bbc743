"""The kernel ABI shared by the generated C++ (tensor_view.h) and Python (ctypes).

Defined once here; ``kernels/qco/tensor_view.h`` is rendered from these enums, so the
two sides cannot drift apart.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

from ..opdef.datatypes import kernel_rows

ABI_VERSION = 2

#: Precedes the list of kernel names embedded in every host library, where the loader reads it
#: without loading the library.
KERNEL_LIST_MARKER = "qco-kernel-list:"


#: ``qco::DType``: the element type of a ``qco::TensorView``, one per kernel ABI tag of the
#: datatype table (``KernelDType.UFixed8`` is ``UFIXED_POINT_8``'s).
if TYPE_CHECKING:  # built from the table at import: type checkers cannot list its members
    KernelDType: Any
else:
    KernelDType = enum.IntEnum("KernelDType", [(r.kernel_tag, r.abi_value) for r in kernel_rows()])


class KernelStatus(enum.IntEnum):
    """``qco::Status``: what a kernel returns."""

    Ok = 0
    NotImplemented = 1
    InvalidArgument = 2
    UnsupportedDtype = 3
    ShapeMismatch = 4
    KernelException = 5  # the kernel threw; the C ABI caught it at the boundary (qco_<Pkg>_last_exception)

    @property
    def htp_status(self) -> str:
        """The HTP ``GraphStatus`` an HTP Impl returns for this kernel status."""
        return _HTP_STATUS[self]

    @property
    def description(self) -> str:
        """Lower-case words, e.g. "not implemented" (also the C++ status_name())."""
        return "".join(f" {c.lower()}" if c.isupper() else c for c in self.name).strip()


_HTP_STATUS = {
    KernelStatus.Ok: "Success",
    KernelStatus.NotImplemented: "ErrorUnsupported",
    KernelStatus.InvalidArgument: "ErrorBadInput",
    KernelStatus.UnsupportedDtype: "ErrorUnsupported",
    KernelStatus.ShapeMismatch: "ErrorDimensions",
    KernelStatus.KernelException: "ErrorFatal",
}
