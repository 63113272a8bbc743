// Kernel of LlmOpPackage::RmsNorm: the op's math, once, in portable C++17.
// Generated once by qnn-custom-ops; this file is yours: regeneration never overwrites it
// (unless --force). The same source builds for the HTP (src/ops/RmsNorm.cpp), for
// ExecuTorch on the host and for the C ABI in host/. Hexagon-only fast paths go behind
// #ifdef __hexagon__.
// RMS normalisation over the last dimension, scaled by a static weight (Llama, Qwen). y =
// x * rsqrt(mean(x * x, dim=-1) + eps) * weight
#pragma once

#include "llm/llm_access.h"
#include "llm/llm_fixed.h"
#include "llm/llm_hvx.h"

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
// The portable loops are the reference; the HVX path below computes the same integers.
struct RmsNormCodes {
  const qco::TensorView& x;
  int64_t hidden;
  float eps;
  float to_output;  // x.scale * weight.scale / y.scale
};

inline RmsNormCodes rms_norm_codes_of(const qco::TensorView& y, const qco::TensorView& x,
                                      const qco::TensorView& weight, float eps) {
  return {x, x.dims[x.rank - 1], eps, x.scale * weight.scale * (1.0f / y.scale)};
}

// The row's one float: x.scale * weight.scale / (y.scale * rms), as a fixed-point multiplier.
inline FixedMultiplier row_multiplier(const RmsNormCodes& norm, int64_t squares) {
  const float scale = norm.x.scale;
  const float mean = static_cast<float>(squares) * (scale * scale) / static_cast<float>(norm.hidden);
  return activation_multiplier(norm.to_output / std::sqrt(mean + norm.eps), norm.x.dtype);
}

template <typename Code>
int64_t sum_squares(const Code* row, int64_t hidden, int32_t offset) {
  int64_t squares = 0;
  for (int64_t c = 0; c < hidden; ++c) {
    const int64_t d = row[c] + offset;
    squares += d * d;
  }
  return squares;
}

// One row's outputs: (q - zp_x) * (w - zp_w) times the row's multiplier, the weight's codes read
// where the row meets them (nothing prepared per call).
template <typename Code, typename Weight>
void scale_row(Code* out, const Code* row, const Weight* weight, int32_t weight_offset, int64_t hidden,
               FixedMultiplier multiplier, int32_t offset, CodeRange range) {
  for (int64_t c = 0; c < hidden; ++c) {
    const int64_t product = static_cast<int64_t>(row[c] + offset) * (weight[c] + weight_offset);
    out[c] = static_cast<Code>(saturate_code(apply(multiplier, product), range));
  }
}

template <typename Code>
void rms_norm_codes(qco::TensorView& y, const qco::TensorView& weight, const RmsNormCodes& norm) {
  const Code* in = norm.x.as<const Code>();
  Code* out = y.as<Code>();
  const int64_t hidden = norm.hidden, rows = hidden == 0 ? 0 : norm.x.numel() / hidden;
  const CodeRange range = code_range(y);
  with_codes(weight, [&](const auto* gain) {
    for (int64_t r = 0; r < rows; ++r) {
      const Code* row = in + r * hidden;
      const FixedMultiplier multiplier = row_multiplier(norm, sum_squares(row, hidden, norm.x.offset));
      scale_row(out + r * hidden, row, gain, weight.offset, hidden, multiplier, norm.x.offset, range);
    }
  });
}

#if defined(__HVX__)
// 8-bit codes and an 8-bit weight on HVX, 128 codes per vector: vrmpy sums q^2 and q per word
// lane (sum (q + o)^2 = sum q^2 + 2 o sum q + n o^2, exact), then per element the product
// (q + o) * (w - zp_w) in 16x16 -> 32 bits, times the 15-bit mantissa and the two-step rounding
// shift of apply(). Codes and weight are widened even/odd alike (vzxt, vsxt), so every lane
// meets its own weight; saturating packs restore the order.
inline int64_t sum_squares_hvx(const uint8_t* row, int64_t hidden, int32_t offset) {
  HVX_Vector squares = Q6_V_vzero(), sums = Q6_V_vzero();
  for (int64_t c = 0; c < hidden; c += qco::hvx::kBytes) {
    const HVX_Vector q = qco::hvx::load_bytes(row + c, hidden - c);
    squares = Q6_Vuw_vrmpyacc_VuwVubVub(squares, q, q);
    sums = Q6_Vuw_vrmpyacc_VuwVubRub(sums, q, 0x01010101);
  }
  const bool narrow = hidden < (int64_t{1} << 16);  // every lane total below 2^32
  const int64_t o = offset;
  return hvx::lane_sum(squares, narrow) + 2 * o * hvx::lane_sum(sums, narrow) + hidden * o * o;
}

// A norm's weight as HVX reads it: its bytes, signedness and zero point.
struct WeightCodes {
  const uint8_t* bytes;
  bool is_signed;
  int32_t offset;
};

inline WeightCodes weight_codes(const qco::TensorView& weight) {
  const bool is_signed = weight.dtype == qco::DType::kSFixed8 || weight.dtype == qco::DType::kSFixed16;
  return {weight.as<const uint8_t>(), is_signed, weight.offset};
}

inline void scale_row_hvx(uint8_t* out, const uint8_t* row, const WeightCodes& weight, int64_t hidden,
                          FixedMultiplier multiplier, int32_t in_offset, int32_t zero_point) {
  for (int64_t c = 0; c < hidden; c += qco::hvx::kBytes) {
    const HVX_VectorPair d = qco::hvx::centered_halves(qco::hvx::load_bytes(row + c, hidden - c), in_offset);
    const HVX_VectorPair gain =
        hvx::centered_halves(qco::hvx::load_bytes(weight.bytes + c, hidden - c), weight.is_signed, weight.offset);
    qco::hvx::store_bytes(out + c, qco::hvx::requantize_products_u8(d, gain, multiplier, zero_point), hidden - c);
  }
}

inline void rms_norm_u8_hvx(qco::TensorView& y, const qco::TensorView& weight, const RmsNormCodes& norm) {
  const uint8_t* in = norm.x.as<const uint8_t>();
  uint8_t* out = y.as<uint8_t>();
  const int64_t hidden = norm.hidden, rows = hidden == 0 ? 0 : norm.x.numel() / hidden;
  const WeightCodes gain = weight_codes(weight);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = in + r * hidden;
    const FixedMultiplier multiplier = row_multiplier(norm, sum_squares_hvx(row, hidden, norm.x.offset));
    scale_row_hvx(out + r * hidden, row, gain, hidden, multiplier, norm.x.offset, -y.offset);
  }
}

// 16-bit codes on HVX, 64 per vector. Sums of codes and of their squares stay exact in 32-bit
// lanes by splitting each code into bytes, q = 256 h + l: vrmpy sums l^2 + h^2, h^2, h l, l and h
// per lane, and sum q^2 = 65536 sum h^2 + 512 sum h l + sum l^2. Per element (q + o) * (w - zp_w)
// fits int32 (a weight centered within int16); its product with the 31-bit mantissa is taken
// whole (vmpye, vmpyo) when the shift is at least 33, else the row runs the portable loop.
struct Sums16 {
  HVX_Vector both, highs, cross, lows, high_sum;  // per lane: l^2 + h^2, h^2, h l, l, h

  static Sums16 zero() {
    const HVX_Vector z = Q6_V_vzero();
    return {z, z, z, z, z};
  }
  // 64 codes q and their high bytes h (bytes (h, 0) per code).
  void add(HVX_Vector q, HVX_Vector h) {
    both = Q6_Vuw_vrmpyacc_VuwVubVub(both, q, q);
    highs = Q6_Vuw_vrmpyacc_VuwVubVub(highs, h, h);
    cross = Q6_Vuw_vrmpyacc_VuwVubVub(cross, h, q);
    lows = Q6_Vuw_vrmpyacc_VuwVubRub(lows, q, 0x00010001);
    high_sum = Q6_Vuw_vrmpyacc_VuwVubRub(high_sum, h, 0x00010001);
  }
  // sum q^2 and sum q; `narrow`: a row below 2^15 codes (every lane total below 2^32).
  int64_t squares(bool narrow) const {
    const int64_t high_squares = hvx::lane_sum(highs, narrow);
    return 65536 * high_squares + 512 * hvx::lane_sum(cross, narrow) + hvx::lane_sum(both, narrow) - high_squares;
  }
  int64_t sum(bool narrow) const { return hvx::lane_sum(lows, narrow) + 256 * hvx::lane_sum(high_sum, narrow); }
};

// A row's 16-bit codes from c on, and their high bytes.
inline HVX_Vector codes_u16(const uint16_t* row, int64_t c, int64_t hidden) {
  return qco::hvx::load_bytes(row + c, 2 * (hidden - c));
}
inline HVX_Vector high_bytes(HVX_Vector q) { return Q6_Vuh_vlsr_VuhR(q, 8); }

inline int64_t sum_squares_u16_hvx(const uint16_t* row, int64_t hidden, int32_t offset) {
  Sums16 sums = Sums16::zero();
  for (int64_t c = 0; c < hidden; c += qco::hvx::kBytes / 2) {
    const HVX_Vector q = codes_u16(row, c, hidden);
    sums.add(q, high_bytes(q));
  }
  const bool narrow = hidden < (int64_t{1} << 15);
  const int64_t o = offset;
  return sums.squares(narrow) + 2 * o * sums.sum(narrow) + hidden * o * o;
}

// The weight's centered codes of elements c .. c + 127 as int16 in their order (lo: the first 64,
// hi: the next): 8-bit codes widened, 16-bit ones loaded as they are (a centered SFIXED_POINT_16
// weight is its codes).
inline HVX_VectorPair weight_halves(const WeightCodes& weight, bool wide, int64_t c, int64_t hidden) {
  if (!wide) {
    return hvx::ordered_halves(qco::hvx::load_bytes(weight.bytes + c, hidden - c), weight.is_signed, weight.offset);
  }
  const int64_t bytes = 2 * (hidden - c), rest = bytes - qco::hvx::kBytes;
  const HVX_Vector second = rest > 0 ? qco::hvx::load_bytes(weight.bytes + 2 * c + qco::hvx::kBytes, rest) : Q6_V_vzero();
  return Q6_W_vcombine_VV(second, qco::hvx::load_bytes(weight.bytes + 2 * c, bytes));
}

// 64 codes of a row, times their weights (int16 lanes in order) and the row's multiplier.
inline HVX_Vector scale_codes_u16(HVX_Vector codes, HVX_Vector gain, FixedMultiplier multiplier, int32_t in_offset,
                                  int32_t zero_point) {
  const HVX_VectorPair d = qco::hvx::centered_words(codes, in_offset);
  const HVX_Vector even = Q6_Vw_vmpyieacc_VwVwVh(Q6_V_vzero(), Q6_V_lo_W(d), gain);
  const HVX_Vector odd = Q6_Vw_vmpyio_VwVh(Q6_V_hi_W(d), gain);
  return qco::hvx::saturate_u16(qco::hvx::requantize_words_wide(even, multiplier, zero_point),
                                qco::hvx::requantize_words_wide(odd, multiplier, zero_point));
}

inline void scale_row_u16_hvx(uint16_t* out, const uint16_t* row, const WeightCodes& weight, bool wide,
                              int64_t hidden, FixedMultiplier multiplier, int32_t in_offset, int32_t zero_point) {
  constexpr int64_t kCodes = qco::hvx::kBytes / 2;
  for (int64_t c = 0; c < hidden; c += 2 * kCodes) {
    const HVX_VectorPair gain = weight_halves(weight, wide, c, hidden);
    const int64_t left = hidden - c;
    const HVX_Vector first =
        scale_codes_u16(qco::hvx::load_bytes(row + c, 2 * left), Q6_V_lo_W(gain), multiplier, in_offset, zero_point);
    qco::hvx::store_bytes(out + c, first, 2 * left);
    if (left <= kCodes) break;
    const HVX_Vector second = scale_codes_u16(qco::hvx::load_bytes(row + c + kCodes, 2 * (left - kCodes)),
                                              Q6_V_hi_W(gain), multiplier, in_offset, zero_point);
    qco::hvx::store_bytes(out + c + kCodes, second, 2 * (left - kCodes));
  }
}

inline void rms_norm_u16_hvx(qco::TensorView& y, const qco::TensorView& weight, const RmsNormCodes& norm) {
  const uint16_t* in = norm.x.as<const uint16_t>();
  uint16_t* out = y.as<uint16_t>();
  const int64_t hidden = norm.hidden, rows = hidden == 0 ? 0 : norm.x.numel() / hidden;
  const WeightCodes gain = weight_codes(weight);
  const bool wide = weight.dtype == qco::DType::kSFixed16;
  const CodeRange range = code_range(y);
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* row = in + r * hidden;
    const FixedMultiplier multiplier = row_multiplier(norm, sum_squares_u16_hvx(row, hidden, norm.x.offset));
    if (multiplier.shift >= 33) {
      scale_row_u16_hvx(out + r * hidden, row, gain, wide, hidden, multiplier, norm.x.offset, -y.offset);
    } else {
      with_codes(weight, [&](const auto* codes) {
        scale_row(out + r * hidden, row, codes, weight.offset, hidden, multiplier, norm.x.offset, range);
      });
    }
  }
}
#endif

#if defined(__HVX__)
// The HVX paths keep (q + o) * (w - zp_w) in 32-bit lanes, w - zp_w in int16 lanes: an 8-bit
// weight with 8-bit codes; with 16-bit codes, an 8-bit weight or a symmetric SFIXED_POINT_16 one.
// Rows below 2^20 keep the lane sums exact.
inline bool fits_hvx_lanes(const qco::TensorView& x, const qco::TensorView& weight, int64_t hidden) {
  if (hidden >= (int64_t{1} << 20)) return false;
  if (is_8_bit(weight.dtype)) return true;
  return x.dtype == qco::DType::kUFixed16 && weight.dtype == qco::DType::kSFixed16 && weight.offset == 0;
}
#endif

// Runs the integer branch when it applies (x, y of one unsigned fixed-point dtype, a fixed-point
// weight); false otherwise.
inline bool run_rms_norm_codes(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& weight,
                               float eps) {
  if (!is_unsigned_code(x.dtype) || y.dtype != x.dtype || !is_fixed_point(weight.dtype)) return false;
  const RmsNormCodes norm = rms_norm_codes_of(y, x, weight, eps);
#if defined(__HVX__)
  if (fits_hvx_lanes(x, weight, norm.hidden)) {
    if (x.dtype == qco::DType::kUFixed8) {
      rms_norm_u8_hvx(y, weight, norm);
    } else {
      rms_norm_u16_hvx(y, weight, norm);
    }
    return true;
  }
#endif
  if (x.dtype == qco::DType::kUFixed16) {
    rms_norm_codes<uint16_t>(y, weight, norm);
  } else {
    rms_norm_codes<uint8_t>(y, weight, norm);
  }
  return true;
}

inline qco::Status RmsNorm(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& weight,
                           const qco::TensorView& eps) {
  if (x.rank < 1 || !y.same_shape(x) || weight.rank != 1 || weight.dims[0] != x.dims[x.rank - 1]) {
    return qco::Status::kShapeMismatch;
  }
  const float epsilon = param_or(eps, 1e-6f);
  if (run_rms_norm_codes(y, x, weight, epsilon)) return qco::Status::kOk;
  return dispatch({&y, &x, &weight}, [&](auto access) {
    rms_norm_rows<decltype(access)>(y, x, weight, epsilon);
  });
}

}  // namespace LlmOpPackage
