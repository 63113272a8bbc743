// Loads an HTP op package built against the stand-in (see qco_standin.h) and prints, as
// JSON lines, what its Interface accepts and which implementations its ops registered:
//   package_check LIBRARY PACKAGE OP:MAX_INPUTS:MAX_PARAMS:OUTPUTS ...
// {"op": ..., "inputs": n, "params": m, "outputs": k} for every accepted count, then
// {"registered": op, "arity": n} for every DEF_PACKAGE_OP.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "QnnOpPackage.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: package_check LIBRARY PACKAGE OP:MAX_INPUTS:MAX_PARAMS:OUTPUTS ...\n");
    return 2;
  }
  void* library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    std::fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  const std::string provider_name = std::string(argv[2]) + "InterfaceProvider";
  auto provider = reinterpret_cast<Qnn_ErrorHandle_t (*)(QnnOpPackage_Interface_t*)>(
      dlsym(library, provider_name.c_str()));
  auto registrations = reinterpret_cast<qco_standin::Registration* (*)(unsigned**)>(
      dlsym(library, "qco_standin_registrations"));
  if (provider == nullptr || registrations == nullptr) {
    std::fprintf(stderr, "missing %s or qco_standin_registrations\n", provider_name.c_str());
    return 1;
  }
  QnnOpPackage_Interface_t interface{};
  if (provider(&interface) != QNN_SUCCESS || interface.v1_4.init(nullptr) != QNN_SUCCESS) return 1;
  for (int i = 3; i < argc; ++i) {
    const std::string spec = argv[i];
    const size_t a = spec.find(':'), b = spec.find(':', a + 1), c = spec.find(':', b + 1);
    const std::string op = spec.substr(0, a);
    const unsigned max_inputs = std::stoul(spec.substr(a + 1, b - a - 1));
    const unsigned max_params = std::stoul(spec.substr(b + 1, c - b - 1));
    const unsigned max_outputs = std::stoul(spec.substr(c + 1));
    for (unsigned outputs = 0; outputs <= max_outputs + 1; ++outputs) {
      for (unsigned inputs = 0; inputs <= max_inputs + 1; ++inputs) {
        for (unsigned params = 0; params <= max_params + 1; ++params) {
          Qnn_OpConfig_t config{};
          config.v1.packageName = argv[2];
          config.v1.typeName = op.c_str();
          config.v1.numOfInputs = inputs;
          config.v1.numOfParams = params;
          config.v1.numOfOutputs = outputs;
          if (interface.v1_4.validateOpConfig(config) == QNN_SUCCESS) {
            std::printf("{\"op\": \"%s\", \"inputs\": %u, \"params\": %u, \"outputs\": %u}\n", op.c_str(),
                        inputs, params, outputs);
          }
        }
      }
    }
  }
  unsigned* count = nullptr;
  qco_standin::Registration* table = registrations(&count);
  for (unsigned i = 0; i < *count; ++i) {
    std::printf("{\"registered\": \"%s\", \"arity\": %u}\n", table[i].op, table[i].arity);
  }
  return 0;
}
