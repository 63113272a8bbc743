// Runs an op's generated HTP implementation on stand-in tensors (see qco_standin.h), so the
// adapter's dtype, encoding, layout and rank handling is tested without the QNN SDK.
// Built by tests/generator/test_htp_build.py with -DQCO_OP_SOURCE='"<package>/src/ops/ExampleCustomOp.cpp"'.
//
//   adapter_check encoding IN_SCALE IN_ZERO_POINT OUT_SCALE OUT_ZERO_POINT
//       runs exampleCustomOpImpl on a uint8 (1,4,8,8) tensor holding 0..255 whose HTP
//       encoding is the given scale and zero point; prints the status, then the 256 outputs.
//   adapter_check refusals
//       prints "<case> <GraphStatus>" for tensors the adapter must refuse or accept.
#include QCO_OP_SOURCE

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

class TestTensor final : public Tensor {
 public:
  TestTensor(std::vector<size_t> dims, DType dtype, float scale, int zero_point, void* data,
             uint32_t format_code = 0)
      : dims_(std::move(dims)), dtype_(dtype), scale_(scale), zero_point_(zero_point), data_(data),
        format_code_(format_code) {}

  size_t rank() const noexcept override { return dims_.size(); }
  size_t dim(size_t index) const noexcept override { return dims_[index]; }
  DTypeScaleOff get_dtype_intfc() const noexcept override { return DTypeScaleOff(dtype_, scale_, zero_point_); }
  uint32_t get_tensor_format_code() const noexcept override { return format_code_; }
  void* raw_data() noexcept override { return data_; }

 private:
  std::vector<size_t> dims_;
  DType dtype_;
  float scale_;
  int zero_point_;
  void* data_;
  uint32_t format_code_;
};

const std::vector<size_t> kShape = {1, 4, 8, 8};

int encoding(float in_scale, int in_zero_point, float out_scale, int out_zero_point) {
  std::vector<uint8_t> x(256), y(256, 0);
  for (int i = 0; i < 256; ++i) x[i] = static_cast<uint8_t>(i);
  TestTensor input(kShape, DType::QUInt8, in_scale, in_zero_point, x.data());
  TestTensor output(kShape, DType::QUInt8, out_scale, out_zero_point, y.data());
  const GraphStatus status = exampleCustomOpImpl(output, input);
  std::printf("%d\n", static_cast<int>(status.error_code));
  for (int i = 0; i < 256; ++i) std::printf("%d%c", y[i], i == 255 ? '\n' : ' ');
  return 0;
}

void refusal(const char* name, std::vector<size_t> in_shape, DType in_dtype, uint32_t in_format,
             DType out_dtype = DType::Float32) {
  std::vector<uint64_t> x(512, 0), y(512, 0);
  TestTensor input(in_shape, in_dtype, 1.0f, 0, x.data(), in_format);
  TestTensor output(in_shape, out_dtype, 1.0f, 0, y.data());
  const GraphStatus status = exampleCustomOpImpl(output, input);
  std::printf("%s %d\n", name, static_cast<int>(status.error_code));
}

int refusals() {
  refusal("float32_flat", kShape, DType::Float32, 0);
  refusal("float32_tcm", kShape, DType::Float32, Tensor::tformat_is_tcm);
  refusal("crouton", kShape, DType::Float32, Tensor::tformat_is_not_flat);
  refusal("indirect", kShape, DType::Float32, Tensor::tformat_is_indirect);
  refusal("chunked", kShape, DType::Float32, Tensor::tformat_is_chunked);
  refusal("rank9", {1, 1, 1, 1, 1, 1, 1, 1, 1}, DType::Float32, 0);
  refusal("int64", kShape, DType::Int64, 0, DType::Int64);
  refusal("bfloat16", kShape, DType::BFloat16, 0, DType::BFloat16);
  refusal("unknown", kShape, DType::UNKNOWN, 0, DType::UNKNOWN);
  refusal("mixed", kShape, DType::Float32, 0, DType::QUInt8);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 6 && std::strcmp(argv[1], "encoding") == 0) {
    return encoding(std::strtof(argv[2], nullptr), std::atoi(argv[3]), std::strtof(argv[4], nullptr),
                    std::atoi(argv[5]));
  }
  if (argc == 2 && std::strcmp(argv[1], "refusals") == 0) return refusals();
  std::fprintf(stderr, "usage: adapter_check encoding IN_SCALE IN_ZP OUT_SCALE OUT_ZP | refusals\n");
  return 2;
}
