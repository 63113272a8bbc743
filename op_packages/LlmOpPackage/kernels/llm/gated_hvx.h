// The HVX path of the gated activations on codes (gated_codes.h), bit for bit with its portable
// loops: the 8-bit table of 256 values looked up with vlut16, and the 16-bit scheme's segments
// read with vlut16 and evaluated in int32 lanes. gated.h runs it on Hexagon with HVX.
#pragma once

#include <cstdint>

#include "gated_codes.h"

#if defined(__HVX__)
namespace LlmOpPackage {

// The 8-bit scheme's integers as the HVX loop reads them: the rounding shift and act(a) of every
// code in vlut16's table.
struct Gate8Hvx {
  GateScale scale;
  qco::hvx::Lut16 lut;
};

inline bool make_gate8(Gate8Hvx& gate, Activation act, const qco::TensorView& y, const qco::TensorView& x) {
  gate.scale = gate_scale(y, x);
  int16_t values[256];
  gate_values(values, act, x, gate.scale);
  gate.lut = qco::hvx::lut16(values);
  return true;
}

// The 16-bit scheme's integers (Gate16) with its coefficients' lookup tables, as the HVX loop
// reads them.
struct Gate16Hvx : Gate16 {
  qco::hvx::Lut32Of<kSegments / 16> luts[kTerms];  // c0 .. c5 | e as vlut16 reads them
};

// make_gate16's integers, then their lookup tables. Not inlined into the cache's find_or_make:
// the tables' vector temporaries would align its frame, a packet on every call finding its slot.
[[gnu::noinline]] inline bool make_gate16(Gate16Hvx& gate, Activation act, const qco::TensorView& y,
                                          const qco::TensorView& x) {
  if (!make_gate16(static_cast<Gate16&>(gate), act, y, x)) return false;
  for (int32_t m = 0; m < kTerms; ++m) gate.luts[m] = qco::hvx::lut32<kSegments>(gate.coefficients + m * kSegments);
  return true;
}

// 8-bit codes on HVX, 128 per vector: the gate's values looked up with vlut16 from the same
// table, times the up half's centered codes in 16x16 -> 32 bits, the rounding shift of apply().
inline void gated_u8_hvx(qco::TensorView& y, const qco::TensorView& x, const Gate8Hvx& gate) {
  const uint8_t* in = x.as<const uint8_t>();
  uint8_t* out = y.as<uint8_t>();
  const int64_t d = y.dims[y.rank - 1];
  const int64_t rows = d == 0 ? 0 : y.numel() / d;
  const qco::hvx::Lut16 lut = gate.lut;
  const FixedMultiplier shift{1, gate.scale.shift};
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* gate = in + 2 * d * r;
    for (int64_t c = 0; c < d; c += qco::hvx::kBytes) {
      const HVX_VectorPair activated = qco::hvx::lookup(lut, qco::hvx::load_bytes(gate + c, d - c));
      const HVX_VectorPair up = qco::hvx::centered_halves(qco::hvx::load_bytes(gate + d + c, d - c), x.offset);
      qco::hvx::store_bytes(out + r * d + c, qco::hvx::requantize_products_u8(activated, up, shift, -y.offset), d - c);
    }
  }
}

// The tail polynomial (unit 2^e) and e of 128 gate codes (n0, n1: |a - zero point| of their two
// vectors), four word vectors each in the layout of lookup_words: [0] and [2] the even and odd
// elements of the first vector, [1] and [3] of the second. Horner's steps follow the lookups of
// c5 .. c0 (fewer vectors live at once). vlut16 takes the shift resource as well as the permute
// one (CVI_VP_VS), so the 48 lookups and every shift share one slot a packet: t is shifted once
// per vector, its odd elements moved down by vshuffo (an ALU op).
struct Tails16 {
  HVX_Vector tail[4], exponent[4];
};

inline Tails16 tails_u16(const qco::hvx::Lut32Of<kSegments / 16>* luts, HVX_Vector n0, HVX_Vector n1, int32_t k) {
  const HVX_Vector last = Q6_Vh_vsplat_R(kSegments - 1);
  // byte 4j + m: the segment of element 2j of n0 (m = 0), of n1 (1), element 2j + 1 of n0 (2), of n1 (3)
  const HVX_Vector segments = Q6_Vb_vshuffe_VbVb(Q6_Vuh_vmin_VuhVuh(Q6_Vuh_vlsr_VuhR(n1, k), last),
                                                 Q6_Vuh_vmin_VuhVuh(Q6_Vuh_vlsr_VuhR(n0, k), last));
  // t of every element in its own halfword; vmpye reads a word's low (even) halfword only. (At
  // k = 0 the shift by 16 may leave n, but there c1..c5 are 0: t is unused.)
  const HVX_Vector t0 = Q6_Vh_vasl_VhR(n0, 16 - k), t1 = Q6_Vh_vasl_VhR(n1, 16 - k);
  const HVX_Vector t[4] = {t0, t1, Q6_Vh_vshuffo_VhVh(t0, t0), Q6_Vh_vshuffo_VhVh(t1, t1)};
  Tails16 r;
  const qco::hvx::Words4 highest = qco::hvx::lookup_words(luts[kDegree], segments);
  for (int32_t g = 0; g < 4; ++g) {
    r.exponent[g] = Q6_V_vand_VV(highest.v[g], Q6_V_vsplat_R((1 << kExponentBits) - 1));
    r.tail[g] = Q6_Vw_vsub_VwVw(highest.v[g], r.exponent[g]);
  }
  for (int32_t m = kDegree - 1; m >= 0; --m) {
    const qco::hvx::Words4 c = qco::hvx::lookup_words(luts[m], segments);
    for (int32_t g = 0; g < 4; ++g) r.tail[g] = Q6_Vw_vadd_VwVw(c.v[g], Q6_Vw_vmpye_VwVuh(r.tail[g], t[g]));
  }
  return r;
}

// apply({1, shift}, (value * product) >> drop) on 32 lanes (gated_u16_rows' magnitude), value <
// 2^30 and product < 2^32 unsigned: ((p >> a) + 1) >> 1 for a = shift + drop - 1 (floors of floors
// by powers of two compose), each lane's a in [25, 93]. From a = 32 on, p >> a is the upper word
// shifted by a - 32 (past 31 every upper word, under 2^30, gives 0): one per-lane shift, all there
// is when the rounding shift is 33 or more (kLow false). Under 32, the upper word shifted left
// joins the lower shifted right, the upper word first capped at 2^16: then p >> a >= 2^17
// whether capped or not, a magnitude that saturates any 16-bit code, and the shift left fits.
template <bool kLow>
inline HVX_Vector gated_magnitude(HVX_Vector value, HVX_Vector product, HVX_Vector drop, int32_t shift) {
  const HVX_VectorPair wide = qco::hvx::products_wide_unsigned(value, product);
  const HVX_Vector a = Q6_Vw_vadd_VwVw(drop, Q6_V_vsplat_R(shift - 1));
  const HVX_Vector thirty_two = Q6_V_vsplat_R(32);
  HVX_Vector shifted =
      Q6_Vw_vasr_VwVw(Q6_V_hi_W(wide), Q6_Vw_vmin_VwVw(Q6_Vw_vsub_VwVw(a, thirty_two), Q6_V_vsplat_R(31)));
  if (kLow) {
    const HVX_Vector capped = Q6_Vw_vmin_VwVw(Q6_V_hi_W(wide), Q6_V_vsplat_R(1 << 16));
    const HVX_Vector joined = Q6_V_vor_VV(Q6_Vw_vasl_VwVw(capped, Q6_Vw_vsub_VwVw(thirty_two, a)),
                                          Q6_Vw_vlsr_VwVw(Q6_V_lo_W(wide), a));
    shifted = Q6_V_vmux_QVV(Q6_Q_vcmp_gt_VwVw(thirty_two, a), joined, shifted);
  }
  return Q6_Vw_vavg_VwVw_rnd(shifted, Q6_V_vzero());  // (shifted + 1) >> 1
}

// The magnitudes |y| of 32 elements (gated_u16_rows): `negative` where their gate code is below
// the zero point, `product` = n |u|, the tail and e of their gate codes.
template <bool kLow>
inline HVX_Vector gated_u16_words(HVX_VectorPred negative, HVX_Vector product, HVX_Vector tail, HVX_Vector exponent,
                                  const Gate16Hvx& gate) {
  const HVX_Vector small = Q6_Vw_vasr_VwVw(tail, exponent);  // tail in units of `unit`
  const HVX_Vector value = Q6_V_vmux_QVV(negative, tail, Q6_Vw_vsub_VwVw(Q6_V_vsplat_R(gate.unit), small));
  const HVX_Vector drop = Q6_V_vmux_QVV(negative, exponent, Q6_V_vzero());
  return gated_magnitude<kLow>(value, product, drop, gate.shift);
}

// 64 uint16 output codes from 64 gate and up codes, the gate codes' n = |a - zero point| and
// their tails' groups `even` and `odd` (of Tails16). The gate codes' signs per word lane come from
// their words (even: the low halfword, odd: the word below zero point 2^16, whatever the low
// halfword); the magnitudes, saturated to 16 bits, are added to or taken from y's zero point
// with unsigned saturation: what saturating +-magnitude + zero point to a code gives.
template <bool kLow>
inline HVX_Vector gated_u16_vector(HVX_Vector gate_codes, HVX_Vector up_codes, HVX_Vector n, const Tails16& tails,
                                   int32_t even, int32_t odd, const Gate16Hvx& gate, HVX_Vector out_zero_point) {
  const HVX_Vector zero_point = Q6_Vh_vsplat_R(-gate.offset);
  const HVX_VectorPair products = Q6_Wuw_vmpy_VuhVuh(n, Q6_Vuh_vabsdiff_VuhVuh(up_codes, zero_point));
  const HVX_VectorPred even_negative =
      Q6_Q_vcmp_gt_VuwVuw(Q6_V_vsplat_R(-gate.offset), Q6_V_vand_VV(gate_codes, Q6_V_vsplat_R(0xFFFF)));
  const HVX_VectorPred odd_negative = Q6_Q_vcmp_gt_VuwVuw(Q6_V_vsplat_R(static_cast<int32_t>(static_cast<uint32_t>(-gate.offset) << 16)), gate_codes);
  const HVX_Vector even_magnitudes = gated_u16_words<kLow>(even_negative, Q6_V_lo_W(products), tails.tail[even],
                                                           tails.exponent[even], gate);
  const HVX_Vector odd_magnitudes =
      gated_u16_words<kLow>(odd_negative, Q6_V_hi_W(products), tails.tail[odd], tails.exponent[odd], gate);
  const HVX_Vector magnitudes = Q6_Vuh_vsat_VuwVuw(odd_magnitudes, even_magnitudes);
  const HVX_VectorPred negative =
      Q6_Q_xor_QQ(Q6_Q_vcmp_gt_VuhVuh(zero_point, gate_codes), Q6_Q_vcmp_gt_VuhVuh(zero_point, up_codes));
  return Q6_V_vmux_QVV(negative, Q6_Vuh_vsub_VuhVuh_sat(out_zero_point, magnitudes),
                       Q6_Vuh_vadd_VuhVuh_sat(out_zero_point, magnitudes));
}

// 128 elements of a row from their gate and up codes (two vectors each): two vectors of y.
template <bool kLow>
inline HVX_VectorPair gated_u16_block(const qco::hvx::Lut32Of<kSegments / 16>* luts, HVX_Vector gate0,
                                      HVX_Vector gate1, HVX_Vector up0, HVX_Vector up1, const Gate16Hvx& gate,
                                      HVX_Vector out_zero_point) {
  const HVX_Vector zero_point = Q6_Vh_vsplat_R(-gate.offset);
  const HVX_Vector n0 = Q6_Vuh_vabsdiff_VuhVuh(gate0, zero_point), n1 = Q6_Vuh_vabsdiff_VuhVuh(gate1, zero_point);
  const Tails16 tails = tails_u16(luts, n0, n1, gate.segment_bits);
  return Q6_W_vcombine_VV(gated_u16_vector<kLow>(gate1, up1, n1, tails, 1, 3, gate, out_zero_point),
                          gated_u16_vector<kLow>(gate0, up0, n0, tails, 0, 2, gate, out_zero_point));
}

// 16-bit codes on HVX, 128 elements per step: whole steps with plain loads and stores, the last
// of a row through load_bytes/store_bytes.
template <bool kLow>
void gated_u16_hvx_rows(qco::TensorView& y, const qco::TensorView& x, const Gate16Hvx& gate) {
  constexpr int64_t kCodes = qco::hvx::kBytes / 2;  // uint16 codes per vector
  const uint16_t* in = x.as<const uint16_t>();
  uint16_t* out = y.as<uint16_t>();
  const int64_t d = y.dims[y.rank - 1];
  const int64_t rows = d == 0 ? 0 : y.numel() / d;
  const qco::hvx::Lut32Of<kSegments / 16>* luts = gate.luts;
  const HVX_Vector out_zero_point = Q6_Vh_vsplat_R(-y.offset);
  // The `count` codes at `at` (zeros past them; none when count <= 0).
  const auto load = [](const uint16_t* at, int64_t count) {
    return count > 0 ? qco::hvx::load_bytes(at, 2 * count) : Q6_V_vzero();
  };
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* gate_row = in + 2 * d * r;
    const uint16_t* up_row = gate_row + d;
    uint16_t* out_row = out + r * d;
    int64_t i = 0;
    for (; i + 2 * kCodes <= d; i += 2 * kCodes) {
      const HVX_VectorPair codes = gated_u16_block<kLow>(
          luts, qco::hvx::load(gate_row + i), qco::hvx::load(gate_row + i + kCodes), qco::hvx::load(up_row + i),
          qco::hvx::load(up_row + i + kCodes), gate, out_zero_point);
      qco::hvx::store(out_row + i, Q6_V_lo_W(codes));
      qco::hvx::store(out_row + i + kCodes, Q6_V_hi_W(codes));
    }
    if (i == d) continue;
    const int64_t left = d - i, second = left - kCodes;
    const HVX_VectorPair codes =
        gated_u16_block<kLow>(luts, load(gate_row + i, left), load(gate_row + i + kCodes, second),
                              load(up_row + i, left), load(up_row + i + kCodes, second), gate, out_zero_point);
    qco::hvx::store_bytes(out_row + i, Q6_V_lo_W(codes), 2 * (left < kCodes ? left : kCodes));
    if (second > 0) qco::hvx::store_bytes(out_row + i + kCodes, Q6_V_hi_W(codes), 2 * second);
  }
}

inline void gated_u16_hvx(qco::TensorView& y, const qco::TensorView& x, const Gate16Hvx& gate) {
  if (gate.shift >= 33) {
    gated_u16_hvx_rows<false>(y, x, gate);
  } else {
    gated_u16_hvx_rows<true>(y, x, gate);
  }
}

}  // namespace LlmOpPackage
#endif
