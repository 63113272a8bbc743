// A boolean backend option of the ExecuTorch runtime this library is linked to, set and read
// through a C ABI (ctypes): executorch::runtime::set_option / get_option take a Span of C++
// BackendOption values, which Python cannot build. Returns ExecuTorch's Error code (0: Ok).
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/backend/options.h>

#include <cstring>

namespace {

using executorch::runtime::BackendOption;
using executorch::runtime::Error;
using executorch::runtime::Span;

BackendOption named(const char* key) {
  BackendOption option{};
  std::strncpy(option.key, key, sizeof(option.key) - 1);
  return option;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int qco_set_bool_option(
    const char* backend, const char* key, int value) {
  BackendOption option = named(key);
  option.value = value != 0;
  Span<BackendOption> options(&option, 1);
  return static_cast<int>(executorch::ET_RUNTIME_NAMESPACE::set_option(backend, options));
}

// *value: the option's value (0 or 1); -1 when the backend holds it as another type.
extern "C" __attribute__((visibility("default"))) int qco_get_bool_option(
    const char* backend, const char* key, int* value) {
  BackendOption option = named(key);
  Span<BackendOption> options(&option, 1);
  Error error = executorch::ET_RUNTIME_NAMESPACE::get_option(backend, options);
  const bool* held = std::get_if<bool>(&option.value);
  *value = held == nullptr ? -1 : (*held ? 1 : 0);
  return static_cast<int>(error);
}
