#pragma once
// mla_decode_sparse's narrow schedule (config `schedule` narrow): fp8 rows (656 B) at h = 8
// or 16. The other schedules put a token's heads on wgmma's M, which is 64: at h = 16 three
// quarters of each tensor-core instruction is padding, and every key is widened to bf16
// through shared memory, so the h ≤ 16 rows ran at the h 64 rate (46 % of copy, H100).
// Here the 64 keys of a tile are M and the h heads N (as mla_decode_fp8's narrow kernel),
// and no row is widened in shared memory: the consumers build their A operands in
// registers from the rows as stored, exactly (every e4m3 value is an f16).
//
//   Sᵀ [64 keys × h] = Σ_b σ_b[key] · (K_b·Q_bᵀ) · 2^e_n + K_r·Q_rᵀ
//        K_b: scale block b's 128 e4m3 content values as f16 (ldmatrix + cvt); Q_b: q's
//        content as f16 · 2^-e_n per head n (e_n puts the head's amax in [2^14, 2^15), so
//        q converts exactly), rewritten in place over q's bf16 staging; each block a fresh
//        accumulator, σ_b and 2^e_n applied in f32; the rope in bf16 as stored.
//   P′_b [h × 64] = p · σ_b[key] / u_b in f16, u_b the tile's largest σ_b: P′ ≤ 1 whatever
//        σ's magnitude, so f16's range never cuts it.
//   Oᵀ_b [128 dims × h] = Oᵀ_b · α · u_b,old / u_b + Vᵀ_b·P′_bᵀ with Vᵀ as f16 in registers
//        (ldmatrix.trans + PRMT + cvt); the output is Oᵀ_b · u_b / l.
// The products are exact and accumulate in f32 (f16 wgmma): unlike e4m3 wgmma, whose
// accumulator keeps ~14 bits on Hopper. Scores from e4m3 SS wgmma against q split exactly
// into two e4m3 parts timed the same on (128, 1, 16, 2048) and missed the lse bound on
// hostile rows by 10⁵×: not kept.
// A producer warpgroup gathers each tile's 64 rows as stored, one bulk copy per row (the
// TMA engine), into a 4-stage ring of rows 656 B apart with 64 B more after each 8
// (layout.cuh: ldmatrix's 8 rows × 16 B fall in 8 bank groups). Gathering by 16-byte
// cp.async instead capped the kernel: alone, with the consumers idle, it moved (128, 1, 16,
// 2048) in 102 µs (57 % of copy), bulk copies in 79 µs. Two consumer warpgroups take
// alternate tiles (an even ring: a stage has one consumer), each with its own m, l and Oᵀ,
// and merge at the end. A skipped key's content and scales are zero-filled by the
// producer and its score replaced by -inf.
//
// Key order. Warp w's S fragment rows g and g + 8 (g = lane / 4) are ring rows 16w + g and
// 16w + 8 + g; P′ᵀ's k position 16w + 2g + j is fragment row g + 8j, so a thread stores
// its two rows' P′ as one f16x2, and Vᵀ's ldmatrix.trans reads k positions from rows
// {g, 8 + g} pairwise (the group stride puts them 4 bank groups apart). Within a 16-dim
// k-step of S, a thread's bytes 4t .. 4t+3 of a row are A's k positions {2t, 2t+1, 8+2t,
// 9+2t}; q's f16 copy is written in that order (q_to_f16).
#include "common/column_merge.cuh"  // acc_column, the two consumers' merge

namespace attnjit::mla_decode_sparse::narrow {

template <auto P>
struct Traits {
  static constexpr int kRows = P.num_heads;                 // wgmma N: the token's heads
  static constexpr int kKeys = kNarrowKeys;                 // wgmma M: keys per tile
  static constexpr int kStages = P.stages;
  static constexpr int kAcc = kRows / 2;                    // floats of one [64 × N] fragment
  static constexpr int kCols = kRows / 4;                   // distinct columns per thread
  static constexpr int kChunkBytes = kRows * 128;           // q and P′ tiles: [N][128 B], SW128
  static constexpr int kQChunks = kHeadDim * 2 / 128;       // 9: 8 of content, the rope
  static constexpr int kRopeChunk = kQChunks - 1;
  static constexpr int kUnit = 16;                          // bytes of a row's unit (ldmatrix's row)
  static constexpr int kGroupStride = kNarrowGroupStride;   // bytes between 8-row groups
  static constexpr int kStageBytes = kKeys / 8 * kGroupStride;
  static constexpr int kScaleUnit = kFp8ScaleOffset / 16, kRopeUnit = kFp8RopeOffset / 16;
  static constexpr int kBlocks = kFp8Scales;                // scale blocks: 2 Oᵀ tiles each
  static constexpr int kDimTiles = kValueDim / kWgmmaM;     // Oᵀ tiles of 64 dims
  static constexpr int kConsumers = 2;
  // The producer only gathers; a consumer holds Oᵀ (8 × kAcc), two blocks' fragments and
  // the scores.
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;
  static_assert(kProducerRegs + 2 * kConsumerRegs <= 3 * 168, "register budgets over the launch's");
  static_assert(P.cache_layout == CacheLayout::kFp8, "narrow: fp8 rows");
  static_assert(kRows == 8 || kRows == 16, "narrow: h 8 or 16 (wgmma N)");
  static_assert(P.block_n == kKeys && P.stages == 4, "narrow: 64-key tiles in 4 stages");
  static_assert(kFp8RowBytes % 128 == 16 && kGroupStride % 128 == 64,
                "rows 1 apart: 1 bank group apart; rows 8 apart: 4 (ldmatrix.trans reads such pairs)");
};

template <auto P>
struct SharedStorage {
  using T = Traits<P>;
  // q [N][576] bf16 as 9 SW128 chunks (TMA); q_to_f16 rewrites chunks 0..7 as f16.
  alignas(1024) u8 q[T::kQChunks * T::kChunkBytes];
  alignas(1024) u8 p[T::kConsumers][T::kBlocks][T::kChunkBytes];  // P′_bᵀ f16 [N][64 k], SW128
  alignas(128) u8 ring[T::kStages][T::kStageBytes];                // rows as stored (ring_place)
  int valid[T::kStages][T::kKeys];                                 // 1: the row was gathered
  float cq[T::kRows];                                              // 2^e_n
  alignas(16) float red[T::kConsumers][T::kRows][4];      // per column, per warp: a max, then l
  alignas(16) float umax[T::kConsumers][T::kBlocks][4];  // per block, per warp: its rows' largest σ_b
  float stats[T::kConsumers][2][T::kRows];    // each consumer's final m and l
  MBarrier q_full;
  MBarrier full[T::kStages];   // 128 arrivals (the valid flags) + the rows' bytes
  MBarrier empty[T::kStages];  // the stage's consumer: one arrival per warp
};

template <auto P>
inline constexpr unsigned kDynamicSmemBytes = sizeof(SharedStorage<P>) + 1024;
template <auto P>
inline constexpr bool kPlanMatches = kDynamicSmemBytes<P> == narrow_smem_bytes(P.num_heads, P.stages);

template <auto P>
using QTile = WgmmaKMajorTile<Swizzle::k128B, Traits<P>::kRows>;  // B: q and P′ᵀ, N rows

// Named barriers: 1 + c is consumer c's own; kBoth the two consumers' (256 threads).
ATTNJIT_DEVICE u32 own_barrier(int c) { return 1u + static_cast<u32>(c); }
inline constexpr u32 kBoth = 3;

// Byte offset of 16-byte unit u of ring row r in a stage (layout.cuh).
ATTNJIT_HOST_DEVICE constexpr int ring_place(int r, int u) {
  return r / 8 * kNarrowGroupStride + r % 8 * kFp8RowBytes + 16 * u;
}

ATTNJIT_DEVICE void ldsm_x4(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
ATTNJIT_DEVICE void ldsm_x4_trans(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// Four e4m3 (low byte first) → two f16x2: lo = bytes 0, 1; hi = bytes 2, 3. Exact.
ATTNJIT_DEVICE void e4m3x4_to_f16(u32 x, u32& lo, u32& hi) {
  asm("{.reg .b16 l, h; mov.b32 {l, h}, %2; cvt.rn.f16x2.e4m3x2 %0, l; cvt.rn.f16x2.e4m3x2 %1, h;}"
      : "=r"(lo), "=r"(hi)
      : "r"(x));
}

// ---- the producer ------------------------------------------------------------------------

// Two threads per key row: thread 2k issues the bulk copy of the tile's key k (announcing
// its bytes on the stage's barrier), thread 2k + 1 only arrives. A skipped key's content
// and scales are zeroed instead, by both: its score and P′ are selected away, but a stale
// NaN there would still reach Oᵀ through Vᵀ·P′ (0 · NaN). Indices are loaded two tiles
// ahead: one tile's issue is short beside a load's latency under a full memory system.
template <auto P>
ATTNJIT_DEVICE void producer(SharedStorage<P>& s, const Args& a, const Work& w) {
  using T = Traits<P>;
  const int tid = thread_in_warpgroup(), key = tid / 2, half = tid % 2;
  const int count = w.tile_end - w.tile_begin;
  const int j0 = w.tile_begin * T::kKeys + key;
  int idx = count > 0 ? key_index<P>(a, w, j0) : -1;
  int idx_next = count > 1 ? key_index<P>(a, w, j0 + T::kKeys) : -1;
  for (int n = 0; n < count; ++n) {
    const int st = n % T::kStages, j = j0 + n * T::kKeys;
    const int later = n + 2 < count ? key_index<P>(a, w, j + 2 * T::kKeys) : -1;
    if (n >= T::kStages) mbarrier_wait(&s.empty[st], static_cast<u32>(n / T::kStages - 1) & 1u);
    const u8* row = gathered_row<true>(a, w, j, idx);
    u8* dst = s.ring[st] + ring_place(key, 0);
    if (half == 0) s.valid[st][key] = row != nullptr ? 1 : 0;
    if (row == nullptr) {
#pragma unroll
      for (int u = half; u <= T::kScaleUnit; u += 2) st_shared_zero16(smem_u32(dst + T::kUnit * u));
      fence_proxy_async_smem();  // ordered before a later tile's bulk copy into these bytes
      mbarrier_arrive(&s.full[st]);
    } else if (half == 0) {
      mbarrier_arrive_expect_tx(&s.full[st], kFp8RowBytes);
      bulk_load(&s.full[st], dst, row, kFp8RowBytes);
    } else {
      mbarrier_arrive(&s.full[st]);
    }
    idx = idx_next;
    idx_next = later;
  }
}

// ---- the consumers' pieces ------------------------------------------------------------------

// q's content (bf16, as TMA wrote it) → f16 · 2^-e_n in place, in the k order of the A
// fragments; cq[n] = 2^e_n. Warp v (0..7) of the two consumers converts rows v, v + 8;
// lane l the 16 values [16l, 16l + 16): chunk l/4, units 2(l%4) and 2(l%4) + 1.
template <auto P>
ATTNJIT_DEVICE void q_to_f16(SharedStorage<P>& s, int consumer_tid) {
  using T = Traits<P>;
  const int v = consumer_tid / 32, lane = consumer_tid % 32;
  for (int n = v; n < T::kRows; n += 8) {
    const u32 line = smem_u32(s.q) + static_cast<u32>((lane / 4) * T::kChunkBytes + n * 128);
    const u32 u0 = 2u * static_cast<u32>(lane % 4), sw = static_cast<u32>(n % 8);
    const u32 at[2] = {line + 16u * (u0 ^ sw), line + 16u * ((u0 + 1u) ^ sw)};
    const uint4 raw[2] = {ld_shared_16(at[0]), ld_shared_16(at[1])};
    const u32 words[8] = {raw[0].x, raw[0].y, raw[0].z, raw[0].w, raw[1].x, raw[1].y, raw[1].z, raw[1].w};
    float x[16];
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      x[2 * i] = __uint_as_float(words[i] << 16);
      x[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
      amax = fmaxf(amax, fmaxf(fabsf(x[2 * i]), fabsf(x[2 * i + 1])));
    }
#pragma unroll
    for (int o = 1; o < 32; o *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    // e: amax · 2^-e in [2^14, 2^15) (f16's largest is 65504); a zero row keeps e = 0, and
    // the clamp keeps 2^±e a normal float.
    const int e = amax > 0.0f ? max(-100, min(100, ((__float_as_int(amax) >> 23) & 0xff) - 127 - 14)) : 0;
    const float mul = __int_as_float((127 - e) << 23);
    u32 out[8];
#pragma unroll
    for (int t = 0; t < 4; ++t) {  // k positions 2t, 2t+1 ← values 4t, 4t+1; 8+2t, 9+2t ← 4t+2, 4t+3
      out[t] = pack2<DType::kF16>(x[4 * t] * mul, x[4 * t + 1] * mul);
      out[4 + t] = pack2<DType::kF16>(x[4 * t + 2] * mul, x[4 * t + 3] * mul);
    }
    st_shared_16(at[0], make_uint4(out[0], out[1], out[2], out[3]));
    st_shared_16(at[1], make_uint4(out[4], out[5], out[6], out[7]));
    if (lane == 0) s.cq[n] = __int_as_float((127 + e) << 23);
  }
}

// Sᵀ's block b (content blocks 0..3: 8 f16 k-steps, A from the rows by ldmatrix + cvt;
// block 4: the rope, 4 bf16 k-steps, A by ldmatrix as stored) into a fresh accumulator d.
// k_addr: this lane's ldmatrix row (matrices 0/1: fragment rows g / g + 8; 2/3: 16 bytes
// on). The fragments f stay untouched until the group retires.
template <auto P, int kBlock>
ATTNJIT_DEVICE void issue_block(float (&d)[Traits<P>::kAcc], u32 (&f)[8][4], u32 k_addr, u32 q_addr) {
  using T = Traits<P>;
  if constexpr (kBlock < T::kBlocks) {
#pragma unroll
    for (int kp = 0; kp < 4; ++kp) {
      u32 r[4];
      ldsm_x4(r, k_addr + T::kUnit * (8 * kBlock + 2 * kp));  // units 8b + 2kp, + 1
      e4m3x4_to_f16(r[0], f[2 * kp][0], f[2 * kp][2]);
      e4m3x4_to_f16(r[1], f[2 * kp][1], f[2 * kp][3]);
      e4m3x4_to_f16(r[2], f[2 * kp + 1][0], f[2 * kp + 1][2]);
      e4m3x4_to_f16(r[3], f[2 * kp + 1][1], f[2 * kp + 1][3]);
    }
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 8; ++ks)
      wgmma_rs<DType::kF16, T::kRows>(d, f[ks], QTile<P>::desc(q_addr, 256 * kBlock + 32 * ks), ks > 0);
  } else {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) ldsm_x4(f[kk], k_addr + T::kUnit * (T::kRopeUnit + 2 * kk));
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_rs<DType::kBF16, T::kRows>(d, f[kk], QTile<P>::desc(q_addr, 128 * T::kRopeChunk + 32 * kk), kk > 0);
  }
  wgmma_commit();
}

// Retires block kBlock (kPending groups may stay in flight) and adds it to the scores:
// σ_b · d for content (then · 2^e_n after the last), d for the rope.
template <auto P, int kBlock, int kPending>
ATTNJIT_DEVICE void add_block(float (&sacc)[Traits<P>::kAcc], float (&d)[Traits<P>::kAcc], u32 (&f)[8][4],
                              const float (&sc)[2][4], const float (&cqn)[Traits<P>::kCols]) {
  using T = Traits<P>;
  wgmma_wait<kPending>();
  wgmma_fence_operands(d);
#pragma unroll
  for (int r = 0; r < 8; ++r) wgmma_fence_operands(f[r]);
#pragma unroll
  for (int i = 0; i < T::kAcc; ++i) {
    if constexpr (kBlock == 0) {
      sacc[i] = sc[(i / 2) % 2][0] * d[i];
    } else if constexpr (kBlock < T::kBlocks) {
      sacc[i] += sc[(i / 2) % 2][kBlock] * d[i];
      if constexpr (kBlock == T::kBlocks - 1) sacc[i] *= cqn[acc_col_of(i)];
    } else {
      sacc[i] += d[i];
    }
  }
}

// Sᵀ over one ring stage: the 5 blocks into two alternating accumulators, one in flight
// while the other is added.
template <auto P>
ATTNJIT_DEVICE void scores(float (&sacc)[Traits<P>::kAcc], u32 k_addr, u32 q_addr, const float (&sc)[2][4],
                           const float (&cqn)[Traits<P>::kCols]) {
  float part[2][Traits<P>::kAcc];
  u32 frag[2][8][4];
  issue_block<P, 0>(part[0], frag[0], k_addr, q_addr);
  issue_block<P, 1>(part[1], frag[1], k_addr, q_addr);
  add_block<P, 0, 1>(sacc, part[0], frag[0], sc, cqn);
  issue_block<P, 2>(part[0], frag[0], k_addr, q_addr);
  add_block<P, 1, 1>(sacc, part[1], frag[1], sc, cqn);
  issue_block<P, 3>(part[1], frag[1], k_addr, q_addr);
  add_block<P, 2, 1>(sacc, part[0], frag[0], sc, cqn);
  issue_block<P, 4>(part[0], frag[0], k_addr, q_addr);
  add_block<P, 3, 1>(sacc, part[1], frag[1], sc, cqn);
  add_block<P, 4, 0>(sacc, part[0], frag[0], sc, cqn);
}

// The column max of v over the consumer's 64 keys (a butterfly over the 8 lanes sharing a
// column set, then the four warps through shared memory), and beside it each scale block's
// largest σ over the 64 rows (u).
template <auto P>
ATTNJIT_DEVICE void reduce_tile(float (&v)[Traits<P>::kCols], float (&u)[4], SharedStorage<P>& s, int c) {
  using T = Traits<P>;
  const int tid = thread_in_warpgroup(), warp = tid / 32;
#pragma unroll
  for (int o = 4; o < 32; o *= 2) {
#pragma unroll
    for (int i = 0; i < T::kCols; ++i) v[i] = fmaxf(v[i], __shfl_xor_sync(0xffffffffu, v[i], o));
#pragma unroll
    for (int b = 0; b < 4; ++b) u[b] = fmaxf(u[b], __shfl_xor_sync(0xffffffffu, u[b], o));
  }
  if (tid % 32 < 4)
#pragma unroll
    for (int i = 0; i < T::kCols; ++i) s.red[c][acc_column(tid, i)][warp] = v[i];
  if (tid % 32 == 0)
#pragma unroll
    for (int b = 0; b < 4; ++b) s.umax[c][b][warp] = u[b];
  named_barrier_sync(own_barrier(c), kWarpgroupThreads);
#pragma unroll
  for (int i = 0; i < T::kCols; ++i) {
    const int n = acc_column(tid, i);
    const float4 r = *reinterpret_cast<const float4*>(s.red[c][n]);
    v[i] = fmaxf(fmaxf(r.x, r.y), fmaxf(r.z, r.w));
  }
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const float4 r = *reinterpret_cast<const float4*>(s.umax[c][b]);
    u[b] = fmaxf(fmaxf(r.x, r.y), fmaxf(r.z, r.w));
  }
}

// Oᵀ += Vᵀ·P′ᵀ over one stage: per 16-key k-step (warp ks's rows), the 8 dim tiles'
// fragments (ldmatrix.trans, two tiles each; a PRMT splits a register's dims 2g and 2g + 1,
// cvt widens), then 8 RS wgmmas; two k-steps' fragments in flight. The stage is released
// after its last ldmatrix (the fragments hold what the wgmmas read).
template <auto P>
ATTNJIT_DEVICE void accumulate_pv(float (&o)[Traits<P>::kDimTiles][Traits<P>::kAcc], u32 v_addr, u32 p_addr,
                                  MBarrier* empty) {
  using T = Traits<P>;
  u32 frag[2][T::kDimTiles][4];
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    u32(&f)[T::kDimTiles][4] = frag[ks % 2];
#pragma unroll
    for (int mp = 0; mp < T::kDimTiles / 2; ++mp) {
      u32 r[4];
      ldsm_x4_trans(r, v_addr + 2 * T::kGroupStride * ks + 8 * T::kUnit * mp);  // rows 16ks.., units 8mp..
#pragma unroll
      for (int m = 0; m < 4; ++m)  // matrix m: dim tile 2mp + m/2, k positions 8(m%2) ..
        e4m3x4_to_f16(__byte_perm(r[m], 0, 0x3120), f[2 * mp + m / 2][2 * (m % 2)], f[2 * mp + m / 2][2 * (m % 2) + 1]);
    }
    if (ks == 3) {
      __syncwarp();
      if (threadIdx.x % 32 == 0) mbarrier_arrive(empty);
    }
    wgmma_fence();
#pragma unroll
    for (int mb = 0; mb < T::kDimTiles; ++mb)
      wgmma_rs<DType::kF16, T::kRows>(o[mb], f[mb], QTile<P>::desc(p_addr + (mb / 2) * T::kChunkBytes, 32 * ks),
                                      true);
    wgmma_commit();
    if (ks > 0) {
      wgmma_wait<1>();
#pragma unroll
      for (int mb = 0; mb < T::kDimTiles; ++mb) wgmma_fence_operands(frag[(ks - 1) % 2][mb]);
    }
  }
  wgmma_wait<0>();
#pragma unroll
  for (int mb = 0; mb < T::kDimTiles; ++mb) {
    wgmma_fence_operands(o[mb]);
    wgmma_fence_operands(frag[1][mb]);
  }
}

}  // namespace attnjit::mla_decode_sparse::narrow

#include "mla_decode_sparse/narrow_merge.cuh"

namespace attnjit::mla_decode_sparse::narrow {

// ---- the consumer role ----------------------------------------------------------------------

// Consumer c's walk over the CTA's `count` tiles c, c + 2, …, then its final m and l, the
// merge and its half of the output.
template <auto P>
ATTNJIT_DEVICE void consumer(SharedStorage<P>& s, const Args& a, int count, int c) {
  using T = Traits<P>;
  const int tid = thread_in_warpgroup(), warp = tid / 32, lane = tid % 32, g = lane / 4;
  if (count > 0) {
    mbarrier_wait(&s.q_full, 0);
    q_to_f16<P>(s, c * kWarpgroupThreads + tid);
    fence_proxy_async_smem();  // q's f16 is read by wgmma
    named_barrier_sync(kBoth, T::kConsumers * kWarpgroupThreads);
  }
  float cqn[T::kCols], m[T::kCols], l[T::kCols];  // per column: 2^e_n, the running max, Σp
#pragma unroll
  for (int i = 0; i < T::kCols; ++i) {
    cqn[i] = count > 0 ? s.cq[acc_column(tid, i)] : 1.0f;
    m[i] = neg_inf();
    l[i] = 0.0f;
  }
  float units[T::kBlocks] = {1.0f, 1.0f, 1.0f, 1.0f};  // u_b: Oᵀ_b's unit
  float o[T::kDimTiles][T::kAcc];
#pragma unroll
  for (int mb = 0; mb < T::kDimTiles; ++mb)
#pragma unroll
    for (int i = 0; i < T::kAcc; ++i) o[mb][i] = 0.0f;

  // This lane's ldmatrix.trans row for Vᵀ: matrix mat = lane/8 covers k positions
  // 8(mat%2) .. +8 of a k-step (row i: position 8(mat%2) + i, ring row (pos/2) + 8(pos%2))
  // and dim tile mat/2 of a pair; the warp's 16 dims are unit `warp` of the tile.
  const int mat = lane / 8, kpos = 8 * (mat % 2) + lane % 8;
  // ... and its ldmatrix row for S: matrices 0/1 fragment rows g / g + 8 (ring rows 16w + i,
  // 16w + 8 + i), 2/3 the next unit.
  const u32 k_lane = static_cast<u32>(ring_place(16 * warp + 8 * (mat % 2) + lane % 8, mat / 2));
  const u32 v_lane = static_cast<u32>(ring_place(kpos / 2 + 8 * (kpos % 2), 4 * (mat / 2) + warp));
  const u32 q_addr = smem_u32(s.q), p_addr = smem_u32(s.p[c][0]);
  const int rows[2] = {16 * warp + g, 16 * warp + 8 + g};  // fragment rows g, g + 8

  for (int n = c; n < count; n += T::kConsumers) {
    const int st = n % T::kStages;
    mbarrier_wait(&s.full[st], static_cast<u32>(n / T::kStages) & 1u);
    const u32 stage = smem_u32(s.ring[st]);
    bool ok[2];
    float sc[2][4];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      ok[j] = s.valid[st][rows[j]] != 0;
      const uint4 v = ld_shared_16(stage + static_cast<u32>(ring_place(rows[j], T::kScaleUnit)));
      sc[j][0] = __uint_as_float(v.x), sc[j][1] = __uint_as_float(v.y);
      sc[j][2] = __uint_as_float(v.z), sc[j][3] = __uint_as_float(v.w);
    }
    float y[T::kAcc];
    scores<P>(y, stage + k_lane, q_addr, sc, cqn);

    float cmax[T::kCols], u[4];
#pragma unroll
    for (int i = 0; i < T::kCols; ++i) cmax[i] = neg_inf();
#pragma unroll
    for (int i = 0; i < T::kAcc; ++i) {
      y[i] = ok[(i / 2) % 2] ? y[i] * a.scale_log2 : neg_inf();  // a skipped key: by selection
      cmax[acc_col_of(i)] = fmaxf(cmax[acc_col_of(i)], y[i]);
    }
#pragma unroll
    for (int b = 0; b < 4; ++b) u[b] = fmaxf(sc[0][b], sc[1][b]);  // skipped rows: zero-filled
    reduce_tile<P>(cmax, u, s, c);
    float alpha[T::kCols];
#pragma unroll
    for (int i = 0; i < T::kCols; ++i) {
      const float m_new = fmaxf(m[i], cmax[i]);
      const float m_use = m_new == neg_inf() ? 0.0f : m_new;  // no valid key yet: p = 0
      alpha[i] = exp2f(m[i] - m_use);
      m[i] = m_new;
      l[i] *= alpha[i];
      cmax[i] = m_use;
    }
#pragma unroll
    for (int i = 0; i < T::kAcc; ++i) {
      y[i] = exp2f(y[i] - cmax[acc_col_of(i)]);
      l[acc_col_of(i)] += y[i];
    }
    // P′_b = p · σ_b / u_b, one f16x2 per column (rows g, g + 8 at k positions 2g, 2g + 1).
    float ratio[4];
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const float unit = u[b] > 0.0f ? u[b] : units[b];
      const float inv = __frcp_rn(unit);  // one rounding more than a division, no slow path
      ratio[b] = units[b] * inv;
      units[b] = unit;
      const float f0 = sc[0][b] * inv, f1 = sc[1][b] * inv;
#pragma unroll
      for (int i = 0; i < T::kCols; ++i) {
        const int i0 = 4 * (i / 2) + i % 2;
        st_shared_u32(p_addr + static_cast<u32>(b * T::kChunkBytes) +
                          QTile<P>::byte_offset(static_cast<u32>(acc_column(tid, i)), static_cast<u32>(32 * warp + 4 * g)),
                      pack2<DType::kF16>(y[i0] * f0, y[i0 + 2] * f1));
      }
    }
#pragma unroll
    for (int mb = 0; mb < T::kDimTiles; ++mb)
#pragma unroll
      for (int i = 0; i < T::kAcc; ++i) o[mb][i] *= alpha[acc_col_of(i)] * ratio[mb / 2];
    fence_proxy_async_smem();  // P′ is read by wgmma
    named_barrier_sync(own_barrier(c), kWarpgroupThreads);
    accumulate_pv<P>(o, stage + v_lane, p_addr, &s.empty[st]);
  }

  // Oᵀ in value units; l over the consumer (lanes, then warps); its final m and l.
#pragma unroll
  for (int mb = 0; mb < T::kDimTiles; ++mb)
#pragma unroll
    for (int i = 0; i < T::kAcc; ++i) o[mb][i] *= units[mb / 2];
#pragma unroll
  for (int i = 0; i < T::kCols; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 4);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 8);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 16);
    if (lane < 4) s.red[c][acc_column(tid, i)][warp] = l[i];
  }
  named_barrier_sync(own_barrier(c), kWarpgroupThreads);
#pragma unroll
  for (int i = 0; i < T::kCols; ++i) {
    const int n = acc_column(tid, i);
    const float4 r = *reinterpret_cast<const float4*>(s.red[c][n]);
    l[i] = (r.x + r.y) + (r.z + r.w);
    if (tid < 4) {
      s.stats[c][0][n] = m[i];
      s.stats[c][1][n] = l[i];
    }
  }
  named_barrier_sync(kBoth, T::kConsumers * kWarpgroupThreads);  // both walks over: the ring is free
  if (c == 0)
    hand_over<P, 0>(s, o);
  else
    hand_over<P, 1>(s, o);
  named_barrier_sync(kBoth, T::kConsumers * kWarpgroupThreads);  // both halves handed over
  // The CTA's Seq and Work again, from an opaque block index: held across the loop, ptxas
  // spilled them. (The parts finish does not read are dead code.)
  u32 bx = blockIdx.x;
  opaque(bx);
  const Seq seq = sequence(a.q, token_slot_of<1>(bx) / a.q.q_len);
  const Work w = locate_steps<1, T::kKeys, 1>(a, seq, bx);
  if (c == 0)
    finish<P, 0>(s, a, w, seq, o, m, l);
  else
    finish<P, 1>(s, a, w, seq, o, m, l);
}

// ---- entry ------------------------------------------------------------------------------

template <auto P>
__global__ void __launch_bounds__(3 * kWarpgroupThreads, 1)
    kernel(const __grid_constant__ TmaDesc q_map,  // [total_q·h, 576] bf16, box [h, 64], SW128
           const Args args) {
  using T = Traits<P>;
  static_assert(kPlanMatches<P>, "mla_decode_sparse/layout.cuh's narrow_smem_bytes is not this SharedStorage's");
  // One CTA per query token (row_tiles(h ≤ 64) = 1) and split; with merge_in_cluster a
  // token's splits are one cluster, so they all return here or none does.
  const Seq seq = sequence(args.q, token_slot_of<1>(blockIdx.x) / args.q.q_len);
  if (token_slot_of<1>(blockIdx.x) % args.q.q_len >= seq.q_len) return;  // ragged: no such token
  extern __shared__ u8 smem_raw[];
  auto& s = *reinterpret_cast<SharedStorage<P>*>(smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u));
  const Work w = locate_steps<1, T::kKeys, 1>(args, seq, blockIdx.x);
  if (threadIdx.x == 0) {
    u32 dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    if (dyn < kDynamicSmemBytes<P>) __trap();  // host and device disagree on the plan
    prefetch_tma_desc(q_map);
    mbarrier_init(&s.q_full, 1);
    for (int i = 0; i < T::kStages; ++i) {
      mbarrier_init(&s.full[i], kWarpgroupThreads);
      mbarrier_init(&s.empty[i], 4);
    }
    fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0 && w.tile_begin < w.tile_end) {
    mbarrier_arrive_expect_tx(&s.q_full, T::kQChunks * T::kChunkBytes);
    for (int ch = 0; ch < T::kQChunks; ++ch)
      tma_load_2d(q_map, &s.q_full, s.q + ch * T::kChunkBytes, ch * 64, static_cast<int>(w.token) * P.num_heads);
  }
  const int wg = warpgroup_id_uniform();
  if (wg == 0) {
    warpgroup_reg_dealloc<T::kProducerRegs>();
    producer<P>(s, args, w);
    if (args.merge_in_cluster) {  // the two cluster barriers of the consumers' finish
      cluster_sync();
      cluster_sync();
    }
  } else {
    warpgroup_reg_alloc<T::kConsumerRegs>();
    consumer<P>(s, args, w.tile_end - w.tile_begin, wg - 1);
  }
  pdl_launch_dependents();
}

}  // namespace attnjit::mla_decode_sparse::narrow
