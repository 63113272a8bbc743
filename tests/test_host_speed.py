"""The host speed kernels compute the bits of the ExecuTorch kernels they stand in for.

Real programs (torch.export, to_edge, ``UseHostSpeedKernels``) on the real ExecuTorch runtime.
``mm``, ``bmm``: ExecuTorch's own gemm sums each output over k in order from 0, every product rounded
before it is added; the reference here computes exactly that with torch's elementwise float32
ops. (A process that imported ``executorch.kernels.quantized`` may route ExecuTorch's ``mm`` to
torch's BLAS instead, whose order differs: the speed kernel does not depend on what is loaded.)
``quantize_per_tensor``: against ExecuTorch's own kernel, on ties, NaN and values far out of range.
"""

from __future__ import annotations

import pytest
import torch
from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

import qnn_custom_ops.lowering.host_speed  # noqa: F401  (the qco_host ops)
from qnn_custom_ops.lowering.host_speed import UseHostSpeedKernels
from qnn_custom_ops.runtime import HostRunner
from qnn_custom_ops.runtime.loading import program_operators


class Mm(torch.nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.mm(x, w)


class Bmm(torch.nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.bmm(x, w)


class Quantize(torch.nn.Module):
    def __init__(self, scale: float, zero_point: int, low: int, high: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.args = (scale, zero_point, low, high, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized_decomposed.quantize_per_tensor(x, *self.args)


def program(module: torch.nn.Module, inputs: tuple, speed: bool) -> bytes:
    """``module`` on ExecuTorch's kernels, or (``speed``) on the speed kernels."""
    import executorch.kernels.quantized  # noqa: F401  (quantize's out variant)

    edge = to_edge_transform_and_lower(
        torch.export.export(module, inputs),
        transform_passes=[UseHostSpeedKernels()] if speed else [],
        compile_config=EdgeCompileConfig(_check_ir_validity=False),
    )
    return edge.to_executorch().buffer


def sequential_mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Each output summed over k in order from 0, every product rounded, then added
    (``[..., m, k] @ [..., k, n]``)."""
    out = torch.zeros(*x.shape[:-1], w.shape[-1])
    for i in range(x.shape[-1]):
        out = out + x[..., i : i + 1] * w[..., i : i + 1, :]
    return out


@pytest.mark.parametrize(
    "m, k, n",
    [(32, 128, 128), (32, 128, 1024), (1, 384, 128), (1, 128, 200), (13, 40, 37), (9, 7, 16)],
    ids=["prefill", "lm-head", "decode", "decode-tails", "row-and-column-tails", "short-k"],
)
def test_mm_sums_in_order_without_fma(m, k, n):
    x, w = torch.randn(m, k), torch.randn(k, n)
    pte = program(Mm(), (x, w), speed=True)
    assert "qco_host::mm.out" in program_operators(pte)
    (out,) = HostRunner().run(pte, [(x, w)])[0]
    assert torch.equal(out, sequential_mm(x, w))


@pytest.mark.parametrize(
    "batch, m, k, n", [(2, 64, 32, 96), (2, 1, 32, 160), (3, 5, 7, 20)], ids=["attention", "decode", "tails"]
)
def test_bmm_sums_in_order_without_fma(batch, m, k, n):
    x, w = torch.randn(batch, m, k), torch.randn(batch, k, n)
    pte = program(Bmm(), (x, w), speed=True)
    assert "qco_host::bmm.out" in program_operators(pte)
    (out,) = HostRunner().run(pte, [(x, w)])[0]
    assert torch.equal(out, sequential_mm(x, w))


@pytest.mark.parametrize(
    "low, high, dtype, zero_point",
    [(0, 255, torch.uint8, 128), (-128, 127, torch.int8, 0), (-32767, 32767, torch.int16, 0),
     (0, 65535, torch.int32, 30870)],
    ids=["uint8", "int8", "int16", "uint16-in-int32"],
)
def test_quantize_matches_executorch(low, high, dtype, zero_point):
    scale = 0.0117
    ties = (torch.arange(-600, 600, dtype=torch.float32) + 0.5) * scale  # every .5 rounds to even
    far = torch.tensor([1e6, -1e6, 3e9, -3e9, float("nan"), 0.0, -0.0])
    x = torch.cat([torch.randn(4000) * scale * (high - low) / 4, ties, far])
    module = Quantize(scale, zero_point, low, high, dtype)
    ours, theirs = (HostRunner().run(program(module, (x,), speed), [(x,)])[0][0] for speed in (True, False))
    assert ours.dtype == dtype
    assert torch.equal(ours, theirs)


def test_only_what_the_speed_kernels_compute_the_same_is_moved():
    """A 32-bit quantize (outside float's exact integers) and a float64 mm stay ExecuTorch's."""
    wide = Quantize(0.01, 0, -(2**31), 2**31 - 1, torch.int32)
    x = torch.randn(8, 8)
    assert "quantized_decomposed::quantize_per_tensor.out" in program_operators(program(wide, (x,), speed=True))
    doubles = (x.double(), x.double())
    assert "aten::mm.out" in program_operators(program(Mm(), doubles, speed=True))
