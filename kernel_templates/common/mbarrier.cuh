#pragma once
// mbarrier: transaction-counting barriers in shared memory. TMA copies complete on
// them (complete_tx), consumers release buffers with plain arrives. Waits use the
// phase-parity form: a barrier alternates phases 0,1,0,...; waiting on parity p returns
// once the phase with that parity has completed.
#include "common/arch.cuh"

namespace attnjit {

struct alignas(8) MBarrier {
  u64 state;
};

// One thread initializes; then fence_mbarrier_init() + a CTA/cluster barrier before use.
ATTNJIT_DEVICE void mbarrier_init(MBarrier* bar, u32 arrive_count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(arrive_count)
               : "memory");
}

// Makes initialized barriers visible to the async proxy and to the cluster.
ATTNJIT_DEVICE void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

ATTNJIT_DEVICE void mbarrier_arrive(MBarrier* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

// Arrive on the barrier of CTA `cta_rank` of this cluster, at the same smem offset.
ATTNJIT_DEVICE void mbarrier_arrive_cluster(MBarrier* bar, u32 cta_rank) {
  asm volatile(
      "{\n"
      "  .reg .b32 remote;\n"
      "  mapa.shared::cluster.u32 remote, %0, %1;\n"
      "  mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(cta_rank)
      : "memory");
}

// Arrive and announce `tx_bytes` of asynchronous copies that will complete on `bar`.
ATTNJIT_DEVICE void mbarrier_arrive_expect_tx(MBarrier* bar, u32 tx_bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
               "r"(tx_bytes)
               : "memory");
}

// Announce bytes without arriving (when the arrive comes from elsewhere).
ATTNJIT_DEVICE void mbarrier_expect_tx(MBarrier* bar, u32 tx_bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)),
               "r"(tx_bytes)
               : "memory");
}

// mbarrier.<op>.parity into `done`: 1 once the phase with parity `phase` has completed.
#define ATTNJIT_MBARRIER_PARITY(op, bar, phase, done)                                        \
  asm volatile("{\n  .reg .pred p;\n  mbarrier." op ".parity.shared::cta.b64 p, [%1], %2;\n" \
               "  selp.u32 %0, 1, 0, p;\n}\n"                                                 \
               : "=r"(done)                                                                  \
               : "r"(smem_u32(bar)), "r"(phase)                                              \
               : "memory")

// Non-blocking probe: true once the phase with parity `phase` has completed.
ATTNJIT_DEVICE bool mbarrier_test_wait(MBarrier* bar, u32 phase) {
  u32 done = 0;
  ATTNJIT_MBARRIER_PARITY("test_wait", bar, phase, done);
  return done != 0;
}

// The same answer, but the thread may be suspended until the phase completes or a
// hardware time limit passes: the building block of a wait loop, not a probe.
ATTNJIT_DEVICE bool mbarrier_try_wait(MBarrier* bar, u32 phase) {
  u32 done = 0;
  ATTNJIT_MBARRIER_PARITY("try_wait", bar, phase, done);
  return done != 0;
}
#undef ATTNJIT_MBARRIER_PARITY

// Blocks until the phase with parity `phase` has completed. try_wait suspends the thread
// only for a short hardware-chosen time: right for a math warp, which expects its data soon.
ATTNJIT_DEVICE void mbarrier_wait(MBarrier* bar, u32 phase) {
  while (!mbarrier_try_wait(bar, phase)) {
  }
}

// The same wait for a warp that has nothing else to do while it waits (a producer running
// ahead of its consumers): try_wait with a long suspend-time hint parks the warp until the
// phase completes. With the default limit the mha_fwd producer's poll loop came round
// every ~15 cycles and was 11 % of the kernel's issued instructions (ncu, d64 1k), all on
// the scheduler it shares with two math warps.
ATTNJIT_DEVICE void mbarrier_wait_parked(MBarrier* bar, u32 phase) {
  constexpr u32 kSuspendNs = 1000000;  // an upper bound: the warp wakes when the phase completes
  u32 done = 0;
  while (!done) {
    asm volatile(
        "{\n"
        "  .reg .pred p;\n"
        "  mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\n"
        "  selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(phase), "r"(kSuspendNs)
        : "memory");
  }
}

}  // namespace attnjit
