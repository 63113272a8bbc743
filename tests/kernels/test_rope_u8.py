"""The 8-bit Rope on HVX where whole rows fill a vector (kernels/llm/rope_hvx.h, rope_u8_packed): each
table entry's coefficient as one int32 (the centered code times the 14-bit scale ratio), one 16x32
multiply per product, the rounding shift as an arithmetic shift and a rounding pack to int16, y's
zero point added with saturation; bit-exact with the portable 64-bit loop at the edges of that
scheme, on every layout of its groups (decode rows sharing one table row, prefill rows taking k)."""

from __future__ import annotations

import numpy as np
import pytest


from tests.conftest import assert_hexagon_bit_exact
from tests.kernels.rope_cases import LOST_CARRY, S8, STYLES, U8, assert_changes_are_caught, lost_carry_cases, rope_case

#: (x dims, table dims): decode rows of 64, 32, 16, 8 and 2 sharing one table row (a vector holds
#: 2 to 64 of them), three rows of 64 (a tail), rows of 128 (one per vector), one table row per
#: sequence, prefill rows of 64 and 32 taking 2 and 4 table rows a vector, per sequence too.
SHAPES = [
    ((1, 8, 1, 64), (1, 32)),
    ((1, 8, 1, 32), (1, 16)),
    ((1, 8, 1, 16), (1, 8)),
    ((1, 16, 1, 8), (1, 4)),
    ((1, 64, 1, 2), (1, 1)),
    ((1, 3, 1, 64), (1, 32)),
    ((1, 2, 1, 128), (1, 64)),
    ((2, 4, 1, 64), (2, 1, 32)),
    ((1, 2, 4, 64), (4, 32)),
    ((1, 2, 8, 32), (8, 16)),
    ((2, 2, 4, 64), (2, 4, 32)),
]
#: y's scale against the calibrated one: as calibrated, coarser (a longer rounding shift), and finer
#: down to the shortest shift (1: every output saturates, the int16 pack included).
Y_SCALES = (1.0, 40.0, 1 / 50, 1e-6)
#: y's offsets at the ends of the scheme's zero points ([-32512, 32767] as zero points) and past them
#: (the 8-bit HVX row loop's encodings).
Y_OFFSETS = (-32767, 32512, -32768, 32513)


def edge_cases(seed: int = 8) -> list:
    """Each shape and style with 8-bit tables (signed too) at each of y's scales, x's zero point at
    either end of its codes, and y's offsets at and past the scheme's ends."""
    generator = np.random.default_rng(seed)
    cases = []
    for dims, table in SHAPES:
        for style in STYLES:
            for y_coarser in Y_SCALES:
                cases.append(rope_case(generator, dims, table, style, U8, y_coarser=y_coarser, dtype=U8)[0])
            cases.append(rope_case(generator, dims, table, style, S8, dtype=U8)[0])
            for x_offset in (0, -255):
                cases.append(rope_case(generator, dims, table, style, U8, x_offset=x_offset, dtype=U8)[0])
            for y_offset in Y_OFFSETS:
                cases.append(rope_case(generator, dims, table, style, U8, 1e-3, y_offset=y_offset, dtype=U8)[0])
    return cases


@pytest.mark.slow
def test_the_u8_rope_hvx_path_is_bit_exact_at_the_edges_of_its_scheme():
    assert_hexagon_bit_exact("LlmOpPackage", edge_cases())


@pytest.mark.slow
def test_a_changed_step_of_either_rope_hvx_scheme_is_caught(hvx_changed_package):
    """One package copy for both schemes' changes (each scheme's cases run only its own code): y's
    zero point added without saturation, which the 8-bit cases' saturating int16 pack wraps, and
    the 16-bit scheme's lost carry."""
    generator = np.random.default_rng(3)
    cases = [rope_case(generator, (1, 8, 1, 64), (1, 32), style, U8, y_coarser=1e-6, dtype=U8)[0] for style in STYLES]
    wrapping = ("llm/rope_hvx.h", "Q6_Vh_vadd_VhVh_sat(packed, zero_point)", "Q6_Vh_vadd_VhVh(packed, zero_point)")
    package_dir = hvx_changed_package("LlmOpPackage", [wrapping, LOST_CARRY])
    assert_changes_are_caught(package_dir, cases + lost_carry_cases())
