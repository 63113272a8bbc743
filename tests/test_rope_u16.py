"""The 16-bit Rope on codes: each table entry's coefficient as one int32 (the scale ratio's 31-bit
multiplier applied to the centered code), a C - b S and b C + a S exactly in 64 bits, one rounding
shift (kernels/llm/rope_codes.h); its HVX path bit-exact with the portable one at the edges of the scheme,
and both within a hair of the best rounding of the exact rotation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qnn_custom_ops.runtime import KernelDType, KernelLibrary, KernelTensor, build_host_kernels
from qnn_custom_ops.runtime.cost import KernelCase
from qnn_custom_ops.runtime.hexagon import hexagon_check

from .conftest import OP_PACKAGES

U8, U16, U32, S8 = KernelDType.UFixed8, KernelDType.UFixed16, KernelDType.UInt32, KernelDType.SFixed8
STYLES = {"neox": 0, "gptj": 1}
LOW, TOP = {U8: 0, U16: 0, S8: -128}, {U8: 255, U16: 65535, S8: 127}
NUMPY = {U8: np.uint8, U16: np.uint16, S8: np.int8}


def encoding(real: np.ndarray, dtype: KernelDType) -> tuple[float, int]:
    """(scale, QNN offset) over [min, max] with zero inside, as a min-max observer sets them."""
    low, high = min(float(real.min()), 0.0), max(float(real.max()), 0.0)
    scale = (high - low) / (TOP[dtype] - LOW[dtype])
    return scale, -LOW[dtype] - round(-low / scale)


def quantized(real: np.ndarray, dtype: KernelDType, scale: float, offset: int) -> KernelTensor:
    codes = np.clip(np.rint(real / scale) - offset, LOW[dtype], TOP[dtype]).astype(NUMPY[dtype])
    return KernelTensor(codes, dtype, scale, offset)


def dequantized(tensor: KernelTensor) -> np.ndarray:
    return tensor.scale * (tensor.array.astype(np.float64) + tensor.offset)


def rotated(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, style: str) -> np.ndarray:
    """The rotation of the first 2 half elements of each row (the rest pass through), in float64."""
    half = cos.shape[-1]
    if cos.ndim == 3:  # [batch, seq, half]: one table per sequence
        cos, sin = cos[:, None], sin[:, None]
    y = x.copy()
    first, second = (
        (slice(0, half), slice(half, 2 * half)) if style == "neox" else (slice(0, 2 * half, 2), slice(1, 2 * half, 2))
    )
    a, b = x[..., first], x[..., second]
    y[..., first], y[..., second] = a * cos - b * sin, b * cos + a * sin
    return y


def rope_case(
    generator: np.random.Generator,
    dims: tuple[int, ...],
    table: tuple[int, ...],
    style: str,
    table_dtype: KernelDType,
    x_spread: float = 3.0,
    y_coarser: float = 1.0,
    x_offset: int | None = None,
    dtype: KernelDType = U16,
    y_offset: int | None = None,
) -> tuple[KernelCase, np.ndarray]:
    """A Rope case on `dtype` codes in calibrated encodings (y's scale times y_coarser, its offset
    then mid-range unless given; x's offset forced if given), and the exact rotation of the reals
    its codes stand for."""
    x_real = generator.standard_normal(dims) * x_spread
    theta = generator.uniform(0, 2 * np.pi, table)
    scale, offset = encoding(x_real, dtype)
    x = quantized(x_real, dtype, scale, offset if x_offset is None else x_offset)
    cos, sin = (quantized(t, table_dtype, *encoding(t, table_dtype)) for t in (np.cos(theta), np.sin(theta)))
    exact = rotated(dequantized(x), dequantized(cos), dequantized(sin), style)
    y_scale, calibrated = encoding(exact, dtype)
    if y_offset is None:
        y_offset = calibrated if y_coarser == 1.0 else -(TOP[dtype] + 1) // 2
    out = KernelTensor.empty(dims, dtype, y_scale * y_coarser, y_offset)
    label = f"{style} {'x'.join(map(str, dims))} tables {'x'.join(map(str, table))} {table_dtype.name}"
    case = KernelCase("Rope", label, (out,), (x, cos, sin), (KernelTensor(np.array(STYLES[style], np.uint32), U32),))
    return case, exact


#: (x dims, table dims): halves of 32, 33 (a tail), 65 and 130 (a whole HVX step and a tail),
#: one table per sequence, partial rotary (the rest of each row passes through), one pair.
SHAPES = [
    ((1, 2, 5, 64), (5, 32)),
    ((1, 3, 2, 66), (2, 33)),
    ((2, 2, 3, 130), (2, 3, 65)),
    ((1, 2, 3, 260), (3, 130)),
    ((2, 2, 3, 80), (2, 3, 24)),
    ((1, 1, 1, 2), (1, 1)),
]


def edge_cases() -> list[KernelCase]:
    """Each shape and style with 16-bit and 8-bit tables; y's scale as calibrated (the rounding
    shift from both words of the products) and 40 times coarser (from the upper words alone);
    x's zero point at either end of the codes, and past them (the 64-bit loop's encodings)."""
    generator = np.random.default_rng(16)
    cases = []
    for dims, table in SHAPES:
        for style in STYLES:
            for table_dtype in (U16, U8):
                cases.append(rope_case(generator, dims, table, style, table_dtype)[0])
            cases.append(rope_case(generator, dims, table, style, U16, y_coarser=40.0)[0])
            for x_offset in (0, -65535, 3):
                cases.append(rope_case(generator, dims, table, style, U16, x_offset=x_offset)[0])
    return cases


@pytest.mark.slow
def test_the_u16_rope_hvx_path_is_bit_exact_at_the_edges_of_its_scheme():
    results = hexagon_check(OP_PACKAGES / "LlmOpPackage", edge_cases())
    failed = [str(r) for r in results if not r.passed]
    assert not failed, "\n".join(failed)


def assert_changes_are_caught(package_dir: Path, cases: list[KernelCase]):
    """The changed copy of LlmOpPackage (the ``hvx_changed_package`` fixture's) fails every case."""
    results = hexagon_check(package_dir, cases)
    assert all("MISMATCH output 0 index " in str(r) for r in results), [str(r) for r in results]


#: A carry of the 64-bit sums lost (qco/hvx.h's add_wide): what the 16-bit scheme's cases must catch.
LOST_CARRY = (
    "qco/hvx.h",
    "Q6_Vw_condacc_QVwVw(carry, high, Q6_V_vsplat_R(1))",
    "Q6_Vw_condacc_QVwVw(carry, high, Q6_V_vsplat_R(0))",
)


def lost_carry_cases() -> list[KernelCase]:
    generator = np.random.default_rng(3)
    return [rope_case(generator, (1, 2, 5, 64), (5, 32), style, U16)[0] for style in STYLES]


@pytest.mark.slow
def test_u16_rope_outputs_are_within_a_hundredth_of_a_step_of_the_best_rounding():
    """60 calibrated cases (x's spread from 0.1 to 30, both styles, 16- and 8-bit tables, y's scale
    as calibrated or 20 times coarser): measured 0.0014 step beyond the rounding, as the 64-bit
    loop the scheme replaced."""
    kernels = KernelLibrary(build_host_kernels(OP_PACKAGES / "LlmOpPackage"), "LlmOpPackage")
    generator = np.random.default_rng(0)
    worst = 0.0
    for trial in range(60):
        half = int(generator.integers(1, 70))
        style = ("neox", "gptj")[trial % 2]
        case, exact = rope_case(
            generator,
            (1, 2, 5, 2 * half),
            (5, half),
            style,
            (U16, U8)[trial // 2 % 2],
            x_spread=float(10 ** generator.uniform(-1, 1.5)),
            y_coarser=20.0 if trial % 3 == 0 else 1.0,
        )
        kernels.run(case.op, list(case.outputs), list(case.inputs), list(case.params))
        out = case.outputs[0]
        z = exact / out.scale - out.offset
        worst = max(worst, float((np.abs(out.array.astype(np.float64) - np.clip(z, 0, 65535)) - 0.5).max()))
    assert worst < 0.01, worst
