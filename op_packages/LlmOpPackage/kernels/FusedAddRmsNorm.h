// Kernel of LlmOpPackage::FusedAddRmsNorm: the op's math, once, in portable C++17.
// Generated once by qnn-custom-ops; this file is yours: regeneration never overwrites it
// (unless --force). The same source builds for the HTP (src/ops/FusedAddRmsNorm.cpp), for
// ExecuTorch on the host and for the C ABI in host/. An HVX fast path goes behind
// #if defined(__HVX__), computing the portable path's integers (README "An HVX path for your
// kernel"); `qnn-custom-ops hexagon-check` compares the two bit for bit.
// Residual add, then RMS normalisation of the sum (vLLM's fused_add_rms_norm): the decoder
// layer's norm with the residual it carries. residual_out = x + residual; y = residual_out
// * rsqrt(mean(residual_out * residual_out, dim=-1) + eps) * weight
//
// Helpers shipped beside it in kernels/qco/: tensor_view.h (qco::load_real/store_real, one
// element of any dtype), access.h (write the math once as a template over Float32Access and
// RealAccess, qco::with_access picks one: float32 loops vectorize; qco::param_or for
// defaulted params), math.h (qco::vector_exp, vector_erfc), hvx.h (fixed-point requantization
// a portable loop and HVX compute alike; HVX loads with tails, a 256-entry table lookup).
// README "Writing a kernel" and "An HVX path for your kernel" show them.
#pragma once

#include <vector>

#include "RmsNorm.h"

namespace LlmOpPackage {

// Arguments: outputs, then inputs, then parameters, in the order of the OpDef.
//   output y: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   output residual_out: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input x: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input residual: mandatory, ND, FLOAT_32, FLOAT_16, UFIXED_POINT_8, UFIXED_POINT_16
//   input weight: mandatory, rank 1, FLOAT_32, FLOAT_16, SFIXED_POINT_8, UFIXED_POINT_8, SFIXED_POINT_16
//   param eps: optional, rank 0, FLOAT_32
// residual_out = x + residual, stored in its dtype; y = RmsNorm of the sum before it is stored
// (in float32, as vLLM's fused_add_rms_norm normalises it). The sum is computed once, in float32
// from each input's reals, on every dtype: fixed-point branches included (the norm of a sum of
// two encodings has no exact integer form in 32-bit lanes; this op has no integer path yet).

// sums = x + residual in reals, element by element (any dtype each).
template <typename Access>
void add_elements(qco::TensorView& sums, const qco::TensorView& x, const qco::TensorView& residual) {
  const auto a = Access::in(x);
  const auto b = Access::in(residual);
  const auto out = Access::out(sums);
  for (int64_t i = 0; i < sums.numel(); ++i) out(i, a(i) + b(i));
}

// dst = src, element by element, in dst's dtype and encoding.
template <typename Access>
void store_elements(qco::TensorView& dst, const qco::TensorView& src) {
  const auto in = Access::in(src);
  const auto out = Access::out(dst);
  for (int64_t i = 0; i < dst.numel(); ++i) out(i, in(i));
}

inline qco::Status FusedAddRmsNorm(qco::TensorView& y, qco::TensorView& residual_out, const qco::TensorView& x,
                                   const qco::TensorView& residual, const qco::TensorView& weight,
                                   const qco::TensorView& eps) {
  if (x.rank < 1 || !y.same_shape(x) || !residual.same_shape(x) || !residual_out.same_shape(x) ||
      weight.rank != 1 || weight.dims[0] != x.dims[x.rank - 1]) {
    return qco::Status::kShapeMismatch;
  }
  std::vector<float> storage(static_cast<size_t>(x.numel()));
  qco::TensorView sums{storage.data(), x.dims, x.rank, qco::DType::kFloat32, 1.0f, 0};
  qco::Status status = dispatch({&sums, &x, &residual}, [&](auto access) {
    add_elements<decltype(access)>(sums, x, residual);
  });
  if (status != qco::Status::kOk) return status;
  status = dispatch({&residual_out, &sums}, [&](auto access) { store_elements<decltype(access)>(residual_out, sums); });
  if (status != qco::Status::kOk) return status;
  return RmsNorm(y, sums, weight, eps);
}

}  // namespace LlmOpPackage
