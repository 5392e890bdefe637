#pragma once
// Named barriers: the 16 hardware barriers of a CTA (bar.sync / bar.arrive with an id and a
// thread count). They synchronize a subset of the CTA — one warpgroup, or two warpgroups
// taking turns — without stalling the producer warps that __syncthreads() would also stop.
//
// Pattern (FlashAttention-3 style): every kernel names its barriers in one enum, so an id
// is never a bare number and two roles cannot pick the same id by accident:
//
//   enum class Bar : u32 {
//     kSyncThreads = 0,   // reserved: __syncthreads() uses barrier 0
//     kQueryReady,        // consumers wait until the producer has issued Q
//     kWarpgroup1Turn,    // ping-pong: warpgroup 1 may start its GEMMs
//     kWarpgroup2Turn,
//     kCount,
//   };
//   static_assert(kNamedBarrierCount >= static_cast<int>(Bar::kCount));
//
//   named_barrier_sync(Bar::kQueryReady, 2 * kWarpgroupThreads);
//
// Rules the hardware imposes (and these wrappers do not check at run time):
// - `threads` is the number of threads taking part, a multiple of the warp size; every
//   warp that arrives counts all 32 of its threads (bar.* acts per warp);
// - all participants of one barrier phase must use the same id and count;
// - bar.arrive does not wait, so a producer can signal "buffer ready" and move on while the
//   consumers block in bar.sync on the same id (count = producers + consumers).
#include "common/arch.cuh"

namespace attnjit {

inline constexpr int kNamedBarrierCount = 16;  // ids 0..15; 0 belongs to __syncthreads()

// Blocks until `threads` threads have arrived at barrier `id` (this one included).
ATTNJIT_DEVICE void named_barrier_sync(u32 id, u32 threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// named_barrier_sync for threads that reach the barrier from different instructions (each
// warpgroup in its own copy of a loop): bar.sync is barrier.sync.aligned, which requires
// every participant to execute the same instruction (compute-sanitizer's synccheck reports
// "divergent threads" otherwise); the non-aligned form does not.
ATTNJIT_DEVICE void named_barrier_sync_unaligned(u32 id, u32 threads) {
  asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Counts this warp as arrived at barrier `id` and continues without waiting.
ATTNJIT_DEVICE void named_barrier_arrive(u32 id, u32 threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Overloads for a kernel's barrier enum (any enum whose underlying type converts to u32).
template <class Id>
ATTNJIT_DEVICE void named_barrier_sync(Id id, u32 threads) {
  named_barrier_sync(static_cast<u32>(id), threads);
}
template <class Id>
ATTNJIT_DEVICE void named_barrier_sync_unaligned(Id id, u32 threads) {
  named_barrier_sync_unaligned(static_cast<u32>(id), threads);
}
template <class Id>
ATTNJIT_DEVICE void named_barrier_arrive(Id id, u32 threads) {
  named_barrier_arrive(static_cast<u32>(id), threads);
}

}  // namespace attnjit
