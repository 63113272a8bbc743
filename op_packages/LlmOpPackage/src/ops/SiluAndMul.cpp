//==============================================================================
// LlmOpPackage::SiluAndMul for the HTP. Generated once by qnn-custom-ops;
// this file is yours: regeneration never overwrites it (unless --force).
// The math lives in kernels/SiluAndMul.h; this file only adapts HTP tensors to it.
//==============================================================================
// Gated SiLU of a fused gate/up projection (vLLM silu_and_mul). d = x.shape[-1] / 2; y =
// silu(x[..., :d]) * x[..., d:]

#include "HTP/core/constraints.h"
#include "HTP/core/op_package_feature_support.h"
#include "HTP/core/op_register_ext.h"
#include "HTP/core/optimize.h"
#include "HTP/core/simple_reg.h"
#include "QnnOpPackage.h"
#include "qco/declared_dtypes.h"
#include "qco/htp_adapter.h"
#include "SiluAndMul.h"

BEGIN_PKG_OP_DEFINITION(PKG_SiluAndMul);

// Arguments: outputs, then inputs, then parameters, each in OpDef order; every parameter,
// scalar or tensor, arrives as a tensor. An absent optional input is nullptr.
//   output y: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input x: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
static GraphStatus siluAndMulImplBody(
    Tensor& y,
    const Tensor* x)
{
  // Outputs keep the static shape the graph declared; call set_dims() here first if the
  // op's output shape depends on its inputs.
  using qco_declared = LlmOpPackage::declared::SiluAndMul;
  qco::htp::View qco_view_y(y, qco_declared::y);
  qco::htp::View qco_view_x(x, qco_declared::x);
  const GraphStatus qco_failure = qco::htp::first_failure({
      &qco_view_y,
      &qco_view_x});
  if (qco_failure != GraphStatus::Success) return qco_failure;
  return qco::htp::status_of(LlmOpPackage::SiluAndMul(
      qco_view_y.view,
      qco_view_x.view));
}

// The implementation for 1 input(s): the HTP registers one per input count.
static GraphStatus siluAndMulImpl(
    Tensor& y,
    const Tensor& x) {
  return siluAndMulImplBody(y, &x);
}

DEF_PACKAGE_OP(siluAndMulImpl, "SiluAndMul")

END_PKG_OP_DEFINITION(PKG_SiluAndMul);
