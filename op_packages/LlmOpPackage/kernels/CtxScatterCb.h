// Kernel of LlmOpPackage::CtxScatterCb: the op's math, once, in portable C++17.
// Generated once by qnn-custom-ops; this file is yours: regeneration never overwrites it
// (unless --force). The same source builds for the HTP (src/ops/CtxScatterCb.cpp), for
// ExecuTorch on the host and for the C ABI in host/. An HVX fast path goes behind
// #if defined(__HVX__), computing the portable path's integers (docs/kernels.md "An HVX path for your
// kernel"); `qnn-custom-ops hexagon-check` compares the two bit for bit.
// CtxScatter for continuous batching: each sequence names its cache slot. out =
// cache.clone(); out[batch_index[b], :, position_ids[b, s]] = updates[b, :, s]; positions
// outside [0, ctx_len) are skipped (padding; see negative)
//
// Helpers shipped beside it in kernels/qco/: tensor_view.h (qco::load_real/store_real, one
// element of any dtype), access.h (write the math once as a template over Float32Access and
// RealAccess, qco::with_access picks one: float32 loops vectorize; qco::param_or for
// defaulted params), math.h (qco::vector_exp, vector_erfc), hvx.h (fixed-point requantization
// a portable loop and HVX compute alike; HVX loads with tails, a 256-entry table lookup).
// docs/kernels.md "Writing a kernel" and "An HVX path for your kernel" show them.
#pragma once

#include "llm/kv_cache.h"

namespace LlmOpPackage {

// Arguments: outputs, then inputs, then parameters, in the order of the OpDef.
//   output out: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input cache: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input batch_index: mandatory, ND, INT_32
//   input position_ids: mandatory, rank 2, INT_32
//   input updates: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   param negative: optional, rank 0, UINT_32
inline qco::Status CtxScatterCb(qco::TensorView& out, const qco::TensorView& cache, const qco::TensorView& batch_index,
                                const qco::TensorView& position_ids, const qco::TensorView& updates,
                                const qco::TensorView& negative) {
  return scatter(out, cache, &batch_index, position_ids, updates, negative);
}

}  // namespace LlmOpPackage
