//==============================================================================
// LlmOpPackage::CtxScatterCb for the HTP. Generated once by qnn-custom-ops;
// this file is yours: regeneration never overwrites it (unless --force).
// The math lives in kernels/CtxScatterCb.h; this file only adapts HTP tensors to it.
//==============================================================================
// CtxScatter for continuous batching: each sequence names its cache slot. out =
// cache.clone(); out[batch_index[b], :, position_ids[b, s]] = updates[b, :, s]; positions
// outside [0, ctx_len) are skipped (padding; see negative)

#include "HTP/core/constraints.h"
#include "HTP/core/op_package_feature_support.h"
#include "HTP/core/op_register_ext.h"
#include "HTP/core/optimize.h"
#include "HTP/core/simple_reg.h"
#include "QnnOpPackage.h"
#include "qco/declared_dtypes.h"
#include "qco/htp_adapter.h"
#include "CtxScatterCb.h"

BEGIN_PKG_OP_DEFINITION(PKG_CtxScatterCb);

// Arguments: outputs, then inputs, then parameters, each in OpDef order; every parameter,
// scalar or tensor, arrives as a tensor. An absent optional input is nullptr.
//   output out: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input cache: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input batch_index: mandatory, ND, INT_32
//   input position_ids: mandatory, rank 2, INT_32
//   input updates: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   param negative: optional, rank 0, UINT_32
static GraphStatus ctxScatterCbImplBody(
    Tensor& out,
    const Tensor* cache,
    const Tensor* batch_index,
    const Tensor* position_ids,
    const Tensor* updates,
    const Tensor* negative)
{
  // Outputs keep the static shape the graph declared; call set_dims() here first if the
  // op's output shape depends on its inputs.
  using qco_declared = LlmOpPackage::declared::CtxScatterCb;
  qco::htp::View qco_view_out(out, qco_declared::out);
  qco::htp::View qco_view_cache(cache, qco_declared::cache);
  qco::htp::View qco_view_batch_index(batch_index, qco_declared::batch_index);
  qco::htp::View qco_view_position_ids(position_ids, qco_declared::position_ids);
  qco::htp::View qco_view_updates(updates, qco_declared::updates);
  qco::htp::View qco_view_negative(negative, qco_declared::negative);
  const GraphStatus qco_failure = qco::htp::first_failure({
      &qco_view_out,
      &qco_view_cache,
      &qco_view_batch_index,
      &qco_view_position_ids,
      &qco_view_updates,
      &qco_view_negative});
  if (qco_failure != GraphStatus::Success) return qco_failure;
  return qco::htp::status_of(LlmOpPackage::CtxScatterCb(
      qco_view_out.view,
      qco_view_cache.view,
      qco_view_batch_index.view,
      qco_view_position_ids.view,
      qco_view_updates.view,
      qco_view_negative.view));
}

// The implementation for 4 input(s): the HTP registers one per input count.
static GraphStatus ctxScatterCbImpl(
    Tensor& out,
    const Tensor& cache,
    const Tensor& batch_index,
    const Tensor& position_ids,
    const Tensor& updates,
    const Tensor& negative) {
  return ctxScatterCbImplBody(out, &cache, &batch_index, &position_ids, &updates, &negative);
}

DEF_PACKAGE_OP(ctxScatterCbImpl, "CtxScatterCb")

static Qnn_Scalar_t sg_opDefaultCtxScatterCb_negativeScalar = {
    .dataType = Qnn_DataType_t::QNN_DATATYPE_UINT_32, .uint32Value = 0u};
static Qnn_Param_t sg_opDefaultCtxScatterCb_negative = {
    .paramType = QNN_PARAMTYPE_SCALAR, .scalarParam = sg_opDefaultCtxScatterCb_negativeScalar};

// Parameter order: name, mandatory, default (nullptr: no default the HTP can apply).
DEF_PACKAGE_PARAM_ORDER("CtxScatterCb",
                        "negative", false, &sg_opDefaultCtxScatterCb_negative)

END_PKG_OP_DEFINITION(PKG_CtxScatterCb);
