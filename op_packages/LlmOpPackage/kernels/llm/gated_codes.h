// The gated activations (SiluAndMul, GeluAndMul) on codes: y = act(a) * b with a, b codes of x
// (one encoding) and y a code of the same dtype, in integers that the portable loops here and the
// HVX loops (gated_hvx.h) compute alike. 8-bit codes: act(a) in the output's units is a table of
// 256 values (computed in float), its product with b - zero point requantized by a rounding shift.
// 16-bit codes: a table of 65536 values has no HVX lookup (vlut16 reads 256 entries; VTCM
// gathers are not for every target), so act(a) = v g(v) is computed from a table of 64
// segments of g that vlut16 reads, and the rest in integer arithmetic (the scheme below).
// Both depend on the activation and the encodings alone, so they are prepared once per encoding
// (prepared_cache.h): a later call at the same encodings only reads them. Which loops run, and the
// caches of what they read: gated.h.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "llm_fixed.h"
#include "prepared_cache.h"

namespace LlmOpPackage {

using Activation = float (*)(float);

// What a gated activation prepares depends on: the activation and both tensors' encodings.
struct GateKey {
  Activation act;
  qco::detail::Encodings encodings;

  bool operator==(const GateKey& other) const {
    return act == other.act && qco::detail::same(encodings, other.encodings);
  }
};

// The slots of each scheme's cache: one gated activation per layer, a model's worth.
constexpr int32_t kGateSlots = 64;

// ---- 8-bit codes: a table of act(a) per code ----

// act(v) scaled into the output's units and by 2^shift, magnitude below 2^15 (its product with
// a 9-bit b fits a 32-bit lane, an int16 table).
struct GateScale {
  float ratio;    // x.scale / y.scale
  int32_t shift;  // of the rounding shift that requantizes act(a) * (b - zp)
  int32_t limit;  // largest magnitude of a table entry
};

// The shift from a bound on |act(v)| over every code: |silu(v)|, |gelu(v)| <= |v| + 1.
inline GateScale gate_scale(const qco::TensorView& y, const qco::TensorView& x) {
  const int32_t bits = 15, max_shift = 30;
  const float ratio = x.scale * (1.0f / y.scale);
  const int32_t low = x.offset, high = max_code(x.dtype) + x.offset;
  const float largest = x.scale * static_cast<float>(low < -high ? -low : high) + 1.0f;
  int exponent = 0;
  std::frexp(largest * ratio, &exponent);  // largest * ratio < 2^exponent
  int32_t shift = bits - exponent;
  shift = shift < 1 ? 1 : (shift > max_shift ? max_shift : shift);
  return {ratio, shift, (1 << bits) - 1};
}

// The 8-bit scheme's integers: the rounding shift and act(a) of every code, as the portable loop
// reads them (the HVX loop's: Gate8Hvx, gated_hvx.h).
struct Gate8 {
  GateScale scale;
  int16_t values[256];  // |value| < 2^15 (gate_scale)
};

// act(dequantize(code)) of every code in fixed point: times ratio 2^shift (a power of two: exact,
// as std::ldexp), rounded half to even (as std::nearbyint, without its call), clamped to the limit.
inline void gate_values(int16_t (&values)[256], Activation act, const qco::TensorView& x, const GateScale& scale) {
  const float power = static_cast<float>(int32_t{1} << scale.shift), limit = static_cast<float>(scale.limit);
  for (int32_t code = 0; code < 256; ++code) {
    const float scaled = act(x.dequantize(code)) * scale.ratio * power;
    const float clamped = !(scaled > -limit) ? -limit : (!(scaled < limit) ? limit : scaled);
    values[code] = static_cast<int16_t>(qco::round_half_even(clamped));
  }
}

inline bool make_gate8(Gate8& gate, Activation act, const qco::TensorView& y, const qco::TensorView& x) {
  gate.scale = gate_scale(y, x);
  gate_values(gate.values, act, x, gate.scale);
  return true;
}

// y[r, i] = saturate(apply({1, shift}, value(x[r, i]) * (x[r, d + i] + offset)) - y.offset), the
// values from a table of the 256 codes.
inline void gated_u8(qco::TensorView& y, const qco::TensorView& x, const Gate8& gate) {
  const uint8_t* in = x.as<const uint8_t>();
  uint8_t* out = y.as<uint8_t>();
  const int64_t d = y.dims[y.rank - 1];
  const int64_t rows = d == 0 ? 0 : y.numel() / d;
  // Locals, not members: a uint8_t store may alias anything, so those would be reloaded per store.
  const int16_t* table = gate.values;
  const int32_t offset = x.offset;
  const CodeRange range = code_range(y);
  const FixedMultiplier rounding{1, gate.scale.shift};
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* gate = in + 2 * d * r;
    for (int64_t i = 0; i < d; ++i) {
      const int64_t product = static_cast<int64_t>(table[gate[i]]) * (gate[d + i] + offset);
      out[r * d + i] = static_cast<uint8_t>(saturate_code(apply(rounding, product), range));
    }
  }
}

// ---- 16-bit codes: g(v) from a table of 64 segments, in integers ----
//
// SiLU and both GELUs are act(v) = v g(v) with g(-v) = 1 - g(v) (g the sigmoid, the normal CDF,
// the sigmoid of 2u). With c = a + offset, n = |c|, u = b + offset and tail(z) = g(-z) <= 1/2,
//   y = act(v) b / y.scale = sign(c u) * n |u| * g * x.scale^2 / y.scale,
//   g = 1 - tail(scale n) for c >= 0, tail(scale n) for c < 0.
// n |u| < 2^32 is exact; g comes from a table of 64 segments of 2^k consecutive n, each a
// polynomial of degree 5 in block floating point (its coefficients scaled by 2^e, e in [0, 31],
// so that its values use 27-29 bits: a tail of 1e-9 keeps the precision of one of 0.3), evaluated
// in 32-bit fixed point by Horner's rule:
//   t    = the position of n within its segment, a 16-bit fraction
//   tail = c0 + ((c1 + ... + ((c5 t) >> 16) ... ) t >> 16)    (in units of unit 2^-e)
//   c < 0:  value = tail,                drop = e
//   c >= 0: value = unit - (tail >> e),  drop = 0
//   y = sign(c u) * apply({1, shift}, (value * n |u|) >> drop) - y.offset
// Every >> is an arithmetic shift of an exact product (HVX's vmpye: (word * uhalf) >> 16; the
// 64-bit product and its shifts by vmpye/vmpyo and per-lane shifts). `unit` (2^29..2^30) is the
// mantissa of x.scale^2 / y.scale and 2^shift its exponent, so the only error beyond the final
// rounding is the table's: the quintic through tail at the segment's Chebyshev nodes (at its codes
// when it holds fewer than 8), plus tail's own float32 error and the fit's. A quintic over 64
// segments approximates tail better than a cubic over 256 (its error falls as the segment's width
// to the sixth power) and reads 12 halfword tables of 4 vlut16 each per 128 codes instead of 8 of
// 16: 48 vlut16, where 128 held the loop above one packet per element (v66 issues one a packet,
// and it takes the shift resource too).
// tests/test_gated_u16.py measures outputs within 0.5 + 0.016 step of the exact act(v) b (the
// cubics over 256 segments: 0.5 + 0.008; the test's bound: 0.5 + 0.05): tail's float32 values at
// six nodes instead of four. The fit is computed in double (in float its rounding cost 0.01 step
// more).
// The table reaches as far as an output could notice tail (tail 2^32 x.scale^2/y.scale < 1/16):
// 63 segments of 2^k codes (k the least that covers that or every code); past it tail is 0.

constexpr int32_t kSegments = 64;
constexpr int32_t kDegree = 5;
constexpr int32_t kTerms = kDegree + 1;
constexpr int32_t kExponentBits = 5;  // the low bits of the last coefficient holding its segment's e

struct Gate16 {
  int32_t coefficients[kTerms * kSegments];  // c0 .. c5 | e of segment s at [s], [64 + s], ...
  int32_t unit;                              // g = 1: round(mantissa of x.scale^2 / y.scale * 2^30)
  int32_t segment_bits;                      // k: 2^k codes of n per segment
  int32_t offset;                            // x.offset: c = a + offset
  int32_t shift;                             // of the rounding shift that requantizes the products
};

// g of one gate code: value 2^-drop in units of `unit`.
struct GateTerm {
  int32_t value;
  int32_t drop;
};

// (a * b) >> 16 for a 32-bit a and a 16-bit unsigned b: HVX's vmpye.
inline int32_t mul_shift16(int32_t a, int32_t b) { return static_cast<int32_t>((int64_t{a} * b) >> 16); }

// g(dequantize(code)) for a 16-bit code (the scheme above).
inline GateTerm gate16_term(const Gate16& gate, int32_t code) {
  const int32_t centered = code + gate.offset;
  const int32_t n = centered < 0 ? -centered : centered;
  const int32_t k = gate.segment_bits;
  const int32_t segment = (n >> k) < kSegments - 1 ? n >> k : kSegments - 1;
  const int32_t t = (n & ((1 << k) - 1)) << (16 - k);
  const int32_t* c = gate.coefficients + segment;
  const int32_t exponent = c[kDegree * kSegments] & ((1 << kExponentBits) - 1);
  int32_t tail = c[kDegree * kSegments] - exponent;
  for (int32_t m = kDegree - 1; m >= 0; --m) tail = c[m * kSegments] + mul_shift16(tail, t);
  if (centered < 0) return {tail, exponent};
  return {gate.unit - (tail >> exponent), 0};
}

// g(-x) = act(-x) / -x for x > 0 (1/2 at 0), in float as act computes it.
inline float tail_of(Activation act, float x) { return x > 0.0f ? act(-x) / -x : 0.5f; }

// The first whole x from which tail(x) < below (x at most 64).
inline float tail_reach(Activation act, double below) {
  float reach = 1.0f;
  while (reach < 64.0f && tail_of(act, reach) >= below) reach += 1.0f;
  return reach;
}

// Where a segment's polynomial meets tail: `count` positions t in [0, 1] and, for Newton's
// divided differences, inverse[order - 1][i - order] = 1 / (t[i] - t[i - order]), computed by
// the compiler.
struct FitNodes {
  int32_t count;
  double t[kTerms];
  double inverse[kDegree][kDegree];
};

constexpr FitNodes fit_nodes(int32_t count, const double (&t)[kTerms]) {
  FitNodes nodes{count, {}, {}};
  for (int32_t i = 0; i < count; ++i) nodes.t[i] = t[i];
  for (int32_t order = 1; order < count; ++order) {
    for (int32_t i = order; i < count; ++i) nodes.inverse[order - 1][i - order] = 1.0 / (t[i] - t[i - order]);
  }
  return nodes;
}

// The Chebyshev nodes of [0, 1], (1 - cos((2i + 1) pi / 12)) / 2: a segment of 8 codes or more.
constexpr FitNodes kChebyshevNodes =
    fit_nodes(kTerms, {0.0170370868554659, 0.146446609406726, 0.370590477448740, 0.629409522551260,
                      0.853553390593274, 0.982962913144534});
// A segment of 1, 2 or 4 codes: the codes themselves, t = i / 2^k (exact there).
constexpr FitNodes kCodeNodes[3] = {fit_nodes(1, {0.0}), fit_nodes(2, {0.0, 0.5}),
                                    fit_nodes(4, {0.0, 0.25, 0.5, 0.75})};

// c0..c5 of tail over the codes n = j 2^k + i, i < 2^k, as a polynomial in t = i / 2^k: the
// polynomial through tail at `nodes` (Newton's divided differences, expanded), in double from
// tail's float values: the same bits on every target (no contraction, no libm call).
inline void fit_segment(double (&c)[kTerms], Activation act, float scale, int32_t j, int32_t k) {
  const FitNodes& nodes = k < 3 ? kCodeNodes[k] : kChebyshevNodes;
  const int32_t last = nodes.count - 1;
  const float codes = static_cast<float>(1 << k);
  double newton[kTerms];  // divided differences, in place
  for (int32_t i = 0; i <= last; ++i) {
    newton[i] = tail_of(act, (static_cast<float>(j) + static_cast<float>(nodes.t[i])) * codes * scale);
  }
  for (int32_t order = 1; order <= last; ++order) {
    for (int32_t i = last; i >= order; --i) {
      newton[i] = (newton[i] - newton[i - 1]) * nodes.inverse[order - 1][i - order];
    }
  }
  // p = newton[0] + (t - t0)(newton[1] + (t - t1)(... + (t - t[last - 1]) newton[last])), expanded
  for (int32_t m = 0; m < kTerms; ++m) c[m] = 0.0;
  c[0] = newton[last];
  for (int32_t i = last - 1; i >= 0; --i) {
    for (int32_t m = last - i; m > 0; --m) c[m] = c[m - 1] - nodes.t[i] * c[m];
    c[0] = newton[i] - nodes.t[i] * c[0];
  }
}

// A segment's coefficients in units of unit 2^-e (e in [0, 31], the largest keeping the sum of
// their magnitudes, a bound on every value Horner's rule reaches for t in [0, 1), under 2^29), e
// in the last coefficient's low bits.
inline void store_segment(Gate16& gate, const double (&c)[kTerms], int32_t j) {
  const double unit = gate.unit;
  double bound = 0.0;
  for (const double term : c) bound += term < 0.0 ? -term : term;
  int power = 0;
  std::frexp(bound * unit, &power);  // bound unit < 2^power
  const int32_t exponent = c[0] > 0.0 ? (power > 29 ? 0 : (power < -2 ? 31 : 29 - power)) : 31;
  const double scale = std::ldexp(unit, exponent);
  const auto fixed = [scale](double v) {
    const double limit = 0x1p31 - 1.0;
    v *= scale;
    // to the nearest integer (ties to even) by adding and subtracting 1.5 2^52 (no libm call);
    // from 2^51 on a double is whole already
    const double shifter = 0x1.8p52;
    v = v > -0x1p51 && v < 0x1p51 ? (v + shifter) - shifter : v;
    return static_cast<int32_t>(v < -limit ? -limit : (v > limit ? limit : v));
  };
  const uint32_t low = (1u << kExponentBits) - 1;
  for (int32_t m = 0; m < kDegree; ++m) gate.coefficients[m * kSegments + j] = fixed(c[m]);
  gate.coefficients[kDegree * kSegments + j] =
      static_cast<int32_t>((static_cast<uint32_t>(fixed(c[kDegree])) & ~low) | exponent);
}

// The scheme's integers for this activation and these encodings, or false outside its domain
// (the float path then runs): zero points that are codes, positive finite scales, and
// 2^-33 <= x.scale^2 / y.scale < 2^4.
inline bool make_gate16(Gate16& gate, Activation act, const qco::TensorView& y, const qco::TensorView& x) {
  const float infinity = std::numeric_limits<float>::infinity();
  if (!(x.scale > 0.0f && x.scale < infinity && y.scale > 0.0f && y.scale < infinity)) return false;
  if (x.offset < -65535 || x.offset > 0 || y.offset < -65535 || y.offset > 0) return false;
  const float real = x.scale * (x.scale * (1.0f / y.scale));
  int exponent = 0;
  const float mantissa = std::frexp(real, &exponent);  // real = mantissa 2^exponent
  if (!(real > 0.0f) || exponent > 4 || exponent < -32) return false;
  gate.unit = static_cast<int32_t>(std::nearbyint(std::ldexp(mantissa, 30)));
  gate.shift = 30 - exponent;
  gate.offset = x.offset;
  const int32_t largest = -x.offset > 65535 + x.offset ? -x.offset : 65535 + x.offset;  // of n
  const float reach = tail_reach(act, std::ldexp(1.0, -36) / real);
  const auto beyond = [&](int32_t n) { return n > largest || x.scale * static_cast<float>(n) >= reach; };
  int32_t k = 0;
  while (!beyond((kSegments - 1) << k)) ++k;
  gate.segment_bits = k;
  // Every entry written below, none zero-filled first: a memset, which the Hexagon toolchain's C
  // library does a byte at a time.
  for (int32_t j = 0; j < kSegments; ++j) {
    double c[kTerms] = {};  // past the reach (and the last segment): tail 0
    if (j < kSegments - 1 && !beyond(j << k)) fit_segment(c, act, x.scale, j, k);
    store_segment(gate, c, j);
  }
  return true;
}

// y = sign(c u) apply({1, shift}, (value n |u|) >> drop) - y.offset over the rows, each gate
// code's (value, drop) from `term`.
template <typename Term>
void gated_u16_rows(qco::TensorView& y, const qco::TensorView& x, const Gate16& gate, const Term& term) {
  const uint16_t* in = x.as<const uint16_t>();
  uint16_t* out = y.as<uint16_t>();
  const int64_t d = y.dims[y.rank - 1];
  const int64_t rows = d == 0 ? 0 : y.numel() / d;
  const int32_t offset = x.offset;
  const CodeRange range = code_range(y);
  const FixedMultiplier rounding{1, gate.shift};
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* gate_row = in + 2 * d * r;
    for (int64_t i = 0; i < d; ++i) {
      const int32_t c = gate_row[i] + offset, u = gate_row[d + i] + offset;
      const int64_t product = int64_t{c < 0 ? -c : c} * (u < 0 ? -u : u);  // < 2^32
      const GateTerm g = term(gate_row[i]);
      const int64_t magnitude = apply(rounding, (g.value * product) >> g.drop);
      out[r * d + i] = static_cast<uint16_t>(saturate_code((c < 0) != (u < 0) ? -magnitude : magnitude, range));
    }
  }
}

// Every gate code's term (host only: 512 KB an encoding), prepared once per activation and
// encodings as the Gate16 is: a prefill's call then reads each element's instead of evaluating
// its polynomial (16a8w prefill on the host: the gate 0.15 -> 0.05 ms a call).
struct Terms16 {
  GateTerm terms[65536];
};

inline PreparedCache<GateKey, Terms16, kGateSlots> terms16_cache;

// Each gate code's term from the table of all 65536 (`terms`, when there is one), else computed
// where it is used: the same integers either way.
inline void gated_u16(qco::TensorView& y, const qco::TensorView& x, const Gate16& gate, const Terms16* terms) {
  if (terms == nullptr) {
    gated_u16_rows(y, x, gate, [&gate](int32_t code) { return gate16_term(gate, code); });
    return;
  }
  const GateTerm* table = terms->terms;
  gated_u16_rows(y, x, gate, [table](int32_t code) { return table[code]; });
}

// The table of every gate code's term for `key`: kept from the first call at its encodings, or
// made for this call (`spare`) when the cache is full; nullptr when no memory is left for it.
inline const Terms16* gate16_terms(const GateKey& key, const Gate16& gate, decltype(terms16_cache)::Spare& spare) {
  return terms16_cache.find_or_make(key, spare, [&gate](Terms16& table) {
    for (int32_t code = 0; code < 65536; ++code) table.terms[code] = gate16_term(gate, code);
    return true;
  });
}

}  // namespace LlmOpPackage
