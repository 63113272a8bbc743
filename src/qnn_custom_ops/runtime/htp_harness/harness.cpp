// The htp-check harness: each case of a cases file as a one-node QNN graph on a real HTP backend
// library (the x86 libQnnHtp.so of a QAIRT release, which prepares the graph and runs it on its
// HTP simulator), its outputs written to a results file. Written by qnn-custom-ops against its
// own declarations of the QNN C API (qco/qhpi_abi.h); the op-agnostic half of
// `qnn-custom-ops htp-check`, whose Python side writes the cases and compares the results.
//
//   harness LIBQNNHTP PACKAGE_LIBRARY INTERFACE_PROVIDER CASES RESULTS
//
// Exit 0 when every case ran (a case the backend refused is a result, with the backend's
// words); 2 with one line on stderr when the backend or the package cannot be loaded.
#include <dlfcn.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "qco/qhpi_abi.h"

namespace {

// The backend's last error and warning lines: what a failed call is reported with.
std::deque<std::string> g_log_lines;

void log_callback(const char* fmt, QnnLog_Level_t level, uint64_t, va_list args) {
  if (level > QNN_LOG_LEVEL_WARN) return;
  char line[1024];
  std::vsnprintf(line, sizeof line, fmt, args);
  std::string text(line);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (std::getenv("QCO_HTP_LOG") != nullptr) std::fprintf(stderr, "qnn: %s\n", text.c_str());
  g_log_lines.push_back(text);
  if (g_log_lines.size() > 4) g_log_lines.pop_front();
}

std::string last_log() {
  std::string joined;
  for (const std::string& line : g_log_lines) joined += (joined.empty() ? "" : " | ") + line;
  g_log_lines.clear();
  return joined;
}

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::exit(2);
}

class Reader {
 public:
  explicit Reader(const char* path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(std::string(path) + ": cannot be read");
    data_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  template <typename T>
  T get() {
    T value;
    need(sizeof(T));
    std::memcpy(&value, data_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }
  std::string string() {
    const uint32_t size = get<uint32_t>();
    need(size);
    std::string text(data_.data() + at_, size);
    at_ += size;
    return text;
  }
  std::vector<char> bytes(uint64_t size) {
    need(size);
    std::vector<char> out(data_.data() + at_, data_.data() + at_ + size);
    at_ += size;
    return out;
  }

 private:
  void need(uint64_t size) {
    if (at_ + size > data_.size()) fail("the cases file is cut short");
  }
  std::vector<char> data_;
  size_t at_ = 0;
};

// One tensor of a case, and the QNN tensor made of it.
struct CaseTensor {
  std::string name;
  Qnn_DataType_t datatype;
  Qnn_TensorType_t type;
  float scale;
  int32_t offset;
  std::vector<uint32_t> dims;
  std::vector<char> data;  // inputs: the values; outputs: room for them
  bool fixed_point;
  Qnn_Tensor_t qnn{};

  void read(Reader& in, bool with_data) {
    datatype = static_cast<Qnn_DataType_t>(in.get<uint32_t>());
    type = static_cast<Qnn_TensorType_t>(in.get<uint32_t>());
    fixed_point = in.get<uint32_t>() != 0;
    scale = in.get<float>();
    offset = in.get<int32_t>();
    const uint32_t rank = in.get<uint32_t>();
    for (uint32_t i = 0; i < rank; ++i) dims.push_back(in.get<uint32_t>());
    if (dims.empty()) dims.push_back(1);  // a scalar is a 1-element tensor to QNN
    const uint64_t size = in.get<uint64_t>();
    data = with_data ? in.bytes(size) : std::vector<char>(size);
  }

  Qnn_Tensor_t& make() {
    qnn = Qnn_Tensor_t{};
    qnn.version = QNN_TENSOR_VERSION_1;
    Qnn_TensorV1_t& v1 = qnn.v1;
    v1.name = name.c_str();
    v1.type = type;
    v1.dataType = datatype;
    if (fixed_point) {
      v1.quantizeParams.encodingDefinition = QNN_DEFINITION_DEFINED;
      v1.quantizeParams.quantizationEncoding = QNN_QUANTIZATION_ENCODING_SCALE_OFFSET;
      v1.quantizeParams.scaleOffsetEncoding = {scale, offset};
    } else {
      v1.quantizeParams.encodingDefinition = QNN_DEFINITION_UNDEFINED;
      v1.quantizeParams.quantizationEncoding = QNN_QUANTIZATION_ENCODING_UNDEFINED;
    }
    v1.rank = static_cast<uint32_t>(dims.size());
    v1.dimensions = dims.data();
    v1.memType = QNN_TENSORMEMTYPE_RAW;
    if (type == QNN_TENSOR_TYPE_STATIC) v1.clientBuf = {data.data(), static_cast<uint32_t>(data.size())};
    return qnn;
  }

  Qnn_Tensor_t bound() {
    Qnn_Tensor_t tensor = qnn;
    tensor.v1.clientBuf = {data.data(), static_cast<uint32_t>(data.size())};
    return tensor;
  }
};

struct CaseParam {
  std::string name;
  bool scalar;
  CaseTensor tensor;
};

struct Case {
  std::string package, op;
  std::vector<CaseTensor> outputs, inputs;
  std::vector<CaseParam> params;
};

Case read_case(Reader& in) {
  Case c;
  c.package = in.string();
  c.op = in.string();
  c.outputs.resize(in.get<uint32_t>());
  c.inputs.resize(in.get<uint32_t>());
  c.params.resize(in.get<uint32_t>());
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    c.outputs[i].name = "out" + std::to_string(i);
    c.outputs[i].read(in, false);
  }
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    c.inputs[i].name = "in" + std::to_string(i);
    c.inputs[i].read(in, true);
  }
  for (size_t i = 0; i < c.params.size(); ++i) {
    c.params[i].name = in.string();
    c.params[i].scalar = in.get<uint32_t>() != 0;
    c.params[i].tensor.name = "param" + std::to_string(i);
    c.params[i].tensor.read(in, true);
  }
  return c;
}

Qnn_Scalar_t scalar_of(const CaseTensor& tensor) {
  Qnn_Scalar_t scalar{};
  scalar.dataType = tensor.datatype;
  std::memcpy(&scalar.uint64Value, tensor.data.data(), std::min<size_t>(tensor.data.size(), 8));
  return scalar;
}

// What happened to one case: the step that failed (empty when it ran) and the backend's words.
struct Outcome {
  std::string failed_step;
  uint64_t error = 0;
  std::string said;
};

class Backend {
 public:
  Backend(const char* library, const char* package, const char* provider) {
    handle_ = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) fail(std::string("cannot load the QNN backend: ") + dlerror());
    auto get_providers = reinterpret_cast<QnnInterface_GetProvidersFn_t>(dlsym(handle_, "QnnInterface_getProviders"));
    if (get_providers == nullptr) fail(std::string(library) + " has no QnnInterface_getProviders: not a QNN backend");
    const QnnInterface_t** providers = nullptr;
    uint32_t count = 0;
    if (get_providers(&providers, &count) != QNN_SUCCESS || count == 0) fail("the QNN backend offers no interface");
    if (providers[0]->apiVersion.coreApiVersion.major != 2) fail("the QNN backend's core API is not version 2");
    qnn_ = &providers[0]->functions;
    qnn_->logCreate(log_callback, QNN_LOG_LEVEL_WARN, &log_);
    if (qnn_->backendCreate(log_, nullptr, &backend_) != QNN_SUCCESS) fail("backendCreate failed: " + last_log());
    const char* build = nullptr;
    if (qnn_->backendGetBuildId != nullptr) qnn_->backendGetBuildId(&build);
    build_ = build ? build : "unknown";
    // Loaded here first with every symbol bound, so a package that cannot load says why (an
    // undefined symbol) instead of ending the process at its first call.
    if (dlopen(package, RTLD_NOW | RTLD_LOCAL) == nullptr) fail(std::string("cannot load the package: ") + dlerror());
    const Qnn_ErrorHandle_t status = qnn_->backendRegisterOpPackage(backend_, package, provider, "CPU");
    if (status != QNN_SUCCESS) {
      const char* why = dlerror();
      fail(std::string(package) + " could not be registered with the HTP backend (QAIRT " + build_ + ", error " +
           std::to_string(status) + "): " + (why ? why : last_log()));
    }
  }

  const std::string& build() const { return build_; }

  Outcome run(Case& c) {
    Outcome outcome;
    Qnn_ContextHandle_t context = nullptr;
    Qnn_GraphHandle_t graph = nullptr;
    auto step = [&](const char* name, Qnn_ErrorHandle_t status) {
      if (status == QNN_SUCCESS || !outcome.failed_step.empty()) return status == QNN_SUCCESS;
      outcome = {name, status, last_log()};
      return false;
    };
    if (step("contextCreate", qnn_->contextCreate(backend_, nullptr, nullptr, &context)) &&
        step("graphCreate", qnn_->graphCreate(context, "qco_case", nullptr, &graph))) {
      build_graph(c, graph, step) && step("graphFinalize", qnn_->graphFinalize(graph, nullptr, nullptr)) &&
          execute(c, graph, step);
    }
    if (context != nullptr) qnn_->contextFree(context, nullptr);
    return outcome;
  }

 private:
  template <typename Step>
  bool build_graph(Case& c, Qnn_GraphHandle_t graph, Step& step) {
    std::vector<Qnn_Tensor_t> inputs, outputs;
    std::vector<Qnn_Param_t> params;
    for (CaseTensor& t : c.inputs) {
      if (!step("tensorCreateGraphTensor", qnn_->tensorCreateGraphTensor(graph, &t.make()))) return false;
      inputs.push_back(t.qnn);
    }
    for (CaseParam& p : c.params) {
      Qnn_Param_t param{};
      param.name = p.name.c_str();
      if (p.scalar) {
        param.paramType = QNN_PARAMTYPE_SCALAR;
        param.scalarParam = scalar_of(p.tensor);
      } else {
        param.paramType = QNN_PARAMTYPE_TENSOR;
        if (!step("tensorCreateGraphTensor", qnn_->tensorCreateGraphTensor(graph, &p.tensor.make()))) return false;
        param.tensorParam = p.tensor.qnn;
      }
      params.push_back(param);
    }
    for (CaseTensor& t : c.outputs) {
      if (!step("tensorCreateGraphTensor", qnn_->tensorCreateGraphTensor(graph, &t.make()))) return false;
      outputs.push_back(t.qnn);
    }
    Qnn_OpConfig_t config{};
    config.version = QNN_OPCONFIG_VERSION_1;
    config.v1 = {"qco_node", c.package.c_str(), c.op.c_str(), static_cast<uint32_t>(params.size()),
                 params.data(), static_cast<uint32_t>(inputs.size()), inputs.data(),
                 static_cast<uint32_t>(outputs.size()), outputs.data()};
    return step("graphAddNode", qnn_->graphAddNode(graph, config));
  }

  template <typename Step>
  bool execute(Case& c, Qnn_GraphHandle_t graph, Step& step) {
    std::vector<Qnn_Tensor_t> inputs, outputs;
    for (CaseTensor& t : c.inputs) {
      if (t.type == QNN_TENSOR_TYPE_APP_WRITE) inputs.push_back(t.bound());
    }
    for (CaseTensor& t : c.outputs) outputs.push_back(t.bound());
    return step("graphExecute", qnn_->graphExecute(graph, inputs.data(), static_cast<uint32_t>(inputs.size()),
                                                   outputs.data(), static_cast<uint32_t>(outputs.size()), nullptr,
                                                   nullptr));
  }

  void* handle_ = nullptr;
  const QnnInterface_Functions_t* qnn_ = nullptr;
  Qnn_LogHandle_t log_ = nullptr;
  Qnn_BackendHandle_t backend_ = nullptr;
  std::string build_;
};

void put_string(std::ofstream& out, const std::string& text) {
  const uint32_t size = static_cast<uint32_t>(text.size());
  out.write(reinterpret_cast<const char*>(&size), sizeof size);
  out.write(text.data(), size);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s LIBQNNHTP PACKAGE_LIBRARY INTERFACE_PROVIDER CASES RESULTS\n", argv[0]);
    return 2;
  }
  Reader in(argv[4]);
  if (in.get<uint32_t>() != 0x48434f51u) fail(std::string(argv[4]) + ": not an htp-check cases file");
  const uint32_t count = in.get<uint32_t>();
  Backend backend(argv[1], argv[2], argv[3]);
  std::ofstream out(argv[5], std::ios::binary);
  out.write("QCOR", 4);
  put_string(out, backend.build());
  for (uint32_t i = 0; i < count; ++i) {
    Case c = read_case(in);
    const Outcome outcome = backend.run(c);
    put_string(out, outcome.failed_step);
    out.write(reinterpret_cast<const char*>(&outcome.error), sizeof outcome.error);
    put_string(out, outcome.said);
    for (const CaseTensor& t : c.outputs) {
      const uint64_t size = outcome.failed_step.empty() ? t.data.size() : 0;
      out.write(reinterpret_cast<const char*>(&size), sizeof size);
      out.write(t.data.data(), static_cast<std::streamsize>(size));
    }
    out.flush();
    std::fprintf(stderr, "qco-htp: case %u of %u\n", i + 1, count);
  }
  out.close();
  const int status = out ? 0 : 2;
  std::fflush(nullptr);
  // Without the backend's static destructors, which crash at exit in some QAIRT releases.
  std::_Exit(status);
}
