// HVX helpers of the LlmOpPackage kernels beyond qco/hvx.h: static tensors (a norm's weight)
// widened where a row meets them, so a call prepares nothing per weight element in scalar code
// (a decode call, one row, would pay that as much as the row itself).
#pragma once

#include <cstdint>

#include "llm_fixed.h"

#if defined(__HVX__)
namespace LlmOpPackage {
namespace hvx {

// 128 8-bit codes, signed or not, widened to int16 and centered (code + offset): lo holds the
// even elements, hi the odd ones, as qco::hvx::centered_halves lays out unsigned codes.
inline HVX_VectorPair centered_halves(HVX_Vector codes, bool is_signed, int32_t offset) {
  const HVX_VectorPair wide = is_signed ? Q6_Wh_vsxt_Vb(codes) : Q6_Wuh_vzxt_Vub(codes);
  const HVX_Vector add = Q6_Vh_vsplat_R(offset);
  return Q6_W_vcombine_VV(Q6_Vh_vadd_VhVh(Q6_V_hi_W(wide), add), Q6_Vh_vadd_VhVh(Q6_V_lo_W(wide), add));
}

// The same 128 codes as int16 in their own order: lo elements 0..63, hi 64..127 (the even/odd
// halves interleaved back). Lane 2i of a 64-element part meets the even word lane i of
// qco::hvx::centered_words (vmpyie), lane 2i + 1 the odd one (vmpyio).
inline HVX_VectorPair ordered_halves(HVX_Vector codes, bool is_signed, int32_t offset) {
  const HVX_VectorPair halves = centered_halves(codes, is_signed, offset);
  return Q6_W_vshuff_VVR(Q6_V_hi_W(halves), Q6_V_lo_W(halves), -2);
}

// apply_terms(scales, a b, c d) + add for 64 int16 lanes each (|a b|, |c d| < 2^16, ratios below
// 2^14: the sums stay in 32 bits), saturated to int16 lanes in a's order.
inline HVX_Vector products_terms(HVX_Vector a, HVX_Vector b, HVX_Vector c, HVX_Vector d, const TermScales& scales,
                                 int32_t add) {
  const HVX_VectorPair ab = Q6_Ww_vmpy_VhVh(a, b), cd = Q6_Ww_vmpy_VhVh(c, d);  // lo: even lanes, hi: odd
  const HVX_Vector first = Q6_V_vsplat_R(static_cast<int32_t>(scales.first));
  const HVX_Vector second = Q6_V_vsplat_R(static_cast<int32_t>(scales.second));
  const auto words = [&](HVX_Vector u, HVX_Vector v) {
    const HVX_Vector sum = Q6_Vw_vmpyieacc_VwVwVuh(Q6_Vw_vmpyie_VwVuh(u, first), v, second);
    return qco::hvx::rounding_shift_words(sum, scales.shift, add);
  };
  return Q6_Vh_vsat_VwVw(words(Q6_V_hi_W(ab), Q6_V_hi_W(cd)), words(Q6_V_lo_W(ab), Q6_V_lo_W(cd)));
}

// The sum of the 32 uint32 lanes of v, for sums known to stay below 2^32: the lanes halved five
// times by rotating and adding, a few vector packets where qco::hvx::sum_words spends ~35 scalar ones.
inline int64_t sum_words_below_2_32(HVX_Vector v) {
  for (int32_t bytes = qco::hvx::kBytes / 2; bytes >= 4; bytes /= 2) v = Q6_Vw_vadd_VwVw(v, Q6_V_vror_VR(v, bytes));
  return static_cast<uint32_t>(Q6_R_vextract_VR(v, 0));
}

// The sum of v's lanes: by rotations when `narrow` (the caller's bound: below 2^32), else in scalar.
inline int64_t lane_sum(HVX_Vector v, bool narrow) {
  return narrow ? sum_words_below_2_32(v) : qco::hvx::sum_words(v);
}

}  // namespace hvx
}  // namespace LlmOpPackage
#endif
