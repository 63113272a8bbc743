// Deterministic math for kernels: exp, log, tanh, sigmoid, erf, rsqrt and pow computing the same
// bits on every target. libm's std::exp, expf, tanhf, ... are not: the host's glibc and the
// Hexagon toolchain's musl differ in the last bit, so a kernel calling them fails
// `qnn-custom-ops hexagon-check` on its float branch (the check names the call and its qco::
// replacement). These use + - * / alone (no libm call, no FMA: every build has -ffp-contract=off),
// which IEEE rounds alike on x86 and Hexagon: in float, but rsqrt's last step and pow, in double.
// Without branches (selects instead), a loop over exp, log, tanh, sigmoid, erf or rsqrt
// vectorizes without -ffast-math (the host library builds with -O3).
//
// A NaN argument is returned as it is: arithmetic on a NaN gives a NaN of other bits on Hexagon
// than on x86, and clang may turn a clamp into Hexagon's sfmin/sfmax, which drop a NaN.
//
// Each function's accuracy is stated beside it as the largest error in ulp (units in the last
// place of the float32 result) over the whole float range against double-precision libm,
// measured by qnn-custom-ops' tests/kernels/test_qco_math.py over every 4093rd float32 and dense sweeps of each
// function's working range, which also checks the Hexagon bits equal the host's.
#ifndef QCO_MATH_H_
#define QCO_MATH_H_

#include <cstdint>
#include <cstring>
#include <limits>

namespace qco {

namespace detail {

inline float from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

inline uint32_t to_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// 2^n for a whole n in [-126, 127], from its exponent bits.
inline float exp2_whole(int32_t n) { return from_bits(static_cast<uint32_t>(n + 127) << 23); }

// A whole-valued float as int32, NaN as 0: converting NaN is undefined behaviour, and a result
// computed from a NaN is NaN anyway.
inline int32_t whole(float n) { return static_cast<int32_t>(n == n ? n : 0.0f); }

// |value| with the sign of `sign`.
inline float copy_sign(float value, float sign) {
  return from_bits((to_bits(value) & 0x7fffffffu) | (to_bits(sign) & 0x80000000u));
}

// e^r for |r| <= ln(2)/2 (Cephes' degree-6 polynomial).
inline float exp_reduced(float r) {
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}

}  // namespace detail

// e^x within 2 ulp over the float range (Cody-Waite reduction, Cephes' degree-6 polynomial);
// x is clamped to [-87.3, 88.7]: below -87.3 it returns e^-87.3 (about 1.2e-38), and from
// 88.3762665 on, where the rounded exponent reaches 128, +inf. Kept as the LlmOpPackage kernels
// compute it; qco::exp below is the same polynomial over the whole float range.
inline float vector_exp(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.7f ? 88.7f : x;
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer, half to even
  const float n = (x * 1.44269504088896341f + shifter) - shifter;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  // 2^n built in unsigned arithmetic: n is in [-126, 128] here, but a NaN x leaves n NaN, whose
  // conversion to int is undefined (and shifting its negative result is too); p is NaN then
  // anyway, so any finite stand-in for n keeps the result NaN.
  const uint32_t bits = static_cast<uint32_t>(detail::whole(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return detail::exp_reduced(r) * scale;
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

// e^x within 1 ulp, subnormal results and overflow to +inf included; e^-inf = 0, NaN stays NaN.
// The result is scaled by 2^n in two exact steps (2^(n/2) twice), so no step overflows early.
inline float exp(float x) {
  float c = x < -104.0f ? -104.0f : x;  // e^-104 rounds to 0
  c = c > 89.0f ? 89.0f : c;            // e^89 overflows
  const float shifter = 12582912.0f;
  const float n = (c * 1.44269504088896341f + shifter) - shifter;
  const float r = (c - n * 0.693359375f) - n * -2.12194440e-4f;
  const int32_t power = detail::whole(n), half = power / 2;  // n in [-150, 129]
  const float y = detail::exp_reduced(r) * detail::exp2_whole(half) * detail::exp2_whole(power - half);
  return x == x ? y : x;
}

// The natural logarithm within 1 ulp (Cephes' reduction to [sqrt(1/2), sqrt(2)) and
// degree-8 polynomial); log(0) = -inf, log(negative) = NaN, log(+inf) = +inf.
inline float log(float x) {
  const bool subnormal = x < 1.17549435e-38f;
  const uint32_t bits = detail::to_bits(subnormal ? x * 8388608.0f : x);  // times 2^23
  int32_t exponent = static_cast<int32_t>((bits >> 23) & 0xffu) - 126 - (subnormal ? 23 : 0);
  float m = detail::from_bits((bits & 0x007fffffu) | 0x3f000000u);  // in [0.5, 1)
  const bool low = m < 0.707106781f;
  exponent -= low ? 1 : 0;
  const float f = (low ? m + m : m) - 1.0f;  // exact
  const float z = f * f;
  float p = 7.0376836292e-2f;
  p = p * f - 1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f - 1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f - 1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f - 2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  const float e = static_cast<float>(exponent);
  float y = p * f * z + e * -2.12194440e-4f - 0.5f * z;
  y = (f + y) + e * 0.693359375f;
  const float infinity = std::numeric_limits<float>::infinity();
  y = x == 0.0f ? -infinity : y;
  y = x < 0.0f ? std::numeric_limits<float>::quiet_NaN() : y;
  y = x == infinity ? infinity : y;
  return x == x ? y : x;
}

// The hyperbolic tangent within 1.5 ulp: Cephes' odd polynomial below |x| = 0.625, where
// 1 - 2 / (e^2|x| + 1) would cancel, that above; +-1 from |x| = 9.1 on.
inline float tanh(float x) {
  const float a = detail::copy_sign(x, 1.0f);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float large = detail::copy_sign(1.0f - 2.0f / (qco::exp(a + a) + 1.0f), x);
  return a < 0.625f ? small : (x == x ? large : x);
}

// The logistic function 1 / (1 + e^-x) within 2.5 ulp: e^x / (1 + e^x) for x < 0, so it does not
// fall to 0 where the exponential overflows (sigmoid(-100) is 3.7e-44, a subnormal).
inline float sigmoid(float x) {
  const float e = qco::exp(-detail::copy_sign(x, 1.0f));  // e^-|x|
  const float y = (x < 0.0f ? e : 1.0f) / (1.0f + e);
  return x == x ? y : x;
}

// The error function within 1.5 ulp: x + x P(x^2) below |x| = 1 (a degree-6 least-squares fit;
// x plus a small correction, so it rounds as x does), 1 - erfc(|x|) with the sign of x above.
inline float erf(float x) {
  const float a = detail::copy_sign(x, 1.0f);
  const float z = x * x;
  float p = 7.898101466707885e-5f;
  p = p * z - 8.024321286939085e-4f;
  p = p * z + 5.190049763768911e-3f;
  p = p * z - 2.6854805648326874e-2f;
  p = p * z + 1.1283612251281738e-1f;
  p = p * z - 3.761262893676758e-1f;
  p = p * z + 1.2837916612625122e-1f;
  const float small = x + x * p;
  const float large = detail::copy_sign(1.0f - vector_erfc(a), x);
  return a < 1.0f ? small : (x == x ? large : x);
}

// 1 / sqrt(x) within 1 ulp (correctly rounded but within about 1e-13 of a rounding tie): a
// bit-level first guess, two Newton steps in float and one in double, subnormals scaled into
// the normal range first; rsqrt(+-0) = +-inf, rsqrt(negative) = NaN, rsqrt(+inf) = 0.
inline float rsqrt(float x) {
  const bool subnormal = x < 1.17549435e-38f;
  const float scaled = subnormal ? x * 16777216.0f : x;  // times 2^24
  float y = detail::from_bits(0x5f375a86u - (detail::to_bits(scaled) >> 1));
  const float half = 0.5f * scaled;
  y = y * (1.5f - half * y * y);
  y = y * (1.5f - half * y * y);  // within about 2 ulp
  const double guess = y, residual = 1.0 - static_cast<double>(scaled) * (guess * guess);  // y^2 exact
  y = static_cast<float>(guess + 0.5 * guess * residual);  // a Newton step in double: rounded once
  y = subnormal ? y * 4096.0f : y;  // times 2^12
  const float infinity = std::numeric_limits<float>::infinity();
  y = x == 0.0f ? detail::copy_sign(infinity, x) : y;
  y = x < 0.0f ? std::numeric_limits<float>::quiet_NaN() : y;
  y = x == infinity ? 0.0f : y;
  return x == x ? y : x;
}

namespace detail {

// 1 / k for k = 0..19 (0 unused), rounded once by the compiler: no division at run time.
constexpr double kInverse[20] = {0.0,        1.0,        1.0 / 2,  1.0 / 3,  1.0 / 4,  1.0 / 5,  1.0 / 6,
                                 1.0 / 7,    1.0 / 8,    1.0 / 9,  1.0 / 10, 1.0 / 11, 1.0 / 12, 1.0 / 13,
                                 1.0 / 14,   1.0 / 15,   1.0 / 16, 1.0 / 17, 1.0 / 18, 1.0 / 19};

// log(x) for a positive finite double x, to about 1e-16 relative: x = m 2^e with m in
// [sqrt(1/2), sqrt(2)), log(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, by its series.
inline double log_double(double x) {
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  int32_t exponent = static_cast<int32_t>((bits >> 52) & 0x7ffu) - 1022;
  bits = (bits & 0x000fffffffffffffull) | 0x3fe0000000000000ull;  // m in [0.5, 1)
  double m;
  std::memcpy(&m, &bits, sizeof m);
  const bool low = m < 0.70710678118654752;
  exponent -= low ? 1 : 0;
  m = low ? m + m : m;
  const double s = (m - 1.0) / (m + 1.0), s2 = s * s;
  double series = kInverse[19];
  for (int32_t k = 17; k >= 1; k -= 2) series = series * s2 + kInverse[k];
  return 2.0 * s * series + exponent * 0.69314718055994531;
}

// e^t for a double t in [-104, 89], to about 1e-16 relative: t = n ln 2 + r, |r| <= ln(2)/2,
// e^r by its Taylor series to r^13, 2^n from the exponent bits.
inline double exp_double(double t) {
  const double n = (t * 1.4426950408889634 + 6755399441055744.0) - 6755399441055744.0;  // 1.5 2^52
  const double r = (t - n * 0.6931471803691238) - n * 1.9082149292705877e-10;  // ln 2 in two parts
  double sum = 1.0;
  for (int32_t k = 13; k >= 1; --k) sum = 1.0 + sum * r * kInverse[k];
  const uint64_t bits = static_cast<uint64_t>(static_cast<int64_t>(n) + 1023) << 52;
  double scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return sum * scale;
}

// A double rounded to float, +inf past the float range (where the conversion is undefined).
inline float to_float(double value) {
  return value >= 3.4028235677973366e38 ? std::numeric_limits<float>::infinity() : static_cast<float>(value);
}

}  // namespace detail

// x^y within 1 ulp (correctly rounded unless the exact result lies within about 1e-15 of a
// rounding tie): y log|x| and its exponential in double arithmetic, rounded to float once. C's
// special cases: x^0 = 1 and 1^y = 1 (even for a NaN), (-1)^+-inf = 1; a negative x only to a
// whole y (the sign of x for an odd y), else NaN; 0, inf and +-inf powers to 0 or inf. Some 60
// double operations, which Hexagon runs in software: for constants computed once per tensor or
// row, not inner loops (there, exp(y * log(x)) costs two float calls and is up to 1 + 0.6 |y log x| ulp off).
inline float pow(float x, float y) {
  const float infinity = std::numeric_limits<float>::infinity();
  const float a = detail::copy_sign(x, 1.0f);  // |x|
  const bool finite_y = y - y == 0.0f;
  const bool small_y = y < 8388608.0f && y > -8388608.0f;  // 2^23: from there every float is whole
  const int32_t integer_y = static_cast<int32_t>(small_y ? y : 0.0f);
  const bool whole_y = finite_y && (!small_y || static_cast<float>(integer_y) == y);
  const bool odd_y = whole_y && small_y && (integer_y & 1) != 0;  // 2^23 .. 2^24 are even
  double t = static_cast<double>(y) * detail::log_double(a > 0.0f && a < infinity ? a : 1.0f);
  t = t < -104.0 ? -104.0 : (t > 89.0 ? 89.0 : (t == t ? t : 0.0));  // NaN (a NaN y, inf * 0): any finite t
  float result = detail::to_float(detail::exp_double(t));
  const bool grows = (a > 1.0f) == (y > 0.0f);  // 0^-y, inf^y, (>1)^inf, (<1)^-inf
  result = a == 0.0f || a == infinity || !finite_y ? (grows ? infinity : 0.0f) : result;
  result = a == 1.0f ? 1.0f : result;
  result = odd_y && (detail::to_bits(x) >> 31) != 0 ? -result : result;
  result = x < 0.0f && a != infinity && finite_y && !whole_y ? std::numeric_limits<float>::quiet_NaN() : result;
  result = x != x || y != y ? std::numeric_limits<float>::quiet_NaN() : result;
  return y == 0.0f || x == 1.0f ? 1.0f : result;
}

}  // namespace qco

#endif  // QCO_MATH_H_
