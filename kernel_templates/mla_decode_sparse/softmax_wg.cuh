#pragma once
// mla_decode_sparse's softmax_wg schedule (opt-in; two_consumers is the default), included
// by sm90_mla_decode_sparse.cuh after the parts both schedules share.
//
// Three warpgroups, mla_decode's softmax_wg schedule (sm90_mla_decode.cuh) as the model:
//   WG0  per step S = Q·Kᵀ, mask, online softmax; P and the row rescale factors to shared
//        memory. Nothing else: its chain is the kernel's critical path.
//   WG1, WG2  O[:, half] = O·scale + P·V[:, half] (V = the first 512 columns of the tile),
//        and the gather, each the half of every row whose V columns it reads (and half
//        the rope), as soon as its own P·V of the stage is done:
//        bf16: rows by 16-byte cp.async straight into the swizzled KV ring (`stages` deep),
//          completing on the stage's mbarrier; tile i + stages refills tile i's stage
//          after the P·V of tile i's step (the ring holds two steps at least);
//        fp8: rows as stored by cp.async into a raw ring (`stages` deep), then widened
//          (e4m3 · block scale → bf16) into a ring of two KV tiles: after its P·V of tile
//          i a warpgroup widens tile i + 2 into tile i's stage and refills the raw stage.
//        Their kPFree arrival after that work is what lets WG0 on to the step after the
//        next, so the gather and widening overlap WG0's S and softmax of the next step.
//
#include "mla_decode_sparse/layout.cuh"

namespace attnjit::mla_decode_sparse {

// P·V warpgroup `half` starts the gather of its half of tile `tile` (relative index i)
// without waiting for it: key tid / kThreadsPerKey, its 16-byte units part, part +
// kThreadsPerKey, ... of the half, so the threads of a key read adjacent units. A skipped
// key's units are zero-filled (src-size 0 reads nothing). bf16: content units [32·half,
// +32) and rope units 64 + [4·half, +4) into KV stage i % kKvStages at the swizzled places
// wgmma reads, completing on kv_full; fp8: content units [16·half, +16), rope units 33 +
// [4·half, +4) and the scales (half 1's copy at kRawScaleCopy) into raw stage i % kRawStages
// as stored, completing on raw_full[.][half]. `idx` is the key's index, loaded a tile
// earlier; on return it holds the index of the same key of the next tile.
template <auto P>
ATTNJIT_DEVICE void gather_tile(SharedStorage<P>& s, const Args& a, const Work& w, int tile, int i, int half,
                                int& idx) {
  using T = Traits<P>;
  constexpr int kTpk = T::kThreadsPerKey;
  const int tid = thread_in_warpgroup();
  const int key = tid / kTpk, part = tid % kTpk;
  const int j = tile * kGatherKeys + key;
  const u8* row = key_row<P>(a, w, j, idx);
  idx = key_index<P>(a, w, j + kGatherKeys);
  const u8* src = row != nullptr ? row : static_cast<const u8*>(a.main.rows);
  const u32 src_bytes = row != nullptr ? 16u : 0u;
  const bool marks = half == 0 && part == 0;  // the one thread that records the key's validity
  // Shared addresses as u32 throughout: `s` was realigned through integer arithmetic, so
  // plain pointer stores would be generic ones (common/smem.cuh).
  if constexpr (!T::kFp8) {
    const int st = i % T::kKvStages;
    const int ring_row = st * kGatherKeys + key;
    if (marks) st_shared_u32(smem_u32(&s.valid[ring_row]), row != nullptr ? 1u : 0u);
    const u32 dst0 = smem_u32(s.kv);
#pragma unroll
    for (int k = 0; k < T::kHalfUnits / kTpk; ++k) {
      const int u = half * T::kHalfUnits + part + k * kTpk;
      cp_async_16(dst0 + KTile<P>::byte_offset(ring_row, 16 * u), src + 16 * u, src_bytes);
    }
#pragma unroll
    for (int k = 0; k < (T::kHalfRopeUnits + kTpk - 1) / kTpk; ++k) {
      const int u = 2 * T::kHalfUnits + half * T::kHalfRopeUnits + part + k * kTpk;
      if (part + k * kTpk < T::kHalfRopeUnits)
        cp_async_16(dst0 + KTile<P>::byte_offset(ring_row, 16 * u), src + 16 * u, src_bytes);
    }
    cp_async_arrive(&s.kv_full[st]);
  } else {
    constexpr int kContent = kValueDim / 16 / 2;  // e4m3 content: 16 units per half row
    const int st = i % T::kRawStages;
    if (marks) st_shared_u32(smem_u32(&s.raw_valid[st][key]), row != nullptr ? 1u : 0u);
    const u32 dst0 = smem_u32(s.raw[st]) + static_cast<u32>(key * kRawRowStride);
#pragma unroll
    for (int k = 0; k < kContent / kTpk; ++k) {
      const int u = half * kContent + part + k * kTpk;
      cp_async_16(dst0 + 16 * u, src + 16 * u, src_bytes);
    }
#pragma unroll
    for (int k = 0; k < (T::kHalfRopeUnits + kTpk - 1) / kTpk; ++k) {
      const int off = kFp8RopeOffset + 16 * (half * T::kHalfRopeUnits + part + k * kTpk);
      if (part + k * kTpk < T::kHalfRopeUnits) cp_async_16(dst0 + off, src + off, src_bytes);
    }
    if (part == kTpk - 1)  // the scales: each half its own copy
      cp_async_16(dst0 + (half == 0 ? kFp8ScaleOffset : kRawScaleCopy), src + kFp8ScaleOffset, src_bytes);
    cp_async_arrive(&s.raw_full[st][half]);
  }
}

// fp8, P·V warpgroup `half`: its half of raw stage i % kRawStages (once landed) → KV stage
// i % 2 in bf16: content = e4m3 · its 128-block's scale rounded to bf16 (a skipped key's
// zero-filled row gives 0), its rope units copied, the key's validity carried over (half
// 0). Key tid / kThreadsPerKey, content units of 16 values part, part + kThreadsPerKey, ...
// Ends with the stores fenced for wgmma; the caller's kPFree arrival publishes them.
template <auto P>
ATTNJIT_DEVICE void widen_tile(SharedStorage<P>& s, int i, int half) {
  using T = Traits<P>;
  constexpr int kTpk = T::kThreadsPerKey;
  constexpr int kContent = kValueDim / 16 / 2;  // 16-value units per half row
  const int tid = thread_in_warpgroup();
  const int key = tid / kTpk, part = tid % kTpk;
  const int rst = i % T::kRawStages, st = i % T::kKvStages;
  mbarrier_wait(&s.raw_full[rst][half], static_cast<u32>(i / T::kRawStages) & 1u);
  const u32 src = smem_u32(s.raw[rst]) + static_cast<u32>(key * kRawRowStride);
  const u32 dst0 = smem_u32(s.kv);
  const int ring_row = st * kGatherKeys + key;
  if (half == 0 && part == 0)
    st_shared_u32(smem_u32(&s.valid[ring_row]), ld_shared_u32(smem_u32(&s.raw_valid[rst][key])));
  const uint4 sc4 = ld_shared_16(src + (half == 0 ? kFp8ScaleOffset : kRawScaleCopy));
  // This half's two scales: unit u = 16·half + part + k·kTpk lies in block 2·half +
  // (k·kTpk) / 8 for every part (kTpk divides 8), so the choice is a constant.
  static_assert(8 % kTpk == 0, "a unit's scale block must not depend on part");
  const float scale[2] = {__uint_as_float(half == 0 ? sc4.x : sc4.z), __uint_as_float(half == 0 ? sc4.y : sc4.w)};
#pragma unroll
  for (int k = 0; k < kContent / kTpk; ++k) {  // 16 e4m3 → 32 bytes of bf16
    const int u = half * kContent + part + k * kTpk;
    uint4 lo, hi;
    widen16(ld_shared_16(src + 16 * u), scale[k * kTpk / 8], lo, hi);
    st_shared_16(dst0 + KTile<P>::byte_offset(ring_row, 32 * u), lo);
    st_shared_16(dst0 + KTile<P>::byte_offset(ring_row, 32 * u + 16), hi);
  }
#pragma unroll
  for (int k = 0; k < (T::kHalfRopeUnits + kTpk - 1) / kTpk; ++k) {  // rope, 8 bf16 per unit, as stored
    const int u = half * T::kHalfRopeUnits + part + k * kTpk;
    if (part + k * kTpk < T::kHalfRopeUnits)
      st_shared_16(dst0 + KTile<P>::byte_offset(ring_row, 2 * kValueDim + 16 * u), ld_shared_16(src + kFp8RopeOffset + 16 * u));
  }
  fence_proxy_async_smem();  // the generic-proxy stores are read by wgmma (async proxy)
}

// WG0: per tile S = Q·Kᵀ, mask, online softmax; P and scales to shared memory. Tile i's
// rows and validity were published by the P·V warpgroups' kPFree arrival after their tile
// i - 2 (or, for the first tiles, kFirstTiles); bf16 data also completes on kv_full.
template <auto P>
ATTNJIT_DEVICE void softmax_warpgroup(SharedStorage<P>& s, const Args& a, const Work& w) {
  using T = Traits<P>;
  const int tid = thread_in_warpgroup();
  float sc[P.block_n / 2];  // S, then P: [64 × block_n] accumulator fragment
  RowState rs{{neg_inf(), neg_inf()}, {0.0f, 0.0f}};
  // The P·V warpgroups gathered the first tiles (and their validity); fp8: widened two.
  named_barrier_sync(static_cast<u32>(Bar::kFirstTiles), T::kBarThreads);
  if (w.tile_begin < w.tile_end) mbarrier_wait(&s.q_full, 0);
  const u32 q_addr = smem_u32(s.q);
  // One step: gather tiles i .. i + kStepTiles - 1 (relative), in adjacent ring stages.
  for (int tile = w.tile_begin, i = 0; tile < w.tile_end; tile += T::kStepTiles, i += T::kStepTiles) {
    const int st = i % T::kKvStages;  // the step's first stage
    if constexpr (!T::kFp8) {
#pragma unroll
      for (int t = 0; t < T::kStepTiles; ++t)
        mbarrier_wait(&s.kv_full[st + t], static_cast<u32>(i / T::kKvStages) & 1u);
      fence_proxy_async_smem();  // cp.async wrote in the generic proxy; wgmma reads in the async one
    }
    const u32 k_addr = smem_u32(s.kv);
    const u32 row0 = static_cast<u32>(st * kGatherKeys);  // the step's first ring row
    // S[64 × block_n] = Q[64 × 576] · K[block_n × 576]ᵀ: 9 chunks × 4 k16 steps, fully
    // unrolled (a rolled loop made ptxas serialize the wgmmas, see sm90_mla_decode.cuh).
    wgmma_fence();
#pragma unroll
    for (int c = 0; c < T::kChunks; ++c)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const u32 k_byte = static_cast<u32>(c * 128 + kk * 32);
        wgmma_ss<DType::kBF16, P.block_n>(sc, QTile::desc(q_addr, k_byte), KTile<P>::desc(k_addr, k_byte, row0),
                                          c > 0 || kk > 0);
      }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(sc);

    // Mask skipped keys by replacement, then the online softmax (4 lanes share a row).
    float tile_max[2] = {neg_inf(), neg_inf()};
    const u32 valid_addr = smem_u32(&s.valid[row0]);
#pragma unroll
    for (int i2 = 0; i2 < P.block_n / 2; ++i2) {
      const int r = (i2 / 2) % 2;
      const bool valid = ld_shared_u32(valid_addr + 4 * wgmma_acc_coord(tid, i2).col) != 0;
      const float x = valid ? sc[i2] * a.scale_log2 : neg_inf();
      sc[i2] = x;
      tile_max[r] = fmaxf(tile_max[r], x);
    }
    float scale[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float m_new = fmaxf(rs.m[r], tile_max[r]);
      scale[r] = m_new == neg_inf() ? 1.0f : exp2f(rs.m[r] - m_new);  // no inf - inf
      rs.m[r] = m_new;
      rs.l[r] *= scale[r];
    }
#pragma unroll
    for (int i2 = 0; i2 < P.block_n / 2; ++i2) {
      const int r = (i2 / 2) % 2;
      const float p = rs.m[r] == neg_inf() ? 0.0f : exp2f(sc[i2] - rs.m[r]);
      sc[i2] = p;
      rs.l[r] += p;
    }

    named_barrier_sync(static_cast<u32>(Bar::kPFree), T::kBarThreads);
    const u32 p_addr = smem_u32(s.p);
#pragma unroll
    for (int i2 = 0; i2 < P.block_n / 2; i2 += 2) {
      const WgmmaCoord c = wgmma_acc_coord(tid, i2);
      st_shared_u32(p_addr + PTile<P>::byte_offset(c.row, c.col * 2), pack2<DType::kBF16>(sc[i2], sc[i2 + 1]));
    }
    if (tid % 4 == 0) {
      st_shared_f32(smem_u32(&s.row_scale[wgmma_acc_coord(tid, 0).row]), scale[0]);
      st_shared_f32(smem_u32(&s.row_scale[wgmma_acc_coord(tid, 2).row]), scale[1]);
    }
    fence_proxy_async_smem();  // P is read by the P·V warpgroups' wgmma
    named_barrier_arrive(static_cast<u32>(Bar::kPReady), T::kBarThreads);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    rs.l[r] += __shfl_xor_sync(0xffffffffu, rs.l[r], 1);
    rs.l[r] += __shfl_xor_sync(0xffffffffu, rs.l[r], 2);
  }
  if (tid % 4 == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = wgmma_acc_coord(tid, 2 * r).row;
      st_shared_f32(smem_u32(&s.row_max[row]), rs.m[r]);
      st_shared_f32(smem_u32(&s.row_sum[row]), rs.l[r]);
    }
  }
  named_barrier_arrive(static_cast<u32>(Bar::kStats), T::kBarThreads);
}

// WG1 / WG2: O[:, half·256 + 0..256) = O·scale + P · V[:, same columns], P from smem; and
// the gather (fp8: and widening) of this half of every row, run ahead (see the top).
template <auto P>
ATTNJIT_DEVICE void pv_warpgroup(SharedStorage<P>& s, const Args& a, const Work& w, const Seq& seq,
                                 int half) {
  using T = Traits<P>;
  const int tid = thread_in_warpgroup();
  float o[T::kHalfCols / 2];  // O[64 × 256] f32 accumulator fragment
#pragma unroll
  for (int i = 0; i < T::kHalfCols / 2; ++i) o[i] = 0.0f;
  const u32 p_addr = smem_u32(s.p);
  const u32 v_col_byte = static_cast<u32>(half * T::kHalfCols * 2);
  const int tiles = w.tile_end - w.tile_begin;
  // bf16: the ring's tiles ahead of S; fp8: the raw ring's, of which two are widened.
  constexpr int kAhead = T::kFp8 ? T::kRawStages : T::kKvStages;
  int idx = key_index<P>(a, w, w.tile_begin * kGatherKeys + tid / T::kThreadsPerKey);
  for (int i = 0; i < kAhead && i < tiles; ++i) gather_tile<P>(s, a, w, w.tile_begin + i, i, half, idx);
  if constexpr (T::kFp8) {
    for (int i = 0; i < 2 && i < tiles; ++i) {
      widen_tile<P>(s, i, half);
      if (i + kAhead < tiles) gather_tile<P>(s, a, w, w.tile_begin + i + kAhead, i + kAhead, half, idx);
    }
  }
  named_barrier_arrive(static_cast<u32>(Bar::kFirstTiles), T::kBarThreads);
  for (int tile = w.tile_begin, i = 0; tile < w.tile_end; tile += T::kStepTiles, i += T::kStepTiles) {
    const int st = i % T::kKvStages;  // the step's first stage
    if (tile == w.tile_begin) named_barrier_arrive(static_cast<u32>(Bar::kPFree), T::kBarThreads);
    named_barrier_sync(static_cast<u32>(Bar::kPReady), T::kBarThreads);
    if constexpr (!T::kFp8) {
      // Already complete (WG0 waited on them first): makes the cp.async data visible here.
#pragma unroll
      for (int t = 0; t < T::kStepTiles; ++t)
        mbarrier_wait(&s.kv_full[st + t], static_cast<u32>(i / T::kKvStages) & 1u);
      fence_proxy_async_smem();
    }  // fp8: this warpgroup widened its half of the tile itself, and fenced
    const u32 v_addr = smem_u32(s.kv);
    const u32 row0 = static_cast<u32>(st * kGatherKeys);  // the step's first ring row
    const float scale0 = ld_shared_f32(smem_u32(&s.row_scale[wgmma_acc_coord(tid, 0).row]));
    const float scale1 = ld_shared_f32(smem_u32(&s.row_scale[wgmma_acc_coord(tid, 2).row]));
#pragma unroll
    for (int i2 = 0; i2 < T::kHalfCols / 2; ++i2) o[i2] *= (i2 / 2) % 2 ? scale1 : scale0;
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < P.block_n / 16; ++ks)
      wgmma_ss<DType::kBF16, T::kHalfCols, WgmmaMajor::kK, WgmmaMajor::kMN>(
          o, PTile<P>::desc(p_addr, ks * 32), VTile<P>::desc(v_addr, row0 + ks * 16, v_col_byte), true);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(o);
    // This half of the step's stages is read: refill them, then let WG0 on (kPFree also
    // publishes them).
    if constexpr (!T::kFp8) {
#pragma unroll
      for (int t = 0; t < T::kStepTiles; ++t)
        if (i + t + kAhead < tiles) gather_tile<P>(s, a, w, tile + t + kAhead, i + t + kAhead, half, idx);
    } else if (i + 2 < tiles) {
      widen_tile<P>(s, i + 2, half);  // its raw stage is then free
      if (i + 2 + kAhead < tiles) gather_tile<P>(s, a, w, tile + 2 + kAhead, i + 2 + kAhead, half, idx);
    }
    if (tile + T::kStepTiles < w.tile_end) named_barrier_arrive(static_cast<u32>(Bar::kPFree), T::kBarThreads);
  }
  named_barrier_sync(static_cast<u32>(Bar::kStats), T::kBarThreads);
  const int r0 = wgmma_acc_coord(tid, 0).row, r1 = wgmma_acc_coord(tid, 2).row;
  const float m[2] = {ld_shared_f32(smem_u32(&s.row_max[r0])), ld_shared_f32(smem_u32(&s.row_max[r1]))};
  const float l[2] = {ld_shared_f32(smem_u32(&s.row_sum[r0])), ld_shared_f32(smem_u32(&s.row_sum[r1]))};
  write_output<P>(o, half, a, w, seq, m, l);
}

}  // namespace attnjit::mla_decode_sparse
