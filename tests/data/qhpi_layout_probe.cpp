// Prints the ABI facts qco/qhpi_abi.h declares: sizes, field offsets, enum values, bit fields.
// Built twice by tests/runtime/test_htp.py: with our header, and with QCO_REAL against the QNN SDK's
// own headers (HTP/core/qhpi.h, QnnInterface.h, QnnOpPackage.h); the two outputs must be equal.
#include <cstddef>
#include <cstdio>
#include <cstring>

#ifdef QCO_REAL
#include "HTP/core/qhpi.h"
#include "QnnInterface.h"
#include "QnnOpPackage.h"
#define FUNCTIONS QNN_INTERFACE_VER_NAME
#else
#include "qco/qhpi_abi.h"
#define FUNCTIONS functions
#endif

#define SIZE(T) std::printf("sizeof %s %zu align %zu\n", #T, sizeof(T), alignof(T))
#define AT(T, F) std::printf("offsetof %s.%s %zu\n", #T, #F, offsetof(T, F))
#define VALUE(E) std::printf("value %s %lld\n", #E, static_cast<long long>(E))

// The byte each bit field of QHPI_Kernel_v1 sets, found by setting it alone.
template <typename Set>
void bit_field(const char* name, Set set) {
  QHPI_Kernel_v1 kernel;
  std::memset(&kernel, 0, sizeof kernel);
  set(kernel);
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(&kernel);
  for (size_t i = 0; i < sizeof kernel; ++i) {
    if (bytes[i] != 0) std::printf("bitfield %s byte %zu value %u\n", name, i, bytes[i]);
  }
}

int main() {
  SIZE(QHPI_Shape); AT(QHPI_Shape, dims);
  SIZE(QHPI_Quant_Parameters); AT(QHPI_Quant_Parameters, zero_offset); AT(QHPI_Quant_Parameters, stepsize);
  SIZE(QHPI_Tensor_Signature_v1); AT(QHPI_Tensor_Signature_v1, layout); AT(QHPI_Tensor_Signature_v1, storage);
  AT(QHPI_Tensor_Signature_v1, mem_placement);
  SIZE(QHPI_Kernel_v1); AT(QHPI_Kernel_v1, function); AT(QHPI_Kernel_v1, resources); AT(QHPI_Kernel_v1, min_inputs);
  AT(QHPI_Kernel_v1, input_signature); AT(QHPI_Kernel_v1, min_outputs); AT(QHPI_Kernel_v1, output_signature);
  AT(QHPI_Kernel_v1, cost_function); AT(QHPI_Kernel_v1, sync_block_size); AT(QHPI_Kernel_v1, precomputed_data_size);
  AT(QHPI_Kernel_v1, do_precomputation_function); AT(QHPI_Kernel_v1, function_with_precomputed_data);
  AT(QHPI_Kernel_v1, predicate); AT(QHPI_Kernel_v1, Reserved_4);
  bit_field("source_destructive", [](QHPI_Kernel_v1& k) { k.source_destructive = 1; });
  bit_field("multithreaded", [](QHPI_Kernel_v1& k) { k.multithreaded = 1; });
  bit_field("variable_inputs", [](QHPI_Kernel_v1& k) { k.variable_inputs = 1; });
  bit_field("variable_outputs", [](QHPI_Kernel_v1& k) { k.variable_outputs = 1; });
  SIZE(QHPI_OpInfo_v1); AT(QHPI_OpInfo_v1, num_kernels); AT(QHPI_OpInfo_v1, kernels); AT(QHPI_OpInfo_v1, early_rewrite);
  AT(QHPI_OpInfo_v1, tile_output); AT(QHPI_OpInfo_v1, build_tile); AT(QHPI_OpInfo_v1, late_rewrite);
  AT(QHPI_OpInfo_v1, Reserved_4);
  VALUE(QHPI_SUCCESS); VALUE(QHPI_QUINT8); VALUE(QHPI_QUINT16); VALUE(QHPI_QINT16); VALUE(QHPI_FLOAT32);
  VALUE(QHPI_INT32); VALUE(QHPI_QINT32); VALUE(QHPI_QINT8); VALUE(QHPI_FLOAT16); VALUE(QHPI_INT64);
  VALUE(QHPI_ELEMENT_TYPE_ANY); VALUE(QHPI_LAYOUT_ANY); VALUE(QHPI_LAYOUT_FLAT_4); VALUE(QHPI_STORAGE_DIRECT);
  VALUE(QHPI_MEM_LOC_DDR_ONLY); VALUE(QHPI_RESOURCE_MAIN); VALUE(QHPI_RESOURCE_HVX); VALUE(QHPI_MAX_RANK);

  SIZE(Qnn_Version_t); SIZE(Qnn_ApiVersion_t); SIZE(Qnn_ScaleOffset_t);
  SIZE(Qnn_QuantizeParams_t); AT(Qnn_QuantizeParams_t, quantizationEncoding); AT(Qnn_QuantizeParams_t, scaleOffsetEncoding);
  SIZE(Qnn_ClientBuffer_t); AT(Qnn_ClientBuffer_t, dataSize);
  SIZE(Qnn_TensorV1_t); AT(Qnn_TensorV1_t, name); AT(Qnn_TensorV1_t, type); AT(Qnn_TensorV1_t, dataFormat);
  AT(Qnn_TensorV1_t, dataType); AT(Qnn_TensorV1_t, quantizeParams); AT(Qnn_TensorV1_t, rank);
  AT(Qnn_TensorV1_t, dimensions); AT(Qnn_TensorV1_t, memType); AT(Qnn_TensorV1_t, clientBuf);
  SIZE(Qnn_Tensor_t); AT(Qnn_Tensor_t, v1);
  SIZE(Qnn_Scalar_t); AT(Qnn_Scalar_t, floatValue); AT(Qnn_Scalar_t, uint64Value);
  SIZE(Qnn_Param_t); AT(Qnn_Param_t, name); AT(Qnn_Param_t, scalarParam); AT(Qnn_Param_t, tensorParam);
  SIZE(Qnn_OpConfigV1_t); AT(Qnn_OpConfigV1_t, packageName); AT(Qnn_OpConfigV1_t, typeName);
  AT(Qnn_OpConfigV1_t, numOfParams); AT(Qnn_OpConfigV1_t, params); AT(Qnn_OpConfigV1_t, numOfInputs);
  AT(Qnn_OpConfigV1_t, inputTensors); AT(Qnn_OpConfigV1_t, numOfOutputs); AT(Qnn_OpConfigV1_t, outputTensors);
  SIZE(Qnn_OpConfig_t); AT(Qnn_OpConfig_t, v1);
  SIZE(QnnOpPackage_Info_t); AT(QnnOpPackage_Info_t, operationNames); AT(QnnOpPackage_Info_t, numOperations);
  AT(QnnOpPackage_Info_t, sdkBuildId); AT(QnnOpPackage_Info_t, sdkApiVersion); AT(QnnOpPackage_Info_t, opsetVersion);
  AT(QnnOpPackage_Info_t, reserved);
  SIZE(QnnOpPackage_Interface_t); AT(QnnOpPackage_Interface_t, v1_4.init); AT(QnnOpPackage_Interface_t, v1_4.logTerminate);
  AT(QnnOpPackage_Interface_t, v1_4.validateOpConfig);
  AT(QnnInterface_t, providerName); AT(QnnInterface_t, apiVersion);
  AT(QnnInterface_t, FUNCTIONS.backendCreate); AT(QnnInterface_t, FUNCTIONS.backendGetBuildId);
  AT(QnnInterface_t, FUNCTIONS.backendRegisterOpPackage); AT(QnnInterface_t, FUNCTIONS.backendFree);
  AT(QnnInterface_t, FUNCTIONS.contextCreate); AT(QnnInterface_t, FUNCTIONS.contextFree);
  AT(QnnInterface_t, FUNCTIONS.graphCreate); AT(QnnInterface_t, FUNCTIONS.graphAddNode);
  AT(QnnInterface_t, FUNCTIONS.graphFinalize); AT(QnnInterface_t, FUNCTIONS.graphExecute);
  AT(QnnInterface_t, FUNCTIONS.tensorCreateGraphTensor); AT(QnnInterface_t, FUNCTIONS.logCreate);
  AT(QnnInterface_t, FUNCTIONS.logFree); AT(QnnInterface_t, FUNCTIONS.deviceCreate);
  AT(QnnInterface_t, FUNCTIONS.deviceSetConfig);

  VALUE(QNN_SUCCESS); VALUE(QNN_COMMON_ERROR_GENERAL);
  VALUE(QNN_OP_PACKAGE_ERROR_LIBRARY_NOT_INITIALIZED); VALUE(QNN_OP_PACKAGE_ERROR_INVALID_INFO);
  VALUE(QNN_OP_PACKAGE_ERROR_VALIDATION_FAILURE); VALUE(QNN_OP_PACKAGE_ERROR_INVALID_ARGUMENT);
  VALUE(QNN_TENSOR_TYPE_APP_WRITE); VALUE(QNN_TENSOR_TYPE_APP_READ); VALUE(QNN_TENSOR_TYPE_NATIVE);
  VALUE(QNN_TENSOR_TYPE_STATIC); VALUE(QNN_DEFINITION_IMPL_GENERATED); VALUE(QNN_DEFINITION_DEFINED);
  VALUE(QNN_DEFINITION_UNDEFINED); VALUE(QNN_QUANTIZATION_ENCODING_SCALE_OFFSET);
  VALUE(QNN_QUANTIZATION_ENCODING_UNDEFINED); VALUE(QNN_TENSORMEMTYPE_RAW); VALUE(QNN_TENSOR_VERSION_1);
  VALUE(QNN_OPCONFIG_VERSION_1); VALUE(QNN_PARAMTYPE_SCALAR); VALUE(QNN_PARAMTYPE_TENSOR);
  VALUE(QNN_LOG_LEVEL_ERROR); VALUE(QNN_LOG_LEVEL_WARN); VALUE(QNN_LOG_LEVEL_DEBUG);
  VALUE(QNN_DATATYPE_INT_8); VALUE(QNN_DATATYPE_INT_16); VALUE(QNN_DATATYPE_INT_32); VALUE(QNN_DATATYPE_INT_64);
  VALUE(QNN_DATATYPE_UINT_8); VALUE(QNN_DATATYPE_UINT_16); VALUE(QNN_DATATYPE_UINT_32); VALUE(QNN_DATATYPE_UINT_64);
  VALUE(QNN_DATATYPE_FLOAT_16); VALUE(QNN_DATATYPE_FLOAT_32); VALUE(QNN_DATATYPE_FLOAT_64); VALUE(QNN_DATATYPE_SFIXED_POINT_4);
  VALUE(QNN_DATATYPE_SFIXED_POINT_8); VALUE(QNN_DATATYPE_SFIXED_POINT_16); VALUE(QNN_DATATYPE_SFIXED_POINT_32); VALUE(QNN_DATATYPE_UFIXED_POINT_4);
  VALUE(QNN_DATATYPE_UFIXED_POINT_8); VALUE(QNN_DATATYPE_UFIXED_POINT_16); VALUE(QNN_DATATYPE_UFIXED_POINT_32); VALUE(QNN_DATATYPE_BOOL_8);
  return 0;
}
