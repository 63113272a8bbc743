"""Call a package's portable kernels through the C ABI of its host library (ctypes).

Used by kernel tests: the same kernels/*.h the HTP build compiles, run on the host.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ReportedError
from ..generator.abi import ABI_VERSION, KernelDType, KernelStatus
from ..opdef.datatypes import kernel_rows
from .isolation import call_isolated, trace_into
from .loading import KernelLoadError, load_host_library

_NUMPY_DTYPE = {KernelDType[r.kernel_tag]: np.dtype(r.numpy_type).type for r in kernel_rows()}


class CTensorView(ctypes.Structure):
    """Mirror of ``qco::TensorView`` (standard layout)."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dims", ctypes.POINTER(ctypes.c_int64)),
        ("rank", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("scale", ctypes.c_float),
        ("offset", ctypes.c_int32),
    ]


@dataclass
class KernelTensor:
    """A contiguous numpy array with the QNN encoding the kernel sees: real = scale*(q+offset)."""

    array: np.ndarray
    dtype: KernelDType
    scale: float = 1.0
    offset: int = 0

    def __post_init__(self) -> None:
        expected = np.dtype(_NUMPY_DTYPE[self.dtype])
        if self.array.dtype != expected:
            raise TypeError(f"{self.dtype.name} tensor needs a {expected} array, got {self.array.dtype}")
        self.array = np.require(self.array, requirements="C")  # keeps a 0-D array 0-D (ascontiguousarray does not)

    @classmethod
    def empty(cls, shape: Sequence[int], dtype: KernelDType, scale: float = 1.0, offset: int = 0) -> KernelTensor:
        return cls(np.zeros(shape, dtype=_NUMPY_DTYPE[dtype]), dtype, scale, offset)

    def view(self) -> tuple[CTensorView, ctypes.Array]:
        """The C view and the dims buffer it points at (keep both alive for the call)."""
        dims = (ctypes.c_int64 * max(self.array.ndim, 1))(*self.array.shape)
        view = CTensorView(
            self.array.ctypes.data, dims, self.array.ndim, int(self.dtype), float(self.scale), int(self.offset)
        )
        return view, dims


class KernelError(ReportedError, RuntimeError):
    """A kernel returned a non-ok status, or threw (``exception`` holds its what())."""

    def __init__(self, op: str, status: int, exception: str = ""):
        try:
            what = KernelStatus(status).description
        except ValueError:
            what = f"unknown status {status}"
        if status == KernelStatus.KernelException:
            what = f"it threw a C++ exception: {exception or '(no message)'}"
        super().__init__(f"kernel {op} failed: {what}")
        self.status = status


class KernelLibrary:
    """A built host kernel library of one op package."""

    def __init__(self, path: str | Path, package_name: str):
        self.path = Path(path)
        self.package_name = package_name
        self._lib = load_host_library(self.path)
        version = getattr(self._lib, f"qco_{package_name}_abi_version")
        version.restype = ctypes.c_int32
        if version() != ABI_VERSION:
            raise KernelLoadError(
                f"{self.path}: kernel ABI version {version()}, this qnn-custom-ops "
                f"speaks {ABI_VERSION}; regenerate the package and rebuild"
            )
        trace_into(getattr(self._lib, f"qco_{package_name}_trace_into"))

    def _last_exception(self) -> str:
        """what() of the exception the C ABI last caught on this thread."""
        function = getattr(self._lib, f"qco_{self.package_name}_last_exception")
        function.restype = ctypes.c_char_p
        return (function() or b"").decode("utf-8", "replace")

    def run(
        self,
        op: str,
        outputs: Sequence[KernelTensor],
        inputs: Sequence[KernelTensor],
        params: Sequence[KernelTensor] = (),
        *,
        isolated: bool = False,
    ) -> None:
        """Run one op in place on ``outputs``; raises ``KernelError`` on a non-ok status.

        ``isolated=True`` runs the call in a child process (about 0.1 s more per call): a kernel
        that crashes raises ``KernelCrashError`` ("kernel <Op> crashed: SIGSEGV") instead of
        ending this interpreter.
        """
        if not isolated:
            self.prepare(op, outputs, inputs, params)()
            return
        results = call_isolated(
            _run_kernel, self.path, self.package_name, op, outputs, inputs, params, what=f"kernel {op}"
        )
        for tensor, result in zip(outputs, results):
            np.copyto(tensor.array, result)

    def prepare(
        self,
        op: str,
        outputs: Sequence[KernelTensor],
        inputs: Sequence[KernelTensor],
        params: Sequence[KernelTensor] = (),
    ) -> Callable[[], None]:
        """A call of ``op`` on these tensors with the C views built once: what a timing loop
        repeats, so it measures the kernel and not ctypes marshalling."""
        return self._bound(f"qco_{self.package_name}_{op}", op, outputs, inputs, params)

    def prepare_ahead(
        self,
        op: str,
        outputs: Sequence[KernelTensor],
        inputs: Sequence[KernelTensor],
        params: Sequence[KernelTensor] = (),
    ) -> None:
        """What ``op``'s kernel prepares ahead of its calls (its ``<Op>Prepare``: QHPI's precompute
        runs it at graph load, the Hexagon check before each call); nothing from a library built
        before the C ABI had it."""
        symbol = f"qco_{self.package_name}_{op}_prepare"
        if not hasattr(self._lib, symbol):
            return
        try:
            self._bound(symbol, op, outputs, inputs, params)()
        except KernelError as error:
            if error.status != KernelStatus.NotImplemented:  # the kernel has nothing to prepare
                raise

    def _bound(
        self,
        symbol: str,
        op: str,
        outputs: Sequence[KernelTensor],
        inputs: Sequence[KernelTensor],
        params: Sequence[KernelTensor],
    ) -> Callable[[], None]:
        """``symbol`` of the C ABI bound to these tensors' views."""
        read_only = [index for index, tensor in enumerate(outputs) if not tensor.array.flags.writeable]
        if read_only:
            raise ValueError(
                f"{op}: output(s) {read_only} are read-only arrays and the kernel writes into its "
                "outputs: pass writable arrays (KernelTensor.empty, or array.copy())"
            )
        function = getattr(self._lib, symbol)
        function.restype = ctypes.c_int32
        arrays, keep_alive = [], []
        for group in (outputs, inputs, params):
            views = [t.view() for t in group]
            keep_alive.append(views)
            arrays.append((CTensorView * max(len(views), 1))(*(v for v, _ in views)))
        counts = (len(outputs), len(inputs), len(params))

        kept = (keep_alive, outputs, inputs, params)  # the views point into these: the call holds them

        def call() -> None:
            status = function(arrays[0], counts[0], arrays[1], counts[1], arrays[2], counts[2])
            if status != KernelStatus.Ok:
                raise KernelError(op, status, self._last_exception() if status == KernelStatus.KernelException else "")
            assert kept  # referenced here, so the arrays live as long as the call

        return call


def _run_kernel(
    path: Path,
    package_name: str,
    op: str,
    outputs: Sequence[KernelTensor],
    inputs: Sequence[KernelTensor],
    params: Sequence[KernelTensor],
) -> list[np.ndarray]:
    """``KernelLibrary.run`` in an isolated child: the outputs' arrays, for the parent."""
    KernelLibrary(path, package_name).run(op, outputs, inputs, params)
    return [tensor.array for tensor in outputs]
