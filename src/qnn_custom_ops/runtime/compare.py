"""Compare outputs with golden tensors: the numbers a user reads to trust a kernel."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from ..errors import ReportedError


class CompareError(ReportedError, ValueError):
    """Outputs and goldens (or scales) that cannot be paired."""


@dataclass(frozen=True)
class Tolerance:
    """An output passes when max abs error <= ``atol`` or SQNR >= ``min_sqnr_db``; an output
    with a quantization scale passes within ``lsb`` steps of it (one step by default)."""

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
    scale: float | None = None  # the output's quantization step, when it has one

    @property
    def steps(self) -> float | None:
        """The max abs error in quantization steps of the output's scale."""
        return None if self.scale is None else self.max_abs / self.scale

    def __str__(self) -> str:
        verdict = "ok" if self.passed else "FAIL"
        steps = "" if self.steps is None else f" ({self.steps:.2f} steps of {self.scale:.4g})"
        detail = self.problem or (f"max abs {self.max_abs:.4g}{steps}  mean abs {self.mean_abs:.4g}  "
                                  f"cosine {self.cosine:.6f}  SQNR {self.sqnr_db:.1f} dB")
        return f"output {self.index}: {list(self.shape)} {str(self.dtype).replace('torch.', '')}  {detail}  {verdict}"


_FLOAT32_SLACK = 1e-5


def _sqnr_db(golden: torch.Tensor, error: torch.Tensor) -> float:
    noise = float(error.pow(2).mean())
    signal = float(golden.pow(2).mean())
    if noise == 0.0:
        return math.inf
    return 10 * math.log10(signal / noise) if signal > 0 else -math.inf


def compare_output(index: int, output: torch.Tensor, golden: torch.Tensor, tolerance: Tolerance,
                   scale: float | None = None) -> OutputReport:
    shape, dtype = tuple(output.shape), output.dtype
    if tuple(golden.shape) != shape:
        return OutputReport(index, shape, dtype, math.inf, math.inf, 0.0, -math.inf, False,
                            f"shape {list(shape)} but the golden is {list(golden.shape)}")
    if golden.dtype != dtype:
        return OutputReport(index, shape, dtype, math.inf, math.inf, 0.0, -math.inf, False,
                            f"dtype {str(dtype).replace('torch.', '')} but the golden is "
                            f"{str(golden.dtype).replace('torch.', '')}")
    got, want = output.detach().double().flatten(), golden.detach().double().flatten()
    error = got - want
    max_abs = float(error.abs().max()) if error.numel() else 0.0
    mean_abs = float(error.abs().mean()) if error.numel() else 0.0
    norms = float(got.norm() * want.norm())
    cosine = float(got @ want) / norms if norms > 0 else float(torch.equal(got, want))
    sqnr = _sqnr_db(want, error)
    # float32 outputs: one step computed in float32 may differ from the scale by an ulp
    within_steps = scale is not None and max_abs <= tolerance.lsb * scale * (1 + _FLOAT32_SLACK)
    passed = max_abs <= tolerance.atol or within_steps or sqnr >= tolerance.min_sqnr_db
    return OutputReport(index, shape, dtype, max_abs, mean_abs, cosine, sqnr, passed, scale=scale)


def compare_outputs(outputs: Sequence[torch.Tensor], goldens: Sequence[torch.Tensor],
                    tolerance: Tolerance = Tolerance(),
                    scales: Sequence[float | None] | None = None) -> list[OutputReport]:
    """One report per output; a count mismatch is an error, not a partial pass.

    ``scales`` gives each output's quantization step (``LoweredProgram.output_scales``):
    such an output passes within ``tolerance.lsb`` steps, and its report shows the steps.
    """
    if len(outputs) != len(goldens):
        raise CompareError(f"{len(outputs)} output(s) but {len(goldens)} golden tensor(s)")
    scales = list(scales) if scales is not None else [None] * len(outputs)
    if len(scales) != len(outputs):
        raise CompareError(f"{len(outputs)} output(s) but {len(scales)} scale(s)")
    return [compare_output(i, o, g, tolerance, s) for i, (o, g, s) in enumerate(zip(outputs, goldens, scales))]
