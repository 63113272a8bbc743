// Fixed-point requantization that a portable loop and an HVX loop compute identically, and
// the HVX helpers to write the second (docs/kernels.md "An HVX path for your kernel"). The portable
// loop is the reference the host runs; put the HVX loop behind #if defined(__HVX__) and let
// `qnn-custom-ops hexagon-check` compare the two bit for bit.
//
//   const qco::FixedMultiplier m = qco::fixed_multiplier(in.scale * (1.0f / out.scale), 15, 31);
//   portable:  y[i] = qco::saturate(qco::apply(m, x[i] + in.offset) - out.offset, 0, 255);
//   HVX:       qco::hvx::requantize_words(words, m, -out.offset), then saturating packs.
#ifndef QCO_HVX_H_
#define QCO_HVX_H_

#include <cmath>
#include <cstdint>

#if defined(__HVX__)
#include <hexagon_types.h>
#include <hvx_hexagon_protos.h>
#endif

namespace qco {

// A positive real factor as mantissa * 2^-shift, the mantissa of `bits` bits (15: its product
// with a 16-bit value fits an HVX 32-bit lane; 31: full float precision, products in int64).
// Taken from the float's exponent and mantissa, so every target derives the same integers. A
// factor too large for the shift range saturates what it multiplies anyway and is capped; one
// needing a shift past `max_shift` rounds every product it can meet to 0 and is 0.
struct FixedMultiplier {
  int64_t mantissa;
  int32_t shift;
};

inline FixedMultiplier fixed_multiplier(float real, int32_t bits, int32_t max_shift) {
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
  if (shift > max_shift) return {0, 1};
  return {mantissa, shift};
}

// value * multiplier rounded half up, as ((value * mantissa) >> (shift - 1) + 1) >> 1: equal to
// (v + 2^(shift-1)) >> shift, without the addition that overflows a 32-bit lane. The shift of a
// negative integer is arithmetic (defined since C++20, and by every compiler we build with).
inline int64_t apply(FixedMultiplier multiplier, int64_t value) {
  return (((value * multiplier.mantissa) >> (multiplier.shift - 1)) + 1) >> 1;
}

// value clamped to [low, high].
inline int64_t saturate(int64_t value, int64_t low, int64_t high) {
  return value < low ? low : (value > high ? high : value);
}

#if defined(__HVX__)
namespace hvx {

constexpr int64_t kBytes = 128;  // one HVX vector (hvx_length128b)

// One vector from any address (vmemu: no alignment needed).
inline HVX_Vector load(const void* at) { return *static_cast<const HVX_UVector*>(at); }
inline void store(void* at, HVX_Vector v) { *static_cast<HVX_UVector*>(at) = v; }

// A tail of fewer than 128 bytes is read and written through the aligned vectors holding its
// first and last bytes: an aligned vector lies within one page, so it is always mapped when one
// of its bytes is, and the bytes of it past the tensor are read but never kept or written. (A
// copy through a buffer instead costs a memset and a memcpy, some 80 packets per tail: at decode
// shapes, as much as the rest of a call.)
inline const HVX_Vector* aligned_vector(const void* at) {
  return reinterpret_cast<const HVX_Vector*>(reinterpret_cast<uintptr_t>(at) & ~static_cast<uintptr_t>(kBytes - 1));
}

// The first `count` bytes of a vector (none when count <= 0, all when count >= 128).
inline HVX_VectorPred first_bytes(int64_t count) {
  if (count >= kBytes) return Q6_Q_vcmp_eq_VbVb(Q6_V_vzero(), Q6_V_vzero());
  return Q6_Q_vsetq_R(static_cast<int32_t>(count > 0 ? count : 0));
}

// The `count` bytes at `at`, 0 < count < 128, the rest zero: a tail never reads past the aligned
// vector holding its last byte. Without load_bytes' checks, for a count known to be a tail.
inline HVX_Vector load_tail(const void* at, int64_t count) {
  const HVX_Vector low = *aligned_vector(at), high = *aligned_vector(static_cast<const uint8_t*>(at) + count - 1);
  const int32_t offset = static_cast<int32_t>(reinterpret_cast<uintptr_t>(at));  // valign takes its low 7 bits
  return Q6_V_vand_QV(Q6_Q_vsetq_R(static_cast<int32_t>(count)), Q6_V_valign_VVR(high, low, offset));
}

// The `count` bytes at `at` (all 128 when count >= 128), the rest zero.
inline HVX_Vector load_bytes(const void* at, int64_t count) {
  if (count >= kBytes) return load(at);
  if (count <= 0) return Q6_V_vzero();
  return load_tail(at, count);
}

// The first `count` bytes of v (all 128 when count >= 128) stored at `at`: v rotated to the
// address's alignment, stored under a byte mask into the one or two aligned vectors it meets.
inline void store_bytes(void* at, HVX_Vector v, int64_t count) {
  if (count >= kBytes) {
    store(at, v);
    return;
  }
  if (count <= 0) return;
  const int64_t offset = static_cast<int64_t>(reinterpret_cast<uintptr_t>(at) & (kBytes - 1)), end = offset + count;
  HVX_Vector* first = const_cast<HVX_Vector*>(aligned_vector(at));
  const HVX_Vector rotated = Q6_V_vlalign_VVR(v, v, static_cast<int32_t>(offset));  // byte offset + i: v's byte i
  Q6_vmem_QRIV(Q6_Q_and_QQn(first_bytes(end), first_bytes(offset)), first, rotated);
  if (end > kBytes) Q6_vmem_QRIV(first_bytes(end - kBytes), first + 1, rotated);
}

// The sum of the 32 unsigned word lanes of v (what vrmpy accumulates).
inline int64_t sum_words(HVX_Vector v) {
  alignas(kBytes) uint32_t lanes[kBytes / 4];
  *reinterpret_cast<HVX_Vector*>(lanes) = v;
  int64_t sum = 0;
  for (const uint32_t lane : lanes) sum += lane;
  return sum;
}

// apply({1, shift}, w) + add on 32 int32 lanes: the rounding shift alone, in two arithmetic
// shifts as apply() computes it.
inline HVX_Vector rounding_shift_words(HVX_Vector words, int32_t shift, int32_t add) {
  const HVX_Vector halved = Q6_Vw_vasr_VwR(words, shift - 1);
  const HVX_Vector rounded = Q6_Vw_vasr_VwR(Q6_Vw_vadd_VwVw(halved, Q6_V_vsplat_R(1)), 1);
  return Q6_Vw_vadd_VwVw(rounded, Q6_V_vsplat_R(add));
}

// apply(multiplier, w) + add on 32 int32 lanes, for a multiplier of at most 15 bits whose
// products with the lanes stay in 32 bits (fixed_multiplier(real, 15, 31) of 16-bit values).
inline HVX_Vector requantize_words(HVX_Vector words, FixedMultiplier multiplier, int32_t add) {
  const HVX_Vector scaled = Q6_Vw_vmpyie_VwVuh(words, Q6_V_vsplat_R(static_cast<int32_t>(multiplier.mantissa)));
  return rounding_shift_words(scaled, multiplier.shift, add);
}

// apply(multiplier, w) + add on 32 int32 lanes for a 31-bit multiplier (fixed_multiplier(real,
// 31, 62)) whose shift is at least 33: the high words of the 64-bit products (vmpye, vmpyo),
// floor(w * m / 2^32), then the rest of the shift, as (w * m) >> (shift - 1) = high >> (shift - 33).
inline HVX_Vector requantize_words_wide(HVX_Vector words, FixedMultiplier multiplier, int32_t add) {
  const HVX_Vector mantissa = Q6_V_vsplat_R(static_cast<int32_t>(multiplier.mantissa));
  const HVX_VectorPair product = Q6_W_vmpyoacc_WVwVh(Q6_W_vmpye_VwVuh(words, mantissa), words, mantissa);
  return rounding_shift_words(Q6_V_hi_W(product), multiplier.shift - 32, add);
}

// 64 uint16 codes widened to int32 and centered (code + offset): lo holds the even elements, hi
// the odd ones (vzxt), as saturate_u16 takes them back.
inline HVX_VectorPair centered_words(HVX_Vector codes, int32_t offset) {
  const HVX_VectorPair wide = Q6_Wuw_vzxt_Vuh(codes);
  const HVX_Vector add = Q6_V_vsplat_R(offset);
  return Q6_W_vcombine_VV(Q6_Vw_vadd_VwVw(Q6_V_hi_W(wide), add), Q6_Vw_vadd_VwVw(Q6_V_lo_W(wide), add));
}

// 64 uint16 codes, each int32 lane saturated to [0, 65535], from the even and odd lanes.
inline HVX_Vector saturate_u16(HVX_Vector even, HVX_Vector odd) {
  const HVX_Vector zero = Q6_V_vzero(), top = Q6_V_vsplat_R(65535);
  return Q6_Vh_vshuffe_VhVh(Q6_Vw_vmin_VwVw(Q6_Vw_vmax_VwVw(odd, zero), top),
                            Q6_Vw_vmin_VwVw(Q6_Vw_vmax_VwVw(even, zero), top));
}

// 128 codes widened to int16 and centered (code + offset), as the pair vzxt gives: lo holds the
// even elements, hi the odd ones. Every 16-bit helper below keeps this even/odd layout.
inline HVX_VectorPair centered_halves(HVX_Vector codes, int32_t offset) {
  const HVX_VectorPair wide = Q6_Wuh_vzxt_Vub(codes);
  const HVX_Vector add = Q6_Vh_vsplat_R(offset);
  return Q6_W_vcombine_VV(Q6_Vh_vadd_VhVh(Q6_V_hi_W(wide), add), Q6_Vh_vadd_VhVh(Q6_V_lo_W(wide), add));
}

// a * b for one vector of int16 lanes each, requantized and saturated to int16, lanes in a's order.
inline HVX_Vector requantized_product(HVX_Vector a, HVX_Vector b, FixedMultiplier multiplier, int32_t add) {
  const HVX_VectorPair products = Q6_Ww_vmpy_VhVh(a, b);  // lo: even lanes, hi: odd lanes
  return Q6_Vh_vsat_VwVw(requantize_words(Q6_V_hi_W(products), multiplier, add),
                         requantize_words(Q6_V_lo_W(products), multiplier, add));
}

// 128 uint8 codes saturate(apply(multiplier, a[i] * b[i]) + add, 0, 255), from two even/odd
// int16 pairs (centered_halves, Lut16) whose products fit 32 bits.
inline HVX_Vector requantize_products_u8(HVX_VectorPair a, HVX_VectorPair b, FixedMultiplier multiplier,
                                         int32_t add) {
  const HVX_Vector even = requantized_product(Q6_V_lo_W(a), Q6_V_lo_W(b), multiplier, add);
  const HVX_Vector odd = requantized_product(Q6_V_hi_W(a), Q6_V_hi_W(b), multiplier, add);
  return Q6_Vub_vsat_VhVh(odd, even);
}

// A table of 16 kSegments int16 values indexed by codes below 16 kSegments, as vlut16 reads it:
// vectors of 64 entries, segment m (entries 16m..16m+15) in vector m / 4, in the word half
// (m / 2) % 2 of words 16 (m % 2) ... 16 (m % 2) + 15. Lut16 (256 entries, four vectors) reads
// every uint8 code; a smaller table costs fewer lookups (kSegments vlut16 per 128 codes).
template <int32_t kSegments>
struct Lut16Of {
  static_assert(kSegments % 4 == 0 && kSegments <= 16, "whole vectors of four segments");
  HVX_Vector parts[kSegments / 4];
};
using Lut16 = Lut16Of<16>;

// The layout both lookups read: a vector holds 4 segments of `kEntries` lanes of T, segment m
// in the lane half (m / 2) % 2 of the lane pairs kEntries (m % 2) ... kEntries (m % 2) + kEntries - 1.
template <typename T, int32_t kSize, int32_t kVectors>
inline void interleave_segments(const T (&table)[kSize], HVX_Vector (&parts)[kVectors]) {
  constexpr int32_t kEntries = kBytes / sizeof(T) / 4;
  static_assert(kSize == 4 * kEntries * kVectors, "a table of whole vectors");
  alignas(kBytes) T part[kBytes / sizeof(T)];
  for (int32_t vector = 0; vector < kVectors; ++vector) {
    for (int32_t segment = 4 * vector; segment < 4 * vector + 4; ++segment) {
      for (int32_t entry = 0; entry < kEntries; ++entry) {
        part[2 * (kEntries * (segment % 2) + entry) + (segment / 2) % 2] = table[kEntries * segment + entry];
      }
    }
    parts[vector] = *reinterpret_cast<const HVX_Vector*>(part);
  }
}

template <int32_t kSize>
inline Lut16Of<kSize / 16> lut16(const int16_t (&table)[kSize]) {
  Lut16Of<kSize / 16> lut;
  interleave_segments(table, lut.parts);
  return lut;
}

// table[code] for 128 codes, as an even/odd int16 pair (kSegments vlut16, one per segment).
template <int32_t kSegments>
inline HVX_VectorPair lookup(const Lut16Of<kSegments>& lut, HVX_Vector codes) {
  HVX_VectorPair values = Q6_Wh_vlut16_VbVhR(codes, lut.parts[0], 0);
  for (int32_t segment = 1; segment < kSegments; ++segment) {
    values = Q6_Wh_vlut16or_WhVbVhR(values, codes, lut.parts[segment / 4], segment);
  }
  return values;
}

// A table of 256 bytes indexed by uint8 codes, as vlut32 reads it: two vectors of 128 entries,
// segment m (entries 32m..32m+31) in vector m / 4, in the byte (m / 2) % 2 of halfwords
// 32 (m % 2) ... 32 (m % 2) + 31.
struct Lut8 {
  HVX_Vector parts[2];
};

inline Lut8 lut8(const uint8_t (&table)[256]) {
  Lut8 lut;
  interleave_segments(table, lut.parts);
  return lut;
}

// table[code] for 128 codes, in their order (8 vlut32, one per segment).
inline HVX_Vector lookup_bytes(const Lut8& lut, HVX_Vector codes) {
  HVX_Vector values = Q6_Vb_vlut32_VbVbR(codes, lut.parts[0], 0);
  for (int32_t segment = 1; segment < 8; ++segment) {
    values = Q6_Vb_vlut32or_VbVbVbR(values, codes, lut.parts[segment / 4], segment);
  }
  return values;
}

// A table of 16 kSegments int32 values (Lut32: 256, every uint8 code): its upper and lower
// halfwords as two Lut16Of.
template <int32_t kSegments>
struct Lut32Of {
  Lut16Of<kSegments> high, low;
};
using Lut32 = Lut32Of<16>;

template <int32_t kSize = 256>
inline Lut32Of<kSize / 16> lut32(const int32_t* table) {  // table[0..kSize - 1]
  int16_t high[kSize], low[kSize];
  for (int32_t i = 0; i < kSize; ++i) {
    high[i] = static_cast<int16_t>(table[i] >> 16);
    low[i] = static_cast<int16_t>(table[i] & 0xFFFF);
  }
  return {lut16(high), lut16(low)};
}

// Four vectors of 32 int32 lanes.
struct Words4 {
  HVX_Vector v[4];
};

// table[codes[4 i + m]] in lane i of v[m], for 128 codes: the halfword lookups (lo holds the
// even codes, hi the odd ones) joined into words by vshuffe (codes 4i, 4i + 1) and vshuffo
// (4i + 2, 4i + 3).
template <int32_t kSegments>
inline Words4 lookup_words(const Lut32Of<kSegments>& lut, HVX_Vector codes) {
  const HVX_VectorPair high = lookup(lut.high, codes), low = lookup(lut.low, codes);
  Words4 words;
  words.v[0] = Q6_Vh_vshuffe_VhVh(Q6_V_lo_W(high), Q6_V_lo_W(low));
  words.v[1] = Q6_Vh_vshuffe_VhVh(Q6_V_hi_W(high), Q6_V_hi_W(low));
  words.v[2] = Q6_Vh_vshuffo_VhVh(Q6_V_lo_W(high), Q6_V_lo_W(low));
  words.v[3] = Q6_Vh_vshuffo_VhVh(Q6_V_hi_W(high), Q6_V_hi_W(low));
  return words;
}

// The 64-bit products a * b of 32 pairs of int32 lanes, whole: hi holds their upper words, lo
// their lower (vmpye takes b's low halfword unsigned, vmpyo accumulates its signed high one).
inline HVX_VectorPair products_wide(HVX_Vector a, HVX_Vector b) {
  return Q6_W_vmpyoacc_WVwVh(Q6_W_vmpye_VwVuh(a, b), a, b);
}

// The same for uint32 lanes b: where b >= 2^31, products_wide took it as b - 2^32, so a 2^32 is
// added back to hi.
inline HVX_VectorPair products_wide_unsigned(HVX_Vector a, HVX_Vector b) {
  const HVX_VectorPair signed_product = products_wide(a, b);
  const HVX_Vector high = Q6_Vw_condacc_QVwVw(Q6_Q_vcmp_gt_VwVw(Q6_V_vzero(), b), Q6_V_hi_W(signed_product), a);
  return Q6_W_vcombine_VV(high, Q6_V_lo_W(signed_product));
}

// p + q on 32 lanes of 64-bit values (hi: upper words, lo: lower), the carry of the lower words
// (their unsigned sum below an addend) added to the upper.
inline HVX_VectorPair add_wide(HVX_VectorPair p, HVX_VectorPair q) {
  const HVX_Vector low = Q6_Vw_vadd_VwVw(Q6_V_lo_W(p), Q6_V_lo_W(q));
  const HVX_Vector high = Q6_Vw_vadd_VwVw(Q6_V_hi_W(p), Q6_V_hi_W(q));
  const HVX_VectorPred carry = Q6_Q_vcmp_gt_VuwVuw(Q6_V_lo_W(p), low);
  return Q6_W_vcombine_VV(Q6_Vw_condacc_QVwVw(carry, high, Q6_V_vsplat_R(1)), low);
}

// p >> amount (arithmetic) on 32 lanes of 64-bit values p (hi: upper words, lo: lower), each
// lane's amount in [0, 31]. The bits hi passes down to lo are (hi << 1) << (31 - amount): no
// shift by 32 where the amount is 0.
inline HVX_VectorPair shift_right_wide(HVX_VectorPair p, HVX_Vector amounts) {
  const HVX_Vector high = Q6_V_hi_W(p);
  const HVX_Vector carried = Q6_Vw_vasl_VwVw(Q6_Vw_vasl_VwR(high, 1), Q6_Vw_vsub_VwVw(Q6_V_vsplat_R(31), amounts));
  return Q6_W_vcombine_VV(Q6_Vw_vasr_VwVw(high, amounts), Q6_V_vor_VV(Q6_Vw_vlsr_VwVw(Q6_V_lo_W(p), amounts), carried));
}

// apply({1, shift}, p) on 32 lanes of 64-bit values p (hi: upper words, lo: lower) for
// shift >= 33, where the upper words hold all of p >> (shift - 1); rounding_shift_low below takes
// shifts from 3 to 32 (decide once per loop, not per vector).
inline HVX_Vector rounding_shift_high(HVX_VectorPair p, int32_t shift) {
  const HVX_Vector shifted = Q6_Vw_vasr_VwR(Q6_V_hi_W(p), shift - 33);  // p >> (shift - 1)
  return Q6_Vw_vavg_VwVw_rnd(shifted, Q6_V_vzero());                    // (shifted + 1) >> 1
}

// apply({1, shift}, p) for 3 <= shift <= 32. A lane whose p >> (shift - 1) does not fit 32 bits
// gets a result of the same sign and magnitude at least 2^29 (its upper word clamped), so
// saturating it to a code of up to 16 bits gives what apply() and a saturation give.
inline HVX_Vector rounding_shift_low(HVX_VectorPair p, int32_t shift) {
  const int32_t bits = shift - 1, reach = 1 << (bits - 1);  // p >> bits fits when hi is in [-reach, reach)
  const HVX_Vector high =
      Q6_Vw_vmin_VwVw(Q6_Vw_vmax_VwVw(Q6_V_hi_W(p), Q6_V_vsplat_R(-reach)), Q6_V_vsplat_R(reach - 1));
  const HVX_Vector shifted = Q6_V_vor_VV(Q6_Vw_vasl_VwR(high, 32 - bits), Q6_Vuw_vlsr_VuwR(Q6_V_lo_W(p), bits));
  return Q6_Vw_vavg_VwVw_rnd(shifted, Q6_V_vzero());  // (shifted + 1) >> 1, no overflow at 2^31 - 1
}

}  // namespace hvx
#endif

// y[i] = table[x[i]] for n byte codes: vlut32 over 128 codes a step on HVX (a tail never read or
// written past n), a plain loop elsewhere. The same bytes either way.
inline void map_bytes(uint8_t* y, const uint8_t* x, int64_t n, const uint8_t (&table)[256]) {
#if defined(__HVX__)
  const hvx::Lut8 lut = hvx::lut8(table);
  for (int64_t i = 0; i < n; i += hvx::kBytes) {
    hvx::store_bytes(y + i, hvx::lookup_bytes(lut, hvx::load_bytes(x + i, n - i)), n - i);
  }
#else
  for (int64_t i = 0; i < n; ++i) y[i] = table[x[i]];
#endif
}

}  // namespace qco

#endif  // QCO_HVX_H_
