//==============================================================================
// LlmOpPackage::RmsNorm for the HTP. Generated once by qnn-custom-ops;
// this file is yours: regeneration never overwrites it (unless --force).
// The math lives in kernels/RmsNorm.h; this file only adapts HTP tensors to it.
//==============================================================================
// RMS normalisation over the last dimension, scaled by a static weight (Llama, Qwen). y =
// x * rsqrt(mean(x * x, dim=-1) + eps) * weight

#include "HTP/core/constraints.h"
#include "HTP/core/op_package_feature_support.h"
#include "HTP/core/op_register_ext.h"
#include "HTP/core/optimize.h"
#include "HTP/core/simple_reg.h"
#include "QnnOpPackage.h"
#include "qco/declared_dtypes.h"
#include "qco/htp_adapter.h"
#include "RmsNorm.h"

BEGIN_PKG_OP_DEFINITION(PKG_RmsNorm);

// Arguments: outputs, then inputs, then parameters, each in OpDef order; every parameter,
// scalar or tensor, arrives as a tensor. An absent optional input is nullptr.
//   output y: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input x: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input weight: mandatory, rank 1, FLOAT_32, FLOAT_16, SFIXED_POINT_8, UFIXED_POINT_8, SFIXED_POINT_16
//   param eps: optional, rank 0, FLOAT_32
static GraphStatus rmsNormImplBody(
    Tensor& y,
    const Tensor* x,
    const Tensor* weight,
    const Tensor* eps)
{
  // Outputs keep the static shape the graph declared; call set_dims() here first if the
  // op's output shape depends on its inputs.
  using qco_declared = LlmOpPackage::declared::RmsNorm;
  qco::htp::View qco_view_y(y, qco_declared::y);
  qco::htp::View qco_view_x(x, qco_declared::x);
  qco::htp::View qco_view_weight(weight, qco_declared::weight);
  qco::htp::View qco_view_eps(eps, qco_declared::eps);
  const GraphStatus qco_failure = qco::htp::first_failure({
      &qco_view_y,
      &qco_view_x,
      &qco_view_weight,
      &qco_view_eps});
  if (qco_failure != GraphStatus::Success) return qco_failure;
  return qco::htp::status_of(LlmOpPackage::RmsNorm(
      qco_view_y.view,
      qco_view_x.view,
      qco_view_weight.view,
      qco_view_eps.view));
}

// The implementation for 2 input(s): the HTP registers one per input count.
static GraphStatus rmsNormImpl(
    Tensor& y,
    const Tensor& x,
    const Tensor& weight,
    const Tensor& eps) {
  return rmsNormImplBody(y, &x, &weight, &eps);
}

DEF_PACKAGE_OP(rmsNormImpl, "RmsNorm")

static Qnn_Scalar_t sg_opDefaultRmsNorm_epsScalar = {
    .dataType = Qnn_DataType_t::QNN_DATATYPE_FLOAT_32, .floatValue = 1e-06f};
static Qnn_Param_t sg_opDefaultRmsNorm_eps = {
    .paramType = QNN_PARAMTYPE_SCALAR, .scalarParam = sg_opDefaultRmsNorm_epsScalar};

// Parameter order: name, mandatory, default (nullptr: no default the HTP can apply).
DEF_PACKAGE_PARAM_ORDER("RmsNorm",
                        "eps", false, &sg_opDefaultRmsNorm_eps)

END_PKG_OP_DEFINITION(PKG_RmsNorm);
