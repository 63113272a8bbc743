// Kernel of LlmOpPackage::CtxScatterCb: the op's math, once, in portable C++17.
// Generated once by qnn-custom-ops; this file is yours: regeneration never overwrites it
// (unless --force). The same source builds for the HTP (src/ops/CtxScatterCb.cpp), for
// ExecuTorch on the host and for the C ABI in host/. Hexagon-only fast paths go behind
// #ifdef __hexagon__.
// CtxScatter for continuous batching: each sequence names its cache slot. out =
// cache.clone(); out[batch_index[b], :, position_ids[b, s]] = updates[b, :, s]; positions
// outside [0, ctx_len) are skipped (padding)
#pragma once

#include "kv_cache.h"

namespace LlmOpPackage {

// Arguments: outputs, then inputs, then parameters, in the order of the OpDef.
//   output out: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input cache: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input batch_index: mandatory, rank 1, INT_32
//   input position_ids: mandatory, rank 2, INT_32
//   input updates: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
inline qco::Status CtxScatterCb(qco::TensorView& out, const qco::TensorView& cache,
                                const qco::TensorView& batch_index, const qco::TensorView& position_ids,
                                const qco::TensorView& updates) {
  return scatter(out, cache, &batch_index, position_ids, updates);
}

}  // namespace LlmOpPackage
