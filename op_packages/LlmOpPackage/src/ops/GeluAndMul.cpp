//==============================================================================
// LlmOpPackage::GeluAndMul for the HTP. Generated once by qnn-custom-ops;
// this file is yours: regeneration never overwrites it (unless --force).
// The math lives in kernels/GeluAndMul.h; this file only adapts HTP tensors to it.
//==============================================================================
// Gated GELU of a fused gate/up projection (vLLM gelu_and_mul). d = x.shape[-1] / 2; y =
// gelu(x[..., :d], approximate) * x[..., d:]

#include "HTP/core/constraints.h"
#include "HTP/core/op_package_feature_support.h"
#include "HTP/core/op_register_ext.h"
#include "HTP/core/optimize.h"
#include "HTP/core/simple_reg.h"
#include "QnnOpPackage.h"
#include "qco/declared_dtypes.h"
#include "qco/htp_adapter.h"
#include "GeluAndMul.h"

BEGIN_PKG_OP_DEFINITION(PKG_GeluAndMul);

// Arguments: outputs, then inputs, then parameters, each in OpDef order; every parameter,
// scalar or tensor, arrives as a tensor. An absent optional input is nullptr.
//   output y: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input x: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   param approximate: optional, rank 0, UINT_32
static GraphStatus geluAndMulImplBody(
    Tensor& y,
    const Tensor* x,
    const Tensor* approximate)
{
  // Outputs keep the static shape the graph declared; call set_dims() here first if the
  // op's output shape depends on its inputs.
  using qco_declared = LlmOpPackage::declared::GeluAndMul;
  qco::htp::View qco_view_y(y, qco_declared::y);
  qco::htp::View qco_view_x(x, qco_declared::x);
  qco::htp::View qco_view_approximate(approximate, qco_declared::approximate);
  const GraphStatus qco_failure = qco::htp::first_failure({
      &qco_view_y,
      &qco_view_x,
      &qco_view_approximate});
  if (qco_failure != GraphStatus::Success) return qco_failure;
  return qco::htp::status_of(LlmOpPackage::GeluAndMul(
      qco_view_y.view,
      qco_view_x.view,
      qco_view_approximate.view));
}

// The implementation for 1 input(s): the HTP registers one per input count.
static GraphStatus geluAndMulImpl(
    Tensor& y,
    const Tensor& x,
    const Tensor& approximate) {
  return geluAndMulImplBody(y, &x, &approximate);
}

DEF_PACKAGE_OP(geluAndMulImpl, "GeluAndMul")

static Qnn_Scalar_t sg_opDefaultGeluAndMul_approximateScalar = {
    .dataType = Qnn_DataType_t::QNN_DATATYPE_UINT_32, .uint32Value = 0u};
static Qnn_Param_t sg_opDefaultGeluAndMul_approximate = {
    .paramType = QNN_PARAMTYPE_SCALAR, .scalarParam = sg_opDefaultGeluAndMul_approximateScalar};

// Parameter order: name, mandatory, default (nullptr: no default the HTP can apply).
DEF_PACKAGE_PARAM_ORDER("GeluAndMul",
                        "approximate", false, &sg_opDefaultGeluAndMul_approximate)

END_PKG_OP_DEFINITION(PKG_GeluAndMul);
