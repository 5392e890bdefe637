#pragma once
// Test family for `attnjit tune`'s isolation of bad candidates: a word copy
// dst[i] = src[i] that, by its `mode`, is correct, wrong, faults, traps or never ends —
// the candidates a sweep must reject (wrong answer) or survive (fault, trap, hang) without
// stopping. Test-only: not in the registry; tests/support/tune_probe.cpp is its host side.
#include "common/arch.cuh"

namespace attnjit::testing {

// P: the tune_probe table's fields (tests/support/tune_probe.cpp), declared by the generated
// translation unit: mode (0 copy, 1 one bit wrong, 2 store to an unmapped address, 3 __trap,
// 4 spin forever) and threads (block size).

template <auto P>
__global__ void __launch_bounds__(P.threads) tune_probe_kernel(const u32* src, u32* dst, int n) {
  static_assert(P.mode >= 0 && P.mode <= 4, "mode: 0..4");
  const int first = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if constexpr (P.mode == 2) {
    // Address 16 is never mapped on the device: the store raises an illegal-address fault.
    if (first == 0) *reinterpret_cast<volatile u32*>(static_cast<u64>(16)) = 1u;
  }
  if constexpr (P.mode == 3) {
    if (first == 0) __trap();
  }
  if constexpr (P.mode == 4) {
    // The asm statement is a side effect, so the loop is not removed: the grid never
    // completes, only killing the process ends it.
    if (first == 0)
      for (;;) __nanosleep(1000);
  }
  const int stride = static_cast<int>(gridDim.x * blockDim.x);
#pragma unroll 1
  for (int i = first; i < n; i += stride) {
    u32 v = src[i];
    if constexpr (P.mode == 1) {
      if (i == n / 2) v ^= 1u;
    }
    dst[i] = v;
  }
}

}  // namespace attnjit::testing
