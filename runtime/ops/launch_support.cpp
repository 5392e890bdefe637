#include "ops/launch_support.hpp"

#include <fmt/format.h>

#include "attnjit/error.hpp"

namespace attnjit::ops {

void require_sm90a(Arch arch, const char* what) {
  if (!(arch == kSm90a))
    fail_config(what, fmt::format("not built for {}: the wgmma kernel is sm_90a only", arch.name()));
}

unsigned long long run_device_check(CUstream stream,
                                    const std::function<void(unsigned long long* word)>& launch) {
  const driver::Api& api = driver::api();
  CUdeviceptr word = 0;
  ATTNJIT_CU(cuMemAlloc, &word, sizeof(unsigned long long));
  unsigned long long found = ~0ull;
  try {
    ATTNJIT_CU(cuMemcpyHtoD, word, &found, sizeof(found));
    launch(reinterpret_cast<unsigned long long*>(word));
    ATTNJIT_CU(cuStreamSynchronize, stream);
    ATTNJIT_CU(cuMemcpyDtoH, &found, word, sizeof(found));
  } catch (...) {
    api.cuMemFree(word);
    throw;
  }
  api.cuMemFree(word);
  return found;
}

int read_device_i32(const void* array, int64_t index) {
  int v = 0;
  ATTNJIT_CU(cuMemcpyDtoH, &v,
             reinterpret_cast<CUdeviceptr>(array) + sizeof(int) * static_cast<size_t>(index),
             sizeof(int));
  return v;
}

}  // namespace attnjit::ops
