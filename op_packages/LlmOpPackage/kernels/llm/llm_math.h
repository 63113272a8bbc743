// Math of the LlmOpPackage kernels. exp and erfc that vectorize (qco::vector_exp,
// qco::vector_erfc) are shipped with every package in qco/math.h; the kernels here call them
// unqualified.
//
// vector_exp's range, as it computes it: x is clamped to [-87.3, 88.7], so below -87.3 it returns
// e^-87.3 (about 1.2e-38), not 0; and from 88.3762665 on, where the rounded exponent reaches 128,
// 2^128 is +inf, so it returns +inf, nothing saturated. SiLU and the tanh GELU divide by
// 1 + e^(...): past that point a / inf, -0 for a very negative a (eager: within 1e-36 of it), NaN
// for a = -inf (eager: -inf * 0).
#pragma once

#include "qco/math.h"

namespace LlmOpPackage {

using qco::vector_erfc;
using qco::vector_exp;

}  // namespace LlmOpPackage
