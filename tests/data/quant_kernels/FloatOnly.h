// Test kernel of QuantTestPackage::FloatOnly: y = 2 * tanh(x), float32 only.
#pragma once

#include <cmath>

#include "qco/tensor_view.h"

namespace QuantTestPackage {

inline qco::Status FloatOnly(qco::TensorView& y, const qco::TensorView& x) {
  if (!y.same_shape(x)) return qco::Status::kShapeMismatch;
  if (x.dtype != qco::DType::kFloat32 || y.dtype != qco::DType::kFloat32) return qco::Status::kUnsupportedDtype;
  for (int64_t i = 0; i < x.numel(); ++i) y.as<float>()[i] = 2.0f * std::tanh(x.as<float>()[i]);
  return qco::Status::kOk;
}

}  // namespace QuantTestPackage
