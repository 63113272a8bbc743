// Kernel of LlmOpPackage::Rope: the op's math, once, in portable C++17.
// Generated once by qnn-custom-ops; this file is yours: regeneration never overwrites it
// (unless --force). The same source builds for the HTP (src/ops/Rope.cpp), for
// ExecuTorch on the host and for the C ABI in host/. Hexagon-only fast paths go behind
// #ifdef __hexagon__.
// Rotary position embedding applied to queries or keys. neox: y = x * [cos, cos] +
// rotate_half(x) * [sin, sin]; gptj: pairs (x[2i], x[2i+1]) rotated by (cos[i], sin[i])
#pragma once

#include "llm/rope_codes.h"
#include "llm/rope_hvx.h"

namespace LlmOpPackage {

// Arguments: outputs, then inputs, then parameters, in the order of the OpDef.
//   output y: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input x: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input cos: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input sin: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   param style: optional, rank 0, UINT_32

// The rotary elements on codes: 16-bit codes by the 16-bit scheme where its domain holds (its HVX
// path on Hexagon), else the 64-bit loop; 8-bit codes on HVX with 8-bit tables, else the loop.
inline void rotate_codes(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& cos,
                         const qco::TensorView& sin, const RopeGeometry& g) {
  if (x.dtype == qco::DType::kUFixed16) {
    Rope16 rope;
    if (!make_rope16(rope, y, x, cos, sin)) {
      rope_codes<uint16_t>(y, x, cos, sin, g);
    } else {
#if defined(__HVX__)
      rope_u16_hvx(y, x, cos, sin, g, rope);
#else
      rope_u16(y, x, cos, sin, g, rope);
#endif
    }
    return;
  }
#if defined(__HVX__)
  RopePacked packed;
  if (rope_packs(g, y, x, cos, sin, packed)) {
    rope_u8_packed(y, x, cos, sin, g, packed);
    return;
  }
  if (is_8_bit(cos.dtype) && is_8_bit(sin.dtype)) {
    rope_u8_hvx(y, x, cos, sin, g);
    return;
  }
#endif
  rope_codes<uint8_t>(y, x, cos, sin, g);
}

// Runs the integer branch when it applies, then the elements past the rotary ones (once, for
// every path); false otherwise.
inline bool run_rope_codes(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& cos,
                           const qco::TensorView& sin, const RopeGeometry& g) {
  if (!is_unsigned_code(x.dtype) || y.dtype != x.dtype || !is_fixed_point(cos.dtype) || !is_fixed_point(sin.dtype)) {
    return false;
  }
  rotate_codes(y, x, cos, sin, g);
  pass_through_codes(y, x, g);
  return true;
}

// cos and sin are [seq, rotary/2] or [batch, seq, rotary/2], with 0 < rotary <= head_dim: the
// ranks first (the dims read next exist), then every dim at once (bitwise, not a branch per
// comparison: a decode call of a few hundred packets notices each).
inline bool rope_tables_fit(const qco::TensorView& x, const qco::TensorView& cos, const qco::TensorView& sin) {
  if ((cos.rank != 2 && cos.rank != 3) || sin.rank != cos.rank) return false;
  const int64_t *c = cos.dims, *s = sin.dims;
  const int32_t last = cos.rank - 1;
  const bool same = ((c[0] ^ s[0]) | (c[last - 1] ^ s[last - 1]) | (c[last] ^ s[last])) == 0;
  const bool sequences = cos.rank == 2 || c[0] == x.dims[0];
  return same & sequences & (c[last - 1] == x.dims[2]) & (c[last] >= 1) & (2 * c[last] <= x.dims[3]);
}

inline qco::Status Rope(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& cos,
                        const qco::TensorView& sin, const qco::TensorView& style) {
  if (x.rank != 4 || y.rank != 4 || !rope_tables_fit(x, cos, sin)) return qco::Status::kShapeMismatch;
  const int64_t *xd = x.dims, *yd = y.dims;  // rank 4: y's shape is x's, compared without a loop
  if (((yd[0] ^ xd[0]) | (yd[1] ^ xd[1]) | (yd[2] ^ xd[2]) | (yd[3] ^ xd[3])) != 0) return qco::Status::kShapeMismatch;
  const uint32_t mode = enum_or(style, kRopeNeox);
  if (mode != kRopeNeox && mode != kRopeGptj) return qco::Status::kInvalidArgument;
  const RopeGeometry geometry = rope_geometry(x, cos, static_cast<RopeStyle>(mode));
  if (run_rope_codes(y, x, cos, sin, geometry)) return qco::Status::kOk;
  return dispatch({&y, &x, &cos, &sin}, [&](auto access) { rope_rows<decltype(access)>(y, x, cos, sin, geometry); });
}

}  // namespace LlmOpPackage
