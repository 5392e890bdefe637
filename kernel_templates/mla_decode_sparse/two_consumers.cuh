#pragma once
// mla_decode_sparse's two_consumers schedule (bf16 rows, 64-key steps, 4 stages): the
// roles of FlashMLA's Hopper sparse prefill, on this kernel's ring, Q tile and epilogue
// (sm90_mla_decode_sparse.cuh, which includes this file).
//
//   WG0  producer: gathers every 32-key tile of the token's list into the ring (both
//        halves of each row, 16-byte cp.async into the swizzled stage), one tile ahead
//        per free stage; a stage is free when both consumers released it (kv_empty).
//   WG1, WG2  consumer c: per step S_c = Q · K[keys 32c .. 32c + 32)ᵀ (its own stage),
//        the row max exchanged with the other consumer, P_c = exp2(S_c − m) into columns
//        [32c, +32) of P, then O[:, half c] = O·scale + P · V[:, half c] over all 64 keys.
//
// Why: the softmax_wg schedule's one S chain (36 dependent 64×64 wgmmas, then the
// softmax) bounds it; here two consumers run half-width S chains and half the softmax
// each at once, and a step's P·V stays in flight under the next step's S. Measured: 0.79×
// softmax_wg at the prefill target row; ptxas serializes these wgmmas (C7515), and two
// forms without that serialization were slower still (docs/performance.md), so the cost
// is per S instruction. Opt-in (schedule two_consumers) until S is cheaper per key.
//
// Hand-offs, each named once:
//   kv_full[st]   the producer's cp.async of stage st landed (one arrival per thread and
//                 half row), and its validity flags are published (a release arrival per
//                 key from the thread that stored the flag).
//   kv_empty[st]  every consumer thread's reads of stage st (S and P·V) completed.
//   kMaxExchange  both consumers stored their row max of the step (and had retired their
//                 previous P·V, so P may be overwritten).
//   kPWritten     both halves of P are in shared memory.
//   kSumExchange  both consumers stored their final row sums (in the row-max slots: the
//                 other consumer read the last max before kPWritten of the last step).
#include "mla_decode_sparse/layout.cuh"

namespace attnjit::mla_decode_sparse {

enum class ConsumerBar : u32 {
  kMaxExchange = 5,  // the two consumers only (256 threads); ids 1..4 are softmax_wg's
  kPWritten = 6,
  kSumExchange = 7,
};
inline constexpr u32 kConsumerThreads = 2 * kWarpgroupThreads;

template <auto P>
ATTNJIT_DEVICE void producer_warpgroup(SharedStorage<P>& s, const Args& a, const Work& w) {
  using T = Traits<P>;
  const int tid = thread_in_warpgroup();
  const int tiles = w.tile_end - w.tile_begin;
  // gather_tile advances the index it is given to the next tile: one per half.
  int idx0 = key_index<P>(a, w, w.tile_begin * kGatherKeys + tid / T::kThreadsPerKey);
  int idx1 = idx0;
  const bool marks = tid % T::kThreadsPerKey == 0;  // stored the key's flag in half 0
  for (int i = 0; i < tiles; ++i) {
    const int st = i % T::kKvStages;
    if (i >= T::kKvStages) mbarrier_wait(&s.x.kv_empty[st], static_cast<u32>(i / T::kKvStages - 1) & 1u);
    gather_tile<P>(s, a, w, w.tile_begin + i, i, 0, idx0);
    gather_tile<P>(s, a, w, w.tile_begin + i, i, 1, idx1);
    if (marks) mbarrier_arrive(&s.kv_full[st]);  // release: the flag store before it
  }
}

template <auto P>
ATTNJIT_DEVICE void consumer_warpgroup(SharedStorage<P>& s, const Args& a, const Work& w, const Seq& seq,
                                       int c) {
  using T = Traits<P>;
  const int tid = thread_in_warpgroup();
  float o[T::kHalfCols / 2];  // O[64 × 256] f32: columns [256c, +256)
#pragma unroll
  for (int i = 0; i < T::kHalfCols / 2; ++i) o[i] = 0.0f;
  // S of this consumer's 32 keys: [64 × 32] fragment. Only wgmma writes it (the softmax
  // reads it and stores P straight to shared memory): a register a non-wgmma instruction
  // defines while the last P·V is in flight would make ptxas serialize the wgmmas.
  float sc[kGatherKeys / 2];
#pragma unroll
  for (int i = 0; i < kGatherKeys / 2; ++i) sc[i] = 0.0f;  // defined before any wgmma stage
  RowState rs{{neg_inf(), neg_inf()}, {0.0f, 0.0f}};
  const u32 q_addr = smem_u32(s.q), kv_addr = smem_u32(s.kv), p_addr = smem_u32(s.p);
  const u32 v_col_byte = static_cast<u32>(c * T::kHalfCols * 2);
  const int rows[2] = {wgmma_acc_coord(tid, 0).row, wgmma_acc_coord(tid, 2).row};
  const int tiles = w.tile_end - w.tile_begin;
  if (tiles > 0) mbarrier_wait(&s.q_full, 0);
  for (int i = 0; i < tiles; i += T::kStepTiles) {
    const int st = i % T::kKvStages;  // the step's first stage; this consumer's keys: st + c
    const u32 phase = static_cast<u32>(i / T::kKvStages) & 1u;
    const u32 own_row0 = static_cast<u32>((st + c) * kGatherKeys);
    mbarrier_wait(&s.kv_full[st + c], phase);
    fence_proxy_async_smem();  // cp.async wrote in the generic proxy; wgmma reads in the async one
    // S[64 × 32] = Q[64 × 576] · K[32 × 576]ᵀ, fully unrolled; the last step's P·V is
    // still in flight and retires with it.
    wgmma_fence();
#pragma unroll
    for (int ch = 0; ch < T::kChunks; ++ch)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const u32 k_byte = static_cast<u32>(ch * 128 + kk * 32);
        wgmma_ss<DType::kBF16, kGatherKeys>(sc, QTile::desc(q_addr, k_byte), KTile<P>::desc(kv_addr, k_byte, own_row0),
                                            ch > 0 || kk > 0);
      }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(sc);
    wgmma_fence_operands(o);
    if (i > 0) {  // the last step's two stages: this thread's S and P·V reads are done
      const int prev = (i - T::kStepTiles) % T::kKvStages;
      mbarrier_arrive(&s.x.kv_empty[prev]);
      mbarrier_arrive(&s.x.kv_empty[prev + 1]);
    }

    // Mask skipped keys by replacement; this consumer's row max, then the step's.
    float own_max[2] = {neg_inf(), neg_inf()};
    const u32 valid_addr = smem_u32(&s.valid[own_row0]);
    u32 valid_bits = 0;  // bit i2: column i2's key was gathered
#pragma unroll
    for (int i2 = 0; i2 < kGatherKeys / 2; ++i2) {
      const int r = (i2 / 2) % 2;
      const bool valid = ld_shared_u32(valid_addr + 4 * wgmma_acc_coord(tid, i2).col) != 0;
      valid_bits |= valid ? 1u << i2 : 0u;
      own_max[r] = fmaxf(own_max[r], valid ? sc[i2] * a.scale_log2 : neg_inf());
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      own_max[r] = fmaxf(own_max[r], __shfl_xor_sync(0xffffffffu, own_max[r], 1));
      own_max[r] = fmaxf(own_max[r], __shfl_xor_sync(0xffffffffu, own_max[r], 2));
      if (tid % 4 == 0) st_shared_f32(smem_u32(&s.x.rows[c][rows[r]]), own_max[r]);
    }
    named_barrier_sync(static_cast<u32>(ConsumerBar::kMaxExchange), kConsumerThreads);
    float scale[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float other = ld_shared_f32(smem_u32(&s.x.rows[1 - c][rows[r]]));
      const float m_new = fmaxf(rs.m[r], fmaxf(own_max[r], other));  // the same in both consumers
      scale[r] = m_new == neg_inf() ? 1.0f : exp2f(rs.m[r] - m_new);  // no inf - inf
      rs.m[r] = m_new;
      rs.l[r] *= scale[r];
    }
    // P = exp2(S − m) into P[:, 32c + col] (both consumers retired their last P·V before
    // kMaxExchange); a skipped key's p is 0 by selection.
#pragma unroll
    for (int i2 = 0; i2 < kGatherKeys / 2; i2 += 2) {
      float p[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int r = ((i2 + e) / 2) % 2;
        const bool live = (valid_bits >> (i2 + e)) & 1u && rs.m[r] != neg_inf();
        p[e] = live ? exp2f(sc[i2 + e] * a.scale_log2 - rs.m[r]) : 0.0f;
        rs.l[r] += p[e];
      }
      const WgmmaCoord co = wgmma_acc_coord(tid, i2);
      st_shared_u32(p_addr + PTile<P>::byte_offset(co.row, (c * kGatherKeys + co.col) * 2),
                    pack2<DType::kBF16>(p[0], p[1]));
    }
    fence_proxy_async_smem();  // P is read by both consumers' wgmma
    named_barrier_sync(static_cast<u32>(ConsumerBar::kPWritten), kConsumerThreads);
    mbarrier_wait(&s.kv_full[st + 1 - c], phase);  // V's other 32 keys
    fence_proxy_async_smem();
#pragma unroll
    for (int i2 = 0; i2 < T::kHalfCols / 2; ++i2) o[i2] *= (i2 / 2) % 2 ? scale[1] : scale[0];
    // O[:, half c] += P[64 × 64] · V[64 keys × 256]: left in flight under the next S.
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < P.block_n / 16; ++ks)
      wgmma_ss<DType::kBF16, T::kHalfCols, WgmmaMajor::kK, WgmmaMajor::kMN>(
          o, PTile<P>::desc(p_addr, ks * 32), VTile<P>::desc(kv_addr, st * kGatherKeys + ks * 16, v_col_byte),
          true);
    wgmma_commit();
  }
  wgmma_wait<0>();
  wgmma_fence_operands(o);
  // The row sums: each consumer's keys, then both.
  float l[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    rs.l[r] += __shfl_xor_sync(0xffffffffu, rs.l[r], 1);
    rs.l[r] += __shfl_xor_sync(0xffffffffu, rs.l[r], 2);
    if (tid % 4 == 0) st_shared_f32(smem_u32(&s.x.rows[c][rows[r]]), rs.l[r]);
  }
  named_barrier_sync(static_cast<u32>(ConsumerBar::kSumExchange), kConsumerThreads);
#pragma unroll
  for (int r = 0; r < 2; ++r) l[r] = rs.l[r] + ld_shared_f32(smem_u32(&s.x.rows[1 - c][rows[r]]));
  write_output<P>(o, c, a, w, seq, rs.m, l);
}

}  // namespace attnjit::mla_decode_sparse
