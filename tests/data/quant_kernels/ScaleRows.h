// Test kernel of QuantTestPackage::ScaleRows: y[r, c] = x[r, c] * weight[c].
// Its float branch deliberately computes something else (x * weight + 1000), so a test that
// matches the converted model proves the quantized branch ran.
#pragma once

#include "qco/tensor_view.h"

namespace QuantTestPackage {

inline qco::Status ScaleRows(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& weight) {
  if (x.rank != 2 || !y.same_shape(x) || weight.rank != 1 || weight.dims[0] != x.dims[1]) {
    return qco::Status::kShapeMismatch;
  }
  const int64_t cols = x.dims[1];
  const bool wrong_on_purpose = y.dtype == qco::DType::kFloat32;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float real = qco::load_real(x, i) * qco::load_real(weight, i % cols);
    if (!qco::store_real(y, i, wrong_on_purpose ? real + 1000.0f : real)) return qco::Status::kUnsupportedDtype;
  }
  return qco::Status::kOk;
}

}  // namespace QuantTestPackage
