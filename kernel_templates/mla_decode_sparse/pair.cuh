#pragma once
// two_consumers on a 2-CTA cluster (config cluster 2: bf16 rows, 65..128 heads), included by
// two_consumers.cuh. The cluster is a token's two 64-head tiles, which read the same rows:
// CTA c gathers rows [32c, +32) of every fill (each buffer's column half) into its own ring,
// and once they have landed the consumer that reads the fill copies them (one 4 KiB bulk
// copy per chunk: 32 rows × 128 B are contiguous in the swizzled ring) to the same place in
// the other CTA's ring, completing on that CTA's kv_full. Each row then crosses L2 once.
//
// Opt-in, and slower: the target row ran 6484–6526 µs against 5064–5117 unpaired (H200);
// docs/performance.md has the diagnosis. Why it was built: a probe in which each CTA
// gathered only its 32 rows of each fill (no copy, outputs wrong) ran in 4104–4126 µs against
// 5065–5073: the gather's L2 traffic, not the consumers (alone ~4030 µs), was the limit.
//
// Hand-offs this adds (per fill i = 2·buf + half; two_consumers.cuh names the others):
//   x.landed[i]     this CTA's cp.async of the fill landed (a noinc arrival per producer
//                   thread): the copy's source is ready.
//   x.peer_free[i]  the other CTA's consumers released that half (one remote arrival per
//                   warp of the releasing warpgroup), so its last copy from here has
//                   landed there: every producer thread waits for it, beside kv_empty,
//                   before its next gather into the half (which overwrites the copy's
//                   source), and the copy that follows may overwrite the other CTA's half.
//   kv_full[i]      also counts the other CTA's copy: marker 0 arrives with expect_tx.
//   x.rope_sent     the other CTA's WG1 saw buffer 0's hi half complete, so this CTA's
//                   copy of it was read (one remote arrival): WG1 then may write P_even
//                   over buffer 0's rope rows, the copy's source (two_consumers.cuh).
// A copy of step s then waits only on landed's phase s (wait_full).
#include "mla_decode_sparse/layout.cuh"

namespace attnjit::mla_decode_sparse {

inline constexpr int kPairRows = 32;  // rows of each 64-key buffer a CTA gathers

// The other CTA of the pair.
ATTNJIT_DEVICE u32 pair_peer() { return cluster_cta_rank() ^ 1u; }

template <auto P>
ATTNJIT_DEVICE void init_pair_barriers(SharedStorage<P>& s) {
  for (int i = 0; i < Traits<P>::kKvStages; ++i) {
    mbarrier_init(&s.x.landed[i], kWarpgroupThreads);
    mbarrier_init(&s.x.peer_free[i], kWarpgroupThreads / 32);
  }
  mbarrier_init(&s.x.rope_sent, 1);
}

// Bytes the other CTA copies into a fill of `half`: its 32 rows of the half's chunks.
template <int kHalf>
inline constexpr u32 kPairCopyBytes = static_cast<u32>(kPairRows * 128 * HalfChunks<kHalf>::kCount);

// A consumer warpgroup's release of (buf, half): its threads on this CTA's kv_empty and,
// paired, each warp once on the other CTA's peer_free (its copy writes there next).
template <auto P>
ATTNJIT_DEVICE void release(SharedStorage<P>& s, int buf, int half) {
  mbarrier_arrive(empty_bar(s, buf, half));
  if constexpr (Traits<P>::kPaired) {
    __syncwarp();  // the warp's reads (its wgmma retired in every lane) before the remote release
    if (lane_id() == 0) mbarrier_arrive_cluster(&s.x.peer_free[2 * buf + half], pair_peer());
  }
}

// A consumer warpgroup's wait for fill i = 2·kBuf + kHalf of this step. Paired, its warp 0
// first waits for this CTA's own rows of the fill and copies them to the other CTA (lane ch:
// chunk ch of the half), so each CTA's copy is issued the moment its rows land whenever its
// consumer is already waiting for them (it usually is), without a polling warp.
template <auto P, int kBuf, int kHalf>
ATTNJIT_DEVICE void wait_full(SharedStorage<P>& s, u32 phase) {
  constexpr int kI = 2 * kBuf + kHalf;
  if constexpr (Traits<P>::kPaired) {
    const int tid = thread_in_warpgroup();
    if (tid < HalfChunks<kHalf>::kCount) {
      mbarrier_wait(&s.x.landed[kI], phase);
      const u32 rank = cluster_cta_rank(), peer = pair_peer();
      const u32 src = smem_u32(s.kv) + static_cast<u32>((HalfChunks<kHalf>::kBegin + tid) * KTile<P>::kChunkBytes) +
                      static_cast<u32>(kBuf * Consumers<P>::kBufKeys + kPairRows * static_cast<int>(rank)) * 128u;
      fence_proxy_async_smem();  // the rows came by cp.async (generic proxy); the copy reads them async
      bulk_copy_to_cluster(cluster_smem_addr(src, peer), src, static_cast<u32>(kPairRows * 128),
                           cluster_smem_addr(smem_u32(&s.kv_full[kI]), peer));
    }
  }
  mbarrier_wait(full_bar(s, kBuf, kHalf), phase);
  // The other CTA's copy of this fill was read: its P_even may overwrite the source.
  if constexpr (Traits<P>::kPaired && kBuf == 0 && kHalf == kHi)
    if (thread_in_warpgroup() == 0) mbarrier_arrive_cluster(&s.x.rope_sent, pair_peer());
}

// WG1, before P_even overwrites buffer 0's rope rows: paired, this CTA's copy of them in the
// step's buffer 0 hi fill was read (x.rope_sent).
template <auto P>
ATTNJIT_DEVICE void wait_rope_sent(SharedStorage<P>& s, u32 phase) {
  if constexpr (Traits<P>::kPaired) mbarrier_wait(&s.x.rope_sent, phase);
}

}  // namespace attnjit::mla_decode_sparse
