#pragma once
// Test family for the cross-warpgroup shared-memory hand-offs of mla_decode's seesaw kernel
// (kernel_templates/mla_decode/sm90_mla_decode_seesaw.cuh), with the same primitives, ids,
// thread counts and CTA shape: two warpgroups, 256 threads, named barriers counting both.
//
//   mode 0, arrive → sync (kOddMax, kPOddReady): each round WG1 writes a row value, then
//     bar.arrive(kPublished); WG0 bar.sync(kPublished), reads it, then bar.arrive(kConsumed)
//     so WG1 (bar.sync kConsumed) may overwrite it next round.
//   mode 1, sync ↔ sync (kRowSums, kOutStaged): each round both warpgroups write their own
//     slot, bar.sync(kBoth) with all 256 threads, read the other's slot, bar.sync(kBoth)
//     again before the next round's writes.
//   mode 2, own barriers, unequal counts (mla_decode_fp8's narrow kernel: each warpgroup
//     syncs its own 128-thread barrier two or three times per tile, over its own number of
//     tiles): WG0 runs 64 rounds and WG1 32, each writing its own slot, bar.sync(kOwn + wg,
//     128), reading another warp's row of it, bar.sync(kOwn + wg, 128) again.
//   Then, in every mode, the epilogue's exchange: both write, bar.sync(kBoth), both read.
//
// PTX orders these (memory consistency model, "Causality order" with bar.sync / bar.arrive
// as release-acquire patterns at CTA scope): a barrier's completion makes every access a
// participant performed before its bar.arrive or bar.sync visible to every participant
// after its bar.sync. `delay_ns` holds the writer back before its store, so a reader that
// were not ordered after the store would see the previous round's value; `broken` = 1
// moves WG1's store after its arrive (the order the proof rules out), which the host test
// must then catch — the test can fail.
#include "common/arch.cuh"
#include "common/named_barrier.cuh"
#include "common/types.cuh"

namespace attnjit::testing {

struct WgHandoffParams {
  int mode;      // 0: arrive → sync, 1: sync ↔ sync, 2: per-warpgroup syncs, unequal counts
  int delay_ns;  // the writer's delay before each store
  int broken;    // 1 (mode 0): WG1 stores after its arrive
};

inline constexpr int kHandoffThreads = 2 * kWarpgroupThreads;
inline constexpr int kHandoffRounds = 64;

enum class HandoffBar : u32 {
  kSyncThreads = 0,  // reserved: __syncthreads()
  kPublished,        // mode 0: WG1 → WG0, the round's value is written
  kConsumed,         // mode 0: WG0 → WG1, it has been read
  kBoth,             // mode 1: both warpgroups; every mode: the epilogue
  kOwn,              // mode 2: warpgroup 0's own (warpgroup 1: kOwn + 1)
};

ATTNJIT_DEVICE float round_value(int round, int row) { return static_cast<float>(round * 1000 + row + 1); }
ATTNJIT_DEVICE float tail_value(int wg, int row) { return 0.5f * static_cast<float>(row + 1) + 100000.0f * wg; }

// out[wg · 128 + row] = Σ over rounds of what that warpgroup read; each read is checked
// against what the writer stored that round (bad[0] counts mismatches).
template <WgHandoffParams P>
__global__ void __launch_bounds__(kHandoffThreads) wg_handoff_kernel(float* out, int* bad) {
  __shared__ float slot[2][kWarpgroupThreads];  // [writer warpgroup][row]
  const int wg = static_cast<int>(threadIdx.x) / kWarpgroupThreads;
  const int row = static_cast<int>(threadIdx.x) % kWarpgroupThreads;
  slot[0][row] = slot[1][row] = -1.0f;  // each thread its own rows: no one reads them first
  __syncthreads();
  float sum = 0.0f;
  int wrong = 0;
  for (int round = 0; round < kHandoffRounds; ++round) {
    if constexpr (P.mode == 0) {
      if (wg == 1) {
        if (round > 0) named_barrier_sync(HandoffBar::kConsumed, kHandoffThreads);
        if (P.broken) named_barrier_arrive(HandoffBar::kPublished, kHandoffThreads);
        if (P.delay_ns > 0) __nanosleep(P.delay_ns);
        slot[1][row] = round_value(round, row);
        if (!P.broken) named_barrier_arrive(HandoffBar::kPublished, kHandoffThreads);
      } else {
        named_barrier_sync(HandoffBar::kPublished, kHandoffThreads);
        const float v = slot[1][kWarpgroupThreads - 1 - row];  // another warp's row
        wrong += v != round_value(round, kWarpgroupThreads - 1 - row);
        sum += v;
        if (round + 1 < kHandoffRounds) named_barrier_arrive(HandoffBar::kConsumed, kHandoffThreads);
      }
    } else if constexpr (P.mode == 2) {
      if (round < kHandoffRounds >> wg) {  // WG0 64 rounds, WG1 32
        const u32 own = static_cast<u32>(HandoffBar::kOwn) + static_cast<u32>(wg);
        if (P.delay_ns > 0 && row < 32) __nanosleep(P.delay_ns);  // the warpgroup's first warp
        slot[wg][row] = round_value(round, row) + wg;
        named_barrier_sync(own, kWarpgroupThreads);
        const float v = slot[wg][kWarpgroupThreads - 1 - row];  // another warp's row
        wrong += v != round_value(round, kWarpgroupThreads - 1 - row) + wg;
        sum += v;
        named_barrier_sync(own, kWarpgroupThreads);
      }
    } else {
      if (P.delay_ns > 0 && wg == 1) __nanosleep(P.delay_ns);
      slot[wg][row] = round_value(round, row) + wg;
      named_barrier_sync(HandoffBar::kBoth, kHandoffThreads);
      const float v = slot[1 - wg][kWarpgroupThreads - 1 - row];
      wrong += v != round_value(round, kWarpgroupThreads - 1 - row) + (1 - wg);
      sum += v;
      named_barrier_sync(HandoffBar::kBoth, kHandoffThreads);
    }
  }
  // The epilogue's exchange (kRowSums, kOutStaged): both write, one bar.sync of all 256,
  // both read the other's row. Modes 1 and 2 reach it with no bar.arrive before it.
  __shared__ float tail[2][kWarpgroupThreads];
  tail[wg][row] = tail_value(wg, row);
  named_barrier_sync(HandoffBar::kBoth, kHandoffThreads);
  const float v = tail[1 - wg][kWarpgroupThreads - 1 - row];
  wrong += v != tail_value(1 - wg, kWarpgroupThreads - 1 - row);
  sum += v;
  out[threadIdx.x] = sum;
  if (wrong > 0) atomicAdd(bad, wrong);
}

}  // namespace attnjit::testing
