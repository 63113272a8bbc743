// exp and erfc for the gated activations, written so a loop over them vectorizes without
// -ffast-math (no branches, no libm calls): the libm scalar calls made SiLU and GELU
// compute-bound at a fifth of memory bandwidth.
#pragma once

#include <cstdint>
#include <cstring>

namespace LlmOpPackage {

// e^x within 2 ulp over the float range (Cody-Waite reduction, Cephes' degree-6 polynomial);
// saturates to 0 below -87.3 and to 2^127 * e^0.7 above 88.7 instead of producing inf.
inline float vector_exp(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.7f ? 88.7f : x;
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer, half to even
  const float n = (x * 1.44269504088896341f + shifter) - shifter;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;  // 2^n
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// erfc(z) for z >= 0 with a fractional error below 1.2e-7 (Numerical Recipes' Chebyshev fit).
inline float vector_erfc(float z) {
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  return t * vector_exp(-z * z + p);
}

}  // namespace LlmOpPackage
