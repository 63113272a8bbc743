// The static KV cache of the LlmOpPackage (QEfficient's CtxScatter/CtxGather and their
// continuous-batching variants): cache [slots, heads, ctx_len, head_dim]. Rows move as codes
// when the tensors share one encoding, else each value is requantized (in integers between
// fixed-point encodings).
#pragma once

#include <cstdint>

#include "element_copy.h"

namespace LlmOpPackage {

// What an index outside [0, ctx_len) means (the ops' `negative` param, in the OpDef's enum
// order): padding that is skipped and reads zeros, or, for a negative index, a row counted
// from the end as torch indexing and QEfficient count it (-1: the last row).
enum NegativeIndex : uint32_t { kSkipNegative = 0, kFromEnd = 1 };

// The cache row an index names, or -1 for none.
inline int64_t cache_row(int64_t index, int64_t ctx_len, NegativeIndex negative) {
  if (index < 0 && negative == kFromEnd) index += ctx_len;
  return index >= 0 && index < ctx_len ? index : -1;
}

// The `negative` param (absent: skip); false for a value outside the enum.
inline bool negative_mode(const qco::TensorView& param, NegativeIndex& mode) {
  const uint32_t value = enum_or(param, kSkipNegative);
  mode = static_cast<NegativeIndex>(value);
  return value == kSkipNegative || value == kFromEnd;
}

// Cache slot of sequence b: batch_index[b] (continuous batching) or b itself.
inline int64_t slot_of(const qco::TensorView* batch_index, int64_t b) {
  return batch_index == nullptr ? b : batch_index->as<const int32_t>()[b];
}

// [d0, n] or, as QEfficient passes them, [d0, 1, n]: true when `view` is one of these.
inline bool is_rows_of_indices(const qco::TensorView& view) {
  return view.rank == 2 || (view.rank == 3 && view.dims[1] == 1);
}

// [n], [n, 1] or [1, n] (the HTP runtime pads every tensor to 4-D, so a 1-D [n] reaches a QHPI
// kernel as [1, n]): n elements along one dimension, every other dimension 1.
inline bool is_vector_of(const qco::TensorView& view, int64_t n) {
  int32_t long_dims = 0;
  for (int32_t i = 0; i < view.rank; ++i) long_dims += view.dims[i] != 1;
  return view.rank >= 1 && view.numel() == n && long_dims <= 1;
}

// The indices per sequence: the last dimension of [batch, n] or [batch, 1, n].
inline int64_t index_count(const qco::TensorView& indices) { return indices.dims[indices.rank - 1]; }

// The shared checks: a 4-D cache of an activation dtype, int32 indices [batch, n] (or
// [batch, 1, n]) and, with continuous batching, an int32 batch_index [batch] (or [batch, 1], [1, batch])
// naming slots of the cache (else batch must equal the cache's slots).
inline qco::Status check_indexing(const qco::TensorView& cache, const qco::TensorView* batch_index,
                                  const qco::TensorView& indices) {
  if (cache.rank != 4 || !is_rows_of_indices(indices)) return qco::Status::kShapeMismatch;
  if (!is_real_dtype(cache.dtype) || indices.dtype != qco::DType::kInt32) return qco::Status::kUnsupportedDtype;
  const int64_t batch = indices.dims[0];
  if (batch_index == nullptr) return batch == cache.dims[0] ? qco::Status::kOk : qco::Status::kShapeMismatch;
  if (!is_vector_of(*batch_index, batch)) return qco::Status::kShapeMismatch;
  if (batch_index->dtype != qco::DType::kInt32) return qco::Status::kUnsupportedDtype;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t slot = slot_of(batch_index, b);
    if (slot < 0 || slot >= cache.dims[0]) return qco::Status::kInvalidArgument;
  }
  return qco::Status::kOk;
}

// out = cache with out[slot(b), :, position_ids[b, s]] = updates[b, :, s]; a position that
// names no row (cache_row) is padding and skipped.
inline qco::Status scatter(qco::TensorView& out, const qco::TensorView& cache, const qco::TensorView* batch_index,
                           const qco::TensorView& position_ids, const qco::TensorView& updates,
                           const qco::TensorView& negative_param) {
  NegativeIndex negative;
  if (!negative_mode(negative_param, negative)) return qco::Status::kInvalidArgument;
  const qco::Status status = check_indexing(cache, batch_index, position_ids);
  if (status != qco::Status::kOk) return status;
  const int64_t batch = position_ids.dims[0], seq = index_count(position_ids);
  const int64_t heads = cache.dims[1], ctx_len = cache.dims[2], dim = cache.dims[3];
  if (!out.same_shape(cache) || updates.rank != 4 || updates.dims[0] != batch || updates.dims[1] != heads ||
      updates.dims[2] != seq || updates.dims[3] != dim) {
    return qco::Status::kShapeMismatch;
  }
  if (!is_real_dtype(out.dtype) || !is_real_dtype(updates.dtype)) return qco::Status::kUnsupportedDtype;
  if (out.data != cache.data) copy_elements(out, 0, cache, 0, cache.numel());
  const int32_t* positions = position_ids.as<const int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t slot = slot_of(batch_index, b);
    for (int64_t s = 0; s < seq; ++s) {
      const int64_t position = cache_row(positions[b * seq + s], ctx_len, negative);
      if (position < 0) continue;
      for (int64_t h = 0; h < heads; ++h) {
        copy_elements(out, ((slot * heads + h) * ctx_len + position) * dim, updates, ((b * heads + h) * seq + s) * dim,
                      dim);
      }
    }
  }
  return qco::Status::kOk;
}

// out[b, :, i] = cache[slot(b), :, ctx_indices[b, i]]; an index that names no row reads 0.
inline qco::Status gather(qco::TensorView& out, const qco::TensorView& cache, const qco::TensorView* batch_index,
                          const qco::TensorView& ctx_indices, const qco::TensorView& negative_param) {
  NegativeIndex negative;
  if (!negative_mode(negative_param, negative)) return qco::Status::kInvalidArgument;
  const qco::Status status = check_indexing(cache, batch_index, ctx_indices);
  if (status != qco::Status::kOk) return status;
  const int64_t batch = ctx_indices.dims[0], n = index_count(ctx_indices);
  const int64_t heads = cache.dims[1], ctx_len = cache.dims[2], dim = cache.dims[3];
  if (out.rank != 4 || out.dims[0] != batch || out.dims[1] != heads || out.dims[2] != n || out.dims[3] != dim) {
    return qco::Status::kShapeMismatch;
  }
  if (!is_real_dtype(out.dtype)) return qco::Status::kUnsupportedDtype;
  const int32_t* indices = ctx_indices.as<const int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t slot = slot_of(batch_index, b);
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t row = cache_row(indices[b * n + i], ctx_len, negative);
        const int64_t at = ((b * heads + h) * n + i) * dim;
        if (row < 0) {
          zero_elements(out, at, dim);
        } else {
          copy_elements(out, at, cache, ((slot * heads + h) * ctx_len + row) * dim, dim);
        }
      }
    }
  }
  return qco::Status::kOk;
}

}  // namespace LlmOpPackage
