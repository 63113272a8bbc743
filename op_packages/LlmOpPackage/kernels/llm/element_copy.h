// Elements moved from one tensor to another as the LlmOpPackage moves them (the KV cache's rows,
// RoPE's pass-through channels): bytes when both share one encoding, codes requantized in
// integers between unsigned fixed-point encodings, else each value through its real.
#pragma once

#include <cstdint>
#include <cstring>

#include "llm_access.h"
#include "llm_fixed.h"

namespace LlmOpPackage {

// Bytes of one element of the dtypes copied verbatim.
inline int64_t element_bytes(qco::DType dtype) {
  switch (dtype) {
    case qco::DType::kFloat32: return 4;
    case qco::DType::kFloat16:
    case qco::DType::kUFixed16:
    case qco::DType::kSFixed16: return 2;
    case qco::DType::kUFixed8:
    case qco::DType::kSFixed8: return 1;
    default: return 0;
  }
}

// True when `a`'s codes mean the same reals in `b`: one dtype and, for fixed point, one
// encoding. The KV cache, its updates and the new cache share one encoding when quantized as
// the library's quantizer overrides ask; the codes are then copied, never requantized.
inline bool same_encoding(const qco::TensorView& a, const qco::TensorView& b) {
  if (a.dtype != b.dtype || element_bytes(a.dtype) == 0) return false;
  const bool is_float = a.dtype == qco::DType::kFloat32 || a.dtype == qco::DType::kFloat16;
  return is_float || (a.scale == b.scale && a.offset == b.offset);
}

// Unsigned codes of one encoding into another's, in integers: (q + offset) times the scale
// ratio as a 31-bit fixed-point multiplier, rounded once, plus dst's zero point, saturated.
template <typename Dst, typename Src>
void requantize_codes(qco::TensorView& dst, int64_t dst_at, const qco::TensorView& src, int64_t src_at,
                      int64_t count) {
  const Src* in = src.as<const Src>() + src_at;
  Dst* out = dst.as<Dst>() + dst_at;
  const FixedMultiplier ratio = activation_multiplier(src.scale * (1.0f / dst.scale), qco::DType::kUFixed16);
  const int32_t offset = src.offset;
  const CodeRange range = code_range(dst);
  for (int64_t i = 0; i < count; ++i) out[i] = static_cast<Dst>(saturate_code(apply(ratio, in[i] + offset), range));
}

template <typename Dst>
void requantize_codes_to(qco::TensorView& dst, int64_t dst_at, const qco::TensorView& src, int64_t src_at,
                         int64_t count) {
  if (src.dtype == qco::DType::kUFixed8) {
    requantize_codes<Dst, uint8_t>(dst, dst_at, src, src_at, count);
  } else {
    requantize_codes<Dst, uint16_t>(dst, dst_at, src, src_at, count);
  }
}

// Copies `count` elements from `src[src_at...]` to `dst[dst_at...]`: bytes when the encodings
// agree; codes requantized in integers between two unsigned fixed-point encodings; else each
// value through its real (float and the other dtypes).
inline void copy_elements(qco::TensorView& dst, int64_t dst_at, const qco::TensorView& src, int64_t src_at,
                          int64_t count) {
  if (same_encoding(dst, src)) {
    const int64_t bytes = element_bytes(src.dtype);
    std::memcpy(static_cast<char*>(dst.data) + dst_at * bytes,
                static_cast<const char*>(src.data) + src_at * bytes, static_cast<size_t>(count * bytes));
  } else if (is_unsigned_code(dst.dtype) && is_unsigned_code(src.dtype)) {
    if (dst.dtype == qco::DType::kUFixed8) {
      requantize_codes_to<uint8_t>(dst, dst_at, src, src_at, count);
    } else {
      requantize_codes_to<uint16_t>(dst, dst_at, src, src_at, count);
    }
  } else {
    for (int64_t i = 0; i < count; ++i) qco::store_real(dst, dst_at + i, qco::load_real(src, src_at + i));
  }
}

// Stores real 0 into `count` elements from `at` (a gather's out-of-range rows): its code is
// computed once, then copied as bytes, each copy doubling what is filled.
inline void zero_elements(qco::TensorView& dst, int64_t at, int64_t count) {
  if (count <= 0) return;
  qco::store_real(dst, at, 0.0f);
  const int64_t bytes = element_bytes(dst.dtype);  // every dtype the ops write has a width
  char* first = static_cast<char*>(dst.data) + at * bytes;
  for (int64_t filled = 1; filled < count; filled *= 2) {
    const int64_t copied = filled < count - filled ? filled : count - filled;
    std::memcpy(first + filled * bytes, first, static_cast<size_t>(copied * bytes));
  }
}

}  // namespace LlmOpPackage
