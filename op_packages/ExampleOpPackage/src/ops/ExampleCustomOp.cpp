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
#include "qco/htp_adapter.h"
#include "ExampleCustomOp.h"

BEGIN_PKG_OP_DEFINITION(PKG_ExampleCustomOp);

// Impl arguments: outputs, then inputs, then parameters, each in OpDef order;
// every parameter, scalar or tensor, arrives as a tensor.
//   output output: mandatory, rank 4, FLOAT_32, UFIXED_POINT_8
//   input input: mandatory, rank 4, FLOAT_32, UFIXED_POINT_8
template <typename TensorType>
GraphStatus exampleCustomOpImpl(
    TensorType& output,
    const TensorType& input);

static float exampleCustomOpCostFunc(const Op* op);

// Cost GLACIAL/SNAIL/FAST/FREE and flags can be set with DEF_PACKAGE_OP_AND_COST_AND_FLAGS.
DEF_PACKAGE_OP((exampleCustomOpImpl<Tensor>), "ExampleCustomOp")

template <typename TensorType>
GraphStatus exampleCustomOpImpl(
    TensorType& output,
    const TensorType& input)
{
  // Outputs keep the static shape the graph declared; call set_dims() here first if the
  // op's output shape depends on its inputs.
  qco::htp::View qco_view_output(output);
  qco::htp::View qco_view_input(input);
  return qco::htp::status_of(ExampleOpPackage::ExampleCustomOp(
      qco_view_output.view,
      qco_view_input.view));
}

__attribute__((unused)) static float exampleCustomOpCostFunc(const Op* op) {
  (void)op;
  return 0.0f;
}

END_PKG_OP_DEFINITION(PKG_ExampleCustomOp);
