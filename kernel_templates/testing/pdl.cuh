#pragma once
// Test family for programmatic dependent launch (common/fence.cuh: pdl_launch_dependents,
// pdl_wait_prior_grids), launched with LaunchShape::programmatic_dependent_launch.
//
// A chain on one stream: primary(seed 0), dependent(slot 0), primary(seed 1),
// dependent(slot 1), ... every kernel launched with the PDL attribute, so each may start
// while its predecessor still runs:
//   primary   : triggers its dependents first thing, waits for its predecessor (the last
//               reader of buf), sleeps delay_ns — the window in which an early dependent
//               would read stale data — then writes buf[i] = pdl_value(i, seed);
//   dependent : triggers its dependents, calls pdl_wait_prior_grids (when
//               wait_prior_grids = 1), then copies buf into its own output slot.
// Correct output in every slot proves griddepcontrol.wait waits for the whole primary grid
// and makes its writes visible. wait_prior_grids = 0 is the negative control: it shows the
// launches really overlap (stale slots), and is reported, not checked.
#include "common/arch.cuh"
#include "common/fence.cuh"

namespace attnjit::testing {

// int fields only: the host twin is the kernel-table key and must have no padding.
struct PdlParams {
  int delay_ns;          // primary: sleep between its trigger and its writes
  int wait_prior_grids;  // dependent: 1 waits before reading buf; 0 does not (control)
};

inline constexpr int kPdlThreads = 256;

// The value the primary with `seed` writes at index i (the host computes the same).
ATTNJIT_HOST_DEVICE constexpr u32 pdl_value(u32 i, u32 seed) {
  return (i * 2654435761u) ^ seed;
}

template <PdlParams P>
__global__ void __launch_bounds__(kPdlThreads) pdl_primary_kernel(u32* buf,  // [n]
                                                                  int n, u32 seed) {
  static_assert(P.delay_ns >= 0, "delay_ns: non-negative");
  pdl_launch_dependents();  // the dependent may be scheduled as soon as every CTA got here
  pdl_wait_prior_grids();   // the previous dependent has finished reading buf
  if constexpr (P.delay_ns > 0) {
    u64 start;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    for (;;) {
      u64 now;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
      if (now - start >= static_cast<u64>(P.delay_ns)) break;
      __nanosleep(500);
    }
  }
  const int stride = static_cast<int>(gridDim.x * blockDim.x);
#pragma unroll 1
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += stride) {
    buf[i] = pdl_value(static_cast<u32>(i), seed);
  }
}

template <PdlParams P>
__global__ void __launch_bounds__(kPdlThreads) pdl_dependent_kernel(const u32* buf,  // [n]
                                                                    u32* out,        // [n]
                                                                    int n) {
  static_assert(P.wait_prior_grids == 0 || P.wait_prior_grids == 1, "wait_prior_grids: 0 or 1");
  pdl_launch_dependents();  // the next primary may start its (waiting) prologue
  if constexpr (P.wait_prior_grids) pdl_wait_prior_grids();  // primary done, writes visible
  const int stride = static_cast<int>(gridDim.x * blockDim.x);
#pragma unroll 1
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += stride) {
    out[i] = buf[i];
  }
}

}  // namespace attnjit::testing
