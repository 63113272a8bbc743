// Math of the LlmOpPackage kernels. exp and erfc that vectorize (qco::vector_exp,
// qco::vector_erfc) are shipped with every package in qco/math.h; the kernels here call them
// unqualified.
#pragma once

#include "qco/math.h"

namespace LlmOpPackage {

using qco::vector_erfc;
using qco::vector_exp;

}  // namespace LlmOpPackage
