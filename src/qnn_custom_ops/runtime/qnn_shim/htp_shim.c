// libQnnHtp.so for ExecuTorch 1.5.1's QNN adaptor, which is built for QNN 2.37, over the real
// x86 backend of a QAIRT 2.47 or newer release (from PyPI's onnxruntime-qnn wheels). It loads
// the real library and hands out its interface with the functions whose arguments changed layout
// since 2.37 translated; everything else goes to the real library untouched.
//
// What changed, read from the public QNN headers of 2.36, 2.43 and 2.50.40 (HTP device, graph and
// context custom configs, the core C types): QnnHtpDevice_CustomConfig_t's union gained a pointer
// member after 2.43 (useDynamicPartitioning), so its value moved from offset 4 to offset 8; the
// graph and context custom configs only gained union members of sizes and alignments they already
// had; QnnInterface_t grew at its end (584 bytes in 2.36, 608 in 2.43), which 2.37 clients never read.
//
// QHPI op packages name libQnnHtp.so as a dependency: that is this library once it is loaded, so
// it forwards the qhpi_* functions qnn-custom-ops' packages call (qco/qhpi_abi.h) to the real one.
//
// Built by qnn-custom-ops (runtime/simulator_sdk.py) with soname libQnnHtp.so and -z nodelete:
// ExecuTorch dlcloses and reopens the backend, and must get this library back, not the real one.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qco/qhpi_abi.h"

// Where the real backend lies from this library: <release>/sdk/lib/x86_64-linux-clang/ here,
// <release>/onnxruntime_qnn/libQnnHtp.so there.
#define REAL_BACKEND "/../../../onnxruntime_qnn/libQnnHtp.so"
// The interface table's bytes a 2.37 client may read (2.43's size: tables only grow).
#define INTERFACE_BYTES 608
#define MAX_PROVIDERS 8
#define MAX_CONFIGS 64
#define DEVICE_CONFIG_OPTION_CUSTOM 0

static void* real_backend(void) {
  static void* handle;
  if (handle != NULL) return handle;
  Dl_info self;
  char path[PATH_MAX];
  if (dladdr((void*)&real_backend, &self) == 0 || strlen(self.dli_fname) + sizeof REAL_BACKEND >= sizeof path) {
    fprintf(stderr, "qnn-custom-ops QNN shim: cannot tell where it was loaded from\n");
    return NULL;
  }
  strcpy(path, self.dli_fname);
  strcat(dirname(path), REAL_BACKEND);
  handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) fprintf(stderr, "qnn-custom-ops QNN shim: %s\n", dlerror());
  return handle;
}

static void* real_symbol(const char* name) {
  void* backend = real_backend();
  return backend == NULL ? NULL : dlsym(backend, name);
}

// ---- Device configs: a 2.37 QnnHtpDevice_CustomConfig_t has its value at offset 4 -------------
typedef struct {
  uint32_t option;
  union {
    void* customConfig;
    void* hardwareInfo;
  };
} DeviceConfig;

typedef struct {
  uint32_t option;
  uint32_t value[2];
} HtpDeviceConfig237;

typedef struct {
  uint32_t option;
  uint64_t value[2];  // at offset 8; as large as 2.50's largest member
} HtpDeviceConfig;

typedef Qnn_ErrorHandle_t (*DeviceCreateFn)(Qnn_LogHandle_t, const DeviceConfig**, void**);
typedef Qnn_ErrorHandle_t (*DeviceSetConfigFn)(void*, const DeviceConfig**);

// `configs` in the new layout, in `storage`: each custom config's value moved to offset 8.
static const DeviceConfig** translated(const DeviceConfig** configs, DeviceConfig* copies, HtpDeviceConfig* htp,
                                       const DeviceConfig** list) {
  if (configs == NULL) return NULL;
  size_t n = 0;
  for (; configs[n] != NULL && n < MAX_CONFIGS - 1; ++n) {
    copies[n] = *configs[n];
    if (configs[n]->option == DEVICE_CONFIG_OPTION_CUSTOM && configs[n]->customConfig != NULL) {
      const HtpDeviceConfig237* old = (const HtpDeviceConfig237*)configs[n]->customConfig;
      memset(&htp[n], 0, sizeof htp[n]);
      htp[n].option = old->option;
      memcpy(&htp[n].value, old->value, sizeof old->value);
      copies[n].customConfig = &htp[n];
    }
    list[n] = &copies[n];
  }
  list[n] = NULL;
  return list;
}

static DeviceCreateFn real_device_create;
static DeviceSetConfigFn real_device_set_config;

static Qnn_ErrorHandle_t device_create(Qnn_LogHandle_t logger, const DeviceConfig** configs, void** device) {
  DeviceConfig copies[MAX_CONFIGS];
  HtpDeviceConfig htp[MAX_CONFIGS];
  const DeviceConfig* list[MAX_CONFIGS];
  return real_device_create(logger, translated(configs, copies, htp, list), device);
}

static Qnn_ErrorHandle_t device_set_config(void* device, const DeviceConfig** configs) {
  DeviceConfig copies[MAX_CONFIGS];
  HtpDeviceConfig htp[MAX_CONFIGS];
  const DeviceConfig* list[MAX_CONFIGS];
  return real_device_set_config(device, translated(configs, copies, htp, list));
}

// ---- The interface: the real one's, with the device functions translated ----------------------
typedef union {
  QnnInterface_t interface;
  unsigned char bytes[INTERFACE_BYTES];
} Interface;

static Interface g_interfaces[MAX_PROVIDERS];
static const QnnInterface_t* g_providers[MAX_PROVIDERS];

__attribute__((visibility("default"))) Qnn_ErrorHandle_t QnnInterface_getProviders(const QnnInterface_t*** providers,
                                                                                 uint32_t* count) {
  QnnInterface_GetProvidersFn_t get = (QnnInterface_GetProvidersFn_t)real_symbol("QnnInterface_getProviders");
  if (get == NULL) return QNN_COMMON_ERROR_GENERAL;
  const QnnInterface_t** real = NULL;
  uint32_t n = 0;
  const Qnn_ErrorHandle_t status = get(&real, &n);
  if (status != QNN_SUCCESS) return status;
  if (n > MAX_PROVIDERS) n = MAX_PROVIDERS;
  for (uint32_t i = 0; i < n; ++i) {
    memcpy(g_interfaces[i].bytes, real[i], INTERFACE_BYTES);
    QnnInterface_Functions_t* functions = &g_interfaces[i].interface.functions;
    real_device_create = (DeviceCreateFn)functions->deviceCreate;
    real_device_set_config = (DeviceSetConfigFn)functions->deviceSetConfig;
    functions->deviceCreate = (void*)device_create;
    functions->deviceSetConfig = (void*)device_set_config;
    g_providers[i] = &g_interfaces[i].interface;
  }
  *providers = g_providers;
  *count = n;
  return QNN_SUCCESS;
}

// ---- QHPI: what qnn-custom-ops' packages call, forwarded ------------------------------------
#define FORWARD(result, name, params, args)                                   \
  __attribute__((visibility("default"))) result name params {                 \
    static result(*real) params;                                              \
    if (real == NULL) *(void**)&real = real_symbol(#name);                    \
    return real args;                                                         \
  }

FORWARD(QHPI_Shape, qhpi_tensor_shape, (const QHPI_Tensor* t), (t))
FORWARD(QHPI_Element_Type, qhpi_tensor_type, (const QHPI_Tensor* t), (t))
FORWARD(QHPI_Standard_Layout, qhpi_tensor_layout, (const QHPI_Tensor* t), (t))
FORWARD(QHPI_Quant_Parameters, qhpi_tensor_quant_parameters, (const QHPI_Tensor* t), (t))
FORWARD(void*, qhpi_tensor_raw_data, (const QHPI_Tensor* t), (t))
FORWARD(QHPI_StatusCode, qhpi_register_ops_v1, (uint32_t n, QHPI_OpInfo_v1* ops, const char* package), (n, ops, package))
