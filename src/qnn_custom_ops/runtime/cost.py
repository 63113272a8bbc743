"""What a kernel costs on this machine: seconds per call and bytes moved (FlexFlow's
``measure_operator_cost``), and the copy bandwidth that bounds a memory-bound kernel, measured
in the same run. Shared by ``qnn-custom-ops cost`` and ``benchmarks/bench_llm_ops.py``."""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

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

    @property
    def nbytes(self) -> int:
        """``bytes_moved`` if given, else every input read once and every output written once."""
        if self.bytes_moved is not None:
            return self.bytes_moved
        return sum(t.array.nbytes for t in self.outputs + self.inputs)


def pin_to_one_core() -> int:
    """Pin this process (and the threads it starts) to one core; returns it. Ratios measured
    side by side are then not skewed by one side using more cores."""
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    return core


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


def measure(library: KernelLibrary, cases: Sequence[KernelCase], min_seconds: float = 0.2) -> list[Cost]:
    """Seconds per call of each case's kernel through the C ABI (views built once)."""
    costs = []
    for case in cases:
        call = library.prepare(case.op, case.outputs, case.inputs, case.params)
        costs.append(Cost(case.op, case.label, seconds_per_call(call, min_seconds), case.nbytes))
    return costs
