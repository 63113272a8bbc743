// Kernel of LlmOpPackage::FusedAddRmsNorm: the op's math, once, in portable C++17.
// Generated once by qnn-custom-ops; this file is yours: regeneration never overwrites it
// (unless --force). The same source builds for the HTP (src/ops/FusedAddRmsNorm.cpp), for
// ExecuTorch on the host and for the C ABI in host/. An HVX fast path goes behind
// #if defined(__HVX__), computing the portable path's integers (docs/kernels.md "An HVX path for your
// kernel"); `qnn-custom-ops hexagon-check` compares the two bit for bit.
// Residual add, then RMS normalisation of the sum (vLLM's fused_add_rms_norm): the decoder
// layer's norm with the residual it carries. residual_out = x + residual; y = residual_out
// * rsqrt(mean(residual_out * residual_out, dim=-1) + eps) * weight
//
// Helpers shipped beside it in kernels/qco/: tensor_view.h (qco::load_real/store_real, one
// element of any dtype), access.h (write the math once as a template over Float32Access and
// RealAccess, qco::with_access picks one: float32 loops vectorize; qco::param_or for
// defaulted params), math.h (qco::vector_exp, vector_erfc), hvx.h (fixed-point requantization
// a portable loop and HVX compute alike; HVX loads with tails, a 256-entry table lookup).
// docs/kernels.md "Writing a kernel" and "An HVX path for your kernel" show them.
#pragma once

#include <vector>

#include "RmsNorm.h"

namespace LlmOpPackage {

// Arguments: outputs, then inputs, then parameters, in the order of the OpDef.
//   output y: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   output residual_out: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input x: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input residual: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input weight: mandatory, rank 1, FLOAT_32, FLOAT_16, SFIXED_POINT_8, UFIXED_POINT_8, SFIXED_POINT_16
//   param eps: optional, rank 0, FLOAT_32
// residual_out = x + residual, stored in its dtype; y = RmsNorm of the sum before it is stored
// (in float32, as vLLM's fused_add_rms_norm normalises it). Float dtypes compute the sum once, in
// float32 from each input's reals; codes take the integer branch below.

// ---- codes: x, residual, y and residual_out of one unsigned fixed-point dtype ----
//
// With a = x + x.offset, b = residual + residual.offset and g = weight + weight.offset (codes
// minus zero points), the sum's real is s = x.scale a + residual.scale b, exactly. Per row, its sum
// of squares comes from three exact integer sums, sum s^2 = x.scale^2 sum a^2 + 2 x.scale
// residual.scale sum a b + residual.scale^2 sum b^2, and gives the row's one float, the reciprocal
// RMS r. Then per element, with the ratios as integers over one shift (TermScales):
//   residual_out = saturate(apply_terms({x.scale, residual.scale} / residual_out.scale, a, b) - offset)
//   y            = saturate(apply_terms({x.scale, residual.scale} r weight.scale / y.scale, a g, b g) - offset)
// 8-bit codes: ratios of 14 bits, every product and sum in 32 bits (|a g| < 2^16); 16-bit codes:
// ratios of 30 bits, sums in 64 bits (|a g| < 2^31). The ratios' rounding moves an output by at
// most a few hundredths of a step: outputs are within one step of the float reference.

// sum a^2, sum b^2 and sum a b of one row.
struct RowSquares {
  int64_t aa, bb, ab;
};

// What every row shares: the encodings and the residual_out ratios.
struct FusedCodes {
  int64_t hidden;
  float eps;
  float x_scale, residual_scale;
  float to_output;  // weight.scale / y.scale
  int32_t x_offset, residual_offset;
  int32_t bits, min_shift, max_shift;  // of every TermScales: 8-bit 14, 1, 31; 16-bit 30, 3, 62
  TermScales sum;                      // x.scale / residual_out.scale, residual.scale / residual_out.scale
};

inline FusedCodes fused_codes_of(const qco::TensorView& y, const qco::TensorView& residual_out,
                                 const qco::TensorView& x, const qco::TensorView& residual,
                                 const qco::TensorView& weight, float eps) {
  const bool narrow = x.dtype == qco::DType::kUFixed8;
  const int32_t bits = narrow ? 14 : 30, min_shift = narrow ? 1 : 3, max_shift = narrow ? 31 : 62;
  const float to_sum = 1.0f / residual_out.scale;
  return {x.dims[x.rank - 1], eps, x.scale, residual.scale, weight.scale * (1.0f / y.scale), x.offset,
          residual.offset, bits, min_shift, max_shift,
          term_scales(x.scale * to_sum, residual.scale * to_sum, bits, min_shift, max_shift)};
}

// The row's ratios of y: {x.scale, residual.scale} r weight.scale / y.scale over one shift.
inline TermScales norm_scales(const FusedCodes& f, const RowSquares& s) {
  const float sx = f.x_scale, sr = f.residual_scale;
  const float squares = (sx * sx) * static_cast<float>(s.aa) + 2.0f * (sx * sr) * static_cast<float>(s.ab) +
                        (sr * sr) * static_cast<float>(s.bb);
  const float k = f.to_output / std::sqrt(squares / static_cast<float>(f.hidden) + f.eps);
  return term_scales(sx * k, sr * k, f.bits, f.min_shift, f.max_shift);
}

template <typename Code>
RowSquares row_squares(const Code* x, const Code* residual, int64_t hidden, int32_t x_offset,
                       int32_t residual_offset) {
  RowSquares s{0, 0, 0};
  for (int64_t c = 0; c < hidden; ++c) {
    const int64_t a = x[c] + x_offset, b = residual[c] + residual_offset;
    s.aa += a * a;
    s.bb += b * b;
    s.ab += a * b;
  }
  return s;
}

// Pointers to one row of each tensor, the weight's codes of type Weight.
template <typename Code, typename Weight>
struct FusedRow {
  Code* y;
  Code* residual_out;
  const Code* x;
  const Code* residual;
  const Weight* weight;
};

template <typename Code, typename Weight>
void fused_row(const FusedRow<Code, Weight>& row, int32_t weight_offset, const FusedCodes& f, const TermScales& norm,
               CodeRange y_range, CodeRange sum_range) {
  const TermScales sum = f.sum;
  const int32_t x_offset = f.x_offset, residual_offset = f.residual_offset;
  for (int64_t c = 0; c < f.hidden; ++c) {
    const int64_t a = row.x[c] + x_offset, b = row.residual[c] + residual_offset, g = row.weight[c] + weight_offset;
    row.residual_out[c] = static_cast<Code>(saturate_code(apply_terms(sum, a, b), sum_range));
    row.y[c] = static_cast<Code>(saturate_code(apply_terms(norm, a * g, b * g), y_range));
  }
}

// The tensors of the op, on codes.
struct FusedViews {
  qco::TensorView& y;
  qco::TensorView& residual_out;
  const qco::TensorView& x;
  const qco::TensorView& residual;
  const qco::TensorView& weight;

  int64_t rows(int64_t hidden) const { return hidden == 0 ? 0 : x.numel() / hidden; }
  template <typename Code, typename Weight>
  FusedRow<Code, Weight> row(int64_t r, int64_t hidden, const Weight* gain) const {
    const int64_t at = r * hidden;
    return {y.as<Code>() + at, residual_out.as<Code>() + at, x.as<const Code>() + at,
            residual.as<const Code>() + at, gain};
  }
};

template <typename Code>
void fused_add_rms_norm_codes(const FusedViews& v, const FusedCodes& f) {
  const CodeRange y_range = code_range(v.y), sum_range = code_range(v.residual_out);
  with_codes(v.weight, [&](const auto* gain) {
    for (int64_t r = 0; r < v.rows(f.hidden); ++r) {
      const auto row = v.row<Code>(r, f.hidden, gain);
      const TermScales norm =
          norm_scales(f, row_squares(row.x, row.residual, f.hidden, f.x_offset, f.residual_offset));
      fused_row(row, v.weight.offset, f, norm, y_range, sum_range);
    }
  });
}

#if defined(__HVX__)
// Raw sums of a row's codes x, r: x^2, r^2, x r, x, r (centered by centered_squares).
struct RawSums {
  int64_t xx, rr, xr, x, r;
};

inline RowSquares centered_squares(const RawSums& s, const FusedCodes& f) {
  const int64_t o = f.x_offset, p = f.residual_offset, n = f.hidden;
  return {s.xx + 2 * o * s.x + n * o * o, s.rr + 2 * p * s.r + n * p * p, s.xr + p * s.x + o * s.r + n * o * p};
}

// 8-bit codes: vrmpy sums per word lane, 128 codes per vector.
inline RowSquares row_squares_u8_hvx(const uint8_t* x, const uint8_t* r, const FusedCodes& f) {
  const int64_t hidden = f.hidden;
  HVX_Vector xx = Q6_V_vzero(), rr = xx, xr = xx, xs = xx, rs = xx;
  for (int64_t c = 0; c < hidden; c += qco::hvx::kBytes) {
    const HVX_Vector qx = qco::hvx::load_bytes(x + c, hidden - c), qr = qco::hvx::load_bytes(r + c, hidden - c);
    xx = Q6_Vuw_vrmpyacc_VuwVubVub(xx, qx, qx);
    rr = Q6_Vuw_vrmpyacc_VuwVubVub(rr, qr, qr);
    xr = Q6_Vuw_vrmpyacc_VuwVubVub(xr, qx, qr);
    xs = Q6_Vuw_vrmpyacc_VuwVubRub(xs, qx, 0x01010101);
    rs = Q6_Vuw_vrmpyacc_VuwVubRub(rs, qr, 0x01010101);
  }
  const bool narrow = hidden < (int64_t{1} << 16);  // every lane total below 2^32
  return centered_squares({hvx::lane_sum(xx, narrow), hvx::lane_sum(rr, narrow), hvx::lane_sum(xr, narrow),
                           hvx::lane_sum(xs, narrow), hvx::lane_sum(rs, narrow)},
                          f);
}

// 16-bit codes: each tensor's Sums16, and sum x r = 65536 sum xh rh + 256 (sum xh rl + sum rh xl)
// + sum xl rl from four more vrmpy sums (xl rl + xh rh, xh rh, xh rl, rh xl per lane).
inline RowSquares row_squares_u16_hvx(const uint16_t* x, const uint16_t* r, const FusedCodes& f) {
  const int64_t hidden = f.hidden;
  Sums16 xs = Sums16::zero(), rs = Sums16::zero();
  HVX_Vector both = Q6_V_vzero(), highs = both, high_low = both, low_high = both;
  for (int64_t c = 0; c < hidden; c += qco::hvx::kBytes / 2) {
    const HVX_Vector qx = codes_u16(x, c, hidden), qr = codes_u16(r, c, hidden);
    const HVX_Vector hx = high_bytes(qx), hr = high_bytes(qr);
    xs.add(qx, hx);
    rs.add(qr, hr);
    both = Q6_Vuw_vrmpyacc_VuwVubVub(both, qx, qr);
    highs = Q6_Vuw_vrmpyacc_VuwVubVub(highs, hx, hr);
    high_low = Q6_Vuw_vrmpyacc_VuwVubVub(high_low, hx, qr);
    low_high = Q6_Vuw_vrmpyacc_VuwVubVub(low_high, hr, qx);
  }
  const bool narrow = hidden < (int64_t{1} << 15);  // every lane total below 2^32
  const int64_t high_products = hvx::lane_sum(highs, narrow);
  const int64_t xr = 65536 * high_products +
                     256 * (hvx::lane_sum(high_low, narrow) + hvx::lane_sum(low_high, narrow)) +
                     hvx::lane_sum(both, narrow) - high_products;
  return centered_squares({xs.squares(narrow), rs.squares(narrow), xr, xs.sum(narrow), rs.sum(narrow)}, f);
}

// apply_terms(scales, a, b) + add for 64 int16 lanes a, b (ratios below 2^15), as int16 lanes in a's order.
inline HVX_Vector terms_halves(HVX_Vector a, HVX_Vector b, const TermScales& scales, int32_t add) {
  const auto pair = [](int64_t k) { return static_cast<int32_t>(k << 16 | k); };  // k in both halves of a word
  const HVX_VectorPair w = Q6_Ww_vmpyacc_WwVhRh(Q6_Ww_vmpy_VhRh(a, pair(scales.first)), b, pair(scales.second));
  return Q6_Vh_vsat_VwVw(qco::hvx::rounding_shift_words(Q6_V_hi_W(w), scales.shift, add),
                         qco::hvx::rounding_shift_words(Q6_V_lo_W(w), scales.shift, add));
}

inline void fused_row_u8_hvx(const FusedRow<uint8_t, uint8_t>& row, const WeightCodes& weight, const FusedCodes& f,
                             const TermScales& norm, int32_t y_zero_point, int32_t sum_zero_point) {
  for (int64_t c = 0; c < f.hidden; c += qco::hvx::kBytes) {
    const int64_t left = f.hidden - c;
    const HVX_VectorPair a = qco::hvx::centered_halves(qco::hvx::load_bytes(row.x + c, left), f.x_offset);
    const HVX_VectorPair b = qco::hvx::centered_halves(qco::hvx::load_bytes(row.residual + c, left), f.residual_offset);
    const HVX_VectorPair g =
        hvx::centered_halves(qco::hvx::load_bytes(weight.bytes + c, left), weight.is_signed, weight.offset);
    const HVX_Vector sum_even = terms_halves(Q6_V_lo_W(a), Q6_V_lo_W(b), f.sum, sum_zero_point);
    const HVX_Vector sum_odd = terms_halves(Q6_V_hi_W(a), Q6_V_hi_W(b), f.sum, sum_zero_point);
    qco::hvx::store_bytes(row.residual_out + c, Q6_Vub_vsat_VhVh(sum_odd, sum_even), left);
    const HVX_Vector y_even =
        hvx::products_terms(Q6_V_lo_W(a), Q6_V_lo_W(g), Q6_V_lo_W(b), Q6_V_lo_W(g), norm, y_zero_point);
    const HVX_Vector y_odd =
        hvx::products_terms(Q6_V_hi_W(a), Q6_V_hi_W(g), Q6_V_hi_W(b), Q6_V_hi_W(g), norm, y_zero_point);
    qco::hvx::store_bytes(row.y + c, Q6_Vub_vsat_VhVh(y_odd, y_even), left);
  }
}

// apply_terms(scales, a, b) + add for 32 int32 lanes a, b (ratios below 2^30), the sums in 64 bits;
// kLow: the shift is at most 32.
template <bool kLow>
inline HVX_Vector terms_words(HVX_Vector a, HVX_Vector b, const TermScales& scales, int32_t add) {
  const HVX_VectorPair sum =
      qco::hvx::add_wide(qco::hvx::products_wide(a, Q6_V_vsplat_R(static_cast<int32_t>(scales.first))),
                         qco::hvx::products_wide(b, Q6_V_vsplat_R(static_cast<int32_t>(scales.second))));
  const HVX_Vector rounded =
      kLow ? qco::hvx::rounding_shift_low(sum, scales.shift) : qco::hvx::rounding_shift_high(sum, scales.shift);
  return Q6_Vw_vadd_VwVw(rounded, Q6_V_vsplat_R(add));
}

// 64 outputs of each from 64 codes of x and residual and their weights (int16 lanes in order).
template <bool kSumLow, bool kNormLow>
inline void fused_codes_u16(uint16_t* y, uint16_t* residual_out, HVX_Vector x, HVX_Vector residual, HVX_Vector g,
                            int64_t count, const FusedCodes& f, const TermScales& norm, int32_t y_zero_point,
                            int32_t sum_zero_point) {
  const HVX_VectorPair a = qco::hvx::centered_words(x, f.x_offset), b = qco::hvx::centered_words(residual, f.residual_offset);
  const HVX_Vector sums =
      qco::hvx::saturate_u16(terms_words<kSumLow>(Q6_V_lo_W(a), Q6_V_lo_W(b), f.sum, sum_zero_point),
                             terms_words<kSumLow>(Q6_V_hi_W(a), Q6_V_hi_W(b), f.sum, sum_zero_point));
  qco::hvx::store_bytes(residual_out, sums, 2 * count);
  const HVX_Vector zero = Q6_V_vzero();
  const HVX_Vector a_even = Q6_Vw_vmpyieacc_VwVwVh(zero, Q6_V_lo_W(a), g), a_odd = Q6_Vw_vmpyio_VwVh(Q6_V_hi_W(a), g);
  const HVX_Vector b_even = Q6_Vw_vmpyieacc_VwVwVh(zero, Q6_V_lo_W(b), g), b_odd = Q6_Vw_vmpyio_VwVh(Q6_V_hi_W(b), g);
  qco::hvx::store_bytes(y, qco::hvx::saturate_u16(terms_words<kNormLow>(a_even, b_even, norm, y_zero_point),
                                                  terms_words<kNormLow>(a_odd, b_odd, norm, y_zero_point)),
                        2 * count);
}

template <bool kSumLow, bool kNormLow>
void fused_row_u16_hvx(const FusedRow<uint16_t, uint8_t>& row, const WeightCodes& weight, bool wide,
                       const FusedCodes& f, const TermScales& norm, int32_t y_zero_point, int32_t sum_zero_point) {
  constexpr int64_t kCodes = qco::hvx::kBytes / 2;
  for (int64_t c = 0; c < f.hidden; c += 2 * kCodes) {
    const HVX_VectorPair g = weight_halves(weight, wide, c, f.hidden);
    for (int64_t part = 0; part < 2 && c + part * kCodes < f.hidden; ++part) {
      const int64_t at = c + part * kCodes, left = f.hidden - at;
      fused_codes_u16<kSumLow, kNormLow>(row.y + at, row.residual_out + at, codes_u16(row.x, at, f.hidden),
                                          codes_u16(row.residual, at, f.hidden),
                                          part == 0 ? Q6_V_lo_W(g) : Q6_V_hi_W(g), left, f, norm, y_zero_point,
                                          sum_zero_point);
    }
  }
}

// Rows of 8-bit or 16-bit codes on HVX, the weight's codes read as bytes.
template <typename Code>
void fused_add_rms_norm_hvx(const FusedViews& v, const FusedCodes& f) {
  const WeightCodes weight = weight_codes(v.weight);
  const bool wide = v.weight.dtype == qco::DType::kSFixed16;
  const int32_t y_zero_point = -v.y.offset, sum_zero_point = -v.residual_out.offset;
  for (int64_t r = 0; r < v.rows(f.hidden); ++r) {
    const auto row = v.row<Code>(r, f.hidden, weight.bytes);
    if constexpr (sizeof(Code) == 1) {
      const TermScales norm = norm_scales(f, row_squares_u8_hvx(row.x, row.residual, f));
      fused_row_u8_hvx(row, weight, f, norm, y_zero_point, sum_zero_point);
    } else {
      const TermScales norm = norm_scales(f, row_squares_u16_hvx(row.x, row.residual, f));
      const bool sum_low = f.sum.shift <= 32, norm_low = norm.shift <= 32;
      const auto run = sum_low ? (norm_low ? fused_row_u16_hvx<true, true> : fused_row_u16_hvx<true, false>)
                               : (norm_low ? fused_row_u16_hvx<false, true> : fused_row_u16_hvx<false, false>);
      run(row, weight, wide, f, norm, y_zero_point, sum_zero_point);
    }
  }
}

// |code + offset| within 255 for every code of an 8-bit dtype (within int16 lanes and 16-bit products).
inline bool centered_within_8_bits(const qco::TensorView& view) {
  if (view.dtype == qco::DType::kSFixed8) return view.offset >= -127 && view.offset <= 127;
  return view.dtype == qco::DType::kUFixed8 && view.offset >= -255 && view.offset <= 0;
}

// The HVX lanes hold the products: activations' zero points that are codes, an 8-bit weight within
// 8 bits centered (or a symmetric SFIXED_POINT_16 one with 16-bit codes); rows below 2^20.
inline bool fused_fits_hvx(const FusedViews& v, int64_t hidden) {
  const int32_t top = max_code(v.x.dtype);
  const auto zero_point_is_code = [top](const qco::TensorView& t) { return t.offset >= -top && t.offset <= 0; };
  if (hidden >= (int64_t{1} << 20) || !zero_point_is_code(v.x) || !zero_point_is_code(v.residual)) return false;
  if (centered_within_8_bits(v.weight)) return true;
  return v.x.dtype == qco::DType::kUFixed16 && v.weight.dtype == qco::DType::kSFixed16 && v.weight.offset == 0;
}
#endif

// Runs the integer branch when it applies (x, residual, y, residual_out of one unsigned
// fixed-point dtype, a fixed-point weight); false otherwise.
inline bool run_fused_codes(const FusedViews& v, float eps) {
  const qco::DType dtype = v.x.dtype;
  if (!is_unsigned_code(dtype) || v.residual.dtype != dtype || v.y.dtype != dtype || v.residual_out.dtype != dtype ||
      !is_fixed_point(v.weight.dtype)) {
    return false;
  }
  const FusedCodes f = fused_codes_of(v.y, v.residual_out, v.x, v.residual, v.weight, eps);
#if defined(__HVX__)
  if (fused_fits_hvx(v, f.hidden)) {
    if (dtype == qco::DType::kUFixed8) {
      fused_add_rms_norm_hvx<uint8_t>(v, f);
    } else {
      fused_add_rms_norm_hvx<uint16_t>(v, f);
    }
    return true;
  }
#endif
  if (dtype == qco::DType::kUFixed8) {
    fused_add_rms_norm_codes<uint8_t>(v, f);
  } else {
    fused_add_rms_norm_codes<uint16_t>(v, f);
  }
  return true;
}

// sums = x + residual in reals, element by element (any dtype each).
template <typename Access>
void add_elements(qco::TensorView& sums, const qco::TensorView& x, const qco::TensorView& residual) {
  const auto a = Access::in(x);
  const auto b = Access::in(residual);
  const auto out = Access::out(sums);
  for (int64_t i = 0; i < sums.numel(); ++i) out(i, a(i) + b(i));
}

// dst = src, element by element, in dst's dtype and encoding.
template <typename Access>
void store_elements(qco::TensorView& dst, const qco::TensorView& src) {
  const auto in = Access::in(src);
  const auto out = Access::out(dst);
  for (int64_t i = 0; i < dst.numel(); ++i) out(i, in(i));
}

inline qco::Status FusedAddRmsNorm(qco::TensorView& y, qco::TensorView& residual_out, const qco::TensorView& x,
                                   const qco::TensorView& residual, const qco::TensorView& weight,
                                   const qco::TensorView& eps) {
  if (x.rank < 1 || !y.same_shape(x) || !residual.same_shape(x) || !residual_out.same_shape(x) ||
      weight.rank != 1 || weight.dims[0] != x.dims[x.rank - 1]) {
    return qco::Status::kShapeMismatch;
  }
  if (run_fused_codes({y, residual_out, x, residual, weight}, param_or(eps, 1e-6f))) return qco::Status::kOk;
  std::vector<float> storage(static_cast<size_t>(x.numel()));
  qco::TensorView sums{storage.data(), x.dims, x.rank, qco::DType::kFloat32, 1.0f, 0};
  qco::Status status = dispatch({&sums, &x, &residual}, [&](auto access) {
    add_elements<decltype(access)>(sums, x, residual);
  });
  if (status != qco::Status::kOk) return status;
  status = dispatch({&residual_out, &sums}, [&](auto access) { store_elements<decltype(access)>(residual_out, sums); });
  if (status != qco::Status::kOk) return status;
  return RmsNorm(y, sums, weight, eps);
}

}  // namespace LlmOpPackage
