#pragma once
// Test family for the warp-specialized producer/consumer skeleton every Hopper attention
// kernel here is built on (common/warpgroup.cuh setmaxnreg, common/pipeline.cuh,
// common/mbarrier.cuh, common/named_barrier.cuh, common/tma.cuh, common/wgmma.cuh):
//
//   C [128 × N] (f32) = A [128 × K] · B [N × K]ᵀ,  K = 64 · k_blocks, bf16 operands.
//
// 3 warpgroups, 384 threads, one CTA:
//   WG0 producer : setmaxnreg.dec to kProducerRegs; one elected thread streams k-block kb
//                  (A [128 × 64] and B [N × 64], one 128B-swizzled TMA box each) into
//                  stage kb % stages of a ring guarded by full/empty mbarriers, with
//                  PipelineState cursors — phases wrap k_blocks / stages times.
//   WG1, WG2     : setmaxnreg.inc to kConsumerRegs; consumer i owns rows [64i, 64i + 64)
//                  of A and C, runs 4 SS wgmma (k16 steps) per stage on its A rows and
//                  all of B, then releases the stage (one arrive per consumer warpgroup:
//                  the empty barrier counts 2).
// Named barriers (ConsumerBar):
//   pingpong = 1 : the consumers take turns issuing their wgmma (FA3's warp-scheduler
//                  barriers): consumer i bar.sync's kTurn[i] with 256 threads, issues,
//                  then bar.arrive's kTurn[1 - i] — sync and arrive of one phase from
//                  different warpgroups.
//   epilogue     : each consumer writes its C rows to a shared staging tile, bar.sync
//                  kEpilogue (256 threads, producer not involved), then copies the OTHER
//                  consumer's rows to global memory — a real cross-warpgroup dependency.
#include "common/arch.cuh"
#include "common/fence.cuh"
#include "common/mbarrier.cuh"
#include "common/named_barrier.cuh"
#include "common/pipeline.cuh"
#include "common/tensor_map.cuh"
#include "common/tma.cuh"
#include "common/types.cuh"
#include "common/warpgroup.cuh"
#include "common/wgmma.cuh"
#include "testing/wait_or_trap.cuh"

namespace attnjit::testing {

// int fields only: the host twin is the kernel-table key and must have no padding.
struct WsPipelineParams {
  int n;         // C columns = B rows: 64 or 128
  int stages;    // ring depth, 1..8 (shared memory permitting)
  int pingpong;  // 1: consumers alternate their wgmma through named barriers
};

inline constexpr int kWsThreads = 3 * kWarpgroupThreads;  // producer + 2 consumers
inline constexpr int kWsConsumerThreads = 2 * kWarpgroupThreads;
// Register budgets: 384 threads at entry get ⌊65536 / 384⌋ → 168 each; after the moves
// 128·40 + 2·128·232 = 64512 <= 65536.
inline constexpr int kProducerRegs = 40;
inline constexpr int kConsumerRegs = 232;
static_assert(kWarpgroupThreads * (kProducerRegs + 2 * kConsumerRegs) <= 65536,
              "the register moves must fit the SM's 64K registers");

inline constexpr int kWsBlockM = 128;  // A / C rows: 64 per consumer
inline constexpr int kWsBlockK = 64;   // bf16 per k-block: one 128-byte swizzle span

enum class ConsumerBar : u32 {
  kSyncThreads = 0,  // reserved: __syncthreads()
  kTurn0,            // pingpong: consumer 0 may issue (consumer 0 syncs, consumer 1 arrives)
  kTurn1,            // pingpong: consumer 1 may issue
  kEpilogue,         // both consumers' C rows are in the staging tile
  kCount,
};
static_assert(kNamedBarrierCount >= static_cast<int>(ConsumerBar::kCount));

template <WsPipelineParams P>
struct WsPipelineTraits {
  using ATile = WgmmaKMajorTile<Swizzle::k128B, kWsBlockM>;  // A k-block [128 × 64] bf16
  using BTile = WgmmaKMajorTile<Swizzle::k128B, P.n>;        // B k-block [N × 64] bf16
  static constexpr u32 kABytes = ATile::kChunkBytes;         // 16 KiB
  static constexpr u32 kBBytes = BTile::kChunkBytes;         // N · 128 B
  static constexpr int kSteps = kWsBlockK / kWgmmaK<DType::kBF16>;  // 4 k16 steps per stage
};

// The shared-memory plan.
template <WsPipelineParams P>
struct WsPipelineShared {
  alignas(1024) u8 a[P.stages][WsPipelineTraits<P>::kABytes];  // A k-blocks [128 × 64]
  alignas(1024) u8 b[P.stages][WsPipelineTraits<P>::kBBytes];  // B k-blocks [N × 64]
  alignas(16) float c[kWsBlockM][P.n];                          // epilogue staging C [128 × N]
  MBarrier full[P.stages];   // stage loaded: 1 arrive (producer) + A and B bytes
  MBarrier empty[P.stages];  // stage consumed: 1 arrive per consumer warpgroup
};

template <WsPipelineParams P>
inline constexpr u32 kWsPipelineSmemBytes = sizeof(WsPipelineShared<P>) + 1024;

template <WsPipelineParams P>
__global__ void __launch_bounds__(kWsThreads, 1)
    ws_pipeline_kernel(const __grid_constant__ TmaDesc a_map,  // A [128, K], box {128, 64}
                       const __grid_constant__ TmaDesc b_map,  // B [N, K],   box {N, 64}
                       float* c,                               // C [128, N] f32 row-major
                       int k_blocks) {                         // K / 64, >= 1
  using T = WsPipelineTraits<P>;
  static_assert(P.n == 64 || P.n == 128, "n: 64 or 128");
  static_assert(P.stages >= 1 && P.stages <= 8, "stages: 1..8");
  static_assert(P.pingpong == 0 || P.pingpong == 1, "pingpong: 0 or 1");
  static_assert(kWsPipelineSmemBytes<P> <= kMaxSmemPerBlock, "over the 227 KiB opt-in shared memory");

  extern __shared__ u8 smem_raw[];
  auto& sm = *reinterpret_cast<WsPipelineShared<P>*>(
      smem_raw + (1024u - smem_u32(smem_raw) % 1024u) % 1024u);

  u32 dynamic_bytes;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_bytes));
  if (dynamic_bytes < kWsPipelineSmemBytes<P>) __trap();

  if (threadIdx.x == 0) {
#pragma unroll 1
    for (int s = 0; s < P.stages; ++s) {
      mbarrier_init(&sm.full[s], 1);
      mbarrier_init(&sm.empty[s], 2);
    }
    fence_mbarrier_init();
  }
  __syncthreads();

  // One if/else over the warpgroup roles, setmaxnreg first in each branch (ptxas applies
  // it only in this shape; see common/warpgroup.cuh).
  if (warpgroup_id_uniform() == 0) {
    // ---- producer warpgroup ------------------------------------------------------------
    warpgroup_reg_dealloc<kProducerRegs>();
    if (warp_in_warpgroup() == 0 && elect_one_sync()) {
      prefetch_tma_desc(a_map);
      prefetch_tma_desc(b_map);
      PipelineState<P.stages> st;
#pragma unroll 1
      for (int kb = 0; kb < k_blocks; ++kb) {
        mbarrier_wait_or_trap(&sm.empty[st.index], st.phase ^ 1u);  // fresh: passes
        MBarrier* full = &sm.full[st.index];
        mbarrier_arrive_expect_tx(full, T::kABytes + T::kBBytes);
        tma_load_2d(a_map, full, sm.a[st.index], kb * kWsBlockK, 0);
        tma_load_2d(b_map, full, sm.b[st.index], kb * kWsBlockK, 0);
        st.advance();
      }
    }
  } else {
    // ---- consumer warpgroups -----------------------------------------------------------
    warpgroup_reg_alloc<kConsumerRegs>();
    const int ci = warpgroup_id_uniform() - 1;  // 0 or 1: rows [64·ci, 64·ci + 64)
    // Barrier ids stay immediates (one call per id): an id in a register makes ptxas
    // reserve all 16 barriers.
    auto wait_my_turn = [&] {
      if (ci == 0) named_barrier_sync(ConsumerBar::kTurn0, kWsConsumerThreads);
      else named_barrier_sync(ConsumerBar::kTurn1, kWsConsumerThreads);
    };
    auto pass_turn = [&] {
      if (ci == 0) named_barrier_arrive(ConsumerBar::kTurn1, kWsConsumerThreads);
      else named_barrier_arrive(ConsumerBar::kTurn0, kWsConsumerThreads);
    };

    float acc[P.n / 2];  // C rows [64·ci, 64·ci + 64) × N: wgmma_acc_coord layout
#pragma unroll
    for (int i = 0; i < P.n / 2; ++i) acc[i] = 0.f;

    if constexpr (P.pingpong) {
      if (ci == 1) pass_turn();  // consumer 0 goes first
    }

    PipelineState<P.stages> st;
#pragma unroll 1
    for (int kb = 0; kb < k_blocks; ++kb) {
      mbarrier_wait_or_trap(&sm.full[st.index], st.phase);
      if constexpr (P.pingpong) wait_my_turn();
      const u32 a_addr = smem_u32(sm.a[st.index]);
      const u32 b_addr = smem_u32(sm.b[st.index]);
      wgmma_fence_operands(acc);
      wgmma_fence();
#pragma unroll
      for (int s = 0; s < T::kSteps; ++s) {
        // A rows [64·ci, +64) × K bytes [32s, 32s + 32); B rows [0, N) × the same K.
        wgmma_ss<DType::kBF16, P.n>(acc, T::ATile::desc(a_addr, 32u * s, 64u * ci),
                                    T::BTile::desc(b_addr, 32u * s), true);
      }
      wgmma_commit();
      // Hand the turn over; consumer 1 skips it after its last k-block so that every
      // bar.arrive meets a bar.sync (consumer 0 syncs kTurn0 exactly k_blocks times).
      if constexpr (P.pingpong) {
        if (!(ci == 1 && kb == k_blocks - 1)) pass_turn();
      }
      wgmma_wait<0>();
      wgmma_fence_operands(acc);
      // The stage's wgmma reads are done: release it (one arrive per warpgroup).
      if (thread_in_warpgroup() == 0) mbarrier_arrive(&sm.empty[st.index]);
      st.advance();
    }

    // Epilogue: stage own rows, wait for the other consumer, write the other's rows.
    const int t = thread_in_warpgroup();
#pragma unroll
    for (int i = 0; i < P.n / 2; i += 2) {
      const WgmmaCoord rc = wgmma_acc_coord(t, i);  // (i, i + 1): adjacent columns
      *reinterpret_cast<float2*>(&sm.c[64 * ci + rc.row][rc.col]) =
          make_float2(acc[i], acc[i + 1]);
    }
    named_barrier_sync(ConsumerBar::kEpilogue, kWsConsumerThreads);
    const int other_row0 = 64 * (1 - ci);
#pragma unroll 1
    for (int f = t; f < 64 * P.n / 4; f += kWarpgroupThreads) {  // float4 f of 64 × N
      const int row = other_row0 + f / (P.n / 4), col = 4 * (f % (P.n / 4));
      *reinterpret_cast<float4*>(c + row * P.n + col) =
          *reinterpret_cast<const float4*>(&sm.c[row][col]);
    }
  }
}

}  // namespace attnjit::testing
