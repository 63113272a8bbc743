// Integer arithmetic of the LlmOpPackage's quantized branches (UFIXED_POINT_8/16 activations):
// codes minus zero points multiplied and summed in integers, requantized with a fixed-point
// multiplier and a rounding shift. Every float these branches use is computed once per tensor or
// row from integers, by the same code on every target, so the host computes the phone's bits;
// an HVX path must compute exactly these integers.
#pragma once

#include <cmath>
#include <cstdint>

#include "llm_access.h"

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

// A positive real factor as mantissa * 2^-shift, the mantissa of `bits` bits (15: the product
// with a 17-bit value fits an HVX 32-bit lane; 31: full float precision, products in int64).
// Taken from the float's exponent and mantissa, so every target derives the same integers; a
// factor too large for the shift range saturates what it multiplies anyway, and is capped.
struct FixedMultiplier {
  int64_t mantissa;
  int32_t shift;
};

inline FixedMultiplier fixed_multiplier(float real, int32_t bits) {
  if (!(real > 0.0f)) return {0, 1};
  if (!(real < 1e30f)) real = 1e30f;
  int exponent = 0;
  const float fraction = std::frexp(real, &exponent);  // real = fraction * 2^exponent, fraction in [0.5, 1)
  int64_t mantissa = static_cast<int64_t>(std::nearbyint(std::ldexp(fraction, bits)));
  int32_t shift = bits - exponent;
  if (mantissa == (int64_t{1} << bits)) {  // rounded up to the next power of two
    mantissa >>= 1;
    --shift;
  }
  if (shift < 1) return {(int64_t{1} << bits) - 1, 1};
  if (shift > 62) return {0, 1};
  return {mantissa, shift};
}

// value * multiplier, rounded half up: (value * mantissa + 2^(shift-1)) >> shift. The shift of a
// negative int64 is arithmetic (defined since C++20, and by every compiler we build with).
inline int64_t apply(FixedMultiplier multiplier, int64_t value) {
  return (value * multiplier.mantissa + (int64_t{1} << (multiplier.shift - 1))) >> multiplier.shift;
}

// A real-valued code (value already in units of the output's scale) to the output's code:
// minus the QNN offset, saturated to [0, max].
inline int32_t saturate_code(int64_t scaled, const qco::TensorView& out) {
  const int64_t code = scaled - out.offset;
  const int64_t top = max_code(out.dtype);
  return static_cast<int32_t>(code < 0 ? 0 : (code > top ? top : code));
}

// Writes code `i` of an unsigned fixed-point view.
inline void store_code(qco::TensorView& view, int64_t i, int32_t code) {
  if (view.dtype == qco::DType::kUFixed8) {
    view.as<uint8_t>()[i] = static_cast<uint8_t>(code);
  } else {
    view.as<uint16_t>()[i] = static_cast<uint16_t>(code);
  }
}

// Mantissa bits of the multipliers of an op whose activations have this dtype (see
// FixedMultiplier): 15 for 8-bit codes, 31 for 16-bit codes.
inline int32_t multiplier_bits(qco::DType activation) { return activation == qco::DType::kUFixed8 ? 15 : 31; }

}  // namespace LlmOpPackage
