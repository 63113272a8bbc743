//==============================================================================
// LlmOpPackage::Rope for the HTP. Generated once by qnn-custom-ops;
// this file is yours: regeneration never overwrites it (unless --force).
// The math lives in kernels/Rope.h; this file only adapts HTP tensors to it.
//==============================================================================
// Rotary position embedding applied to queries or keys. neox: y = x * [cos, cos] +
// rotate_half(x) * [sin, sin]; gptj: pairs (x[2i], x[2i+1]) rotated by (cos[i], sin[i])

#include "HTP/core/constraints.h"
#include "HTP/core/op_package_feature_support.h"
#include "HTP/core/op_register_ext.h"
#include "HTP/core/optimize.h"
#include "HTP/core/simple_reg.h"
#include "QnnOpPackage.h"
#include "qco/declared_dtypes.h"
#include "qco/htp_adapter.h"
#include "Rope.h"

BEGIN_PKG_OP_DEFINITION(PKG_Rope);

// Arguments: outputs, then inputs, then parameters, each in OpDef order; every parameter,
// scalar or tensor, arrives as a tensor. An absent optional input is nullptr.
//   output y: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input x: mandatory, rank 4, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input cos: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input sin: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   param style: optional, rank 0, UINT_32
static GraphStatus ropeImplBody(
    Tensor& y,
    const Tensor* x,
    const Tensor* cos,
    const Tensor* sin,
    const Tensor* style)
{
  // Outputs keep the static shape the graph declared; call set_dims() here first if the
  // op's output shape depends on its inputs.
  using qco_declared = LlmOpPackage::declared::Rope;
  qco::htp::View qco_view_y(y, qco_declared::y);
  qco::htp::View qco_view_x(x, qco_declared::x);
  qco::htp::View qco_view_cos(cos, qco_declared::cos);
  qco::htp::View qco_view_sin(sin, qco_declared::sin);
  qco::htp::View qco_view_style(style, qco_declared::style);
  const GraphStatus qco_failure = qco::htp::first_failure({
      &qco_view_y,
      &qco_view_x,
      &qco_view_cos,
      &qco_view_sin,
      &qco_view_style});
  if (qco_failure != GraphStatus::Success) return qco_failure;
  return qco::htp::status_of(LlmOpPackage::Rope(
      qco_view_y.view,
      qco_view_x.view,
      qco_view_cos.view,
      qco_view_sin.view,
      qco_view_style.view));
}

// The implementation for 3 input(s): the HTP registers one per input count.
static GraphStatus ropeImpl(
    Tensor& y,
    const Tensor& x,
    const Tensor& cos,
    const Tensor& sin,
    const Tensor& style) {
  return ropeImplBody(y, &x, &cos, &sin, &style);
}

DEF_PACKAGE_OP(ropeImpl, "Rope")

static Qnn_Scalar_t sg_opDefaultRope_styleScalar = {
    .dataType = Qnn_DataType_t::QNN_DATATYPE_UINT_32, .uint32Value = 0u};
static Qnn_Param_t sg_opDefaultRope_style = {
    .paramType = QNN_PARAMTYPE_SCALAR, .scalarParam = sg_opDefaultRope_styleScalar};

// Parameter order: name, mandatory, default (nullptr: no default the HTP can apply).
DEF_PACKAGE_PARAM_ORDER("Rope",
                        "style", false, &sg_opDefaultRope_style)

END_PKG_OP_DEFINITION(PKG_Rope);
