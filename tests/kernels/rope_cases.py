"""The Rope kernel cases the 16-bit and 8-bit Rope tests share: encodings as a min-max observer
sets them, a case of codes with its float64 rotation, and the HVX mutation every scheme must catch."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from qnn_custom_ops.runtime import KernelDType, KernelTensor
from qnn_custom_ops.runtime.cost import KernelCase
from qnn_custom_ops.runtime.hexagon import hexagon_check

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
