//==============================================================================
// LlmOpPackage::CtxGatherCb for the HTP. Generated once by qnn-custom-ops;
// this file is yours: regeneration never overwrites it (unless --force).
// The math lives in kernels/CtxGatherCb.h; this file only adapts HTP tensors to it.
//==============================================================================
// CtxGather for continuous batching: each sequence names its cache slot. out[b, :, i] =
// cache[batch_index[b], :, ctx_indices[b, i]]; indices outside [0, ctx_len) read zeros
// (see negative)

#include "HTP/core/constraints.h"
#include "HTP/core/op_package_feature_support.h"
#include "HTP/core/op_register_ext.h"
#include "HTP/core/optimize.h"
#include "HTP/core/simple_reg.h"
#include "QnnOpPackage.h"
#include "qco/declared_dtypes.h"
#include "qco/htp_adapter.h"
#include "CtxGatherCb.h"

BEGIN_PKG_OP_DEFINITION(PKG_CtxGatherCb);

// Arguments: outputs, then inputs, then parameters, each in OpDef order; every parameter,
// scalar or tensor, arrives as a tensor. An absent optional input is nullptr.
//   output out: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input cache: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input batch_index: mandatory, ND, INT_32
//   input ctx_indices: mandatory, ND, INT_32
//   param negative: optional, rank 0, UINT_32
static GraphStatus ctxGatherCbImplBody(
    Tensor& out,
    const Tensor* cache,
    const Tensor* batch_index,
    const Tensor* ctx_indices,
    const Tensor* negative)
{
  // Outputs keep the static shape the graph declared; call set_dims() here first if the
  // op's output shape depends on its inputs.
  using qco_declared = LlmOpPackage::declared::CtxGatherCb;
  qco::htp::View qco_view_out(out, qco_declared::out);
  qco::htp::View qco_view_cache(cache, qco_declared::cache);
  qco::htp::View qco_view_batch_index(batch_index, qco_declared::batch_index);
  qco::htp::View qco_view_ctx_indices(ctx_indices, qco_declared::ctx_indices);
  qco::htp::View qco_view_negative(negative, qco_declared::negative);
  const GraphStatus qco_failure = qco::htp::first_failure({
      &qco_view_out,
      &qco_view_cache,
      &qco_view_batch_index,
      &qco_view_ctx_indices,
      &qco_view_negative});
  if (qco_failure != GraphStatus::Success) return qco_failure;
  return qco::htp::status_of(LlmOpPackage::CtxGatherCb(
      qco_view_out.view,
      qco_view_cache.view,
      qco_view_batch_index.view,
      qco_view_ctx_indices.view,
      qco_view_negative.view));
}

// The implementation for 3 input(s): the HTP registers one per input count.
static GraphStatus ctxGatherCbImpl(
    Tensor& out,
    const Tensor& cache,
    const Tensor& batch_index,
    const Tensor& ctx_indices,
    const Tensor& negative) {
  return ctxGatherCbImplBody(out, &cache, &batch_index, &ctx_indices, &negative);
}

DEF_PACKAGE_OP(ctxGatherCbImpl, "CtxGatherCb")

static Qnn_Scalar_t sg_opDefaultCtxGatherCb_negativeScalar = {
    .dataType = Qnn_DataType_t::QNN_DATATYPE_UINT_32, .uint32Value = 0u};
static Qnn_Param_t sg_opDefaultCtxGatherCb_negative = {
    .paramType = QNN_PARAMTYPE_SCALAR, .scalarParam = sg_opDefaultCtxGatherCb_negativeScalar};

// Parameter order: name, mandatory, default (nullptr: no default the HTP can apply).
DEF_PACKAGE_PARAM_ORDER("CtxGatherCb",
                        "negative", false, &sg_opDefaultCtxGatherCb_negative)

END_PKG_OP_DEFINITION(PKG_CtxGatherCb);
