// Kernel of LlmOpPackage::SiluAndMul: the op's math, once, in portable C++17.
// Generated once by qnn-custom-ops; this file is yours: regeneration never overwrites it
// (unless --force). The same source builds for the HTP (src/ops/SiluAndMul.cpp), for
// ExecuTorch on the host and for the C ABI in host/. Hexagon-only fast paths go behind
// #ifdef __hexagon__.
// Gated SiLU of a fused gate/up projection (vLLM silu_and_mul). d = x.shape[-1] / 2; y =
// silu(x[..., :d]) * x[..., d:]
#pragma once

#include "llm/llm_access.h"
#include "llm/llm_math.h"
#include "llm/gated.h"

namespace LlmOpPackage {

// Arguments: outputs, then inputs, then parameters, in the order of the OpDef.
//   output y: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input x: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
inline float silu(float a) { return a / (1.0f + vector_exp(-a)); }

// y[r, i] = silu(x[r, i]) * x[r, d + i] over rows r of the last dimension [2d] -> [d].
template <typename Access>
void silu_and_mul_rows(qco::TensorView& y, const qco::TensorView& x) {
  const auto in = Access::in(x);
  const auto out = Access::out(y);
  const int64_t d = y.dims[y.rank - 1];
  const int64_t rows = d == 0 ? 0 : y.numel() / d;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t gate = 2 * d * r;
    for (int64_t i = 0; i < d; ++i) {
      out(r * d + i, silu(in(gate + i)) * in(gate + d + i));
    }
  }
}

// What a call prepares at these encodings (the gate's integers), done once ahead of the calls.
inline void SiluAndMulPrepare(qco::TensorView& y, const qco::TensorView& x) {
  if (gated_shapes_match(y, x)) prepare_gated_codes(y, x, silu);
}

inline qco::Status SiluAndMul(qco::TensorView& y, const qco::TensorView& x) {
  if (!gated_shapes_match(y, x)) return qco::Status::kShapeMismatch;
  if (run_gated_codes(y, x, silu)) return qco::Status::kOk;
  return dispatch({&y, &x}, [&](auto access) { silu_and_mul_rows<decltype(access)>(y, x); });
}

}  // namespace LlmOpPackage
