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
#include "qco/htp_adapter.h"
#include "SplitCustomOp.h"

BEGIN_PKG_OP_DEFINITION(PKG_SplitCustomOp);

// Impl arguments: outputs, then inputs, then parameters, each in OpDef order;
// every parameter, scalar or tensor, arrives as a tensor.
//   output first_half: mandatory, rank 4, FLOAT_32, UFIXED_POINT_8
//   output second_half: mandatory, rank 4, FLOAT_32, UFIXED_POINT_8
//   input input: mandatory, rank 4, FLOAT_32, UFIXED_POINT_8
template <typename TensorType>
GraphStatus splitCustomOpImpl(
    TensorType& first_half,
    TensorType& second_half,
    const TensorType& input);

static float splitCustomOpCostFunc(const Op* op);

// Cost GLACIAL/SNAIL/FAST/FREE and flags can be set with DEF_PACKAGE_OP_AND_COST_AND_FLAGS.
DEF_PACKAGE_OP((splitCustomOpImpl<Tensor>), "SplitCustomOp")

template <typename TensorType>
GraphStatus splitCustomOpImpl(
    TensorType& first_half,
    TensorType& second_half,
    const TensorType& input)
{
  // Outputs keep the static shape the graph declared; call set_dims() here first if the
  // op's output shape depends on its inputs.
  qco::htp::View qco_view_first_half(first_half);
  qco::htp::View qco_view_second_half(second_half);
  qco::htp::View qco_view_input(input);
  return qco::htp::status_of(SplitCustomOpPackage::SplitCustomOp(
      qco_view_first_half.view,
      qco_view_second_half.view,
      qco_view_input.view));
}

__attribute__((unused)) static float splitCustomOpCostFunc(const Op* op) {
  (void)op;
  return 0.0f;
}

END_PKG_OP_DEFINITION(PKG_SplitCustomOp);
