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

}  // namespace hvx
}  // namespace LlmOpPackage
#endif
