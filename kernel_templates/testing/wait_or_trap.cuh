#pragma once
// Bounded mbarrier waits for the device-library test families. A broken barrier protocol
// (a wrong expect-tx byte count, a missing arrive, a multicast that never lands) would
// otherwise hang the kernel until the test machine's watchdog kills the whole test run,
// taking every later result with it. Here the waiting thread traps after kWaitLimitNs
// instead: the launch fails with an error the host reports under the test's name.
//
// It waits exactly like common/mbarrier.cuh's mbarrier_wait (the same try_wait.parity
// probe), so what the tests prove holds for the production wait too. No printf: it would
// put a local-memory frame into the kernel, and the tests require none.
#include "common/arch.cuh"
#include "common/mbarrier.cuh"

namespace attnjit::testing {

// Far above any legitimate wait of these small kernels (microseconds), far below the
// GPU test time limit.
inline constexpr u64 kWaitLimitNs = 2'000'000'000ull;

ATTNJIT_DEVICE u64 global_timer_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

ATTNJIT_DEVICE void mbarrier_wait_or_trap(MBarrier* bar, u32 phase) {
  if (mbarrier_try_wait(bar, phase)) return;
  const u64 start = global_timer_ns();
  while (!mbarrier_try_wait(bar, phase)) {
    if (global_timer_ns() - start > kWaitLimitNs) __trap();
  }
}

}  // namespace attnjit::testing
