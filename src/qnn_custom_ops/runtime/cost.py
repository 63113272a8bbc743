"""What a kernel costs on this machine: seconds per call and bytes moved (FlexFlow's
``measure_operator_cost``), and the copy bandwidth that bounds a memory-bound kernel, measured
in the same run. Shared by ``qnn-custom-ops cost`` and ``benchmarks/bench_llm_ops.py``."""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import UsageError
from ..generator.abi import KernelDType
from ..opdef import Datatype, OpDef, OpPackage, TensorDef
from ..opdef.datatypes import DATATYPES
from .isolation import call_isolated, set_time_limit
from .kernel_abi import KernelLibrary, KernelTensor


@dataclass(frozen=True)
class KernelCase:
    """One op on tensors of one shape; ``bytes_moved`` is what the op must read and write at least."""

    op: str  # QNN op type
    label: str  # the shape, as printed
    outputs: tuple[KernelTensor, ...]
    inputs: tuple[KernelTensor, ...]
    params: tuple[KernelTensor, ...] = ()
    bytes_moved: int | None = None
    default_shape: bool = False  # dims nobody asked for (``dtype_cases``' default): the op may not take them

    @property
    def nbytes(self) -> int:
        """``bytes_moved`` if given, else every input read once and every output written once."""
        if self.bytes_moved is not None:
            return self.bytes_moved
        return sum(t.array.nbytes for t in self.outputs + self.inputs)


@contextmanager
def one_core() -> Iterator[int]:
    """Pin this process (and the threads it starts) to one core while measuring, so ratios
    measured side by side are not skewed by one side using more cores; yields the core."""
    cores = os.sched_getaffinity(0)
    core = min(cores)
    os.sched_setaffinity(0, {core})
    try:
        yield core
    finally:
        os.sched_setaffinity(0, cores)


def seconds_per_call(call: Callable[[], object], min_seconds: float = 0.2, repeats: int = 5) -> float:
    """The median over ``repeats`` rounds of the mean time of a call, each round at least
    ``min_seconds`` long (calibrated on a first call), after one warm-up."""
    call()
    start = time.perf_counter()
    call()
    once = max(time.perf_counter() - start, 1e-7)
    number = max(1, int(min_seconds / once))
    rounds = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            call()
        rounds.append((time.perf_counter() - start) / number)
    return statistics.median(rounds)


def copy_bandwidth(nbytes: int = 64 << 20) -> float:
    """Bytes per second of one core copying ``nbytes`` (read + write counted), the roofline a
    memory-bound kernel is judged against."""
    source = np.ones(nbytes // 4, dtype=np.float32)
    destination = np.empty_like(source)
    return 2 * nbytes / seconds_per_call(lambda: np.copyto(destination, source))


@dataclass(frozen=True)
class Cost:
    op: str
    label: str
    seconds: float
    nbytes: int

    @property
    def bandwidth(self) -> float:
        return self.nbytes / self.seconds


#: A measurement's calls: a warm-up, a calibration and one overshooting each of the 5 rounds.
_CALLS_PER_MEASUREMENT = 7


def measurement_limit(case: KernelCase, min_seconds: float) -> float:
    """Seconds measuring ``case`` may take before its kernel is taken for one that never
    returns: its timing rounds, and per call 2 s and 10 ns per byte it moves (a slow kernel's 100 MB/s)."""
    return 6 * min_seconds + _CALLS_PER_MEASUREMENT * (2.0 + case.nbytes * 1e-8)


def measure(
    library: KernelLibrary, cases: Sequence[KernelCase], min_seconds: float = 0.2, limit: float | None = None
) -> list[Cost]:
    """Seconds per call of each case's kernel through the C ABI (views built once); in an
    isolated process each measurement has a time limit (``limit`` or ``measurement_limit``)."""
    costs = []
    for case in cases:
        set_time_limit(limit or measurement_limit(case, min_seconds))
        call = library.prepare(case.op, case.outputs, case.inputs, case.params)
        costs.append(Cost(case.op, case.label, seconds_per_call(call, min_seconds), case.nbytes))
    return costs


@dataclass(frozen=True)
class PackageCost:
    """A package's cases measured on one core, beside that core's copy bandwidth."""

    core: int
    copy_bandwidth: float
    costs: list[Cost]


def measure_package(
    library_path: str | Path,
    package_name: str,
    cases: Sequence[KernelCase],
    min_seconds: float = 0.2,
    *,
    isolated: bool = False,
    limit: float | None = None,
) -> PackageCost:
    """Every case of a package's host kernel library on one pinned core; ``isolated=True``
    measures in a child process, so a kernel that crashes, exits or outlives its time limit
    (``limit`` seconds per measurement, or ``measurement_limit``) raises ``KernelCrashError``."""
    if isolated:
        return call_isolated(
            _measure_here, library_path, package_name, cases, min_seconds, limit, what="the cost measurement"
        )
    return _measure_here(library_path, package_name, cases, min_seconds, limit)


def _measure_here(
    library_path: str | Path, package_name: str, cases: Sequence[KernelCase], min_seconds: float, limit: float | None
) -> PackageCost:
    """``measure_package`` in this process."""
    library = KernelLibrary(library_path, package_name)
    with one_core() as core:
        return PackageCost(core, copy_bandwidth(), measure(library, cases, min_seconds, limit))


#: At most a quarter of this machine's memory for the tensors of one case.
_MAX_CASE_BYTES = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4


#: The largest dim a kernel tensor takes (ExecuTorch's sizes are int32).
LARGEST_DIM = 2**31 - 1


def parse_dims(text: str, where: str) -> tuple[int, ...]:
    """``1x128x4096`` -> (1, 128, 4096): whole numbers from 0 to ``LARGEST_DIM``, joined by x."""
    try:
        dims = tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        dims = ()
    if not dims or any(d < 0 for d in dims):
        raise UsageError(f"{where}: {text!r} is not a shape (write dims joined by x, e.g. 1x128x4096)")
    if max(dims) > LARGEST_DIM:
        raise UsageError(f"{where}: dim {max(dims)} of {text!r} is past the largest a tensor takes ({LARGEST_DIM})")
    return dims


def _measured_datatype(tensor: TensorDef, where: str) -> Datatype:
    """FLOAT_32 if the tensor may be float32, else its first integer datatype."""
    if Datatype.FLOAT_32 in tensor.datatypes:
        return Datatype.FLOAT_32
    integer = next((d for d in tensor.datatypes if d.is_integer and DATATYPES[d].kernel is not None), None)
    if integer is None:
        raise UsageError(
            f"{where}: {tensor.name} is {', '.join(d.short_name for d in tensor.datatypes)}; cost "
            "measures tensors that may be FLOAT_32 or an integer datatype"
        )
    return integer


def _tensor_for(datatype: Datatype, dims: tuple[int, ...], generator: np.random.Generator) -> KernelTensor:
    """float32 random data, or zeros of an integer datatype (valid as indices into anything)."""
    kernel = KernelDType[DATATYPES[datatype].kernel_tag]
    if datatype is Datatype.FLOAT_32:
        return KernelTensor(generator.standard_normal(dims, dtype=np.float32), kernel)
    return KernelTensor.empty(dims, kernel)


def check_case_size(shapes: dict[str, tuple[int, ...]], datatypes: dict[str, Datatype], where: str) -> None:
    """Refuse a case whose tensors would not fit in memory, before allocating them."""
    nbytes = sum(math.prod(dims) * np.dtype(DATATYPES[datatypes[name]].numpy).itemsize for name, dims in shapes.items())
    if nbytes > _MAX_CASE_BYTES:
        raise UsageError(
            f"{where}: the tensors need {nbytes / 1e9:.3g} GB, more than a quarter of this machine's "
            f"memory ({_MAX_CASE_BYTES / 1e9:.3g} GB): measure a smaller shape"
        )


def parse_assignments(text: str, where: str) -> dict[str, str]:
    """``x=1x4096,y=1x4096`` -> {"x": "1x4096", ...}; a tensor named twice is an error."""
    shapes: dict[str, str] = {}
    for item in filter(None, text.split(",")):
        name, _, dims = item.partition("=")
        if name in shapes:
            raise UsageError(f"{where}: {name} is given twice ({shapes[name]} and {dims}): give each tensor once")
        shapes[name] = dims
    return shapes


def op_of(package: OpPackage, name: str, where: str) -> OpDef:
    """The op ``name`` of ``package``, or a UsageError listing its ops."""
    op = package.ops.get(name)
    if op is None:
        raise UsageError(f"{where}: {name!r} is not an op of {package.name} (ops: {', '.join(package.ops)})")
    return op


def named_shapes(op: OpDef, assignments: str, where: str) -> dict[str, tuple[int, ...]]:
    """``tensor=DIMS,...`` naming every input and output of ``op`` once -> dims per tensor."""
    shapes = parse_assignments(assignments, where)
    tensors = op.outputs + op.inputs
    missing = [t.name for t in tensors if t.name not in shapes]
    unknown = [name for name in shapes if name not in {t.name for t in tensors}]
    if missing or unknown:
        raise UsageError(
            f"{where}: name every input and output of {op.name} once "
            f"({', '.join(t.name for t in tensors)}); missing: {', '.join(missing) or '-'}, "
            f"unknown: {', '.join(unknown) or '-'}"
        )
    return {t.name: parse_dims(shapes[t.name], where) for t in tensors}


def shape_label(op: OpDef, shapes: dict[str, tuple[int, ...]]) -> str:
    """The inputs' dims as printed: ``2048x4096 4096``."""
    return " ".join("x".join(map(str, shapes[t.name])) for t in op.inputs)


def shape_specs(package: OpPackage, specs: Sequence[str]) -> Iterator[tuple[OpDef, str, str]]:
    """(op, its ``tensor=DIMS,...`` text, the spec as errors name it) of each ``Op:tensor=DIMS,...``."""
    for spec in specs:
        name, _, assignments = spec.partition(":")
        where = f"--shape {spec!r}"
        yield op_of(package, name, where), assignments, where


def cases_from_shapes(package: OpPackage, specs: Sequence[str], seed: int = 0) -> list[KernelCase]:
    """``OpType:tensor=DIMS,tensor=DIMS`` (every input and output of the op named) -> cases."""
    generator = np.random.default_rng(seed)
    cases = []
    for op, assignments, where in shape_specs(package, specs):
        dims = named_shapes(op, assignments, where)
        datatypes = {t.name: _measured_datatype(t, where) for t in op.outputs + op.inputs}
        check_case_size(dims, datatypes, where)
        made = {name: _tensor_for(datatypes[name], dims[name], generator) for name in dims}
        cases.append(
            KernelCase(
                op.name,
                shape_label(op, dims),
                tuple(made[t.name] for t in op.outputs),
                tuple(made[t.name] for t in op.inputs),
            )
        )
    return cases
