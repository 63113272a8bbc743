// The portable half of LlmOpPackage::Rope (kernels/Rope.h): where each row finds its angles, the
// float rows, and the integer scheme on codes (8-bit and 16-bit) that the HVX path
// (rope_hvx.h) computes bit for bit.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "element_copy.h"
#include "llm_access.h"
#include "llm_fixed.h"

namespace LlmOpPackage {

enum RopeStyle : uint32_t { kRopeNeox = 0, kRopeGptj = 1 };  // the OpDef's enum order

// Where each row of x finds its angles. The tables are [seq, rotary/2], shared by every
// sequence, or [batch, seq, rotary/2], one per sequence (continuous batching: each sequence at
// its own positions). The first `rotary` elements of a row rotate; the rest pass through
// (partial rotary). neox pairs element i with i + rotary/2; gptj pairs 2i with 2i + 1.
struct RopeGeometry {
  int64_t rows;      // batch * heads * seq rows of head_dim elements
  int64_t head_dim;
  int64_t half;      // rotary / 2: the angles of a row, and the pairs it rotates
  int64_t seq;
  int64_t heads;
  bool per_sequence;
  RopeStyle style;

  // The first angle of row r (batch b, head h, position s) in the tables.
  int64_t angles(int64_t r) const {
    const int64_t s = r % seq;
    return (per_sequence ? r / (heads * seq) * seq + s : s) * half;
  }
  int64_t table_rows() const { return per_sequence ? rows / heads : seq; }
  int64_t stride() const { return style == kRopeNeox ? half : 1; }  // between the two elements of a pair
  int64_t step() const { return style == kRopeNeox ? 1 : 2; }       // between consecutive pairs
};

inline RopeGeometry rope_geometry(const qco::TensorView& x, const qco::TensorView& cos_table, RopeStyle style) {
  const int64_t* dims = x.dims;  // rank 4 (Rope checked it): no loop over the rank
  return {dims[0] * dims[1] * dims[2], dims[3], cos_table.dims[cos_table.rank - 1], dims[2], dims[1],
          cos_table.rank == 3, style};
}

template <typename Access>
void rope_rows(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& cos_table,
               const qco::TensorView& sin_table, const RopeGeometry& g) {
  const auto in = Access::in(x);
  const auto cosine = Access::in(cos_table);
  const auto sine = Access::in(sin_table);
  const auto out = Access::out(y);
  const int64_t stride = g.stride(), step = g.step();
  for (int64_t r = 0; r < g.rows; ++r) {
    const int64_t base = r * g.head_dim;
    const int64_t angles = g.angles(r);
    for (int64_t i = 0; i < g.half; ++i) {
      const float c = cosine(angles + i);
      const float s = sine(angles + i);
      const float a = in(base + i * step);
      const float b = in(base + i * step + stride);
      out(base + i * step, a * c - b * s);
      out(base + i * step + stride, b * c + a * s);
    }
    for (int64_t j = 2 * g.half; j < g.head_dim; ++j) out(base + j, in(base + j));
  }
}

// The same on codes (x, y of one unsigned fixed-point dtype, fixed-point cos and sin): each
// output is (d_a d_c k_c - d_b d_s k_s) >> shift, rounded, with d the codes minus their zero points
// and k_c, k_s the scale ratios x.scale cos.scale / y.scale and x.scale sin.scale / y.scale as
// integers over one shift: of 14 bits for 8-bit codes (with 8-bit tables the sums fit an HVX
// 32-bit lane: 2^16 * 2^14 * 2 = 2^31), of 28 for 16-bit codes (int64 sums: 2^32 * 2^28 * 2 < 2^63).
using RopeScale = TermScales;  // first: cos, second: sin

inline RopeScale rope_scale(const qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& cos_table,
                            const qco::TensorView& sin_table) {
  const float ratio = x.scale * (1.0f / y.scale);
  const bool narrow = x.dtype == qco::DType::kUFixed8;
  return term_scales(cos_table.scale * ratio, sin_table.scale * ratio, narrow ? 14 : 28, 1, narrow ? 31 : 62);
}

// Every code of a table minus its zero point. The view is copied and its size taken once: an
// int32 store may alias the view's fields, which would be read again per element.
inline std::vector<int32_t> centered_codes(const qco::TensorView& table) {
  const qco::TensorView view = table;
  const int64_t count = view.numel();
  std::vector<int32_t> centered(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) centered[i] = centered_code(view, i);
  return centered;
}

// The elements past the rotary ones (partial rotary), row by row: x's codes in y's encoding.
inline void pass_through_codes(qco::TensorView& y, const qco::TensorView& x, const RopeGeometry& g) {
  const int64_t passed = g.head_dim - 2 * g.half;
  if (passed == 0) return;
  for (int64_t r = 0; r < g.rows; ++r) {
    const int64_t at = r * g.head_dim + 2 * g.half;
    copy_elements(y, at, x, at, passed);
  }
}

// 16-bit codes: each table entry's coefficient as one int32, C = cos d_c x.scale / y.scale 2^q
// rounded (the 31-bit multiplier of the scale ratio applied to the centered code; q puts the
// largest |C| or |S| in [2^29, 2^30)), then exactly in 64 bits
//   y_a = saturate(apply({1, q}, a C - b S) - y.offset),  y_b = saturate(apply({1, q}, b C + a S) - y.offset)
// with a, b the pair's codes minus x's zero point: products of 17 and 31 bits, which HVX takes
// whole (vmpye/vmpyo) and adds with a carry. Encodings whose coefficients reach 2^27 (q < 3) or
// stay below 2^-33 take rope_codes.
struct Rope16 {
  FixedMultiplier cosine, sine;  // a table's centered code to its coefficient: C = apply(cosine, c)
  int32_t shift;                 // q
};

// f(i, code i minus the zero point) for every code of a table, a loop per code type (no switch
// per code; the loops vectorize on the host).
template <typename F>
void for_each_centered(const qco::TensorView& table, F&& f) {
  const int64_t count = table.numel();
  const int32_t offset = table.offset;
  const auto each = [&](const auto* codes) {
    for (int64_t i = 0; i < count; ++i) f(i, codes[i] + offset);
  };
  switch (table.dtype) {
    case qco::DType::kUFixed8: each(table.as<const uint8_t>()); break;
    case qco::DType::kUFixed16: each(table.as<const uint16_t>()); break;
    case qco::DType::kSFixed8: each(table.as<const int8_t>()); break;
    case qco::DType::kSFixed16: each(table.as<const int16_t>()); break;
    default:
      for (int64_t i = 0; i < count; ++i) f(i, 0);
  }
}

// The pairs of every row on codes, given each table entry's coefficient (C for cos, S for sin,
// indexed as the tables are): with a, b the pair's codes minus x's zero point,
//   y_a = saturate(apply({1, shift}, a C - b S) - y.offset),  y_b = saturate(apply({1, shift}, b C + a S) - y.offset)
// in 64 bits. The portable loop of both integer schemes below.
template <typename Code, typename Coefficient>
void rotate_pairs(qco::TensorView& y, const qco::TensorView& x, const RopeGeometry& geometry,
                  const Coefficient* cosine, const Coefficient* sine, int32_t shift_bits) {
  // Local copies: a uint8_t store may alias the caller's geometry and views, whose fields the
  // loop would then read again after every store (on the host, a loop 5 times slower: it did not
  // vectorize).
  const RopeGeometry g = geometry;
  const Code* in = x.as<const Code>();
  Code* out = y.as<Code>();
  const int32_t offset = x.offset;
  const CodeRange range = code_range(y);
  const FixedMultiplier shift{1, shift_bits};
  const int64_t stride = g.stride(), step = g.step();
  for (int64_t r = 0; r < g.rows; ++r) {
    const int64_t base = r * g.head_dim, angles = g.angles(r);
    for (int64_t i = 0; i < g.half; ++i) {
      const int64_t c = cosine[angles + i], s = sine[angles + i];
      const int64_t a = in[base + i * step] + offset, b = in[base + i * step + stride] + offset;
      out[base + i * step] = static_cast<Code>(saturate_code(apply(shift, a * c - b * s), range));
      out[base + i * step + stride] = static_cast<Code>(saturate_code(apply(shift, b * c + a * s), range));
    }
  }
}

// A table's centered codes times a scale ratio k: the coefficients of the RopeScale scheme.
inline std::vector<int64_t> scaled_codes(const qco::TensorView& table, int64_t k) {
  std::vector<int64_t> scaled(static_cast<size_t>(table.numel()));
  for_each_centered(table, [&scaled, k](int64_t i, int32_t c) { scaled[static_cast<size_t>(i)] = c * k; });
  return scaled;
}

template <typename Code>
void rope_codes(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& cos_table,
                const qco::TensorView& sin_table, const RopeGeometry& g) {
  const RopeScale scale = rope_scale(y, x, cos_table, sin_table);
  const std::vector<int64_t> cosines = scaled_codes(cos_table, scale.first);
  const std::vector<int64_t> sines = scaled_codes(sin_table, scale.second);
  rotate_pairs<Code>(y, x, g, cosines.data(), sines.data(), scale.shift);
}

// A bound on the magnitude of a table's centered codes: its dtype's extreme codes minus the zero
// point (a calibrated table of cosines or sines spans its codes).
inline int32_t largest_code(const qco::TensorView& table) {
  int32_t low = 0, high = 65535;
  switch (table.dtype) {
    case qco::DType::kUFixed8: high = 255; break;
    case qco::DType::kSFixed8: low = -128, high = 127; break;
    case qco::DType::kSFixed16: low = -32768, high = 32767; break;
    default: break;
  }
  low += table.offset, high += table.offset;
  return std::max(low < 0 ? -low : low, high < 0 ? -high : high);
}

// The multiplier taking a table's centered codes to C or S: real's 31-bit multiplier with q taken
// from its shift ({0, 3}, every coefficient 0, when no shift is left: real below 2^-33), or false
// where its shift would be 1 or 2, which the HVX rounding (rounding_shift_low) does not take.
inline bool coefficient_multiplier(float real, int32_t q, FixedMultiplier& scaled) {
  const FixedMultiplier multiplier = fixed_multiplier_31(real);  // real ~ mantissa 2^-shift
  const int32_t shift = multiplier.shift - q;
  if (multiplier.mantissa == 0 || shift < 1) {
    scaled = {0, 3};
    return true;
  }
  scaled = {multiplier.mantissa, shift};
  return shift >= 3;
}

// The scheme's integers for these encodings, or false outside its domain (zero points that are
// codes, 3 <= q <= 62, coefficient shifts of at least 3).
inline bool make_rope16(Rope16& rope, const qco::TensorView& y, const qco::TensorView& x,
                        const qco::TensorView& cos_table, const qco::TensorView& sin_table) {
  if (x.offset < -65535 || x.offset > 0 || y.offset < -65535 || y.offset > 0) return false;
  const float ratio = x.scale * (1.0f / y.scale);
  const float cosine = cos_table.scale * ratio, sine = sin_table.scale * ratio;
  const float cosines = cosine * static_cast<float>(largest_code(cos_table));
  const float sines = sine * static_cast<float>(largest_code(sin_table));
  const float largest = sines > cosines || cosines != cosines ? sines : cosines;  // std::fmax, not a call on Hexagon
  const int32_t q = 30 - frexp_exponent(largest);  // every coefficient's real below 2^(30 - q)
  if (!(largest < 0x1p27f) || q > 62) return false;  // (a NaN scale fails the first)
  rope.shift = q;
  return coefficient_multiplier(cosine, q, rope.cosine) && coefficient_multiplier(sine, q, rope.sine);
}

// C or S of every entry of a table, in its order. Left uninitialized before the loop writes every
// element: a zero-filled vector costs a memset.
inline std::unique_ptr<int32_t[]> rope_coefficients(const qco::TensorView& table, FixedMultiplier multiplier) {
  std::unique_ptr<int32_t[]> values(new int32_t[static_cast<size_t>(table.numel())]);
  int32_t* value = values.get();
  for_each_centered(table, [value, multiplier](int64_t i, int32_t c) { value[i] = static_cast<int32_t>(apply(multiplier, c)); });
  return values;
}

inline void rope_u16(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& cos,
                     const qco::TensorView& sin, const RopeGeometry& g, const Rope16& rope) {
  const std::unique_ptr<int32_t[]> cosine = rope_coefficients(cos, rope.cosine);
  const std::unique_ptr<int32_t[]> sine = rope_coefficients(sin, rope.sine);
  rotate_pairs<uint16_t>(y, x, g, cosine.get(), sine.get(), rope.shift);
}

}  // namespace LlmOpPackage
