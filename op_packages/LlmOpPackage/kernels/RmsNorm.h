// Kernel of LlmOpPackage::RmsNorm: the op's math, once, in portable C++17.
// Generated once by qnn-custom-ops; this file is yours: regeneration never overwrites it
// (unless --force). The same source builds for the HTP (src/ops/RmsNorm.cpp), for
// ExecuTorch on the host and for the C ABI in host/. Hexagon-only fast paths go behind
// #ifdef __hexagon__.
// RMS normalisation over the last dimension, scaled by a static weight (Llama, Qwen). y =
// x * rsqrt(mean(x * x, dim=-1) + eps) * weight
#pragma once

#include <vector>

#include "llm_access.h"
#include "llm_fixed.h"

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

// The same on codes (x, y of one unsigned fixed-point dtype, a fixed-point weight): the sum of
// squares of (q - zero point) exact in int64, one float per row (the reciprocal RMS, folded with
// the scales into a fixed-point multiplier), then per element (q - zp_x) * (w - zp_w) times it.
template <typename Code>
void rms_norm_codes(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& weight, float eps) {
  const Code* in = x.as<const Code>();
  Code* out = y.as<Code>();
  const int64_t hidden = x.dims[x.rank - 1];
  const int64_t rows = hidden == 0 ? 0 : x.numel() / hidden;
  std::vector<int32_t> gain(static_cast<size_t>(hidden));
  for (int64_t c = 0; c < hidden; ++c) gain[c] = centered_code(weight, c);
  const float to_output = x.scale * weight.scale * (1.0f / y.scale);
  const int32_t bits = multiplier_bits(x.dtype);
  for (int64_t r = 0; r < rows; ++r) {
    const Code* row = in + r * hidden;
    int64_t squares = 0;
    for (int64_t c = 0; c < hidden; ++c) {
      const int64_t d = row[c] + x.offset;
      squares += d * d;
    }
    const float mean = static_cast<float>(squares) * (x.scale * x.scale) / static_cast<float>(hidden);
    const FixedMultiplier multiplier = fixed_multiplier(to_output / std::sqrt(mean + eps), bits);
    for (int64_t c = 0; c < hidden; ++c) {
      const int64_t product = static_cast<int64_t>(row[c] + x.offset) * gain[c];
      out[r * hidden + c] = static_cast<Code>(saturate_code(apply(multiplier, product), y));
    }
  }
}

inline qco::Status RmsNorm(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& weight,
                           const qco::TensorView& eps) {
  if (x.rank < 1 || !y.same_shape(x) || weight.rank != 1 || weight.dims[0] != x.dims[x.rank - 1]) {
    return qco::Status::kShapeMismatch;
  }
  const float epsilon = param_or(eps, 1e-6f);
  if (is_unsigned_code(x.dtype) && y.dtype == x.dtype && is_fixed_point(weight.dtype)) {
    if (x.dtype == qco::DType::kUFixed8) {
      rms_norm_codes<uint8_t>(y, x, weight, epsilon);
    } else {
      rms_norm_codes<uint16_t>(y, x, weight, epsilon);
    }
    return qco::Status::kOk;
  }
  return dispatch({&y, &x, &weight}, [&](auto access) {
    rms_norm_rows<decltype(access)>(y, x, weight, epsilon);
  });
}

}  // namespace LlmOpPackage
