#pragma once
// Basics every kernel template includes: qualifiers, thread-index helpers, and the
// integer types (NVRTC has no <cstdint> unless the toolkit's CCCL is on the path).
//
// Convention for all of kernel_templates/: headers include each other by their path
// relative to kernel_templates/ ("common/mbarrier.cuh"), which is also the name under
// which the runtime hands them to NVRTC.

#include "common/constants.cuh"

#define ATTNJIT_DEVICE __device__ __forceinline__
#define ATTNJIT_HOST_DEVICE __host__ __device__ __forceinline__

namespace attnjit {

using u8 = unsigned char;
using u16 = unsigned short;
using u32 = unsigned int;
using u64 = unsigned long long;
using i32 = int;
using i64 = long long;

ATTNJIT_DEVICE int lane_id() { return static_cast<int>(threadIdx.x) & 31; }
ATTNJIT_DEVICE int warp_id() { return static_cast<int>(threadIdx.x) >> 5; }

// Warp index made warp-uniform for the compiler (so role branches do not diverge).
ATTNJIT_DEVICE int warp_id_uniform() { return __shfl_sync(0xffffffffu, warp_id(), 0); }

// True on exactly one lane of the (fully active) warp: `elect.sync` on sm_90+.
ATTNJIT_DEVICE bool elect_one_sync() {
  u32 pred = 0;
  asm volatile(
      "{\n"
      "  .reg .pred p;\n"
      "  elect.sync _|p, 0xffffffff;\n"
      "  selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(pred));
  return pred != 0;
}

// 32-bit shared-memory address of a generic pointer into shared memory.
ATTNJIT_DEVICE u32 smem_u32(const void* ptr) {
  return static_cast<u32>(__cvta_generic_to_shared(ptr));
}

template <class T>
ATTNJIT_HOST_DEVICE constexpr T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

}  // namespace attnjit
