// Shared by the LlmOpPackage kernels: what is particular to this package. Each op's math is
// written once as a template over element access and instantiated by qco::with_access on raw
// float pointers or through each tensor's encoding (qco/access.h, shipped with every package);
// dispatch() below first refuses the dtypes these ops do not compute on. Plain C++17: builds
// for the HTP, for ExecuTorch on the host and for the C ABI.
#pragma once

#include <cstdint>
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

}  // namespace LlmOpPackage
