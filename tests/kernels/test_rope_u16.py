"""The 16-bit Rope on codes: each table entry's coefficient as one int32 (the scale ratio's 31-bit
multiplier applied to the centered code), a C - b S and b C + a S exactly in 64 bits, one rounding
shift (kernels/llm/rope_codes.h); its HVX path bit-exact with the portable one at the edges of the scheme,
and both within a hair of the best rounding of the exact rotation."""

from __future__ import annotations


import numpy as np
import pytest

from qnn_custom_ops.runtime import KernelLibrary, build_host_kernels
from qnn_custom_ops.runtime.cost import KernelCase

from tests.conftest import OP_PACKAGES, assert_hexagon_bit_exact
from tests.kernels.rope_cases import STYLES, U8, U16, rope_case

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
    assert_hexagon_bit_exact("LlmOpPackage", edge_cases())


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
