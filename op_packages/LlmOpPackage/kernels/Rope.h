// Kernel of LlmOpPackage::Rope: the op's math, once, in portable C++17.
// Generated once by qnn-custom-ops; this file is yours: regeneration never overwrites it
// (unless --force). The same source builds for the HTP (src/ops/Rope.cpp), for
// ExecuTorch on the host and for the C ABI in host/. Hexagon-only fast paths go behind
// #ifdef __hexagon__.
// Rotary position embedding applied to queries or keys. neox: y = x * [cos, cos] +
// rotate_half(x) * [sin, sin]; gptj: pairs (x[2i], x[2i+1]) rotated by (cos[i], sin[i])
#pragma once

#include "llm_access.h"

namespace LlmOpPackage {

// Arguments: outputs, then inputs, then parameters, in the order of the OpDef.
//   output y: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input x: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input cos: mandatory, rank 2, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input sin: mandatory, rank 2, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   param style: optional, rank 0, UINT_32
enum RopeStyle : uint32_t { kRopeNeox = 0, kRopeGptj = 1 };  // the OpDef's enum order

// Rotates each [head_dim] row of x at sequence position s by angle pairs (cos[s, i], sin[s, i]).
// neox pairs element i with i + head_dim/2; gptj pairs 2i with 2i + 1.
template <typename Access>
void rope_rows(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& cos_table,
               const qco::TensorView& sin_table, RopeStyle style) {
  const auto in = Access::in(x);
  const auto cosine = Access::in(cos_table);
  const auto sine = Access::in(sin_table);
  const auto out = Access::out(y);
  const int64_t seq = x.dims[2];
  const int64_t half = x.dims[3] / 2;
  const int64_t rows = extent(x, 0, 3);
  const int64_t stride = style == kRopeNeox ? half : 1;   // distance between the two elements of a pair
  const int64_t step = style == kRopeNeox ? 1 : 2;        // distance between consecutive pairs
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * 2 * half;
    const int64_t angles = (r % seq) * half;
    for (int64_t i = 0; i < half; ++i) {
      const float c = cosine(angles + i);
      const float s = sine(angles + i);
      const float a = in(base + i * step);
      const float b = in(base + i * step + stride);
      out(base + i * step, a * c - b * s);
      out(base + i * step + stride, b * c + a * s);
    }
  }
}

inline qco::Status Rope(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& cos,
                        const qco::TensorView& sin, const qco::TensorView& style) {
  if (x.rank != 4 || !y.same_shape(x) || x.dims[3] % 2 != 0 || !cos.same_shape(sin) || cos.rank != 2 ||
      cos.dims[0] != x.dims[2] || cos.dims[1] != x.dims[3] / 2) {
    return qco::Status::kShapeMismatch;
  }
  const uint32_t mode = enum_or(style, kRopeNeox);
  if (mode != kRopeNeox && mode != kRopeGptj) return qco::Status::kInvalidArgument;
  return dispatch({&y, &x, &cos, &sin}, [&](auto access) {
    rope_rows<decltype(access)>(y, x, cos, sin, static_cast<RopeStyle>(mode));
  });
}

}  // namespace LlmOpPackage
