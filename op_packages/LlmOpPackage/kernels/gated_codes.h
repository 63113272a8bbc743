// The gated activations (SiluAndMul, GeluAndMul) on codes: y = act(a) * b with a, b codes of x
// (one encoding) and y a code of the same dtype. act(a), times the ratio of scales, is a
// fixed-point value per gate code (a table of 256 entries for 8-bit codes; for 16-bit codes a
// table of 65536 built only when the tensor has more elements, else each value computed where
// it is used: the same function either way); the product with b - zero point is an integer,
// requantized by a rounding shift.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "llm_fixed.h"

namespace LlmOpPackage {

using Activation = float (*)(float);

// act(v) scaled into the output's units and by 2^shift, magnitude below 2^bits: 15 bits for
// 8-bit codes (its product with a 9-bit b fits a 32-bit lane, an int16 table), 31 for 16-bit.
struct GateScale {
  float ratio;    // x.scale / y.scale
  int32_t shift;  // of the rounding shift that requantizes act(a) * (b - zp)
  int32_t limit;  // largest magnitude of a table entry
};

// The shift from a bound on |act(v)| over every code: |silu(v)|, |gelu(v)| <= |v| + 1.
inline GateScale gate_scale(const qco::TensorView& y, const qco::TensorView& x) {
  const int32_t bits = x.dtype == qco::DType::kUFixed8 ? 15 : 31;
  const int32_t max_shift = x.dtype == qco::DType::kUFixed8 ? 30 : 62;
  const float ratio = x.scale * (1.0f / y.scale);
  const int32_t low = x.offset, high = max_code(x.dtype) + x.offset;
  const float largest = x.scale * static_cast<float>(low < -high ? -low : high) + 1.0f;
  int exponent = 0;
  std::frexp(largest * ratio, &exponent);  // largest * ratio < 2^exponent
  int32_t shift = bits - exponent;
  shift = shift < 1 ? 1 : (shift > max_shift ? max_shift : shift);
  return {ratio, shift, static_cast<int32_t>((int64_t{1} << bits) - 1)};
}

// The fixed-point value of act(dequantize(code)).
inline int32_t gate_value(Activation act, const qco::TensorView& x, const GateScale& scale, int32_t code) {
  const float scaled = std::ldexp(act(x.dequantize(code)) * scale.ratio, scale.shift);
  const float limit = static_cast<float>(scale.limit);
  if (!(scaled > -limit)) return -scale.limit;
  if (!(scaled < limit)) return scale.limit;
  return static_cast<int32_t>(std::nearbyint(scaled));
}

// Every gate code's value, or none when the tensor has fewer elements than codes.
inline std::vector<int32_t> gate_table(Activation act, const qco::TensorView& x, const GateScale& scale,
                                       int64_t elements) {
  const int32_t codes = max_code(x.dtype) + 1;
  std::vector<int32_t> table;
  if (x.dtype == qco::DType::kUFixed16 && elements < codes) return table;
  table.resize(static_cast<size_t>(codes));
  for (int32_t code = 0; code < codes; ++code) table[code] = gate_value(act, x, scale, code);
  return table;
}

template <typename Code>
void gated_codes(qco::TensorView& y, const qco::TensorView& x, Activation act) {
  const Code* in = x.as<const Code>();
  Code* out = y.as<Code>();
  const int64_t d = y.dims[y.rank - 1];
  const int64_t rows = d == 0 ? 0 : y.numel() / d;
  const GateScale scale = gate_scale(y, x);
  const std::vector<int32_t> table = gate_table(act, x, scale, y.numel());
  // Locals, not members: a uint8_t store may alias anything, so those would be reloaded per store.
  const int32_t* values = table.empty() ? nullptr : table.data();
  const int32_t offset = x.offset;
  const CodeRange range = code_range(y);
  const FixedMultiplier shift{1, scale.shift};
  for (int64_t r = 0; r < rows; ++r) {
    const Code* gate = in + 2 * d * r;
    for (int64_t i = 0; i < d; ++i) {
      const int32_t value = values == nullptr ? gate_value(act, x, scale, gate[i]) : values[gate[i]];
      const int64_t product = static_cast<int64_t>(value) * (gate[d + i] + offset);
      out[r * d + i] = static_cast<Code>(saturate_code(apply(shift, product), range));
    }
  }
}

#if defined(__HVX__)
// 8-bit codes on HVX, 128 per vector: the gate's values looked up with vlut16 from the same
// table, times the up half's centered codes in 16x16 -> 32 bits, the rounding shift of apply().
inline void gated_u8_hvx(qco::TensorView& y, const qco::TensorView& x, Activation act) {
  const uint8_t* in = x.as<const uint8_t>();
  uint8_t* out = y.as<uint8_t>();
  const int64_t d = y.dims[y.rank - 1];
  const int64_t rows = d == 0 ? 0 : y.numel() / d;
  const GateScale scale = gate_scale(y, x);
  int16_t values[256];  // |value| < 2^15 for 8-bit codes (gate_scale)
  for (int32_t code = 0; code < 256; ++code) values[code] = static_cast<int16_t>(gate_value(act, x, scale, code));
  const qco::hvx::Lut16 lut = qco::hvx::lut16(values);
  const FixedMultiplier shift{1, scale.shift};
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* gate = in + 2 * d * r;
    for (int64_t c = 0; c < d; c += qco::hvx::kBytes) {
      const HVX_VectorPair activated = qco::hvx::lookup(lut, qco::hvx::load_bytes(gate + c, d - c));
      const HVX_VectorPair up = qco::hvx::centered_halves(qco::hvx::load_bytes(gate + d + c, d - c), x.offset);
      qco::hvx::store_bytes(out + r * d + c, qco::hvx::requantize_products_u8(activated, up, shift, -y.offset), d - c);
    }
  }
}
#endif

// True when the gated op runs on codes: x and y of one unsigned fixed-point dtype; then runs it.
inline bool run_gated_codes(qco::TensorView& y, const qco::TensorView& x, Activation act) {
  if (!is_unsigned_code(x.dtype) || y.dtype != x.dtype) return false;
  if (x.dtype == qco::DType::kUFixed16) {
    gated_codes<uint16_t>(y, x, act);
    return true;
  }
#if defined(__HVX__)
  gated_u8_hvx(y, x, act);
#else
  gated_codes<uint8_t>(y, x, act);
#endif
  return true;
}

}  // namespace LlmOpPackage
