// Kernel of LlmOpPackage::GeluAndMul: the op's math, once, in portable C++17.
// Generated once by qnn-custom-ops; this file is yours: regeneration never overwrites it
// (unless --force). The same source builds for the HTP (src/ops/GeluAndMul.cpp), for
// ExecuTorch on the host and for the C ABI in host/. Hexagon-only fast paths go behind
// #ifdef __hexagon__.
// Gated GELU of a fused gate/up projection (vLLM gelu_and_mul). d = x.shape[-1] / 2; y =
// gelu(x[..., :d], approximate) * x[..., d:]
#pragma once

#include "llm/llm_access.h"
#include "llm/llm_math.h"
#include "llm/gated.h"

namespace LlmOpPackage {

// Arguments: outputs, then inputs, then parameters, in the order of the OpDef.
//   output y: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input x: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   param approximate: optional, rank 0, UINT_32
enum GeluApproximation : uint32_t { kGeluExact = 0, kGeluTanh = 1 };  // the OpDef's enum order

// a * Phi(a), Phi the normal CDF through erfc of |a| / sqrt(2) (no cancellation for a < 0).
inline float gelu_exact(float a) {
  const float tail = 0.5f * vector_erfc((a < 0.0f ? -a : a) * 0.70710678118654752f);
  return a * (a < 0.0f ? tail : 1.0f - tail);
}

// 0.5 a (1 + tanh(u)) = a / (1 + e^{-2u}): +inf stays inf (a - a / (e^{2u} + 1) made it
// inf - inf = NaN) and -inf is -inf / inf = NaN, as eager's -inf * 0; no cancellation for a < 0.
inline float gelu_tanh(float a) {
  const float u = 0.79788456080286536f * (a + 0.044715f * a * a * a);
  return a / (1.0f + vector_exp(-2.0f * u));
}

// y[r, i] = gelu(x[r, i]) * x[r, d + i] over rows r of the last dimension [2d] -> [d].
template <typename Access, float (*Gelu)(float)>
void gelu_and_mul_rows(qco::TensorView& y, const qco::TensorView& x) {
  const auto in = Access::in(x);
  const auto out = Access::out(y);
  const int64_t d = y.dims[y.rank - 1];
  const int64_t rows = d == 0 ? 0 : y.numel() / d;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t gate = 2 * d * r;
    for (int64_t i = 0; i < d; ++i) out(r * d + i, Gelu(in(gate + i)) * in(gate + d + i));
  }
}

// What a call prepares at these encodings (the gate's integers), done once ahead of the calls.
inline void GeluAndMulPrepare(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& approximate) {
  const uint32_t mode = enum_or(approximate, kGeluExact);
  if (gated_shapes_match(y, x) && (mode == kGeluExact || mode == kGeluTanh)) {
    prepare_gated_codes(y, x, mode == kGeluTanh ? gelu_tanh : gelu_exact);
  }
}

inline qco::Status GeluAndMul(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& approximate) {
  if (!gated_shapes_match(y, x)) return qco::Status::kShapeMismatch;
  const uint32_t mode = enum_or(approximate, kGeluExact);
  if (mode != kGeluExact && mode != kGeluTanh) return qco::Status::kInvalidArgument;
  if (run_gated_codes(y, x, mode == kGeluTanh ? gelu_tanh : gelu_exact)) return qco::Status::kOk;
  return dispatch({&y, &x}, [&](auto access) {
    if (mode == kGeluTanh) {
      gelu_and_mul_rows<decltype(access), gelu_tanh>(y, x);
    } else {
      gelu_and_mul_rows<decltype(access), gelu_exact>(y, x);
    }
  });
}

}  // namespace LlmOpPackage
