// A stand-in for the part of the QNN SDK's HTP op package API that qnn-custom-ops
// generates code against: names and signatures only, written for our tests from the SDK's
// public declarations (2.25 to 2.43), so that CI -- which has no QNN SDK -- compiles every
// generated HTP file and runs the HTP adapter. It implements nothing of the HTP: op
// registrations are recorded so a test can check which implementations a package registers.
// Never use it to build a package for a device.
#pragma once

#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstring>

// ---- QnnTypes.h / QnnCommon.h / QnnLog.h / QnnOpPackage.h ----------------------------
typedef uint64_t Qnn_ErrorHandle_t;
enum { QNN_SUCCESS = 0 };
enum QnnLog_Level_t {
  QNN_LOG_LEVEL_ERROR = 1,
  QNN_LOG_LEVEL_WARN = 2,
  QNN_LOG_LEVEL_INFO = 3,
  QNN_LOG_LEVEL_VERBOSE = 4,
  QNN_LOG_LEVEL_DEBUG = 5,
};
enum { QNN_LOG_ERROR_INVALID_ARGUMENT = 4002 };
typedef void (*QnnLog_Callback_t)(const char* fmt, QnnLog_Level_t level, uint64_t timestamp, va_list args);

enum {
  QNN_OP_PACKAGE_ERROR_LIBRARY_ALREADY_INITIALIZED = 30000,
  QNN_OP_PACKAGE_ERROR_LIBRARY_NOT_INITIALIZED = 30001,
  QNN_OP_PACKAGE_ERROR_INVALID_INFO = 30101,
  QNN_OP_PACKAGE_ERROR_VALIDATION_FAILURE = 30110,
  QNN_OP_PACKAGE_ERROR_INVALID_ARGUMENT = 30200,
};

typedef enum {
  QNN_DATATYPE_INT_8 = 0x0008,
  QNN_DATATYPE_INT_16 = 0x0016,
  QNN_DATATYPE_INT_32 = 0x0032,
  QNN_DATATYPE_INT_64 = 0x0064,
  QNN_DATATYPE_UINT_8 = 0x0108,
  QNN_DATATYPE_UINT_16 = 0x0116,
  QNN_DATATYPE_UINT_32 = 0x0132,
  QNN_DATATYPE_UINT_64 = 0x0164,
  QNN_DATATYPE_FLOAT_16 = 0x0216,
  QNN_DATATYPE_FLOAT_32 = 0x0232,
  QNN_DATATYPE_FLOAT_64 = 0x0264,
  QNN_DATATYPE_SFIXED_POINT_4 = 0x0304,
  QNN_DATATYPE_SFIXED_POINT_8 = 0x0308,
  QNN_DATATYPE_SFIXED_POINT_16 = 0x0316,
  QNN_DATATYPE_SFIXED_POINT_32 = 0x0332,
  QNN_DATATYPE_UFIXED_POINT_4 = 0x0404,
  QNN_DATATYPE_UFIXED_POINT_8 = 0x0408,
  QNN_DATATYPE_UFIXED_POINT_16 = 0x0416,
  QNN_DATATYPE_UFIXED_POINT_32 = 0x0432,
  QNN_DATATYPE_BOOL_8 = 0x0508,
  QNN_DATATYPE_STRING = 0x0608,
} Qnn_DataType_t;

typedef struct {
  Qnn_DataType_t dataType;
  union {
    float floatValue;
    double doubleValue;
    uint64_t uint64Value;
    int64_t int64Value;
    uint32_t uint32Value;
    int32_t int32Value;
    uint16_t uint16Value;
    int16_t int16Value;
    uint8_t uint8Value;
    int8_t int8Value;
    uint8_t bool8Value;
    const char* stringValue;
  };
} Qnn_Scalar_t;

typedef enum { QNN_PARAMTYPE_SCALAR = 0, QNN_PARAMTYPE_TENSOR = 1 } Qnn_ParamType_t;
typedef struct Qnn_Tensor_t Qnn_Tensor_t;
typedef struct {
  Qnn_ParamType_t paramType;
  const char* name;
  union {
    Qnn_Scalar_t scalarParam;
    Qnn_Tensor_t* tensorParam;
  };
} Qnn_Param_t;

typedef struct {
  const char* name;
  const char* packageName;
  const char* typeName;
  uint32_t numOfParams;
  Qnn_Param_t* params;
  uint32_t numOfInputs;
  Qnn_Tensor_t* inputTensors;
  uint32_t numOfOutputs;
  Qnn_Tensor_t* outputTensors;
} Qnn_OpConfigV1_t;
typedef struct {
  uint32_t version;
  union {
    Qnn_OpConfigV1_t v1;
  };
} Qnn_OpConfig_t;

typedef struct {
  uint32_t major, minor, patch;
} Qnn_Version_t;
typedef struct {
  Qnn_Version_t coreApiVersion;
  Qnn_Version_t backendApiVersion;
} Qnn_ApiVersion_t;
#define QNN_HTP_API_VERSION_INIT {{2, 0, 0}, {5, 0, 0}}

typedef struct {
  const char* packageName;
  const char** operationNames;
  const void* operationInfo;
  uint32_t numOperations;
  const void* optimizationInfo;
  uint32_t numOptimizations;
  const char* sdkBuildId;
  const Qnn_ApiVersion_t* sdkApiVersion;
  const void* packageInfo;
} QnnOpPackage_Info_t;
#define QNN_OP_PACKAGE_INFO_INIT {}

typedef struct QnnOpPackage_GlobalInfrastructureImpl* QnnOpPackage_GlobalInfrastructure_t;
typedef struct {
  Qnn_ErrorHandle_t (*init)(QnnOpPackage_GlobalInfrastructure_t);
  Qnn_ErrorHandle_t (*terminate)();
  Qnn_ErrorHandle_t (*getInfo)(const QnnOpPackage_Info_t**);
  Qnn_ErrorHandle_t (*validateOpConfig)(Qnn_OpConfig_t);
  void* createOpImpl;
  void* freeOpImpl;
  Qnn_ErrorHandle_t (*logInitialize)(QnnLog_Callback_t, QnnLog_Level_t);
  Qnn_ErrorHandle_t (*logSetLevel)(QnnLog_Level_t);
  Qnn_ErrorHandle_t (*logTerminate)();
} QnnOpPackage_ImplementationV1_4_t;
typedef struct {
  Qnn_Version_t interfaceVersion;
  union {
    QnnOpPackage_ImplementationV1_4_t v1_4;
  };
} QnnOpPackage_Interface_t;

// ---- HTP/core: dtype_enum.h, graph_status.h, interface.h, tensor.h -------------------
enum class DType : uint32_t {
  UNKNOWN = 0,
  QUInt8 = 1,
  QUInt16 = 2,
  QInt16 = 3,
  Float32 = 4,
  Int32 = 5,
  QInt32 = 6,
  QInt8 = 7,
  Float16 = 8,
  Int64 = 9,
  BFloat16 = 10,
  ZZ_LAST_DTYPE,
  None = 254,
  Multi = 255,
};

struct GraphStatus {
  enum GraphErrorCode {
    ErrorFatal = -1,
    Success = 0,
    ErrorDimensions = 2,
    ErrorPrecision = 3,
    ErrorUnsupported = 7,
    ErrorBadInput = 10,
  };
  GraphErrorCode error_code;
  GraphStatus(GraphErrorCode code) : error_code(code) {}
  operator bool() const { return error_code != Success; }
  bool operator==(GraphErrorCode code) const { return error_code == code; }
  bool operator!=(GraphErrorCode code) const { return error_code != code; }
};

// Returned by Tensor::get_dtype_intfc(): the HTP stores a zero point in `offset`,
// real = (q - offset) * scale.
struct DTypeScaleOff {
  DType dtype;
  float scale;
  int offset;
  DTypeScaleOff(DType dt, float sc, int zo) noexcept : dtype(dt), scale(sc), offset(zo) {}
};

class Op;

class Tensor {
 public:
  // Bits of get_tensor_format_code().
  static constexpr unsigned tformat_is_tcm = 1u << 16u;
  static constexpr unsigned tformat_is_quantized = 1u << 17u;
  static constexpr unsigned tformat_is_indirect = 1u << 18u;
  static constexpr unsigned tformat_is_chunked = 1u << 19u;
  static constexpr unsigned tformat_is_not_flat = 1u << 20u;

  Tensor() = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  virtual ~Tensor() {}

  virtual size_t rank() const noexcept = 0;
  virtual size_t dim(size_t index) const noexcept = 0;
  virtual DTypeScaleOff get_dtype_intfc() const noexcept = 0;
  virtual uint32_t get_tensor_format_code() const noexcept = 0;
  virtual void* raw_data() noexcept = 0;
  void const* raw_data_const() const noexcept { return const_cast<Tensor*>(this)->raw_data(); }

  DType get_dtype() const { return get_dtype_intfc().dtype; }
  float interface_scale() const { return get_dtype_intfc().scale; }
  int32_t interface_offset() const { return get_dtype_intfc().offset; }
};

// ---- op_register_ext.h / op_package_feature_support.h / optimize.h (macros) ----------
namespace qco_standin {

// One DEF_PACKAGE_OP: the op name and the number of tensors its implementation takes.
struct Registration {
  const char* op;
  unsigned arity;
};

constexpr unsigned kMaxRegistrations = 1024;

extern "C" inline __attribute__((visibility("default"))) Registration* qco_standin_registrations(unsigned** count) {
  static Registration registrations[kMaxRegistrations];
  static unsigned used = 0;
  *count = &used;
  return registrations;
}

template <typename... Args>
bool register_op(const char* op, GraphStatus (*)(Args...)) {
  unsigned* used = nullptr;
  Registration* registrations = qco_standin_registrations(&used);
  if (*used < kMaxRegistrations) registrations[(*used)++] = Registration{op, sizeof...(Args)};
  return true;
}

inline bool register_param_order(const char*) { return true; }

template <typename... Rest>
bool register_param_order(const char* op, const char* name, bool mandatory, const Qnn_Param_t* fallback,
                          Rest... rest) {
  (void)name, (void)mandatory, (void)fallback;
  return register_param_order(op, rest...);
}

}  // namespace qco_standin

#define QCO_STANDIN_CAT2(a, b) a##b
#define QCO_STANDIN_CAT(a, b) QCO_STANDIN_CAT2(a, b)
#define QCO_STANDIN_STR2(x) #x
#define QCO_STANDIN_STR(x) QCO_STANDIN_STR2(x)
#define THIS_PKG_NAME_STR QCO_STANDIN_STR(THIS_PKG_NAME)

#define BEGIN_PKG_OP_DEFINITION(NAME) void QCO_STANDIN_CAT(NAME, _standin_begin)()
#define END_PKG_OP_DEFINITION(NAME) void QCO_STANDIN_CAT(NAME, _standin_end)()
#define DEF_PACKAGE_OP(F, OP) \
  [[maybe_unused]] static const bool QCO_STANDIN_CAT(qco_standin_op_, __LINE__) = qco_standin::register_op(OP, F);
#define DEF_PACKAGE_PARAM_ORDER(OP, ...)                                                \
  [[maybe_unused]] static const bool QCO_STANDIN_CAT(qco_standin_order_, __LINE__) = \
      qco_standin::register_param_order(OP, __VA_ARGS__);

#define DEFINE_UNIQ_TY()
#define BEGIN_PKG_OPS_OPTS_LIST()
#define DECLARE_PKG_OPS_OPTS_LIST(NAME) void QCO_STANDIN_CAT(NAME, _standin_begin)();
#define END_PKG_OPS_OPTS_LIST()
#define INIT_PACKAGE_OP_DEF()
#define INIT_PACKAGE_OPTIMIZATION_DEF()
#define INIT_PACKAGE_PARAM_ORDER_DEF()
#define INIT_PKG_CORE_INIT_FUNC()
#define REGISTER_PACKAGE_PARAM_ORDERS()
#define REGISTER_PACKAGE_AXIS_PARAMS()
#define REGISTER_PACKAGE_PER_CHANNEL_QUANTIZED_OPS()
