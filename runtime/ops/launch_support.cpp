#include "ops/launch_support.hpp"

#include <fmt/format.h>

#include "attnjit/error.hpp"

namespace attnjit::ops {

void require_sm90a(Arch arch, const char* what) {
  if (!(arch == kSm90a))
    fail_config(what, fmt::format("not built for {}: the wgmma kernel is sm_90a only", arch.name()));
}

void check_tensor(const TensorView& t, const char* name, DType dtype, int align) {
  if (t.data == nullptr) fail_arg(name, "must be set (data is null)");
  check_dtype(t, name, dtype);
  if (!t.is_contiguous())
    fail_arg(name, fmt::format("must be contiguous (row-major), got {}", t.describe()));
  check_aligned(t, name, align);
}

void check_dims(const TensorView& t, const char* name, std::initializer_list<int64_t> dims,
                const char* layout) {
  bool ok = t.data != nullptr && t.rank == static_cast<int>(dims.size());
  int d = 0;
  for (int64_t want : dims) {
    if (ok && want >= 0 && t.shape[static_cast<size_t>(d)] != want) ok = false;
    ++d;
  }
  if (!ok) fail_arg(name, fmt::format("must be {}, got {}", layout, t.data ? t.describe() : "null"));
}

void check_workspace(const Workspace& ws, size_t need, std::string_view plan) {
  if (need == 0) return;
  if (ws.data == nullptr || ws.bytes < need)
    fail_arg("workspace", fmt::format("the plan needs {} B ({} workspace_bytes), got {} B at {}",
                                      need, plan, ws.bytes, ws.data));
  if (reinterpret_cast<uintptr_t>(ws.data) % 16 != 0)
    fail_arg("workspace", fmt::format("pointer {} must be 16-byte aligned", ws.data));
}

StreamWorkspace::StreamWorkspace(size_t bytes, CUstream stream) : bytes_(bytes), stream_(stream) {
  if (bytes_ > 0) ATTNJIT_CU(cuMemAllocAsync, &ptr_, bytes_, stream_);
}

StreamWorkspace::~StreamWorkspace() {
  // A failed free leaves the block to the pool's release at context teardown; a
  // destructor cannot report it, and the launches it followed were already checked.
  if (ptr_ != 0) (void)driver::api().cuMemFreeAsync(ptr_, stream_);
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
