//==============================================================================
// LlmOpPackage::CtxGather for the HTP. Generated once by qnn-custom-ops;
// this file is yours: regeneration never overwrites it (unless --force).
// The math lives in kernels/CtxGather.h; this file only adapts HTP tensors to it.
//==============================================================================
// Read rows of a static KV cache (QEfficient CtxGather). out[b, :, i] = cache[b, :,
// ctx_indices[b, i]]; indices outside [0, ctx_len) read zeros

#include "HTP/core/constraints.h"
#include "HTP/core/op_package_feature_support.h"
#include "HTP/core/op_register_ext.h"
#include "HTP/core/optimize.h"
#include "HTP/core/simple_reg.h"
#include "QnnOpPackage.h"
#include "qco/declared_dtypes.h"
#include "qco/htp_adapter.h"
#include "CtxGather.h"

BEGIN_PKG_OP_DEFINITION(PKG_CtxGather);

// Arguments: outputs, then inputs, then parameters, each in OpDef order; every parameter,
// scalar or tensor, arrives as a tensor. An absent optional input is nullptr.
//   output out: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input cache: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input ctx_indices: mandatory, rank 2, INT_32
static GraphStatus ctxGatherImplBody(
    Tensor& out,
    const Tensor* cache,
    const Tensor* ctx_indices)
{
  // Outputs keep the static shape the graph declared; call set_dims() here first if the
  // op's output shape depends on its inputs.
  using qco_declared = LlmOpPackage::declared::CtxGather;
  qco::htp::View qco_view_out(out, qco_declared::out);
  qco::htp::View qco_view_cache(cache, qco_declared::cache);
  qco::htp::View qco_view_ctx_indices(ctx_indices, qco_declared::ctx_indices);
  const GraphStatus qco_failure = qco::htp::first_failure({
      &qco_view_out,
      &qco_view_cache,
      &qco_view_ctx_indices});
  if (qco_failure != GraphStatus::Success) return qco_failure;
  return qco::htp::status_of(LlmOpPackage::CtxGather(
      qco_view_out.view,
      qco_view_cache.view,
      qco_view_ctx_indices.view));
}

// The implementation for 2 input(s): the HTP registers one per input count.
static GraphStatus ctxGatherImpl(
    Tensor& out,
    const Tensor& cache,
    const Tensor& ctx_indices) {
  return ctxGatherImplBody(out, &cache, &ctx_indices);
}

DEF_PACKAGE_OP(ctxGatherImpl, "CtxGather")

END_PKG_OP_DEFINITION(PKG_CtxGather);
