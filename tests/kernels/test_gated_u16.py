"""The 16-bit gated activations (SiluAndMul, GeluAndMul none/tanh) on codes: the integer scheme of
kernels/llm/gated_codes.h (g from a table of 64 segments of degree-5 polynomials in block floating
point, the exact product n |u| of the centered codes, one 64-bit product and rounding shift)
against the exact act(v) b, and its HVX path (kernels/llm/gated_hvx.h) bit-exact with the portable
one at the edges of the scheme."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import qnn_custom_ops as qco
from qnn_custom_ops.runtime import KernelDType, KernelLibrary, KernelTensor, build_host_kernels
from qnn_custom_ops.runtime.cost import KernelCase
from qnn_custom_ops.runtime.hexagon import hexagon_check

from tests.conftest import OP_PACKAGES, assert_hexagon_bit_exact

U16, U32 = KernelDType.UFixed16, KernelDType.UInt32
#: act name: (QNN op, params)
ACTIVATIONS = {
    "silu": ("SiluAndMul", ()),
    "gelu": ("GeluAndMul", (KernelTensor(np.array(0, np.uint32), U32),)),
    "gelu tanh": ("GeluAndMul", (KernelTensor(np.array(1, np.uint32), U32),)),
}


def exact_act(name: str, v: torch.Tensor) -> torch.Tensor:
    """act in float64."""
    if name == "silu":
        return v / (1 + torch.exp(-v))
    if name == "gelu":
        return 0.5 * v * (1 + torch.erf(v / 2**0.5))
    return 0.5 * v * (1 + torch.tanh(0.7978845608028654 * (v + 0.044715 * v**3)))


def gate_codes(generator: np.random.Generator, rows: int, d: int, zero_point: int) -> np.ndarray:
    """[rows, 2d] uint16 codes over the whole range, a fifth of them within 400 of the zero point
    (small |c|, |u|: the first segments, products near the rounding)."""
    codes = generator.integers(0, 65536, size=(rows, 2 * d))
    near = generator.random(codes.shape) < 0.2
    codes[near] = np.clip(zero_point + generator.integers(-400, 400, size=int(near.sum())), 0, 65535)
    return codes.astype(np.uint16)


def gated_case(name: str, codes: np.ndarray, x: tuple[float, int], y: tuple[float, int], label: str) -> KernelCase:
    op, params = ACTIVATIONS[name]
    out = KernelTensor.empty((codes.shape[0], codes.shape[1] // 2), U16, *y)
    return KernelCase(op, f"{name} {label}", (out,), (KernelTensor(codes, U16, *x),), params)


#: (x scale, x zero point, y scale, y zero point, what it reaches): x.scale^2 / y.scale from 2^-30
#: to 12.5 (rounding shift 60 to 26: the 64-bit shift from the upper word alone and from both),
#: segments of 1, 2, 4 codes (fitted at the codes), 8 and 2048 (at Chebyshev nodes; SiLU's counts,
#: GELU's reach is shorter), zero points at either end (n |u| >= 2^31), and encodings
#: outside the scheme (a zero point that is no code, a ratio of 2^5: the float path, still bit-exact).
EDGE_ENCODINGS = [
    (3e-4, 30000, 3e-4 * 3e-4 / 1e-4, 20000, "calibrated-like"),
    (2e-2, 0, 2e-2 * 2e-2 / 0.5, 65535, "zero points at the ends, ratio 0.5"),
    (2e-2, 65535, 2e-2 * 2e-2 / 0.5, 0, "zero points at the other ends"),
    (5e-2, 32768, 5e-2 * 5e-2 / 12.5, 32768, "ratio 12.5: shift 26"),
    (1e-4, 12345, 1e-8 * 2.0**30, 40000, "ratio 2^-30: shift 60"),
    (0.5, 32768, 0.5 * 0.5 / 0.5, 30000, "one code per segment"),
    (0.2, 32768, 0.2 * 0.2 / 0.5, 30000, "two codes per segment"),
    (0.1, 32768, 0.1 * 0.1 / 0.5, 30000, "four codes per segment"),
    (0.07, 32768, 0.07 * 0.07 / 0.5, 30000, "eight codes per segment"),
    (1e-5, 0, 1e-5 * 1e-5 / 1e-4, 30000, "2048 codes per segment"),
    (1e-3, -5, 1e-3 * 1e-3 / 1e-4, 30000, "zero point below the codes: float path"),
    (5e-2, 32768, 5e-2 * 5e-2 / 32.0, 30000, "ratio 32: float path"),
]


def edge_cases(shapes=((3, 200), (2, 769), (2, 64), (1, 1))) -> list[KernelCase]:
    """Every edge encoding, activation and shape (200 = a whole step of 128 and a tail of 72 in
    a second vector; 769 odd: rows off vector boundaries; 64 exactly one vector; 1)."""
    generator = np.random.default_rng(21)
    cases = []
    for sx, zx, sy, zy, what in EDGE_ENCODINGS:
        for rows, d in shapes:
            codes = gate_codes(generator, rows, d, zx)
            cases += [gated_case(name, codes, (sx, -zx), (sy, -zy), f"{rows}x{d} {what}") for name in ACTIVATIONS]
    return cases


@pytest.mark.slow
def test_the_u16_hvx_path_is_bit_exact_at_the_edges_of_its_scheme():
    assert_hexagon_bit_exact("LlmOpPackage", edge_cases())


#: Changes to the HVX code the 16-bit path runs, each caught by the edge cases: the rounding shift
#: off by one, the upper word's cap (rounding shifts under 32) too low, and the upper words of the
#: products of n |u| >= 2^31 left uncorrected. (file under kernels/, original, changed)
MUTATIONS = {
    "rounding shift": ("llm/gated_hvx.h", "Q6_V_vsplat_R(shift - 1)", "Q6_V_vsplat_R(shift)"),
    "cap of the upper word": ("llm/gated_hvx.h", "Q6_V_vsplat_R(1 << 16)", "Q6_V_vsplat_R(1 << 8)"),
    "unsigned products": (
        "qco/hvx.h",
        "Q6_Vw_condacc_QVwVw(Q6_Q_vcmp_gt_VwVw(Q6_V_vzero(), b), Q6_V_hi_W(signed_product), a)",
        "Q6_V_hi_W(signed_product)",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_a_changed_u16_hvx_helper_is_caught(mutation, hvx_changed_package):
    package_dir = hvx_changed_package("LlmOpPackage", [MUTATIONS[mutation]])
    cases = edge_cases(shapes=((3, 200),))
    results = {r.label: r for r in hexagon_check(package_dir, cases)}
    assert any("MISMATCH output 0 index " in str(r) for r in results.values())
    assert all(r.passed for label, r in results.items() if "float path" in label)  # no HVX there


@pytest.fixture(scope="module")
def kernels():
    return KernelLibrary(build_host_kernels(OP_PACKAGES / "LlmOpPackage"), "LlmOpPackage")


def excess_over_rounding(
    kernels: KernelLibrary, name: str, codes: np.ndarray, x: tuple[float, int], y: tuple[float, int]
) -> float:
    """max |y - z| - 1/2 over the elements, z the exact act(v) b in y's codes (saturated): how far
    the kernel is from the best rounding of the exact value."""
    case = gated_case(name, codes, x, y, "")
    kernels.run(case.op, list(case.outputs), list(case.inputs), list(case.params))
    real = x[0] * (torch.from_numpy(codes.astype(np.float64)) + x[1])
    d = codes.shape[1] // 2
    z = exact_act(name, real[:, :d]) * real[:, d:] / y[0] - y[1]
    got = torch.from_numpy(case.outputs[0].array.astype(np.float64))
    return float(((got - z.clamp(0, 65535)).abs() - 0.5).max())


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_u16_outputs_are_within_a_twentieth_of_a_step_of_the_best_rounding(kernels, name):
    """Over 150 encodings (x.scale from 3e-6 to 1, zero points anywhere and at the ends,
    x.scale^2 / y.scale from 1e-9 to 3, as the scheme takes them): measured 0.0151 step at most
    (GELU; SiLU 0.0084, the tanh GELU 0.0055; the 256 cubic segments before: 0.0072; the float
    per-code table before them: 0.43)."""
    generator = np.random.default_rng(1)
    worst = 0.0
    for _ in range(150):
        sx = float(10 ** generator.uniform(-5.5, 0))
        zx = int(generator.choice([0, 65535, int(generator.integers(0, 65536)), 32768]))
        sy = float(sx * sx / 10 ** generator.uniform(-9, 0.5))
        zy = int(generator.integers(0, 65536))
        codes = gate_codes(generator, 2, 1000, zx)
        worst = max(worst, excess_over_rounding(kernels, name, codes, (sx, -zx), (sy, -zy)))
    assert worst < 0.05, worst


def test_the_edge_encodings_are_those_the_package_declares():
    """The cases above use the ops and datatypes the OpDef declares (UFIXED_POINT_16 in and out)."""
    package = qco.load_package(OP_PACKAGES / "LlmOpPackage/config/LlmOpPackage.xml")
    for op, _ in ACTIVATIONS.values():
        declared = {d.short_name for d in package.ops[op].datatypes(package.ops[op].outputs[0], "HTP")}
        assert "UFIXED_POINT_16" in declared
