// Kernel of LlmOpPackage::Rope: the op's math, once, in portable C++17.
// Generated once by qnn-custom-ops; this file is yours: regeneration never overwrites it
// (unless --force). The same source builds for the HTP (src/ops/Rope.cpp), for
// ExecuTorch on the host and for the C ABI in host/. Hexagon-only fast paths go behind
// #ifdef __hexagon__.
// Rotary position embedding applied to queries or keys. neox: y = x * [cos, cos] +
// rotate_half(x) * [sin, sin]; gptj: pairs (x[2i], x[2i+1]) rotated by (cos[i], sin[i])
#pragma once

#include <cmath>
#include <vector>

#include "llm_access.h"
#include "llm_fixed.h"

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

// The same on codes (x, y of one unsigned fixed-point dtype, fixed-point cos and sin): each
// output is (d_a d_c k_c - d_b d_s k_s) >> shift, rounded, with d the codes minus their zero points
// and k_c, k_s the scale ratios x.scale cos.scale / y.scale and x.scale sin.scale / y.scale as
// integers of at most 28 bits over one shift (int64 sums: 2^32 * 2^28 * 2 < 2^63).
struct RopeScale {
  int64_t cosine;
  int64_t sine;
  int32_t shift;
};

inline int64_t scaled_ratio(float ratio, int32_t shift) {
  const float scaled = std::ldexp(ratio, shift);
  const float limit = 268435456.0f;  // 2^28
  return static_cast<int64_t>(std::nearbyint(scaled < limit ? scaled : limit));
}

inline RopeScale rope_scale(const qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& cos_table,
                            const qco::TensorView& sin_table) {
  const float ratio = x.scale * (1.0f / y.scale);
  const float cosine = cos_table.scale * ratio, sine = sin_table.scale * ratio;
  int exponent = 0;
  std::frexp(cosine > sine ? cosine : sine, &exponent);  // both below 2^exponent
  int32_t shift = 28 - exponent;
  shift = shift < 1 ? 1 : (shift > 62 ? 62 : shift);
  return {scaled_ratio(cosine, shift), scaled_ratio(sine, shift), shift};
}

// Every code of a table minus its zero point.
inline std::vector<int32_t> centered_codes(const qco::TensorView& table) {
  std::vector<int32_t> centered(static_cast<size_t>(table.numel()));
  for (int64_t i = 0; i < table.numel(); ++i) centered[i] = centered_code(table, i);
  return centered;
}

template <typename Code>
void rope_codes(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& cos_table,
                const qco::TensorView& sin_table, RopeStyle style) {
  const Code* in = x.as<const Code>();
  Code* out = y.as<Code>();
  const std::vector<int32_t> cosine = centered_codes(cos_table), sine = centered_codes(sin_table);
  const RopeScale scale = rope_scale(y, x, cos_table, sin_table);
  const FixedMultiplier shift{1, scale.shift};
  const int64_t seq = x.dims[2], half = x.dims[3] / 2, rows = extent(x, 0, 3);
  const int64_t stride = style == kRopeNeox ? half : 1;
  const int64_t step = style == kRopeNeox ? 1 : 2;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * 2 * half, angles = (r % seq) * half;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t c = cosine[angles + i] * scale.cosine, s = sine[angles + i] * scale.sine;
      const int64_t a = in[base + i * step] + x.offset, b = in[base + i * step + stride] + x.offset;
      out[base + i * step] = static_cast<Code>(saturate_code(apply(shift, a * c - b * s), y));
      out[base + i * step + stride] = static_cast<Code>(saturate_code(apply(shift, b * c + a * s), y));
    }
  }
}

// Runs the integer branch when it applies; false otherwise.
inline bool run_rope_codes(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& cos,
                           const qco::TensorView& sin, RopeStyle style) {
  if (!is_unsigned_code(x.dtype) || y.dtype != x.dtype || !is_fixed_point(cos.dtype) || !is_fixed_point(sin.dtype)) {
    return false;
  }
  if (x.dtype == qco::DType::kUFixed8) {
    rope_codes<uint8_t>(y, x, cos, sin, style);
  } else {
    rope_codes<uint16_t>(y, x, cos, sin, style);
  }
  return true;
}

inline qco::Status Rope(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& cos,
                        const qco::TensorView& sin, const qco::TensorView& style) {
  if (x.rank != 4 || !y.same_shape(x) || x.dims[3] % 2 != 0 || !cos.same_shape(sin) || cos.rank != 2 ||
      cos.dims[0] != x.dims[2] || cos.dims[1] != x.dims[3] / 2) {
    return qco::Status::kShapeMismatch;
  }
  const uint32_t mode = enum_or(style, kRopeNeox);
  if (mode != kRopeNeox && mode != kRopeGptj) return qco::Status::kInvalidArgument;
  if (run_rope_codes(y, x, cos, sin, static_cast<RopeStyle>(mode))) return qco::Status::kOk;
  return dispatch({&y, &x, &cos, &sin}, [&](auto access) {
    rope_rows<decltype(access)>(y, x, cos, sin, static_cast<RopeStyle>(mode));
  });
}

}  // namespace LlmOpPackage
