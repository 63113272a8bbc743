// Kernel of LlmOpPackage::RmsNorm: the op's math, once, in portable C++17.
// Generated once by qnn-custom-ops; this file is yours: regeneration never overwrites it
// (unless --force). The same source builds for the HTP (src/ops/RmsNorm.cpp), for
// ExecuTorch on the host and for the C ABI in host/. Hexagon-only fast paths go behind
// #ifdef __hexagon__.
// RMS normalisation over the last dimension, scaled by a static weight (Llama, Qwen). y =
// x * rsqrt(mean(x * x, dim=-1) + eps) * weight
#pragma once

#include "llm_access.h"

namespace LlmOpPackage {

// Arguments: outputs, then inputs, then parameters, in the order of the OpDef.
//   output y: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input x: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input weight: mandatory, rank 1, FLOAT_32, FLOAT_16, SFIXED_POINT_8, UFIXED_POINT_8, SFIXED_POINT_16
//   param eps: optional, rank 0, FLOAT_32
// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight, for each row r of the last dimension.
// The sum of squares runs in 8 independent float lanes (vectorizes without -ffast-math).
template <typename Access>
void rms_norm_rows(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& weight, float eps) {
  const auto in = Access::in(x);
  const auto gain = Access::in(weight);
  const auto out = Access::out(y);
  const int64_t hidden = x.dims[x.rank - 1];
  const int64_t rows = hidden == 0 ? 0 : x.numel() / hidden;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * hidden;
    float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t c = 0;
    for (; c + 8 <= hidden; c += 8) {
      for (int k = 0; k < 8; ++k) {
        const float v = in(base + c + k);
        lanes[k] += v * v;
      }
    }
    float sum = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
    for (; c < hidden; ++c) sum += in(base + c) * in(base + c);
    const float inv_rms = 1.0f / std::sqrt(sum / static_cast<float>(hidden) + eps);
    for (c = 0; c < hidden; ++c) out(base + c, in(base + c) * inv_rms * gain(c));
  }
}

inline qco::Status RmsNorm(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& weight,
                           const qco::TensorView& eps) {
  if (x.rank < 1 || !y.same_shape(x) || weight.rank != 1 || weight.dims[0] != x.dims[x.rank - 1]) {
    return qco::Status::kShapeMismatch;
  }
  const float epsilon = param_or(eps, 1e-6f);
  return dispatch({&y, &x, &weight}, [&](auto access) {
    rms_norm_rows<decltype(access)>(y, x, weight, epsilon);
  });
}

}  // namespace LlmOpPackage
