#pragma once
// Test family for TMA multicast in a 2-CTA cluster (common/tma.cuh, common/mbarrier.cuh,
// common/fence.cuh, common/pipeline.cuh): the pattern a cluster-shared K/V stream uses.
//
// Grid = clusters of 2 CTAs (launched with LaunchShape::cluster = {2, 1, 1}). Cluster c
// copies tiles c·T .. c·T + T - 1 (T = tiles_per_cluster) of a bf16 source through a ring
// of `stages` shared-memory buffers:
//   - CTA rank r loads rows [r·R/2, (r+1)·R/2) of the tile (R = rows) with
//     tma_load_{2d,3d}_multicast to BOTH CTAs (mask 0b11), so each CTA's buffer is filled
//     half by itself and half by its peer;
//   - each CTA's producer announces the whole tile (both halves) on its OWN full barrier
//     (arrive_expect_tx, or expect_tx + arrive), since both halves complete there;
//   - each CTA's consumers copy the full tile to their own output slot, then release the
//     stage in BOTH CTAs (mbarrier_arrive_cluster to rank 0 and rank 1): the peer's next
//     multicast writes into this CTA's buffer, so each empty barrier counts 2 arrivals;
//   - cluster_sync after the barrier init (no remote arrive or multicast may reach a
//     barrier before it is initialized) and before exit (no CTA may leave while its peer
//     can still arrive on its barriers).
// Output: out[tile][rank] = the tile, for every tile and both ranks; ranks[b] =
// cluster_cta_rank + 2·cluster id, which must equal b for 1-D clusters of 2.
//
// Many tiles per cluster and few stages make the phases wrap many times.
#include "common/arch.cuh"
#include "common/fence.cuh"
#include "common/mbarrier.cuh"
#include "common/named_barrier.cuh"
#include "common/pipeline.cuh"
#include "common/tensor_map.cuh"
#include "common/tma.cuh"
#include "common/types.cuh"
#include "common/wgmma.cuh"  // swizzle_byte_offset
#include "testing/wait_or_trap.cuh"

namespace attnjit::testing {

// int fields only: the host twin is the kernel-table key and must have no padding.
struct TmaMulticastParams {
  int rank;          // tensor-map rank: 2 → map [tiles·rows, cols], tma_load_2d_multicast;
                     //                  3 → map [tiles, rows, cols], tma_load_3d_multicast
  int rows;          // tile rows R, multiple of 16; each CTA loads R/2 of them (box ≤ 256)
  int cols;          // tile columns (bf16), whole box rows (span bytes / 2 elements each)
  int swizzle;       // TMA swizzle span in bytes: 0 (none; 128-byte box rows), 32, 64, 128
  int stages;        // ring depth, 1..8
  int split_expect;  // 1: mbarrier_expect_tx then mbarrier_arrive; 0: arrive_expect_tx
};

inline constexpr int kMulticastClusterSize = 2;
inline constexpr int kMulticastConsumerThreads = 128;                  // warps 1..4
inline constexpr int kMulticastThreads = 32 + kMulticastConsumerThreads;  // warp 0: producer

enum class MulticastBar : u32 {
  kSyncThreads = 0,  // reserved: __syncthreads()
  kConsumersRead,    // the 128 consumer threads finished reading a stage
  kCount,
};
static_assert(kNamedBarrierCount >= static_cast<int>(MulticastBar::kCount));

template <TmaMulticastParams P>
struct TmaMulticastTraits {
  static constexpr Swizzle kSwizzle = static_cast<Swizzle>(P.swizzle);
  static constexpr u32 kSpan = P.swizzle == 0 ? 128u : static_cast<u32>(P.swizzle);  // bytes
  static constexpr u32 kBoxInner = kSpan / 2;                  // bf16 elements per box row
  static constexpr u32 kHalfRows = static_cast<u32>(P.rows) / 2;  // box rows (outer extent)
  static constexpr u32 kChunks = static_cast<u32>(P.cols) / kBoxInner;  // boxes per tile row
  static constexpr u32 kChunkBytes = static_cast<u32>(P.rows) * kSpan;  // [R][span]
  static constexpr u32 kTileBytes = kChunks * kChunkBytes;  // [R × cols] bf16
  static constexpr u32 kRowUnits = static_cast<u32>(P.cols) * 2 / 16;  // 16-byte units/row

  // Byte offset of tile element (row, byte) from the stage base: chunk `byte / span`
  // holds [R][span] densely, swizzled as TMA writes it (the stage base is 1024-aligned).
  ATTNJIT_HOST_DEVICE static constexpr u32 offset(u32 row, u32 byte) {
    return swizzle_byte_offset<kSwizzle>((byte / kSpan) * kChunkBytes + row * kSpan +
                                         byte % kSpan);
  }
};

// The shared-memory plan.
template <TmaMulticastParams P>
struct TmaMulticastShared {
  alignas(1024) u8 tiles[P.stages][TmaMulticastTraits<P>::kTileBytes];  // [R × cols] each
  MBarrier full[P.stages];   // both halves of stage s landed (1 arrive + tile bytes)
  MBarrier empty[P.stages];  // stage s read by both CTAs' consumers (2 arrives)
};

// Dynamic smem the host requests: the plan plus slack to realign the window to 1024.
template <TmaMulticastParams P>
inline constexpr u32 kTmaMulticastSmemBytes = sizeof(TmaMulticastShared<P>) + 1024;

ATTNJIT_DEVICE u32 cluster_id_x() {
  u32 id;
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(id));
  return id;
}

template <TmaMulticastParams P>
__global__ void __launch_bounds__(kMulticastThreads, 1)
    tma_multicast_kernel(const __grid_constant__ TmaDesc src,  // rank 2: [tiles·R, cols]
                                                               // rank 3: [tiles, R, cols]
                                                               // box {(1,) R/2, span/2}
                         u16* out,        // [tiles][2][R][cols] bf16 bits
                         u32* ranks,      // [gridDim.x]
                         int tiles_per_cluster) {
  using T = TmaMulticastTraits<P>;
  static_assert(P.rank == 2 || P.rank == 3, "rank: 2 or 3");
  static_assert(P.swizzle == 0 || P.swizzle == 32 || P.swizzle == 64 || P.swizzle == 128,
                "swizzle: 0, 32, 64 or 128 bytes");
  static_assert(P.rows % 16 == 0 && P.rows / 2 <= 256,
                "rows: multiple of 16 (each half starts on a swizzle repeat), half box <= 256");
  static_assert(P.cols > 0 && P.cols % T::kBoxInner == 0, "cols: whole box rows");
  static_assert(P.stages >= 1 && P.stages <= 8, "stages: 1..8");
  static_assert(P.split_expect == 0 || P.split_expect == 1, "split_expect: 0 or 1");
  static_assert(T::kTileBytes % 1024 == 0, "every stage must start 1024-aligned");
  static_assert(kTmaMulticastSmemBytes<P> <= kMaxSmemPerBlock, "over the 227 KiB opt-in shared memory");
  constexpr u16 kBothCtas = 0b11;

  extern __shared__ u8 smem_raw[];
  auto& sm = *reinterpret_cast<TmaMulticastShared<P>*>(
      smem_raw + (1024u - smem_u32(smem_raw) % 1024u) % 1024u);
  // Both CTAs realign identically (same kernel, same window), so multicast offsets agree.

  u32 dynamic_bytes;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_bytes));
  if (dynamic_bytes < kTmaMulticastSmemBytes<P>) __trap();

  const u32 rank = cluster_cta_rank();  // 0 or 1
  const u32 cluster = cluster_id_x();
  if (threadIdx.x == 0) {
    ranks[blockIdx.x] = rank + kMulticastClusterSize * cluster;
#pragma unroll 1
    for (int s = 0; s < P.stages; ++s) {
      mbarrier_init(&sm.full[s], 1);
      mbarrier_init(&sm.empty[s], kMulticastClusterSize);
    }
    fence_mbarrier_init();
  }
  cluster_sync();  // barriers of both CTAs initialized before any multicast or remote arrive

  if (warp_id_uniform() == 0) {
    // ---- producer: one elected thread -------------------------------------------------
    if (elect_one_sync()) {
      prefetch_tma_desc(src);
      PipelineState<P.stages> st;
#pragma unroll 1
      for (int k = 0; k < tiles_per_cluster; ++k) {
        // Both CTAs' consumers released this stage (a fresh barrier passes parity 1).
        mbarrier_wait_or_trap(&sm.empty[st.index], st.phase ^ 1u);
        MBarrier* full = &sm.full[st.index];
        if constexpr (P.split_expect) {
          mbarrier_expect_tx(full, T::kTileBytes);  // before the arrive, or the phase could
          mbarrier_arrive(full);                    // complete with the bytes unannounced
        } else {
          mbarrier_arrive_expect_tx(full, T::kTileBytes);
        }
        const int tile = static_cast<int>(cluster) * tiles_per_cluster + k;
        const int half_row0 = static_cast<int>(rank * T::kHalfRows);
        u8* half_dst = sm.tiles[st.index] + rank * T::kHalfRows * T::kSpan;  // rows r·R/2..
#pragma unroll 1
        for (u32 j = 0; j < T::kChunks; ++j) {
          const int c0 = static_cast<int>(j * T::kBoxInner);
          if constexpr (P.rank == 2) {
            tma_load_2d_multicast(src, full, half_dst + j * T::kChunkBytes, c0,
                                  tile * P.rows + half_row0, kBothCtas);
          } else {
            tma_load_3d_multicast(src, full, half_dst + j * T::kChunkBytes, c0, half_row0, tile,
                                  kBothCtas);
          }
        }
        st.advance();
      }
    }
    __syncwarp();
  } else {
    // ---- consumers: 128 threads copy the stage to this CTA's output slot ---------------
    const u32 c = threadIdx.x - 32;  // 0..127
    PipelineState<P.stages> st;
#pragma unroll 1
    for (int k = 0; k < tiles_per_cluster; ++k) {
      mbarrier_wait_or_trap(&sm.full[st.index], st.phase);
      const u64 tile = static_cast<u64>(cluster) * tiles_per_cluster + k;
      u8* dst = reinterpret_cast<u8*>(out) +
                (tile * kMulticastClusterSize + rank) * (static_cast<u64>(P.rows) * P.cols * 2);
      const u8* stage = sm.tiles[st.index];
#pragma unroll 4
      for (u32 u = c; u < static_cast<u32>(P.rows) * T::kRowUnits;
           u += kMulticastConsumerThreads) {
        const u32 row = u / T::kRowUnits, byte = (u % T::kRowUnits) * 16;  // 16 B: one unit
        *reinterpret_cast<uint4*>(dst + row * (P.cols * 2u) + byte) =
            *reinterpret_cast<const uint4*>(stage + T::offset(row, byte));
      }
      named_barrier_sync(MulticastBar::kConsumersRead, kMulticastConsumerThreads);
      if (c == 0) {  // release the stage in both CTAs: both producers write into it
        mbarrier_arrive_cluster(&sm.empty[st.index], 0);
        mbarrier_arrive_cluster(&sm.empty[st.index], 1);
      }
      st.advance();
    }
  }
  cluster_sync();  // the peer may still arrive on our empty barriers until here
}

}  // namespace attnjit::testing
