// Shared by the LlmOpPackage kernels: what is particular to this package. Each op's math is
// written once as a template over element access and instantiated by qco::with_access on raw
// float pointers or through each tensor's encoding (qco/access.h, shipped with every package);
// dispatch() below first refuses the dtypes these ops do not compute on. Plain C++17: builds
// for the HTP, for ExecuTorch on the host and for the C ABI.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "qco/access.h"

namespace LlmOpPackage {

using qco::enum_or;
using qco::param_or;

// The dtypes of activations the OpDef declares (FLOAT_32, FLOAT_16, UFIXED_POINT_8/16), and
// the fixed-point weights of each quant_dtype (SFIXED_POINT_8/16).
inline bool is_real_dtype(qco::DType dtype) {
  switch (dtype) {
    case qco::DType::kFloat32:
    case qco::DType::kFloat16:
    case qco::DType::kUFixed8:
    case qco::DType::kUFixed16:
    case qco::DType::kSFixed8:
    case qco::DType::kSFixed16:
      return true;
    default:
      return false;
  }
}

// qco::with_access for the ops of this package: kUnsupportedDtype if a view has a dtype they
// do not compute on.
template <typename Body>
qco::Status dispatch(std::initializer_list<const qco::TensorView*> views, Body&& body) {
  for (const qco::TensorView* view : views) {
    if (!is_real_dtype(view->dtype)) return qco::Status::kUnsupportedDtype;
  }
  return qco::with_access(views, body);
}

// Product of dims [begin, end) of a view.
inline int64_t extent(const qco::TensorView& view, int32_t begin, int32_t end) {
  int64_t n = 1;
  for (int32_t i = begin; i < end; ++i) n *= view.dims[i];
  return n;
}

// y is x with the last dimension halved: [..., 2d] -> [..., d] (the gated activations).
inline bool gated_shapes_match(const qco::TensorView& y, const qco::TensorView& x) {
  if (x.rank < 1 || y.rank != x.rank) return false;
  for (int32_t i = 0; i + 1 < x.rank; ++i) {
    if (y.dims[i] != x.dims[i]) return false;
  }
  return x.dims[x.rank - 1] == 2 * y.dims[y.rank - 1];
}

// Bytes of one element of the dtypes the KV-cache ops copy verbatim.
inline int64_t element_bytes(qco::DType dtype) {
  switch (dtype) {
    case qco::DType::kFloat32: return 4;
    case qco::DType::kFloat16:
    case qco::DType::kUFixed16: return 2;
    case qco::DType::kUFixed8: return 1;
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

// Copies `count` elements from `src[src_at...]` to `dst[dst_at...]`: bytes when the encodings
// agree, else each value requantized into dst's encoding.
inline void copy_elements(qco::TensorView& dst, int64_t dst_at, const qco::TensorView& src, int64_t src_at,
                          int64_t count) {
  if (same_encoding(dst, src)) {
    const int64_t bytes = element_bytes(src.dtype);
    std::memcpy(static_cast<char*>(dst.data) + dst_at * bytes,
                static_cast<const char*>(src.data) + src_at * bytes, static_cast<size_t>(count * bytes));
    return;
  }
  for (int64_t i = 0; i < count; ++i) qco::store_real(dst, dst_at + i, qco::load_real(src, src_at + i));
}

// Stores real 0 into `count` elements from `at` (a gather's out-of-range rows): its code is
// computed once, then copied as bytes, each copy doubling what is filled.
inline void zero_elements(qco::TensorView& dst, int64_t at, int64_t count) {
  if (count <= 0) return;
  qco::store_real(dst, at, 0.0f);
  const int64_t bytes = element_bytes(dst.dtype);
  if (bytes == 0) {  // a dtype copied per value (the fixed-point weights): no byte pattern to repeat
    for (int64_t i = 1; i < count; ++i) qco::store_real(dst, at + i, 0.0f);
    return;
  }
  char* first = static_cast<char*>(dst.data) + at * bytes;
  for (int64_t filled = 1; filled < count; filled *= 2) {
    const int64_t copied = filled < count - filled ? filled : count - filled;
    std::memcpy(first + filled * bytes, first, static_cast<size_t>(copied * bytes));
  }
}

}  // namespace LlmOpPackage
