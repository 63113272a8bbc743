"""Compare outputs with golden tensors: the numbers a user reads to trust a kernel."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import torch

from ..errors import ReportedError
from ..torch_bridge.quantized import Encoding


class CompareError(ReportedError, ValueError):
    """Outputs and goldens (or encodings, or names) that cannot be paired."""


T = TypeVar("T")


@dataclass(frozen=True)
class Tolerance:
    """An output passes when max abs error <= ``atol`` or SQNR >= ``min_sqnr_db``; a quantized
    output passes within ``lsb`` codes of its encoding (one code by default)."""

    atol: float = 1e-4
    min_sqnr_db: float = math.inf
    lsb: float = 1.0


@dataclass(frozen=True)
class OutputReport:
    index: int
    shape: tuple[int, ...]
    dtype: torch.dtype
    max_abs: float
    mean_abs: float
    cosine: float
    sqnr_db: float
    passed: bool
    problem: str = ""  # a shape or dtype mismatch, which no tolerance excuses
    encoding: Encoding | None = None  # the output's quantization, when it has one
    steps: int | None = None  # the largest difference in codes of ``encoding``
    name: str | None = None  # what the output is (``softmax``), when the caller says

    @property
    def scale(self) -> float | None:
        return None if self.encoding is None else self.encoding.scale

    def __str__(self) -> str:
        verdict = "ok" if self.passed else "FAIL"
        plural = "" if self.steps == 1 else "s"
        steps = "" if self.steps is None else f" ({self.steps} step{plural} of {self.scale:.4g})"
        detail = self.problem or (
            f"max abs {self.max_abs:.4g}{steps}  mean abs {self.mean_abs:.4g}  "
            f"cosine {self.cosine:.6f}  SQNR {self.sqnr_db:.1f} dB"
        )
        label = f"output {self.index}" + ("" if self.name is None else f" ({self.name})")
        return f"{label}: {list(self.shape)} {str(self.dtype).replace('torch.', '')}  {detail}  {verdict}"


def _sqnr_db(golden: torch.Tensor, error: torch.Tensor) -> float:
    noise = float(error.pow(2).mean())
    signal = float(golden.pow(2).mean())
    if noise == 0.0:
        return math.inf
    return 10 * math.log10(signal / noise) if signal > 0 else -math.inf


def codes(values: torch.Tensor, encoding: Encoding) -> torch.Tensor:
    """``values`` requantized with ``encoding`` (round half to even, saturate), as float64: two
    outputs one code apart differ by exactly 1 here, whatever float error their dequantization
    carried (a 16-bit step divides float32 values into 1.0001-ish "steps" otherwise)."""
    low, high = encoding.datatype.integer_range
    return (torch.round(values / encoding.scale) - encoding.offset).clamp(low, high)


def _max_code_difference(got: torch.Tensor, want: torch.Tensor, encoding: Encoding) -> int:
    return int((codes(got, encoding) - codes(want, encoding)).abs().max()) if got.numel() else 0


def _unpaired(index: int, shape: tuple[int, ...], dtype: torch.dtype, problem: str) -> OutputReport:
    """The report of an output no tolerance can pair with its golden (shape or dtype differ)."""
    return OutputReport(index, shape, dtype, math.inf, math.inf, 0.0, -math.inf, False, problem)


def compare_output(
    index: int, output: torch.Tensor, golden: torch.Tensor, tolerance: Tolerance, encoding: Encoding | None = None
) -> OutputReport:
    shape, dtype = tuple(output.shape), output.dtype
    if tuple(golden.shape) != shape:
        return _unpaired(index, shape, dtype, f"shape {list(shape)} but the golden is {list(golden.shape)}")
    if golden.dtype != dtype:
        golden_dtype = str(golden.dtype).replace("torch.", "")
        return _unpaired(
            index, shape, dtype, f"dtype {str(dtype).replace('torch.', '')} but the golden is {golden_dtype}"
        )
    got, want = output.detach().double().flatten(), golden.detach().double().flatten()
    error = got - want
    max_abs = float(error.abs().max()) if error.numel() else 0.0
    mean_abs = float(error.abs().mean()) if error.numel() else 0.0
    norms = float(got.norm() * want.norm())
    cosine = float(got @ want) / norms if norms > 0 else float(torch.equal(got, want))
    sqnr = _sqnr_db(want, error)
    steps = None if encoding is None else _max_code_difference(got, want, encoding)
    within_steps = steps is not None and steps <= tolerance.lsb
    passed = max_abs <= tolerance.atol or within_steps or sqnr >= tolerance.min_sqnr_db
    return OutputReport(index, shape, dtype, max_abs, mean_abs, cosine, sqnr, passed, encoding=encoding, steps=steps)


def _one_per_output(outputs: Sequence[torch.Tensor], values: Sequence[T], what: str) -> Sequence[T]:
    """``values``, checked to be one per output: a count mismatch is an error, not a partial pass."""
    if len(values) != len(outputs):
        raise CompareError(f"{len(outputs)} output(s) but {len(values)} {what}(s)")
    return values


def _given_or_none(outputs: Sequence[torch.Tensor], values: Sequence[T] | None, what: str) -> Sequence[T | None]:
    """``values`` one per output, or None for each when not given."""
    return _one_per_output(outputs, [None] * len(outputs) if values is None else list(values), what)


def compare_outputs(
    outputs: Sequence[torch.Tensor],
    goldens: Sequence[torch.Tensor],
    tolerance: Tolerance = Tolerance(),
    encodings: Sequence[Encoding | None] | None = None,
    names: Sequence[str] | None = None,
) -> list[OutputReport]:
    """One report per output.

    ``encodings`` gives each output's quantization (``LoweredProgram.output_encodings``): such
    an output is compared in codes -- both sides requantized with it -- and passes within
    ``tolerance.lsb`` codes; its report shows the steps. ``names`` say what each output is, so
    a reader can tell its figures from another tensor's.
    """
    goldens = _one_per_output(outputs, goldens, "golden tensor")
    encoded = _given_or_none(outputs, encodings, "encoding")
    reports = [compare_output(i, o, g, tolerance, e) for i, (o, g, e) in enumerate(zip(outputs, goldens, encoded))]
    return [replace(r, name=n) for r, n in zip(reports, _given_or_none(outputs, names, "name"))]
