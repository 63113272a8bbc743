//==============================================================================
// SplitCustomOpPackage::SplitCustomOp for the HTP. Generated once by qnn-custom-ops;
// this file is yours: regeneration never overwrites it (unless --force).
// The math lives in kernels/SplitCustomOp.h; this file only adapts HTP tensors to it.
//==============================================================================
// SplitCustomOp splits the input tensor in half along the last dimension and returns two
// output tensors of equal size: output 0 is input[..., :C//2], output 1 is input[...,
// C//2:].

#include "HTP/core/constraints.h"
#include "HTP/core/op_package_feature_support.h"
#include "HTP/core/op_register_ext.h"
#include "HTP/core/optimize.h"
#include "HTP/core/simple_reg.h"
#include "QnnOpPackage.h"
#include "qco/declared_dtypes.h"
#include "qco/htp_adapter.h"
#include "SplitCustomOp.h"

BEGIN_PKG_OP_DEFINITION(PKG_SplitCustomOp);

// Arguments: outputs, then inputs, then parameters, each in OpDef order; every parameter,
// scalar or tensor, arrives as a tensor. An absent optional input is nullptr.
//   output first_half: mandatory, rank 4, FLOAT_32, UFIXED_POINT_8
//   output second_half: mandatory, rank 4, FLOAT_32, UFIXED_POINT_8
//   input input: mandatory, rank 4, FLOAT_32, UFIXED_POINT_8
static GraphStatus splitCustomOpImplBody(
    Tensor& first_half,
    Tensor& second_half,
    const Tensor* input)
{
  // Outputs keep the static shape the graph declared; call set_dims() here first if the
  // op's output shape depends on its inputs.
  using qco_declared = SplitCustomOpPackage::declared::SplitCustomOp;
  qco::htp::View qco_view_first_half(first_half, qco_declared::first_half);
  qco::htp::View qco_view_second_half(second_half, qco_declared::second_half);
  qco::htp::View qco_view_input(input, qco_declared::input);
  const GraphStatus qco_failure = qco::htp::first_failure({
      &qco_view_first_half,
      &qco_view_second_half,
      &qco_view_input});
  if (qco_failure != GraphStatus::Success) return qco_failure;
  return qco::htp::status_of(SplitCustomOpPackage::SplitCustomOp(
      qco_view_first_half.view,
      qco_view_second_half.view,
      qco_view_input.view));
}

// The implementation for 1 input(s): the HTP registers one per input count.
static GraphStatus splitCustomOpImpl(
    Tensor& first_half,
    Tensor& second_half,
    const Tensor& input) {
  return splitCustomOpImplBody(first_half, second_half, &input);
}

DEF_PACKAGE_OP(splitCustomOpImpl, "SplitCustomOp")

END_PKG_OP_DEFINITION(PKG_SplitCustomOp);
