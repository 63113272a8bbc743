//==============================================================================
// ExampleOpPackage::ExampleCustomOp for the HTP. Generated once by qnn-custom-ops;
// this file is yours: regeneration never overwrites it (unless --force).
// The math lives in kernels/ExampleCustomOp.h; this file only adapts HTP tensors to it.
//==============================================================================
// ExampleCustomOp for testing OP package registration functionality.

#include "HTP/core/constraints.h"
#include "HTP/core/op_package_feature_support.h"
#include "HTP/core/op_register_ext.h"
#include "HTP/core/optimize.h"
#include "HTP/core/simple_reg.h"
#include "QnnOpPackage.h"
#include "qco/declared_dtypes.h"
#include "qco/htp_adapter.h"
#include "ExampleCustomOp.h"

BEGIN_PKG_OP_DEFINITION(PKG_ExampleCustomOp);

// Arguments: outputs, then inputs, then parameters, each in OpDef order; every parameter,
// scalar or tensor, arrives as a tensor. An absent optional input is nullptr.
//   output output: mandatory, rank 4, FLOAT_32, UFIXED_POINT_8
//   input input: mandatory, rank 4, FLOAT_32, UFIXED_POINT_8
static GraphStatus exampleCustomOpImplBody(
    Tensor& output,
    const Tensor* input)
{
  // Outputs keep the static shape the graph declared; call set_dims() here first if the
  // op's output shape depends on its inputs.
  using qco_declared = ExampleOpPackage::declared::ExampleCustomOp;
  qco::htp::View qco_view_output(output, qco_declared::output);
  qco::htp::View qco_view_input(input, qco_declared::input);
  const GraphStatus qco_failure = qco::htp::first_failure({
      &qco_view_output,
      &qco_view_input});
  if (qco_failure != GraphStatus::Success) return qco_failure;
  return qco::htp::status_of(ExampleOpPackage::ExampleCustomOp(
      qco_view_output.view,
      qco_view_input.view));
}

// The implementation for 1 input(s): the HTP registers one per input count.
static GraphStatus exampleCustomOpImpl(
    Tensor& output,
    const Tensor& input) {
  return exampleCustomOpImplBody(output, &input);
}

DEF_PACKAGE_OP(exampleCustomOpImpl, "ExampleCustomOp")

END_PKG_OP_DEFINITION(PKG_ExampleCustomOp);
