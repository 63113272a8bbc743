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

#include "element_copy.h"
#include "llm_access.h"
#include "llm_fixed.h"

namespace LlmOpPackage {

// Arguments: outputs, then inputs, then parameters, in the order of the OpDef.
//   output y: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input x: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input cos: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input sin: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   param style: optional, rank 0, UINT_32
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
  return {extent(x, 0, 3), x.dims[3], cos_table.dims[cos_table.rank - 1], x.dims[2], x.dims[1],
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
struct RopeScale {
  int64_t cosine;
  int64_t sine;
  int32_t shift;
};

inline int64_t scaled_ratio(float ratio, int32_t shift, int32_t bits) {
  const float scaled = std::ldexp(ratio, shift);
  const float limit = std::ldexp(1.0f, bits) - 1.0f;
  return static_cast<int64_t>(std::nearbyint(scaled < limit ? scaled : limit));
}

inline RopeScale rope_scale(const qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& cos_table,
                            const qco::TensorView& sin_table) {
  const float ratio = x.scale * (1.0f / y.scale);
  const float cosine = cos_table.scale * ratio, sine = sin_table.scale * ratio;
  int exponent = 0;
  std::frexp(cosine > sine ? cosine : sine, &exponent);  // both below 2^exponent
  const int32_t bits = x.dtype == qco::DType::kUFixed8 ? 14 : 28;
  const int32_t max_shift = x.dtype == qco::DType::kUFixed8 ? 31 : 62;  // past it, every output rounds to 0
  int32_t shift = bits - exponent;
  shift = shift < 1 ? 1 : (shift > max_shift ? max_shift : shift);
  return {scaled_ratio(cosine, shift, bits), scaled_ratio(sine, shift, bits), shift};
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

template <typename Code>
void rope_codes(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& cos_table,
                const qco::TensorView& sin_table, const RopeGeometry& g) {
  const Code* in = x.as<const Code>();
  Code* out = y.as<Code>();
  const std::vector<int32_t> cosines = centered_codes(cos_table), sines = centered_codes(sin_table);
  // Raw pointers and local copies: a uint8_t store may alias anything, so members and vector
  // internals read in the loop would be reloaded after every store.
  const int32_t* cosine = cosines.data();
  const int32_t* sine = sines.data();
  const RopeScale scale = rope_scale(y, x, cos_table, sin_table);
  const int64_t k_c = scale.cosine, k_s = scale.sine;
  const int32_t offset = x.offset;
  const CodeRange range = code_range(y);
  const FixedMultiplier shift{1, scale.shift};
  const int64_t stride = g.stride(), step = g.step();
  for (int64_t r = 0; r < g.rows; ++r) {
    const int64_t base = r * g.head_dim, angles = g.angles(r);
    for (int64_t i = 0; i < g.half; ++i) {
      const int64_t c = cosine[angles + i] * k_c, s = sine[angles + i] * k_s;
      const int64_t a = in[base + i * step] + offset, b = in[base + i * step + stride] + offset;
      out[base + i * step] = static_cast<Code>(saturate_code(apply(shift, a * c - b * s), range));
      out[base + i * step + stride] = static_cast<Code>(saturate_code(apply(shift, b * c + a * s), range));
    }
  }
  pass_through_codes(y, x, g);
}

#if defined(__HVX__)
// 8-bit codes and tables on HVX. The pairs (a, b) of 128 codes meet their angles in int16 lanes:
// gptj's pairs are the even and odd codes of a row (what vzxt splits), neox's two runs of codes
// a half apart, each split even/odd, with the tables laid out to match once per call.
struct RopeLanes {
  HVX_Vector a, b, cosine, sine;  // 64 int16 lanes each, one pair per lane
};

// (a c k_c - b s k_s, b c k_c + a s k_s) of 64 lanes, shifted as apply() does, plus y's zero
// point, saturated to int16 lanes in the input's order.
inline HVX_VectorPair rotated(const RopeLanes& lanes, const RopeScale& scale, int32_t zero_point) {
  const HVX_Vector k_c = Q6_V_vsplat_R(static_cast<int32_t>(scale.cosine));
  const HVX_Vector k_s = Q6_V_vsplat_R(static_cast<int32_t>(scale.sine));
  const HVX_VectorPair ac = Q6_Ww_vmpy_VhVh(lanes.a, lanes.cosine), bs = Q6_Ww_vmpy_VhVh(lanes.b, lanes.sine);
  const HVX_VectorPair bc = Q6_Ww_vmpy_VhVh(lanes.b, lanes.cosine), as = Q6_Ww_vmpy_VhVh(lanes.a, lanes.sine);
  HVX_Vector first[2], second[2];
  for (int half = 0; half < 2; ++half) {
    const auto part = [half](HVX_VectorPair w) { return half == 0 ? Q6_V_lo_W(w) : Q6_V_hi_W(w); };
    const HVX_Vector ac_k = Q6_Vw_vmpyie_VwVuh(part(ac), k_c), bs_k = Q6_Vw_vmpyie_VwVuh(part(bs), k_s);
    const HVX_Vector bc_k = Q6_Vw_vmpyie_VwVuh(part(bc), k_c), as_k = Q6_Vw_vmpyie_VwVuh(part(as), k_s);
    first[half] = qco::hvx::rounding_shift_words(Q6_Vw_vsub_VwVw(ac_k, bs_k), scale.shift, zero_point);
    second[half] = qco::hvx::rounding_shift_words(Q6_Vw_vadd_VwVw(bc_k, as_k), scale.shift, zero_point);
  }
  return Q6_W_vcombine_VV(Q6_Vh_vsat_VwVw(second[1], second[0]), Q6_Vh_vsat_VwVw(first[1], first[0]));
}

// A table's centered codes as int16, each of its `rows` rows of `half` angles padded to whole
// blocks of `block`; neox's rows split even/odd per block as its codes are.
inline std::vector<int16_t> table_lanes(const std::vector<int32_t>& centered, int64_t rows, int64_t half,
                                        int64_t block, bool even_odd) {
  const int64_t padded = (half + block - 1) / block * block;
  std::vector<int16_t> lanes(static_cast<size_t>(rows * padded), 0);
  for (int64_t s = 0; s < rows; ++s) {
    for (int64_t start = 0; start < half; start += block) {  // no division per angle: a call on Hexagon
      const int64_t count = half - start < block ? half - start : block;
      int16_t* to = &lanes[s * padded + start];
      const int32_t* from = &centered[s * half + start];
      for (int64_t k = 0; k < count; ++k) to[even_odd ? k % 2 * (block / 2) + k / 2 : k] = static_cast<int16_t>(from[k]);
    }
  }
  return lanes;
}

// gptj: 64 pairs per step, a and b the even and odd codes; y's even and odd codes interleaved back.
inline void rope_gptj_row_hvx(uint8_t* out, const uint8_t* row, const int16_t* cosine, const int16_t* sine,
                              int64_t half, const RopeScale& scale, int32_t in_offset, int32_t zero_point) {
  for (int64_t i = 0; i < half; i += qco::hvx::kBytes / 2) {
    const int64_t count = 2 * (half - i);  // codes, and bytes of the tables' int16 lanes
    const HVX_VectorPair pairs = qco::hvx::centered_halves(qco::hvx::load_bytes(row + 2 * i, count), in_offset);
    const RopeLanes lanes{Q6_V_lo_W(pairs), Q6_V_hi_W(pairs), qco::hvx::load_bytes(cosine + i, count),
                          qco::hvx::load_bytes(sine + i, count)};
    const HVX_VectorPair y = rotated(lanes, scale, zero_point);
    qco::hvx::store_bytes(out + 2 * i, Q6_Vub_vsat_VhVh(Q6_V_hi_W(y), Q6_V_lo_W(y)), count);
  }
}

// neox: 128 pairs per step, a = row[i...] and b = row[half + i...], each split even/odd.
inline void rope_neox_row_hvx(uint8_t* out, const uint8_t* row, const int16_t* cosine, const int16_t* sine,
                              int64_t half, const RopeScale& scale, int32_t in_offset, int32_t zero_point) {
  for (int64_t i = 0; i < half; i += qco::hvx::kBytes) {
    const int64_t count = half - i;
    const HVX_VectorPair a = qco::hvx::centered_halves(qco::hvx::load_bytes(row + i, count), in_offset);
    const HVX_VectorPair b = qco::hvx::centered_halves(qco::hvx::load_bytes(row + half + i, count), in_offset);
    const HVX_Vector* c = reinterpret_cast<const HVX_Vector*>(cosine + i);
    const HVX_Vector* s = reinterpret_cast<const HVX_Vector*>(sine + i);
    const HVX_VectorPair even = rotated({Q6_V_lo_W(a), Q6_V_lo_W(b), qco::hvx::load(c), qco::hvx::load(s)}, scale,
                                        zero_point);
    const HVX_VectorPair odd = rotated({Q6_V_hi_W(a), Q6_V_hi_W(b), qco::hvx::load(c + 1), qco::hvx::load(s + 1)},
                                       scale, zero_point);
    qco::hvx::store_bytes(out + i, Q6_Vub_vsat_VhVh(Q6_V_lo_W(odd), Q6_V_lo_W(even)), count);
    qco::hvx::store_bytes(out + half + i, Q6_Vub_vsat_VhVh(Q6_V_hi_W(odd), Q6_V_hi_W(even)), count);
  }
}

inline void rope_u8_hvx(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& cos_table,
                        const qco::TensorView& sin_table, const RopeGeometry& g) {
  const bool neox = g.style == kRopeNeox;
  const int64_t half = g.half;
  const int64_t block = neox ? qco::hvx::kBytes : qco::hvx::kBytes / 2;
  const int64_t padded = (half + block - 1) / block * block;
  const std::vector<int16_t> cosine = table_lanes(centered_codes(cos_table), g.table_rows(), half, block, neox);
  const std::vector<int16_t> sine = table_lanes(centered_codes(sin_table), g.table_rows(), half, block, neox);
  const RopeScale scale = rope_scale(y, x, cos_table, sin_table);
  const uint8_t* in = x.as<const uint8_t>();
  uint8_t* out = y.as<uint8_t>();
  for (int64_t r = 0; r < g.rows; ++r) {
    const int64_t base = r * g.head_dim, angles = g.angles(r) / half * padded;
    if (neox) {
      rope_neox_row_hvx(out + base, in + base, &cosine[angles], &sine[angles], half, scale, x.offset, -y.offset);
    } else {
      rope_gptj_row_hvx(out + base, in + base, &cosine[angles], &sine[angles], half, scale, x.offset, -y.offset);
    }
  }
  pass_through_codes(y, x, g);
}
#endif

// Runs the integer branch when it applies; false otherwise.
inline bool run_rope_codes(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& cos,
                           const qco::TensorView& sin, const RopeGeometry& g) {
  if (!is_unsigned_code(x.dtype) || y.dtype != x.dtype || !is_fixed_point(cos.dtype) || !is_fixed_point(sin.dtype)) {
    return false;
  }
  if (x.dtype == qco::DType::kUFixed16) {
    rope_codes<uint16_t>(y, x, cos, sin, g);
    return true;
  }
#if defined(__HVX__)
  if (is_8_bit(cos.dtype) && is_8_bit(sin.dtype)) {
    rope_u8_hvx(y, x, cos, sin, g);
    return true;
  }
#endif
  rope_codes<uint8_t>(y, x, cos, sin, g);
  return true;
}

// cos and sin are [seq, rotary/2] or [batch, seq, rotary/2], with 0 < rotary <= head_dim.
inline bool rope_tables_fit(const qco::TensorView& x, const qco::TensorView& cos, const qco::TensorView& sin) {
  if (!cos.same_shape(sin) || (cos.rank != 2 && cos.rank != 3)) return false;
  const int32_t last = cos.rank - 1;
  const bool sequences = cos.rank == 2 || cos.dims[0] == x.dims[0];
  return sequences && cos.dims[last - 1] == x.dims[2] && cos.dims[last] >= 1 && 2 * cos.dims[last] <= x.dims[3];
}

inline qco::Status Rope(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& cos,
                        const qco::TensorView& sin, const qco::TensorView& style) {
  if (x.rank != 4 || !y.same_shape(x) || !rope_tables_fit(x, cos, sin)) return qco::Status::kShapeMismatch;
  const uint32_t mode = enum_or(style, kRopeNeox);
  if (mode != kRopeNeox && mode != kRopeGptj) return qco::Status::kInvalidArgument;
  const RopeGeometry geometry = rope_geometry(x, cos, static_cast<RopeStyle>(mode));
  if (run_rope_codes(y, x, cos, sin, geometry)) return qco::Status::kOk;
  return dispatch({&y, &x, &cos, &sin}, [&](auto access) { rope_rows<decltype(access)>(y, x, cos, sin, geometry); });
}

}  // namespace LlmOpPackage
