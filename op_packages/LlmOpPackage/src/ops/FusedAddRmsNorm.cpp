//==============================================================================
// LlmOpPackage::FusedAddRmsNorm for the HTP. Generated once by qnn-custom-ops;
// this file is yours: regeneration never overwrites it (unless --force).
// The math lives in kernels/FusedAddRmsNorm.h; this file only adapts HTP tensors to it.
//==============================================================================
// Residual add, then RMS normalisation of the sum (vLLM's fused_add_rms_norm): the decoder
// layer's norm with the residual it carries. residual_out = x + residual; y = residual_out
// * rsqrt(mean(residual_out * residual_out, dim=-1) + eps) * weight

#include "HTP/core/constraints.h"
#include "HTP/core/op_package_feature_support.h"
#include "HTP/core/op_register_ext.h"
#include "HTP/core/optimize.h"
#include "HTP/core/simple_reg.h"
#include "QnnOpPackage.h"
#include "qco/declared_dtypes.h"
#include "qco/htp_adapter.h"
#include "FusedAddRmsNorm.h"

BEGIN_PKG_OP_DEFINITION(PKG_FusedAddRmsNorm);

// Arguments: outputs, then inputs, then parameters, each in OpDef order; every parameter,
// scalar or tensor, arrives as a tensor. An absent optional input is nullptr.
//   output y: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   output residual_out: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input x: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input residual: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input weight: mandatory, rank 1, FLOAT_32, FLOAT_16, SFIXED_POINT_8, UFIXED_POINT_8, SFIXED_POINT_16
//   param eps: optional, rank 0, FLOAT_32
static GraphStatus fusedAddRmsNormImplBody(
    Tensor& y,
    Tensor& residual_out,
    const Tensor* x,
    const Tensor* residual,
    const Tensor* weight,
    const Tensor* eps)
{
  // Outputs keep the static shape the graph declared; call set_dims() here first if the
  // op's output shape depends on its inputs.
  using qco_declared = LlmOpPackage::declared::FusedAddRmsNorm;
  qco::htp::View qco_view_y(y, qco_declared::y);
  qco::htp::View qco_view_residual_out(residual_out, qco_declared::residual_out);
  qco::htp::View qco_view_x(x, qco_declared::x);
  qco::htp::View qco_view_residual(residual, qco_declared::residual);
  qco::htp::View qco_view_weight(weight, qco_declared::weight);
  qco::htp::View qco_view_eps(eps, qco_declared::eps);
  const GraphStatus qco_failure = qco::htp::first_failure({
      &qco_view_y,
      &qco_view_residual_out,
      &qco_view_x,
      &qco_view_residual,
      &qco_view_weight,
      &qco_view_eps});
  if (qco_failure != GraphStatus::Success) return qco_failure;
  return qco::htp::status_of(LlmOpPackage::FusedAddRmsNorm(
      qco_view_y.view,
      qco_view_residual_out.view,
      qco_view_x.view,
      qco_view_residual.view,
      qco_view_weight.view,
      qco_view_eps.view));
}

// The implementation for 3 input(s): the HTP registers one per input count.
static GraphStatus fusedAddRmsNormImpl(
    Tensor& y,
    Tensor& residual_out,
    const Tensor& x,
    const Tensor& residual,
    const Tensor& weight,
    const Tensor& eps) {
  return fusedAddRmsNormImplBody(y, residual_out, &x, &residual, &weight, &eps);
}

DEF_PACKAGE_OP(fusedAddRmsNormImpl, "FusedAddRmsNorm")

static Qnn_Scalar_t sg_opDefaultFusedAddRmsNorm_epsScalar = {
    .dataType = Qnn_DataType_t::QNN_DATATYPE_FLOAT_32, .floatValue = 1e-06f};
static Qnn_Param_t sg_opDefaultFusedAddRmsNorm_eps = {
    .paramType = QNN_PARAMTYPE_SCALAR, .scalarParam = sg_opDefaultFusedAddRmsNorm_epsScalar};

// Parameter order: name, mandatory, default (nullptr: no default the HTP can apply).
DEF_PACKAGE_PARAM_ORDER("FusedAddRmsNorm",
                        "eps", false, &sg_opDefaultFusedAddRmsNorm_eps)

END_PKG_OP_DEFINITION(PKG_FusedAddRmsNorm);
