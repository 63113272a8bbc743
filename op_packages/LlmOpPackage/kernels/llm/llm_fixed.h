// Integer arithmetic of the LlmOpPackage's quantized branches (UFIXED_POINT_8/16 activations):
// codes minus zero points multiplied and summed in integers, requantized with a fixed-point
// multiplier and a rounding shift. Every float these branches use is computed once per tensor or
// row from integers, by the same code on every target, so the host computes the phone's bits;
// an HVX path must compute exactly these integers.
#pragma once

#include <cmath>
#include <cstdint>

#include "llm_access.h"
#include "qco/hvx.h"
#include "qco/math.h"

namespace LlmOpPackage {

// True for the activation dtypes the integer branches take: codes of 8 or 16 bits.
inline bool is_unsigned_code(qco::DType dtype) {
  return dtype == qco::DType::kUFixed8 || dtype == qco::DType::kUFixed16;
}

// True for the fixed-point dtypes of weights and activations (centered_code reads them).
inline bool is_fixed_point(qco::DType dtype) {
  return dtype == qco::DType::kUFixed8 || dtype == qco::DType::kUFixed16 || dtype == qco::DType::kSFixed8 ||
         dtype == qco::DType::kSFixed16;
}

// True for the 8-bit fixed-point dtypes (centered codes within [-255, 255]).
inline bool is_8_bit(qco::DType dtype) { return dtype == qco::DType::kUFixed8 || dtype == qco::DType::kSFixed8; }

// True for the signed fixed-point dtypes.
inline bool is_signed_code(const qco::TensorView& view) {
  return view.dtype == qco::DType::kSFixed8 || view.dtype == qco::DType::kSFixed16;
}

// Largest code of an unsigned fixed-point dtype.
inline int32_t max_code(qco::DType dtype) { return dtype == qco::DType::kUFixed8 ? 255 : 65535; }

// Code `i` of a fixed-point view minus its zero point (q + offset in QNN's convention).
inline int32_t centered_code(const qco::TensorView& view, int64_t i) {
  switch (view.dtype) {
    case qco::DType::kUFixed8: return view.as<const uint8_t>()[i] + view.offset;
    case qco::DType::kUFixed16: return view.as<const uint16_t>()[i] + view.offset;
    case qco::DType::kSFixed8: return view.as<const int8_t>()[i] + view.offset;
    case qco::DType::kSFixed16: return view.as<const int16_t>()[i] + view.offset;
    default: return 0;
  }
}

// f(codes) with a fixed-point view's codes as a pointer of their own type: one loop per code
// type, no switch per element (a weight read where each row meets it).
template <typename F>
void with_codes(const qco::TensorView& view, F&& f) {
  switch (view.dtype) {
    case qco::DType::kUFixed8: f(view.as<const uint8_t>()); break;
    case qco::DType::kUFixed16: f(view.as<const uint16_t>()); break;
    case qco::DType::kSFixed8: f(view.as<const int8_t>()); break;
    case qco::DType::kSFixed16: f(view.as<const int16_t>()); break;
    default: break;
  }
}

using qco::apply;
using qco::FixedMultiplier;
using qco::fixed_multiplier;

// What saturate_code needs of an output, held by value: a loop storing uint8_t codes (which
// may alias anything) would otherwise reload them from the view after every store.
struct CodeRange {
  int32_t offset;
  int32_t top;  // the largest code
};

inline CodeRange code_range(const qco::TensorView& out) { return {out.offset, max_code(out.dtype)}; }

// A real-valued code (value already in units of the output's scale) to the output's code:
// minus the QNN offset, saturated to [0, top].
inline int32_t saturate_code(int64_t scaled, CodeRange out) {
  return static_cast<int32_t>(qco::saturate(scaled - out.offset, 0, out.top));
}

// The multipliers of an op whose activations have this dtype (see FixedMultiplier): 15 bits
// for 8-bit codes, whose products then stay in 32 bits (a larger shift rounds them all to 0),
// 31 bits for 16-bit codes, products in int64.
inline FixedMultiplier activation_multiplier(float real, qco::DType activation) {
  return activation == qco::DType::kUFixed8 ? fixed_multiplier(real, 15, 31) : fixed_multiplier(real, 31, 62);
}

// The per-call constants below are computed without libm: frexp, ldexp and nearbyint are calls
// of 10-30 packets each on Hexagon, which a decode call of a few hundred packets notices.

// std::frexp's exponent of v (|v| < 2^e <= 2 |v|), from its bits: 0 for zero, infinities and
// NaN (what glibc and musl leave), a subnormal's from its highest set bit. No call: the compiler
// would otherwise call frexpf on every path and pick its answer (~10 packets a call).
inline int32_t frexp_exponent(float v) {
  const uint32_t bits = qco::detail::to_bits(v);
  const int32_t biased = static_cast<int32_t>(bits >> 23 & 0xFF);
  if (biased == 0xFF) return 0;
  if (biased == 0) {
    const uint32_t mantissa = bits & 0x7FFFFF;  // v = mantissa 2^-149
    return mantissa == 0 ? 0 : (31 - __builtin_clz(mantissa)) - 148;
  }
  return biased - 126;
}

// fixed_multiplier(real, 31, 62) without libm: real 2^(31 - e) is a float in [2^30, 2^31), whole
// already (24 significant bits), so the rounding leaves it and it never reaches 2^31.
inline FixedMultiplier fixed_multiplier_31(float real) {
  if (!(real > 0.0f)) return {0, 1};
  if (!(real < 1e30f)) real = 1e30f;
  const int32_t shift = 31 - frexp_exponent(real);
  if (shift < 1) return {(int64_t{1} << 31) - 1, 1};
  if (shift > 62) return {0, 1};
  return {static_cast<int64_t>(real * qco::detail::exp2_whole(shift)), shift};
}

// ratio 2^shift rounded (half to even), capped at 2^bits - 1; shift and bits in [0, 127]. Times a
// power of two, which is exact as std::ldexp is.
inline int64_t scaled_ratio(float ratio, int32_t shift, int32_t bits) {
  const float scaled = ratio * qco::detail::exp2_whole(shift);
  const float limit = qco::detail::exp2_whole(bits) - 1.0f;
  return static_cast<int64_t>(qco::round_half_even(scaled < limit ? scaled : limit));
}

// Two non-negative ratios as integers over one shift, apply({1, shift}, a first + b second) their
// sum of products: the larger ratio takes `bits` bits, the shift clamped to [min_shift,
// max_shift] (past max_shift every product rounds to 0; below min_shift they saturate anyway).
struct TermScales {
  int64_t first;
  int64_t second;
  int32_t shift;
};

inline TermScales term_scales(float first, float second, int32_t bits, int32_t min_shift, int32_t max_shift) {
  const auto bounded = [](float ratio) { return ratio > 0.0f ? (ratio < 1e30f ? ratio : 1e30f) : 0.0f; };  // NaN: 0
  first = bounded(first), second = bounded(second);
  const int32_t exponent = frexp_exponent(first > second ? first : second);  // both below 2^exponent
  int32_t shift = bits - exponent;
  shift = shift < min_shift ? min_shift : (shift > max_shift ? max_shift : shift);
  return {scaled_ratio(first, shift, bits), scaled_ratio(second, shift, bits), shift};
}

// apply({1, scales.shift}, a first + b second).
inline int64_t apply_terms(const TermScales& scales, int64_t a, int64_t b) {
  return apply({1, scales.shift}, a * scales.first + b * scales.second);
}

}  // namespace LlmOpPackage
