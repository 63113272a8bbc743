//==============================================================================
// LlmOpPackage::CtxScatter for the HTP. Generated once by qnn-custom-ops;
// this file is yours: regeneration never overwrites it (unless --force).
// The math lives in kernels/CtxScatter.h; this file only adapts HTP tensors to it.
//==============================================================================
// Write new keys or values into a static KV cache (QEfficient CtxScatter). out =
// cache.clone(); out[b, :, position_ids[b, s]] = updates[b, :, s]; positions outside [0,
// ctx_len) are skipped (padding; see negative)

#include "HTP/core/constraints.h"
#include "HTP/core/op_package_feature_support.h"
#include "HTP/core/op_register_ext.h"
#include "HTP/core/optimize.h"
#include "HTP/core/simple_reg.h"
#include "QnnOpPackage.h"
#include "qco/declared_dtypes.h"
#include "qco/htp_adapter.h"
#include "CtxScatter.h"

BEGIN_PKG_OP_DEFINITION(PKG_CtxScatter);

// Arguments: outputs, then inputs, then parameters, each in OpDef order; every parameter,
// scalar or tensor, arrives as a tensor. An absent optional input is nullptr.
//   output out: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input cache: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input position_ids: mandatory, rank 2, INT_32
//   input updates: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   param negative: optional, rank 0, UINT_32
static GraphStatus ctxScatterImplBody(
    Tensor& out,
    const Tensor* cache,
    const Tensor* position_ids,
    const Tensor* updates,
    const Tensor* negative)
{
  // Outputs keep the static shape the graph declared; call set_dims() here first if the
  // op's output shape depends on its inputs.
  using qco_declared = LlmOpPackage::declared::CtxScatter;
  qco::htp::View qco_view_out(out, qco_declared::out);
  qco::htp::View qco_view_cache(cache, qco_declared::cache);
  qco::htp::View qco_view_position_ids(position_ids, qco_declared::position_ids);
  qco::htp::View qco_view_updates(updates, qco_declared::updates);
  qco::htp::View qco_view_negative(negative, qco_declared::negative);
  const GraphStatus qco_failure = qco::htp::first_failure({
      &qco_view_out,
      &qco_view_cache,
      &qco_view_position_ids,
      &qco_view_updates,
      &qco_view_negative});
  if (qco_failure != GraphStatus::Success) return qco_failure;
  return qco::htp::status_of(LlmOpPackage::CtxScatter(
      qco_view_out.view,
      qco_view_cache.view,
      qco_view_position_ids.view,
      qco_view_updates.view,
      qco_view_negative.view));
}

// The implementation for 3 input(s): the HTP registers one per input count.
static GraphStatus ctxScatterImpl(
    Tensor& out,
    const Tensor& cache,
    const Tensor& position_ids,
    const Tensor& updates,
    const Tensor& negative) {
  return ctxScatterImplBody(out, &cache, &position_ids, &updates, &negative);
}

DEF_PACKAGE_OP(ctxScatterImpl, "CtxScatter")

static Qnn_Scalar_t sg_opDefaultCtxScatter_negativeScalar = {
    .dataType = Qnn_DataType_t::QNN_DATATYPE_UINT_32, .uint32Value = 0u};
static Qnn_Param_t sg_opDefaultCtxScatter_negative = {
    .paramType = QNN_PARAMTYPE_SCALAR, .scalarParam = sg_opDefaultCtxScatter_negativeScalar};

// Parameter order: name, mandatory, default (nullptr: no default the HTP can apply).
DEF_PACKAGE_PARAM_ORDER("CtxScatter",
                        "negative", false, &sg_opDefaultCtxScatter_negative)

END_PKG_OP_DEFINITION(PKG_CtxScatter);
