// Host speed kernels: qco_host::mm.out, mm_panels.out, bmm.out, permute_copy.out,
// expand_copy.out, add.out, _softmax.out and quantize_per_tensor.out.
//
// A quantized program runs its standard ops on ExecuTorch's kernels on the host (XNNPACK would
// compute something else); its prefill spent most of its time in a few of them: mm and bmm (one
// thread, the whole output updated once per k), quantize_per_tensor (std::nearbyint called per
// element), softmax (expf twice per value, through glibc's underflow handler on every masked
// column), add's broadcast path and permute_copy and expand_copy (an index computed per element).
// These compute the same bits, faster: mm and bmm sum each output over k in order from 0, every
// product rounded before it is added (as ExecuTorch's gemm_notrans_ does; built without FMA
// contraction), over register tiles, a constant weight read as panels (mm_panels); softmax calls
// the same expf once per value, and not where it returns 0; add rounds each sum once, a row at a
// time; quantize rounds as ExecuTorch's quantize_val does, in vector lanes; permute_copy and
// expand_copy move the same elements, a contiguous run at a time.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include <executorch/runtime/kernel/kernel_includes.h>
#include <executorch/runtime/kernel/operator_registry.h>

namespace {

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::KernelRuntimeContext;
using executorch::runtime::Span;

// A register tile of the output: up to kRows rows of Vecs vectors of kLanes columns, each
// accumulated in a register (vector lanes are output columns: every output still sums over k in
// order). Fewer rows take more vectors, so a decode step's one row still reads b's rows
// kLanes * 4 columns at a time.
constexpr int64_t kLanes = 16;
constexpr int64_t kRows = 8;
constexpr int64_t kWide = 4;
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));

bool check(KernelRuntimeContext& ctx, bool ok, const char* what) {
  if (!ok) {
    ET_LOG(Error, "%s", what);
    ctx.fail(Error::InvalidArgument);
  }
  return ok;
}

// Where b's values are: element (l, j) at b[l * row + (j / kLanes) * panel + j % kLanes]. A
// row-major [k, n] b has row n and panel kLanes; panels ([n / kLanes, k, kLanes], a weight laid out
// once when lowered: qco_host::mm_panels) row kLanes and panel k * kLanes, so that a tile reads
// each of its vectors' k rows from one contiguous block instead of k rows n apart.
struct Layout {
  int64_t row, panel;
};

// b from column j on (j a multiple of kLanes).
const float* columns_from(const float* b, int64_t j, Layout layout) { return b + j / kLanes * layout.panel; }

// Rows x (Vecs * kLanes) outputs at c (row stride n): row r of a (k values) times those columns of b.
template <int64_t Rows, int64_t Vecs>
void mm_tile(const float* a, const float* b, float* c, int64_t k, int64_t n, Layout layout) {
  Vec acc[Rows][Vecs] = {};
  for (int64_t l = 0; l < k; ++l) {
    Vec w[Vecs];
    for (int64_t v = 0; v < Vecs; ++v) __builtin_memcpy(&w[v], b + l * layout.row + v * layout.panel, sizeof(Vec));
    for (int64_t r = 0; r < Rows; ++r)
      for (int64_t v = 0; v < Vecs; ++v) acc[r][v] = acc[r][v] + a[r * k + l] * w[v];
  }
  for (int64_t r = 0; r < Rows; ++r) __builtin_memcpy(c + r * n, &acc[r], sizeof(acc[r]));
}

// The same sums, one output at a time: the columns past the last whole vector (row-major b only:
// panels hold whole vectors).
void mm_edge(const float* a, const float* b, float* c, int64_t k, int64_t n, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      float sum = 0.0f;
      for (int64_t l = 0; l < k; ++l) sum = sum + a[r * k + l] * b[l * n + j];
      c[r * n + j] = sum;
    }
}

// `rows` (< kRows) rows of the n columns: kWide vectors at a time, then one, then the edge.
template <int64_t Rows>
void mm_few_rows(const float* a, const float* b, float* c, int64_t k, int64_t n, Layout layout) {
  int64_t j = 0;
  for (; j + kWide * kLanes <= n; j += kWide * kLanes)
    mm_tile<Rows, kWide>(a, columns_from(b, j, layout), c + j, k, n, layout);
  for (; j + kLanes <= n; j += kLanes) mm_tile<Rows, 1>(a, columns_from(b, j, layout), c + j, k, n, layout);
  mm_edge(a, b + j, c + j, k, n, Rows, n - j);
}

// c = a @ b, [m, k] @ [k, n]: blocks of kRows rows one vector wide (b's column block reused
// from cache by every block of rows), then the last rows.
void mm(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n, Layout layout) {
  const int64_t whole = m - m % kRows;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int64_t i = 0; i < whole; i += kRows)
      mm_tile<kRows, 1>(a + i * k, columns_from(b, j, layout), c + i * n + j, k, n, layout);
  mm_edge(a, b + j, c + j, k, n, whole, n - j);
  a += whole * k;
  c += whole * n;
  switch (m - whole) {
    case 0: return;
    case 1: return mm_few_rows<1>(a, b, c, k, n, layout);
    case 2: return mm_few_rows<2>(a, b, c, k, n, layout);
    case 3: return mm_few_rows<3>(a, b, c, k, n, layout);
    case 4: return mm_few_rows<4>(a, b, c, k, n, layout);
    case 5: return mm_few_rows<5>(a, b, c, k, n, layout);
    case 6: return mm_few_rows<6>(a, b, c, k, n, layout);
    default: return mm_few_rows<7>(a, b, c, k, n, layout);
  }
}

// out resized to [m, n], or [batch, m, n] when batch is not 0.
bool resize_product(KernelRuntimeContext& ctx, Tensor& out, int64_t batch, int64_t m, int64_t n) {
  executorch::aten::SizesType sizes[3] = {static_cast<executorch::aten::SizesType>(batch),
                                          static_cast<executorch::aten::SizesType>(m),
                                          static_cast<executorch::aten::SizesType>(n)};
  const size_t rank = batch ? 3 : 2;
  return check(ctx, executorch::runtime::resize_tensor(out, {sizes + (3 - rank), rank}) == Error::Ok,
               "qco_host: cannot resize the output to the product's shape");
}

// [m, k] @ [k, n] (rank 2, mm) or [batch, m, k] @ [batch, k, n] (rank 3, bmm), float32, on the
// calling thread: on this project's shared 2-core machines the runtime's threadpool gained nothing
// (32x1024x4096: 15.99 ms on two threads, 15.92 ms on one) and cost 10% of a small prefill.
void matmul_out(KernelRuntimeContext& ctx, const Tensor& self, const Tensor& mat2, Tensor& out, int64_t rank,
                const char* what) {
  const int64_t d = rank - 2;
  if (!check(ctx,
             self.scalar_type() == ScalarType::Float && mat2.scalar_type() == ScalarType::Float &&
                 out.scalar_type() == ScalarType::Float && self.dim() == rank && mat2.dim() == rank &&
                 self.size(d + 1) == mat2.size(d) && (rank == 2 || self.size(0) == mat2.size(0)),
             what))
    return;
  const int64_t batch = rank == 2 ? 1 : self.size(0);
  const int64_t m = self.size(d), k = self.size(d + 1), n = mat2.size(d + 1);
  if (!resize_product(ctx, out, rank == 2 ? 0 : batch, m, n)) return;
  const float* a = self.const_data_ptr<float>();
  const float* b = mat2.const_data_ptr<float>();
  float* c = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < batch; ++i) mm(a + i * m * k, b + i * k * n, c + i * m * n, m, k, n, {n, kLanes});
}

// [m, k] @ a weight laid out as panels [n / kLanes, k, kLanes] (lowering/host_speed.py): mm's sums.
void mm_panels_out(KernelRuntimeContext& ctx, const Tensor& self, const Tensor& panels, Tensor& out) {
  if (!check(ctx,
             self.scalar_type() == ScalarType::Float && panels.scalar_type() == ScalarType::Float &&
                 out.scalar_type() == ScalarType::Float && self.dim() == 2 && panels.dim() == 3 &&
                 panels.size(2) == kLanes && self.size(1) == panels.size(1),
             "qco_host::mm_panels.out: float32 [m, k] @ panels [n / 16, k, 16] only"))
    return;
  const int64_t m = self.size(0), k = self.size(1), n = panels.size(0) * kLanes;
  if (!resize_product(ctx, out, 0, m, n)) return;
  mm(self.const_data_ptr<float>(), panels.const_data_ptr<float>(), out.mutable_data_ptr<float>(), m, k, n,
     {kLanes, k * kLanes});
}

constexpr int64_t kMaxRank = 16;

// Copies out's elements, any dtype, from self at `strides` (in self's elements, per output
// dimension, 0 where it broadcasts), a contiguous run of the innermost dimensions at a time where
// self's layout allows (ExecuTorch's permute_copy and expand_copy compute every element's index).
void strided_copy(const Tensor& self, Tensor& out, const int64_t* strides) {
  const int64_t rank = out.dim();
  int64_t run = 1, outer = rank;  // elements copied at once; output dimensions walked
  while (outer > 0 && strides[outer - 1] == run) run *= out.size(--outer);
  const int64_t width = static_cast<int64_t>(self.element_size());
  const auto* source = static_cast<const char*>(self.const_data_ptr());
  auto* target = static_cast<char*>(out.mutable_data_ptr());
  int64_t index[kMaxRank] = {};
  int64_t offset = 0;  // of index, in self's elements
  for (int64_t done = 0, total = out.numel(); done < total; done += run) {
    std::memcpy(target + done * width, source + offset * width, static_cast<size_t>(run * width));
    for (int64_t d = outer - 1; d >= 0; --d) {  // the next index, last dimension fastest
      offset += strides[d];
      if (++index[d] < out.size(d)) break;
      offset -= strides[d] * out.size(d);
      index[d] = 0;
    }
  }
}

// self's contiguous stride of dimension d, in elements.
int64_t stride_of(const Tensor& self, int64_t d) {
  int64_t stride = 1;
  for (int64_t e = d + 1; e < self.dim(); ++e) stride *= self.size(e);
  return stride;
}

// out = self permuted by `dims`: the elements moved as they are.
void permute_copy_out(KernelRuntimeContext& ctx, const Tensor& self, executorch::aten::ArrayRef<int64_t> dims,
                      Tensor& out) {
  const int64_t rank = self.dim();
  bool ok = rank == static_cast<int64_t>(dims.size()) && rank <= kMaxRank && rank > 0 &&
            out.scalar_type() == self.scalar_type() && out.dim() == rank;
  int64_t strides[kMaxRank];  // in self's elements, in out's dimension order
  for (int64_t d = 0; ok && d < rank; ++d) {
    const int64_t from = dims[d] < 0 ? dims[d] + rank : dims[d];
    ok = from >= 0 && from < rank && out.size(d) == self.size(from);
    if (ok) strides[d] = stride_of(self, from);
  }
  if (!check(ctx, ok, "qco_host::permute_copy.out: dims must be a permutation of the input's, the output its shape"))
    return;
  strided_copy(self, out, strides);
}

// out = self expanded to `sizes` (-1 keeps a dimension; new dimensions lead): each element
// repeated where self's dimension is 1.
void expand_copy_out(KernelRuntimeContext& ctx, const Tensor& self, executorch::aten::ArrayRef<int64_t> sizes,
                     Tensor& out) {
  const int64_t rank = static_cast<int64_t>(sizes.size()), lead = rank - self.dim();
  bool ok = lead >= 0 && rank <= kMaxRank && out.scalar_type() == self.scalar_type();
  executorch::aten::SizesType expanded[kMaxRank];
  int64_t strides[kMaxRank];  // in self's elements, 0 where the dimension repeats
  for (int64_t d = 0; ok && d < rank; ++d) {
    const int64_t own = d < lead ? 1 : self.size(d - lead);
    const int64_t size = sizes[d] == -1 && d >= lead ? own : sizes[d];
    ok = size >= 0 && (own == size || own == 1);
    expanded[d] = static_cast<executorch::aten::SizesType>(size);
    strides[d] = d < lead || own != size ? 0 : stride_of(self, d - lead);
  }
  if (!check(ctx, ok, "qco_host::expand_copy.out: sizes must keep or repeat each dimension of size 1"))
    return;
  if (!check(ctx, executorch::runtime::resize_tensor(out, {expanded, static_cast<size_t>(rank)}) == Error::Ok,
             "qco_host::expand_copy.out: cannot resize the output to the expanded shape"))
    return;
  strided_copy(self, out, strides);
}

// out = self + other, float32, broadcast to their common shape (ExecuTorch's add with alpha 1:
// each sum rounded once, the same bits), the last dimension in one loop per pair of rows, which
// vectorizes where neither repeats along it.
void add_out(KernelRuntimeContext& ctx, const Tensor& self, const Tensor& other, Tensor& out) {
  const int64_t rank = std::max<int64_t>(self.dim(), other.dim());
  bool ok = self.scalar_type() == ScalarType::Float && other.scalar_type() == ScalarType::Float &&
            out.scalar_type() == ScalarType::Float && rank <= kMaxRank;
  executorch::aten::SizesType sizes[kMaxRank];
  int64_t strides[2][kMaxRank];  // in each input's elements, 0 where it repeats
  for (int64_t d = 0; ok && d < rank; ++d) {
    int64_t size = 1;
    for (const Tensor* input : {&self, &other}) {
      const int64_t e = d - (rank - input->dim());
      const int64_t own = e < 0 ? 1 : input->size(e);
      ok = ok && (own == 1 || size == 1 || own == size);
      size = own == 1 ? size : own;
    }
    sizes[d] = static_cast<executorch::aten::SizesType>(size);
    for (int64_t i = 0; i < 2; ++i) {
      const Tensor& input = i == 0 ? self : other;
      const int64_t e = d - (rank - input.dim());
      strides[i][d] = e < 0 || input.size(e) != size ? 0 : stride_of(input, e);
    }
  }
  if (!check(ctx, ok, "qco_host::add.out: float32 tensors of shapes that broadcast together only")) return;
  if (!check(ctx, executorch::runtime::resize_tensor(out, {sizes, static_cast<size_t>(rank)}) == Error::Ok,
             "qco_host::add.out: cannot resize the output to the broadcast shape"))
    return;
  const float* a = self.const_data_ptr<float>();
  const float* b = other.const_data_ptr<float>();
  float* c = out.mutable_data_ptr<float>();
  const int64_t width = rank == 0 ? 1 : sizes[rank - 1], outer = rank - 1;
  const int64_t step_a = rank == 0 ? 0 : strides[0][rank - 1], step_b = rank == 0 ? 0 : strides[1][rank - 1];
  int64_t index[kMaxRank] = {};
  int64_t offset_a = 0, offset_b = 0;
  for (int64_t done = 0, total = out.numel(); done < total; done += width) {
    const float* x = a + offset_a;
    const float* y = b + offset_b;
    float* z = c + done;
    if (step_a == 1 && step_b == 1) {
      for (int64_t j = 0; j < width; ++j) z[j] = x[j] + y[j];
    } else {
      for (int64_t j = 0; j < width; ++j) z[j] = x[j * step_a] + y[j * step_b];
    }
    for (int64_t d = outer - 1; d >= 0; --d) {  // the next row, last dimension fastest
      offset_a += strides[0][d];
      offset_b += strides[1][d];
      if (++index[d] < sizes[d]) break;
      offset_a -= strides[0][d] * sizes[d];
      offset_b -= strides[1][d] * sizes[d];
      index[d] = 0;
    }
  }
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

// Below this, glibc's expf returns +0 (by way of its underflow handler, which sets errno and costs
// five times an exp): an attention row's masked columns (score - 255 - max) are all here.
constexpr float kExpUnderflow = -104.0f;

float exp_of(float x) { return x < kExpUnderflow ? 0.0f : std::exp(x); }

typedef int32_t Lanes __attribute__((vector_size(kLanes * sizeof(int32_t))));

// The largest of a contiguous row of at least kLanes values, kLanes at a time; false (and `max`
// unset) if the row holds a NaN, whose place in the fold decides what ExecuTorch's max is.
bool contiguous_max(const float* in, int64_t size, float& max) {
  Vec best, v;
  __builtin_memcpy(&best, in, sizeof(Vec));
  Lanes nan = best != best;
  int64_t i = kLanes;
  for (; i + kLanes <= size; i += kLanes) {
    __builtin_memcpy(&v, in + i, sizeof(Vec));
    nan |= v != v;
    best = v > best ? v : best;
  }
  max = best[0];
  for (int64_t l = 1; l < kLanes; ++l) max = best[l] > max ? best[l] : max;
  bool found_nan = false;
  for (int64_t l = 0; l < kLanes; ++l) found_nan |= nan[l] != 0;
  for (; i < size; ++i) {
    found_nan |= in[i] != in[i];
    max = in[i] > max ? in[i] : max;
  }
  return !found_nan;
}

// The max ExecuTorch's softmax subtracts: std::max(value, max) folded from the first value on.
// Without a NaN that is the row's largest value, found kLanes at a time where the row is
// contiguous (a zero's sign may differ, which no exp(value - max) tells apart).
float row_max(const float* in, int64_t size, int64_t stride) {
  float max = in[0];
  if (stride == 1 && size >= kLanes && contiguous_max(in, size, max)) return max;
  max = in[0];
  for (int64_t i = 1; i < size; ++i) max = std::max(in[i * stride], max);
  return max;
}

// ExecuTorch's portable softmax of one row (`size` values `stride` apart): the max (row_max),
// the sum of exp(value - max) in order from the first, each output exp(value - max) / sum. Its
// kernel calls exp twice per value; the first result is kept in `out` instead (the same function
// of the same argument: the same bits). An exp of +0 is not added (sum + 0 is sum, NaN and
// infinity included), and the divisions of a contiguous row go kLanes at a time (each rounded
// once, as alone).
void softmax_row(const float* in, float* out, int64_t size, int64_t stride) {
  const float max = row_max(in, size, stride);
  float sum = 0.0f;
  for (int64_t i = 0; i < size; ++i) {
    const float e = exp_of(in[i * stride] - max);
    out[i * stride] = e;
    if (e != 0.0f) sum = sum + e;
  }
  if (stride == 1) {
    for (int64_t i = 0; i < size; ++i) out[i] = out[i] / sum;
  } else {
    for (int64_t i = 0; i < size; ++i) out[i * stride] = out[i * stride] / sum;
  }
}

void softmax_out(KernelRuntimeContext& ctx, const Tensor& self, int64_t dim, bool half_to_float, Tensor& out) {
  const int64_t rank = self.dim();
  if (dim < 0) dim += rank;
  if (!check(ctx, self.scalar_type() == ScalarType::Float && out.scalar_type() == ScalarType::Float &&
                      !half_to_float && rank > 0 && dim >= 0 && dim < rank,
             "qco_host::_softmax.out: float32 input of rank 1 or more, a dim within it, half_to_float false"))
    return;
  if (!check(ctx, executorch::runtime::resize_tensor(out, self.sizes()) == Error::Ok,
             "qco_host::_softmax.out: cannot resize the output to the input's shape"))
    return;
  const int64_t size = self.size(dim);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= self.size(d);
  for (int64_t d = dim + 1; d < rank; ++d) inner *= self.size(d);
  if (size == 0) return;
  const float* in = self.const_data_ptr<float>();
  float* result = out.mutable_data_ptr<float>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t base = o * size * inner + i;
      softmax_row(in + base, result + base, size, inner);
    }
}

// Boxed entries: the runtime's stack holds the schema's arguments, the output, then the
// returned value (the output again).
void mm_out_boxed(KernelRuntimeContext& ctx, Span<EValue*> stack) {
  if (!check(ctx, stack.size() >= 3, "qco_host::mm.out: too few arguments")) return;
  matmul_out(ctx, stack[0]->toTensor(), stack[1]->toTensor(), stack[2]->toTensor(), 2,
             "qco_host::mm.out: float32 [m, k] @ [k, n] only");
}

void mm_panels_out_boxed(KernelRuntimeContext& ctx, Span<EValue*> stack) {
  if (!check(ctx, stack.size() >= 3, "qco_host::mm_panels.out: too few arguments")) return;
  mm_panels_out(ctx, stack[0]->toTensor(), stack[1]->toTensor(), stack[2]->toTensor());
}

void bmm_out_boxed(KernelRuntimeContext& ctx, Span<EValue*> stack) {
  if (!check(ctx, stack.size() >= 3, "qco_host::bmm.out: too few arguments")) return;
  matmul_out(ctx, stack[0]->toTensor(), stack[1]->toTensor(), stack[2]->toTensor(), 3,
             "qco_host::bmm.out: float32 [b, m, k] @ [b, k, n] only");
}

void permute_copy_out_boxed(KernelRuntimeContext& ctx, Span<EValue*> stack) {
  if (!check(ctx, stack.size() >= 3, "qco_host::permute_copy.out: too few arguments")) return;
  permute_copy_out(ctx, stack[0]->toTensor(), stack[1]->toIntList(), stack[2]->toTensor());
}

void expand_copy_out_boxed(KernelRuntimeContext& ctx, Span<EValue*> stack) {
  if (!check(ctx, stack.size() >= 3, "qco_host::expand_copy.out: too few arguments")) return;
  expand_copy_out(ctx, stack[0]->toTensor(), stack[1]->toIntList(), stack[2]->toTensor());
}

void add_out_boxed(KernelRuntimeContext& ctx, Span<EValue*> stack) {
  if (!check(ctx, stack.size() >= 3, "qco_host::add.out: too few arguments")) return;
  add_out(ctx, stack[0]->toTensor(), stack[1]->toTensor(), stack[2]->toTensor());
}

void quantize_per_tensor_out_boxed(KernelRuntimeContext& ctx, Span<EValue*> stack) {
  if (!check(ctx, stack.size() >= 7, "qco_host::quantize_per_tensor.out: too few arguments")) return;
  quantize_per_tensor_out(ctx, stack[0]->toTensor(), stack[1]->toDouble(), stack[2]->toInt(), stack[3]->toInt(),
                          stack[4]->toInt(), stack[5]->toScalarType(), stack[6]->toTensor());
}

void softmax_out_boxed(KernelRuntimeContext& ctx, Span<EValue*> stack) {
  if (!check(ctx, stack.size() >= 4, "qco_host::_softmax.out: too few arguments")) return;
  softmax_out(ctx, stack[0]->toTensor(), stack[1]->toInt(), stack[2]->toBool(), stack[3]->toTensor());
}

const executorch::runtime::Kernel kKernels[] = {
    executorch::runtime::Kernel("qco_host::mm.out", mm_out_boxed),
    executorch::runtime::Kernel("qco_host::mm_panels.out", mm_panels_out_boxed),
    executorch::runtime::Kernel("qco_host::bmm.out", bmm_out_boxed),
    executorch::runtime::Kernel("qco_host::permute_copy.out", permute_copy_out_boxed),
    executorch::runtime::Kernel("qco_host::expand_copy.out", expand_copy_out_boxed),
    executorch::runtime::Kernel("qco_host::add.out", add_out_boxed),
    executorch::runtime::Kernel("qco_host::quantize_per_tensor.out", quantize_per_tensor_out_boxed),
    executorch::runtime::Kernel("qco_host::_softmax.out", softmax_out_boxed),
};

const auto kRegistered = executorch::runtime::register_kernels({kKernels, 8});

}  // namespace

// The kernels this library registers, readable from the file without loading it (as the
// package libraries list theirs): registering a name twice aborts the interpreter.
extern "C" __attribute__((used, visibility("default"))) const char qco_host_kernel_list[] =
    "qco-kernel-list:qco_host::mm.out;qco_host::mm_panels.out;qco_host::bmm.out;qco_host::permute_copy.out;qco_host::expand_copy.out;qco_host::add.out;"
    "qco_host::quantize_per_tensor.out;qco_host::_softmax.out;";
