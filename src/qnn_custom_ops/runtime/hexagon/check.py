"""The check itself: each case run on the host build and on Hexagon and compared bit for bit
(``hexagon_check``), what a mismatch or a refusal asks of the kernel (its libm calls, the status's
fix), and the packets alone (``hexagon_packets``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...generator.abi import KernelDType, KernelStatus
from ...generator.hexagon_driver import driver_ops
from ...opdef.datatypes import kernel_rows
from ...progress import Progress, silent
from ..cost import KernelCase
from ..host_build import GeneratedPackage, build_host_kernels
from ..isolation import call_isolated, set_time_limit
from ..kernel_abi import KernelError, KernelLibrary, KernelTensor
from .driver import build_hexagon_driver
from .emulation import case_time_limit, run_on_hexagon

_FIXED_POINT = {KernelDType[r.kernel_tag] for r in kernel_rows() if r.datatype.is_fixed_point}


@dataclass(frozen=True)
class CheckResult:
    """One case compared: the host's and Hexagon's statuses and first differing element."""

    op: str
    label: str
    host_status: int
    hexagon_status: int
    mismatch: str  # "" when bit-exact
    packets: int
    elements: int  # output elements, for packets per element
    default_shape: bool = False  # the case's dims are the default, not asked for
    prepare_packets: int = 0  # of what the kernel prepares ahead of the call (its <Op>Prepare)

    @property
    def passed(self) -> bool:
        """Bit-exact on a call the kernel accepted: a refusal checks nothing."""
        return not self.mismatch and self.host_status == self.hexagon_status == KernelStatus.Ok

    @property
    def not_applicable(self) -> bool:
        """The default dims, refused as a shape on both sides: the op's, not a failure of it."""
        return self.default_shape and self.host_status == self.hexagon_status == KernelStatus.ShapeMismatch

    def __str__(self) -> str:
        per_element = f"{self.packets / self.elements:8.2f}/element" if self.elements else "no elements"
        prepared = f"  (prepared ahead: {self.prepare_packets} packets)" if self.prepare_packets else ""
        cost = f"{self.packets:>10} packets  {per_element}{prepared}"
        if self.host_status != self.hexagon_status:
            return (
                f"{self.op:<16}{self.label:<48}MISMATCH status: host {_status(self.host_status)}, "
                f"hexagon {_status(self.hexagon_status)}"
            )
        if self.mismatch:
            return f"{self.op:<16}{self.label:<48}MISMATCH {self.mismatch}"
        if self.not_applicable:
            return (
                f"{self.op:<16}{self.label:<48}not applicable: the default dims are not a shape {self.op} "
                f"takes (check it with --shape {self.op}:TENSOR=DIMS,...)"
            )
        if self.host_status != KernelStatus.Ok:
            return (
                f"{self.op:<16}{self.label:<48}NOT CHECKED: the kernel refuses this case on both "
                f"({_status(self.host_status)}): {refusal_fix(self.host_status, self.op)}"
            )
        return f"{self.op:<16}{self.label:<48}ok  {cost}"


def refusal_fix(status: int, op: str) -> str:
    """What to do about a case the kernel refuses, by the status it returned."""
    if status == KernelStatus.NotImplemented:
        return f"write the op's math in kernels/{op}.h (the generated skeleton returns this)"
    if status == KernelStatus.ShapeMismatch:
        return f"give shapes it takes with --shape {op}:TENSOR=DIMS,..."
    if status == KernelStatus.UnsupportedDtype:
        return "make it take every datatype its OpDef declares, or drop the datatype from the OpDef"
    return f"give shapes and values it takes with --shape {op}:TENSOR=DIMS,..."


def _status(status: int) -> str:
    try:
        return KernelStatus(status).description
    except ValueError:
        return f"status {status}"


def first_mismatch(host: np.ndarray, hexagon: np.ndarray, tensor: KernelTensor, index: int) -> str:
    """ "" if the two outputs are the same bits; else where they first differ, in values and,
    for fixed point, in steps."""
    flat_host, flat_hexagon = host.ravel(), hexagon.ravel()
    width = flat_host.dtype.itemsize  # bytes per element, so a tensor with no elements compares too
    host_bytes = flat_host.view(np.uint8).reshape(flat_host.size, width)
    hexagon_bytes = flat_hexagon.view(np.uint8).reshape(flat_hexagon.size, width)
    differs = np.flatnonzero((host_bytes != hexagon_bytes).any(axis=1))
    if not differs.size:
        return ""
    at = int(differs[0])
    got, want = flat_hexagon[at], flat_host[at]
    steps = f" ({int(got) - int(want):+d} steps)" if tensor.dtype in _FIXED_POINT else ""
    return f"output {index} index {at} ({len(differs)} differ): host {want}, hexagon {got}{steps}"


#: libm functions whose last bit differs between the host's glibc and Hexagon's musl, and what
#: a kernel calls instead (qco/math.h computes the same bits on both). sqrt, fabs, floor, round,
#: nearbyint, fmin and the like are exact (one correctly rounded result) and not listed.
LIBM_REPLACEMENTS = {
    "exp": "qco::exp, or qco::sigmoid for 1 / (1 + exp(-x))",
    "log": "qco::log",
    "tanh": "qco::tanh",
    "erf": "qco::erf",
    "erfc": "1 - qco::erf(x)",
    "pow": "qco::pow",
    **{name: "qco::exp or qco::log of your own argument" for name in ("exp2", "expm1", "log2", "log10", "log1p")},
    **{
        name: "no qco:: equivalent: a polynomial in + - * / computes the same bits on both"
        for name in "sin cos tan asin acos atan atan2 sinh cosh cbrt hypot tgamma lgamma".split()
    },
}
_LIBM_CALL = re.compile(
    rf"(?<![\w.>])((?:\w*::)*)({'|'.join(sorted(LIBM_REPLACEMENTS, key=len, reverse=True))})([fl]?)\s*\("
)
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
_FLOAT_DTYPES = {KernelDType.Float32, KernelDType.Float16}


def libm_calls(package_dir: Path, op: str) -> list[str]:
    """Where ``kernels/<op>.h`` and the package's headers it includes (not the generated qco/)
    call libm's transcendental functions, as "kernels/File.h:LINE calls NAME: use REPLACEMENT"."""
    root = package_dir.resolve()
    kernels = root / "kernels"
    pending, seen, calls = [kernels / f"{op}.h"], set(), []
    while pending:
        source = pending.pop()
        inside = source.is_relative_to(kernels) and source.relative_to(kernels).parts[0] != "qco"
        if source in seen or not inside or not source.is_file():
            continue
        seen.add(source)
        text = _COMMENT.sub(lambda m: "\n" * m[0].count("\n"), source.read_text(errors="replace"))
        for call in _LIBM_CALL.finditer(text):
            if call[1] in ("", "std::", "::"):
                line = text.count("\n", 0, call.start()) + 1
                name = f"{call[1]}{call[2]}{call[3]}"
                calls.append(f"{source.relative_to(root)}:{line} calls {name}: use {LIBM_REPLACEMENTS[call[2]]}")
        pending += [(source.parent / name).resolve() for name in _LOCAL_INCLUDE.findall(text)]
    return calls


def libm_hint(package_dir: Path, op: str) -> str:
    """For a float output that differs: the kernel's libm calls, the likely cause, named with their
    qco:: replacements (qco/math.h); "" when it calls none."""
    calls = libm_calls(package_dir, op)
    if not calls:
        return ""
    more = f"; {len(calls) - 5} more" if len(calls) > 5 else ""
    return f"; libm differs in the last bit between the host and Hexagon: {'; '.join(calls[:5])}{more} (qco/math.h)"


def hexagon_packets(
    package: str | Path | GeneratedPackage,
    cases: Sequence[KernelCase],
    time_limit: float | None = None,
    progress: Progress = silent,
) -> list[tuple[int, int]]:
    """Executed packets on Hexagon (emulated) of each case: what its kernel prepares ahead (its
    ``<Op>Prepare``; 0 without one), then its call. The build and each case are said to ``progress``."""
    package = GeneratedPackage.at(package)
    ops = driver_ops(package.ops, (case.op for case in cases))
    run = run_on_hexagon(build_hexagon_driver(package, ops, progress), cases, ops, time_limit, progress)
    return list(zip(run.prepare_packets, run.packets))


def hexagon_check(
    package: str | Path | GeneratedPackage,
    cases: Sequence[KernelCase],
    time_limit: float | None = None,
    progress: Progress = silent,
) -> list[CheckResult]:
    """Run ``cases`` through the host build and under the emulator; one result per case.
    ``time_limit``: seconds per case under the emulator (default: ``case_time_limit``). Both builds
    and each case under the emulator are said to ``progress``."""
    package = GeneratedPackage.at(package)
    ops = driver_ops(package.ops, (case.op for case in cases))
    run = run_on_hexagon(build_hexagon_driver(package, ops, progress), cases, ops, time_limit, progress)
    library = build_host_kernels(package, progress=progress)
    host = call_isolated(
        host_results, library, package.name, cases, time_limit, what="the host half of the Hexagon check"
    )
    results = []
    for case, (hexagon_status, hexagon_outputs, _), (host_status, host_outputs), packets, prepared in zip(
        cases, run.results, host, run.packets, run.prepare_packets
    ):
        mismatch = (
            ""
            if host_status != KernelStatus.Ok
            else next(
                (
                    m
                    for i, (t, h, x) in enumerate(zip(case.outputs, host_outputs, hexagon_outputs))
                    if (m := first_mismatch(h, x, t, i))
                ),
                "",
            )
        )
        if mismatch and any(t.dtype in _FLOAT_DTYPES for t in case.outputs):
            mismatch += libm_hint(package.directory, case.op)
        results.append(
            CheckResult(
                case.op,
                case.label,
                host_status,
                hexagon_status,
                mismatch,
                packets,
                sum(t.array.size for t in case.outputs),
                case.default_shape,
                prepared,
            )
        )
    return results


def host_results(
    library_path: Path, package_name: str, cases: Sequence[KernelCase], time_limit: float | None
) -> list[tuple[int, list[np.ndarray]]]:
    """(status, output arrays) of each case on the host: what ``hexagon_check`` runs in an
    isolated process, so a kernel that crashes, exits or loops on the host only is reported."""
    library = KernelLibrary(library_path, package_name)
    results = []
    for case in cases:
        set_time_limit(time_limit or case_time_limit(case))
        outputs = [KernelTensor(t.array.copy(), t.dtype, t.scale, t.offset) for t in case.outputs]
        results.append((_host_status(library, case, outputs), [t.array for t in outputs]))
    return results


def _host_status(library: KernelLibrary, case: KernelCase, outputs: list[KernelTensor]) -> int:
    """The kernel's status on the host, after what it prepares ahead, as every other build runs
    it (a refusal is a result to compare, not an error)."""
    try:
        library.prepare_ahead(case.op, outputs, case.inputs, case.params)
        library.run(case.op, outputs, case.inputs, case.params)
    except KernelError as error:
        return error.status
    return KernelStatus.Ok
