// Host speed kernels: qco_host::mm.out and qco_host::quantize_per_tensor.out.
//
// A quantized program runs its standard ops on ExecuTorch's kernels on the host (XNNPACK would
// compute something else); its prefill spent most of its time in two of them: mm (one thread)
// and quantize_per_tensor (std::nearbyint called per element). These compute the same bits,
// faster: mm sums each output over k in order from 0, every product rounded before it is added
// (as ExecuTorch's gemm_notrans_ does; built without FMA contraction), over register tiles and
// the runtime's threadpool; quantize rounds as ExecuTorch's quantize_val does, in vector lanes.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include <executorch/runtime/kernel/kernel_includes.h>
#include <executorch/runtime/kernel/operator_registry.h>
#include <executorch/runtime/kernel/thread_parallel_interface.h>

namespace {

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::KernelRuntimeContext;
using executorch::runtime::Span;

// A register tile of the output: kRows rows of one vector of kCols columns, each accumulated in
// a register (vector lanes are output columns: every output still sums over k in order).
constexpr int64_t kCols = 16;
constexpr int64_t kRows = 8;
typedef float Vec __attribute__((vector_size(kCols * sizeof(float))));
// Below this many multiply-adds an mm runs on the calling thread (a decode step's projections,
// the smaller prefill ones): handing work to the pool costs more than it saves.
constexpr int64_t kParallelWork = int64_t{1} << 21;

bool check(KernelRuntimeContext& ctx, bool ok, const char* what) {
  if (!ok) {
    ET_LOG(Error, "%s", what);
    ctx.fail(Error::InvalidArgument);
  }
  return ok;
}

// Rows x kCols outputs at c: row r of a (k values) times kCols columns of b (row stride n).
template <int64_t Rows>
void mm_tile(const float* a, const float* b, float* c, int64_t k, int64_t n) {
  Vec acc[Rows] = {};
  for (int64_t l = 0; l < k; ++l) {
    Vec w;
    __builtin_memcpy(&w, b + l * n, sizeof(Vec));
    for (int64_t r = 0; r < Rows; ++r) acc[r] = acc[r] + a[r * k + l] * w;
  }
  for (int64_t r = 0; r < Rows; ++r) __builtin_memcpy(c + r * n, &acc[r], sizeof(Vec));
}

// The last rows (fewer than kRows) of a column block.
void mm_rows(const float* a, const float* b, float* c, int64_t k, int64_t n, int64_t rows) {
  switch (rows) {
    case 1: return mm_tile<1>(a, b, c, k, n);
    case 2: return mm_tile<2>(a, b, c, k, n);
    case 3: return mm_tile<3>(a, b, c, k, n);
    case 4: return mm_tile<4>(a, b, c, k, n);
    case 5: return mm_tile<5>(a, b, c, k, n);
    case 6: return mm_tile<6>(a, b, c, k, n);
    default: return mm_tile<7>(a, b, c, k, n);
  }
}

// The last columns (fewer than kCols): the same sums, one output at a time.
void mm_edge(const float* a, const float* b, float* c, int64_t k, int64_t n, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      float sum = 0.0f;
      for (int64_t l = 0; l < k; ++l) sum = sum + a[r * k + l] * b[l * n + j];
      c[r * n + j] = sum;
    }
}

// Tiles [begin, end) of the m x n output, column block major (consecutive tiles share b's columns).
void mm_tiles(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n, int64_t begin, int64_t end) {
  const int64_t row_tiles = (m + kRows - 1) / kRows;
  for (int64_t t = begin; t < end; ++t) {
    const int64_t i = (t % row_tiles) * kRows;
    const int64_t j = (t / row_tiles) * kCols;
    const int64_t rows = std::min(kRows, m - i);
    const int64_t cols = std::min(kCols, n - j);
    if (cols < kCols)
      mm_edge(a + i * k, b + j, c + i * n + j, k, n, rows, cols);
    else if (rows == kRows)
      mm_tile<kRows>(a + i * k, b + j, c + i * n + j, k, n);
    else
      mm_rows(a + i * k, b + j, c + i * n + j, k, n, rows);
  }
}

void mm_out(KernelRuntimeContext& ctx, const Tensor& self, const Tensor& mat2, Tensor& out) {
  if (!check(ctx,
             self.scalar_type() == ScalarType::Float && mat2.scalar_type() == ScalarType::Float &&
                 out.scalar_type() == ScalarType::Float && self.dim() == 2 && mat2.dim() == 2 &&
                 self.size(1) == mat2.size(0),
             "qco_host::mm.out: float32 [m, k] @ [k, n] only"))
    return;
  const int64_t m = self.size(0), k = self.size(1), n = mat2.size(1);
  const executorch::aten::SizesType sizes[2] = {static_cast<executorch::aten::SizesType>(m),
                                                static_cast<executorch::aten::SizesType>(n)};
  if (!check(ctx, executorch::runtime::resize_tensor(out, {sizes, 2}) == Error::Ok,
             "qco_host::mm.out: cannot resize the output to [m, n]"))
    return;
  const float* a = self.const_data_ptr<float>();
  const float* b = mat2.const_data_ptr<float>();
  float* c = out.mutable_data_ptr<float>();
  const int64_t tiles = ((m + kRows - 1) / kRows) * ((n + kCols - 1) / kCols);
  if (m * n * k < kParallelWork) {
    mm_tiles(a, b, c, m, k, n, 0, tiles);
    return;
  }
  const int64_t grain = std::max<int64_t>(1, tiles / (4 * executorch::extension::get_thread_count()));
  executorch::extension::parallel_for(0, tiles, grain, [&](int64_t begin, int64_t end) {
    mm_tiles(a, b, c, m, k, n, begin, end);
  });
}

// ExecuTorch's quantize_val: zero_point + nearbyint(value * (1.0f / float(scale))) in float,
// clamped (a NaN to quant_min, as its int64 conversion of one then clamps). The pass that
// calls this kernel keeps the range within 16 bits, where every clamped value is exact in float.
template <typename Out>
void quantize(const float* in, Out* out, int64_t count, float inv_scale, float zero_point, float low, float high) {
  for (int64_t i = 0; i < count; ++i) {
    const float q = zero_point + std::nearbyint(inv_scale * in[i]);
    out[i] = static_cast<Out>(static_cast<int32_t>(std::max(low, std::min(q, high))));
  }
}

void quantize_per_tensor_out(KernelRuntimeContext& ctx, const Tensor& input, double scale, int64_t zero_point,
                             int64_t quant_min, int64_t quant_max, ScalarType dtype, Tensor& out) {
  if (!check(ctx, input.scalar_type() == ScalarType::Float && out.scalar_type() == dtype &&
                      quant_min >= -65536 && quant_max <= 65536 && quant_min <= quant_max,
             "qco_host::quantize_per_tensor.out: float32 input, codes within 16 bits only"))
    return;
  if (!check(ctx, executorch::runtime::resize_tensor(out, input.sizes()) == Error::Ok,
             "qco_host::quantize_per_tensor.out: cannot resize the output to the input's shape"))
    return;
  const float* in = input.const_data_ptr<float>();
  const int64_t count = input.numel();
  const float inv_scale = 1.0f / static_cast<float>(scale);
  const float zp = static_cast<float>(zero_point);
  const float low = static_cast<float>(quant_min), high = static_cast<float>(quant_max);
  switch (dtype) {
    case ScalarType::Byte: quantize(in, out.mutable_data_ptr<uint8_t>(), count, inv_scale, zp, low, high); return;
    case ScalarType::Char: quantize(in, out.mutable_data_ptr<int8_t>(), count, inv_scale, zp, low, high); return;
    case ScalarType::Short: quantize(in, out.mutable_data_ptr<int16_t>(), count, inv_scale, zp, low, high); return;
    case ScalarType::Int: quantize(in, out.mutable_data_ptr<int32_t>(), count, inv_scale, zp, low, high); return;
    default: check(ctx, false, "qco_host::quantize_per_tensor.out: codes stored as uint8, int8, int16 or int32 only");
  }
}

// Boxed entries: the runtime's stack holds the schema's arguments, the output, then the
// returned value (the output again).
void mm_out_boxed(KernelRuntimeContext& ctx, Span<EValue*> stack) {
  if (!check(ctx, stack.size() >= 3, "qco_host::mm.out: too few arguments")) return;
  mm_out(ctx, stack[0]->toTensor(), stack[1]->toTensor(), stack[2]->toTensor());
}

void quantize_per_tensor_out_boxed(KernelRuntimeContext& ctx, Span<EValue*> stack) {
  if (!check(ctx, stack.size() >= 7, "qco_host::quantize_per_tensor.out: too few arguments")) return;
  quantize_per_tensor_out(ctx, stack[0]->toTensor(), stack[1]->toDouble(), stack[2]->toInt(), stack[3]->toInt(),
                          stack[4]->toInt(), stack[5]->toScalarType(), stack[6]->toTensor());
}

const executorch::runtime::Kernel kKernels[] = {
    executorch::runtime::Kernel("qco_host::mm.out", mm_out_boxed),
    executorch::runtime::Kernel("qco_host::quantize_per_tensor.out", quantize_per_tensor_out_boxed),
};

const auto kRegistered = executorch::runtime::register_kernels({kKernels, 2});

}  // namespace

// The kernels this library registers, readable from the file without loading it (as the
// package libraries list theirs): registering a name twice aborts the interpreter.
extern "C" __attribute__((used, visibility("default"))) const char qco_host_kernel_list[] =
    "qco-kernel-list:qco_host::mm.out;qco_host::quantize_per_tensor.out;";
