// Test kernel of QuantTestPackage::GatherRows: rows[i, :] = table[indices[i], :].
// indices must be INT_32, as the OpDef says: the host casts int64 model inputs as QNN does.
#pragma once

#include "qco/tensor_view.h"

namespace QuantTestPackage {

inline qco::Status GatherRows(qco::TensorView& rows, const qco::TensorView& table, const qco::TensorView& indices) {
  if (indices.dtype != qco::DType::kInt32) return qco::Status::kUnsupportedDtype;
  if (table.rank != 2 || indices.rank != 1 || rows.rank != 2 || rows.dims[0] != indices.dims[0] ||
      rows.dims[1] != table.dims[1]) {
    return qco::Status::kShapeMismatch;
  }
  const int64_t cols = table.dims[1];
  for (int64_t r = 0; r < indices.dims[0]; ++r) {
    const int32_t index = indices.as<int32_t>()[r];
    if (index < 0 || index >= table.dims[0]) return qco::Status::kInvalidArgument;
    for (int64_t c = 0; c < cols; ++c) {
      if (!qco::store_real(rows, r * cols + c, qco::load_real(table, index * cols + c))) {
        return qco::Status::kUnsupportedDtype;
      }
    }
  }
  return qco::Status::kOk;
}

}  // namespace QuantTestPackage
