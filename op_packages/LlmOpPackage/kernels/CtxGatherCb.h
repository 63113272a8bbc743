// Kernel of LlmOpPackage::CtxGatherCb: the op's math, once, in portable C++17.
// Generated once by qnn-custom-ops; this file is yours: regeneration never overwrites it
// (unless --force). The same source builds for the HTP (src/ops/CtxGatherCb.cpp), for
// ExecuTorch on the host and for the C ABI in host/. Hexagon-only fast paths go behind
// #ifdef __hexagon__.
// CtxGather for continuous batching: each sequence names its cache slot. out[b, :, i] =
// cache[batch_index[b], :, ctx_indices[b, i]]; indices outside [0, ctx_len) read zeros
#pragma once

#include "kv_cache.h"

namespace LlmOpPackage {

// Arguments: outputs, then inputs, then parameters, in the order of the OpDef.
//   output out: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input cache: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input batch_index: mandatory, rank 1, INT_32
//   input ctx_indices: mandatory, rank 2, INT_32
inline qco::Status CtxGatherCb(qco::TensorView& out, const qco::TensorView& cache,
                               const qco::TensorView& batch_index, const qco::TensorView& ctx_indices) {
  return gather(out, cache, &batch_index, ctx_indices);
}

}  // namespace LlmOpPackage
