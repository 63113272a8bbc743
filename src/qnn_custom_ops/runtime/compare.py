"""Compare outputs with golden tensors: the numbers a user reads to trust a kernel."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass(frozen=True)
class Tolerance:
    """An output passes when max abs error <= ``atol`` or SQNR >= ``min_sqnr_db``."""

    atol: float = 1e-4
    min_sqnr_db: float = math.inf


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

    def __str__(self) -> str:
        verdict = "ok" if self.passed else "FAIL"
        detail = self.problem or (f"max abs {self.max_abs:.4g}  mean abs {self.mean_abs:.4g}  "
                                  f"cosine {self.cosine:.6f}  SQNR {self.sqnr_db:.1f} dB")
        return f"output {self.index}: {list(self.shape)} {str(self.dtype).replace('torch.', '')}  {detail}  {verdict}"


def _sqnr_db(golden: torch.Tensor, error: torch.Tensor) -> float:
    noise = float(error.pow(2).mean())
    signal = float(golden.pow(2).mean())
    if noise == 0.0:
        return math.inf
    return 10 * math.log10(signal / noise) if signal > 0 else -math.inf


def compare_output(index: int, output: torch.Tensor, golden: torch.Tensor, tolerance: Tolerance) -> OutputReport:
    shape, dtype = tuple(output.shape), output.dtype
    if tuple(golden.shape) != shape:
        return OutputReport(index, shape, dtype, math.inf, math.inf, 0.0, -math.inf, False,
                            f"shape {list(shape)} but the golden is {list(golden.shape)}")
    got, want = output.detach().double().flatten(), golden.detach().double().flatten()
    error = got - want
    max_abs = float(error.abs().max()) if error.numel() else 0.0
    mean_abs = float(error.abs().mean()) if error.numel() else 0.0
    norms = float(got.norm() * want.norm())
    cosine = float(got @ want) / norms if norms > 0 else float(torch.equal(got, want))
    sqnr = _sqnr_db(want, error)
    passed = max_abs <= tolerance.atol or sqnr >= tolerance.min_sqnr_db
    return OutputReport(index, shape, dtype, max_abs, mean_abs, cosine, sqnr, passed)


def compare_outputs(outputs: Sequence[torch.Tensor], goldens: Sequence[torch.Tensor],
                    tolerance: Tolerance = Tolerance()) -> list[OutputReport]:
    """One report per output; a count mismatch is an error, not a partial pass."""
    if len(outputs) != len(goldens):
        raise ValueError(f"{len(outputs)} output(s) but {len(goldens)} golden tensor(s)")
    return [compare_output(i, o, g, tolerance) for i, (o, g) in enumerate(zip(outputs, goldens))]
