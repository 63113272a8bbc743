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
from qnn_custom_ops.lowering.host_speed import LayoutOnCodes, UseHostSpeedKernels
from qnn_custom_ops.runtime import HostRunner
from qnn_custom_ops.runtime.loading import program_operators


class Mm(torch.nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.mm(x, w)


class Bmm(torch.nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.bmm(x, w)


class Permute(torch.nn.Module):
    def __init__(self, dims: tuple[int, ...]) -> None:
        super().__init__()
        self.dims = dims

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(self.dims) + 0  # a copy: permute_copy in the edge graph


class Requantized(torch.nn.Module):
    """Codes dequantized, moved (a permute and a view) and quantized again with their encoding,
    as PT2E leaves every layout op between two quantized ops; once with another encoding, and
    once as the program's output."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        encoding = (0.0117, 30870, 0, 65535, torch.int32)
        codes = torch.ops.quantized_decomposed.quantize_per_tensor(x, *encoding)

        def moved() -> torch.Tensor:
            return torch.ops.quantized_decomposed.dequantize_per_tensor(codes, *encoding).permute(0, 2, 1, 3)

        same = torch.ops.quantized_decomposed.quantize_per_tensor(moved().reshape(1, 8, -1), *encoding)
        other = torch.ops.quantized_decomposed.quantize_per_tensor(moved(), 0.02, 30000, 0, 65535, torch.int32)
        kept = torch.ops.quantized_decomposed.quantize_per_tensor(moved().reshape(1, 8, -1), *encoding)
        return same + 1, other, kept


class Quantize(torch.nn.Module):
    def __init__(self, scale: float, zero_point: int, low: int, high: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.args = (scale, zero_point, low, high, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized_decomposed.quantize_per_tensor(x, *self.args)


def program(module: torch.nn.Module, inputs: tuple, speed: bool, passes: tuple = (UseHostSpeedKernels,)) -> bytes:
    """``module`` on ExecuTorch's kernels, or (``speed``) after ``passes``."""
    import executorch.kernels.quantized  # noqa: F401  (quantize's out variant)

    edge = to_edge_transform_and_lower(
        torch.export.export(module, inputs),
        transform_passes=[p() for p in passes] if speed else [],
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


@pytest.mark.parametrize(
    "shape, dims, dtype",
    [((1, 32, 4, 32), (0, 2, 1, 3), torch.float32), ((1, 2, 32, 32), (0, 1, 3, 2), torch.int32),
     ((3, 5, 7), (2, 0, 1), torch.int16), ((6, 4), (1, 0), torch.uint8)],
    ids=["heads", "transpose-last", "rank-3", "bytes"],
)
def test_permute_moves_the_same_elements(shape, dims, dtype):
    x = (torch.randn(shape) * 100).to(dtype)
    pte = program(Permute(dims), (x,), speed=True)
    assert "qco_host::permute_copy.out" in program_operators(pte)
    (out,) = HostRunner().run(pte, [(x,)])[0]
    assert torch.equal(out, x.permute(dims))


def test_layout_between_quantizations_of_one_encoding_runs_on_the_codes():
    x = torch.randn(1, 8, 4, 16)
    moved = program(Requantized(), (x,), speed=True, passes=(LayoutOnCodes,))
    operators = program_operators(moved)
    assert "quantized_decomposed::quantize_per_tensor.out" in operators  # the first and the other encoding's
    unmoved = program(Requantized(), (x,), speed=False)
    quantize = "quantized_decomposed::quantize_per_tensor.out"
    assert [sum(op == quantize for op in ops(pte)) for pte in (moved, unmoved)] == [3, 4]
    ours, theirs = (HostRunner().run(pte, [(x,)])[0] for pte in (moved, unmoved))
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))


def ops(pte: bytes) -> list[str]:
    """The program's operator calls in order (one name per instruction)."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary(pte)
    plan = getattr(program, "program", program).execution_plan[0]
    names = [f"{op.name}.{op.overload}" for op in plan.operators]
    calls = [i.instr_args for chain in plan.chains for i in chain.instructions]
    return [names[call.op_index] for call in calls if hasattr(call, "op_index")]


def test_only_what_the_speed_kernels_compute_the_same_is_moved():
    """A 32-bit quantize (outside float's exact integers) and a float64 mm stay ExecuTorch's."""
    wide = Quantize(0.01, 0, -(2**31), 2**31 - 1, torch.int32)
    x = torch.randn(8, 8)
    assert "quantized_decomposed::quantize_per_tensor.out" in program_operators(program(wide, (x,), speed=True))
    doubles = (x.double(), x.double())
    assert "aten::mm.out" in program_operators(program(Mm(), doubles, speed=True))
