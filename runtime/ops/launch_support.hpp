#pragma once
// Host-side pieces every GPU op's launcher shares: the arch a device compiles for, the rule
// that wgmma kernels are sm_90a only, the argument checks every op runs, the one-call
// form's stream-ordered workspace, and the checked mode's read-back of a validation
// kernel's report (ATTNJIT_CHECK=1 only: never on the hot path).
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string_view>

#include "attnjit/tensor.hpp"
#include "attnjit/types.hpp"
#include "driver/driver.hpp"

namespace attnjit::ops {

// The arch-specific target of a device (sm_90 → sm_90a): what its kernels are built for.
inline Arch device_arch(const driver::DeviceInfo& info) {
  return Arch{info.cc_major, info.cc_minor, true};
}

// Throws Error(kUnsupportedConfig) naming `what` unless `arch` is sm_90a (wgmma kernels).
void require_sm90a(Arch arch, const char* what);

// ---- argument checks (each throws Error(kBadArgument) naming `name` and the rule) ----

// `t` is set (data != nullptr), of `dtype`, contiguous and `align`-byte aligned.
void check_tensor(const TensorView& t, const char* name, DType dtype, int align);

// `t` is set and has rank dims.size() with these sizes (-1: any); `layout` names the
// expected form in the message, e.g. "rank 1 [b] i32".
void check_dims(const TensorView& t, const char* name, std::initializer_list<int64_t> dims,
                const char* layout);

// `ws` holds `need` bytes, 16-byte aligned (nothing asked when need == 0); `plan` names the
// function whose Plan::workspace_bytes sized it.
void check_workspace(const Workspace& ws, size_t need, std::string_view plan);

// ---- the one-call form's workspace ----

// `bytes` of device memory allocated on `stream` (cuMemAllocAsync from the device's
// default pool) and freed on it when this goes out of scope, after the work enqueued
// meanwhile: no synchronization, and nothing reused across streams.
class StreamWorkspace {
 public:
  StreamWorkspace(size_t bytes, CUstream stream);
  ~StreamWorkspace();
  StreamWorkspace(const StreamWorkspace&) = delete;
  StreamWorkspace& operator=(const StreamWorkspace&) = delete;
  Workspace get() const { return {reinterpret_cast<void*>(ptr_), bytes_}; }

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
  CUstream stream_ = nullptr;
};

// ---- checked mode ----

// Allocates one device word set to ~0, calls launch(word) to enqueue a validation kernel
// that atomicMin's its first finding into it, waits for `stream`, and returns the word
// (~0: nothing found). The word is freed on every path.
unsigned long long run_device_check(CUstream stream,
                                    const std::function<void(unsigned long long* word)>& launch);

// Element `index` of an int32 device array (for naming a bad value in an error message).
int read_device_i32(const void* array, int64_t index);

}  // namespace attnjit::ops
