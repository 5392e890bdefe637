#pragma once
// Host-side pieces every GPU op's launcher shares: the arch a device compiles for, the rule
// that wgmma kernels are sm_90a only, and the checked mode's read-back of a validation
// kernel's report (ATTNJIT_CHECK=1 only: never on the hot path).
#include <cuda.h>

#include <cstdint>
#include <functional>

#include "attnjit/types.hpp"
#include "driver/driver.hpp"

namespace attnjit::ops {

// The arch-specific target of a device (sm_90 → sm_90a): what its kernels are built for.
inline Arch device_arch(const driver::DeviceInfo& info) {
  return Arch{info.cc_major, info.cc_minor, true};
}

// Throws Error(kUnsupportedConfig) naming `what` unless `arch` is sm_90a (wgmma kernels).
void require_sm90a(Arch arch, const char* what);

// Allocates one device word set to ~0, calls launch(word) to enqueue a validation kernel
// that atomicMin's its first finding into it, waits for `stream`, and returns the word
// (~0: nothing found). The word is freed on every path.
unsigned long long run_device_check(CUstream stream,
                                    const std::function<void(unsigned long long* word)>& launch);

// Element `index` of an int32 device array (for naming a bad value in an error message).
int read_device_i32(const void* array, int64_t index);

}  // namespace attnjit::ops
