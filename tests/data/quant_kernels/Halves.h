// Test kernel of QuantTestPackage::Halves: low = x[..., :C/2], high = x[..., C/2:], each
// output in its own encoding.
#pragma once

#include "qco/tensor_view.h"

namespace QuantTestPackage {

inline qco::Status Halves(qco::TensorView& low, qco::TensorView& high, const qco::TensorView& x) {
  if (x.rank < 1 || x.dims[x.rank - 1] % 2 != 0 || low.numel() * 2 != x.numel() || high.numel() * 2 != x.numel()) {
    return qco::Status::kShapeMismatch;
  }
  const int64_t cols = x.dims[x.rank - 1], half = cols / 2;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t row = i / cols, col = i % cols;
    qco::TensorView& out = col < half ? low : high;
    if (!qco::store_real(out, row * half + col % half, qco::load_real(x, i))) return qco::Status::kUnsupportedDtype;
  }
  return qco::Status::kOk;
}

}  // namespace QuantTestPackage
