// Kernel of LlmOpPackage::CtxScatter: the op's math, once, in portable C++17.
// Generated once by qnn-custom-ops; this file is yours: regeneration never overwrites it
// (unless --force). The same source builds for the HTP (src/ops/CtxScatter.cpp), for
// ExecuTorch on the host and for the C ABI in host/. Hexagon-only fast paths go behind
// #ifdef __hexagon__.
// Write new keys or values into a static KV cache (QEfficient CtxScatter). out =
// cache.clone(); out[b, :, position_ids[b, s]] = updates[b, :, s]; positions outside [0,
// ctx_len) are skipped (padding)
#pragma once

#include "kv_cache.h"

namespace LlmOpPackage {

// Arguments: outputs, then inputs, then parameters, in the order of the OpDef.
//   output out: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input cache: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input position_ids: mandatory, rank 2, INT_32
//   input updates: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
inline qco::Status CtxScatter(qco::TensorView& out, const qco::TensorView& cache, const qco::TensorView& position_ids,
                              const qco::TensorView& updates) {
  return scatter(out, cache, nullptr, position_ids, updates);
}

}  // namespace LlmOpPackage
