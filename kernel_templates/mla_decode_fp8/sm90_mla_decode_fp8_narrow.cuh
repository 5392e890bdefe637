#pragma once
// sm90_mla_decode_fp8_narrow: mla_decode_fp8 with 8, 16 or 32 query rows per CTA (schedule
// 2, the default; q_len·h beyond 32 runs several row tiles per sequence). The other
// schedules put the query rows on wgmma's M, which is 64: at h = 16 three quarters of every
// tensor-core instruction is padding and the kernel is bound by that work, not by the
// cache. This one transposes the problem so the keys take M and the N = block_m query rows
// take wgmma's N (8 … 32):
//
//   Sᵀ [64 keys × N]   = K_c·Q_cᵀ (16 SS e4m3 k32 wgmmas, score_chain of them into each fresh
//                        accumulator added in f32: see the qgmma kernel on fp8 accumulation)
//                        + K_r·Q_rᵀ (4 bf16 k16, or 2 e4m3 k32 for 576-byte rows), K and Q
//                        straight from TMA;
//   y  = Sᵀ·σ_Q·scale·log2e·σ_KV + log2 σ_KV   (σ_KV's logarithm rides in the exponent);
//   P′ = e4m3(exp2(y − m + 8)) with m the running column max of y: P′ = p·σ_KV up to one
//        factor per column, its largest value 256 whatever σ's magnitude (issue 19's "P′
//        in e4m3's normal range"), l += P′·2⁻⁸/σ_KV = p;
//   Oᵀ [512 dims × N] += Vᵀ·P′ᵀ: 8 dim blocks × 2 RS e4m3 m64nNk32, Vᵀ in registers from the
//        same ring stage by ldmatrix.trans + PRMT (vt_fragment.cuh), P′ᵀ the B operand;
//   out = Oᵀ·2⁻⁸ / l, lse = (m + log2 l)·ln 2.
// Softmax runs down the columns, across the warpgroup's four warps: one shuffle butterfly
// and one exchange through shared memory per tile.
//
// Two consumer warpgroups, no producer: warpgroup w takes the CTA's tiles w, w + 2, …, each
// with its own m, l and Oᵀ; one thread of each refills the ring stage its previous tile
// freed once the next tile's column-max barrier shows every thread past it (at 2 stages
// that stage is the next tile's: refilled at the end of the tile); the
// two states merge at the end (each warpgroup writes half of the dims). Rows past a
// sequence's length: content bytes zeroed in the ring before any MMA reads them (0·NaN is
// NaN inside the MMA), σ and P′ 0 by selection. Split, schedule and epilogue contract are
// the other schedules'.
#include "mla_decode_fp8/sm90_mla_decode_fp8.cuh"  // load_q8, load_kv, init_cta, cta_item
#include "common/column_merge.cuh"  // acc_column, the two warpgroups' merge
#include "mla_decode_fp8/vt_fragment.cuh"

namespace attnjit::mla_decode_fp8::narrow {

template <auto P>
struct Traits {
  static constexpr int kConsumers = kNarrowConsumers;          // layout.cuh
  static constexpr int kThreads = kConsumers * kWarpgroupThreads;
  static constexpr int kRows = P.block_m;                       // N: query rows, wgmma N
  static constexpr int kKeys = P.block_n;                       // keys per tile, wgmma M
  static constexpr int kAcc = kRows / 2;                        // floats of one [64 × N] fragment
  static constexpr int kCols = kRows / 4;                       // distinct columns per thread
  static constexpr int kQChunkBytes = kRows * kBoxBytes;        // [N][128 B]
  static constexpr int kKChunkBytes = kKeys * kBoxBytes;        // [64][128 B]
  static constexpr int kStageBytes = kRowBoxes * kKChunkBytes;  // 4 content boxes + rope
  static constexpr int kDimBlocks = kValueDim / kWgmmaM;        // 8 blocks of Oᵀ
  static constexpr int kPBytes = kRows * kKeys;                 // P′ᵀ e4m3 [N][64]
  static_assert(P.schedule == 2, "this file is schedule 2");
  static_assert(kRows == 8 || kRows == 16 || kRows == 32, "8, 16 or 32 query rows (wgmma N)");
  static_assert(kKeys == kWgmmaM, "64-key tiles: one wgmma M of keys");
  // Tile n sits in stage n % stages and warpgroup n % 2 takes it: with an even ring each
  // stage has one warpgroup, which waits on it and refills it in order. An odd ring would
  // hand a stage between the warpgroups, and one running a lap ahead would pass a wait on
  // the previous phase of the same parity (the ABA of a parity wait), a launch failure at
  // stages 3 on the H200.
  static_assert(P.stages == 2 || P.stages == 4, "2 or 4 ring stages: even, so a stage has one warpgroup");
  static_assert(P.page_size >= 64 && (P.page_size & (P.page_size - 1)) == 0, "pages of 64..256");
  static_assert(P.score_chain >= 1 && (kContentBoxes * 4) % P.score_chain == 0, "chains that split the 16 k32 steps");
};

template <auto P>
struct SharedStorage {
  using T = Traits<P>;
  alignas(1024) u8 q8[kContentBoxes * T::kQChunkBytes];  // Q content e4m3, 4 × [N][128 B] SW128
  alignas(1024) u8 q_rope[T::kQChunkBytes];              // Q rope bf16 (or e4m3 + zeros), SW128
  alignas(1024) u8 ring[P.stages][T::kStageBytes];       // K/V e4m3 4 × [64][128 B] + rope, SW128
  alignas(128) u8 p8[T::kConsumers][T::kPBytes];         // P′ᵀ per warpgroup, PTile, vt key order
  float cq[T::kConsumers][T::kRows];                     // per column: σ_Q·scale·log2e
  float red[T::kConsumers][4][T::kRows];                 // per warp: a column max, then l
  float stats[T::kConsumers][2][T::kRows];               // each warpgroup's final m and l
  int slot;  // md::Tile::slot, read back by the epilogue: no register holds it over the walk
  MBarrier q_full;
  MBarrier kv_full[P.stages];
};

template <auto P>
inline constexpr unsigned kDynamicSmemBytes = sizeof(SharedStorage<P>) + 1024;
template <auto P>
inline constexpr bool kPlanMatches =
    kDynamicSmemBytes<P> == smem_bytes(P.block_m, P.block_n, P.stages, P.fp8_mma, P.schedule);

template <auto P>
using KTile = WgmmaKMajorTile<Swizzle::k128B, P.block_n>;  // A: keys × K bytes
template <auto P>
using QTile = WgmmaKMajorTile<Swizzle::k128B, P.block_m>;  // B: query rows × K bytes
template <auto P>
using PTile = WgmmaKMajorTile<Swizzle::kNone, P.block_m>;  // B of P·V: rows × 64 key positions

// P′ = e4m3(exp2(y − m + kHeadroom)): 256 at the column max m, exact, and e4m3 holds p·σ
// down to 2^-14 of it in its normal range. (A max allowed to lag the true one by up to
// 2.5, which skips most rescales, measured 3 % faster at h 128 and 25 % higher rel_l2: the
// largest weight is no longer exact. docs/performance.md, session 43.)
inline constexpr float kHeadroom = 8.0f;
inline constexpr float kInvHeadroom = 1.0f / 256.0f;  // 2^-kHeadroom

// Named barrier 1 + w is warpgroup w's own (128 threads); the merge uses __syncthreads.
ATTNJIT_DEVICE u32 own_barrier(int wg) { return 1u + static_cast<u32>(wg); }

// ---- per-tile pieces --------------------------------------------------------------------

// σ_KV of this thread's two keys of `tile` (16w + g and 16w + g + 8, g = lane / 4): 0 past
// the length or for a table entry that is not a page, by selection. Fetched a tile ahead.
template <auto P>
ATTNJIT_DEVICE void fetch_sigma(const Args& a, const md::Tile& t, int tile, float (&sg)[2]) {
  const int tid = thread_in_warpgroup();
  const int key0 = tile * P.block_n + 16 * (tid / 32) + (tid % 32) / 4;
  sg[0] = sg[1] = 0.0f;
  if (key0 >= t.len) return;  // key0 < len ≤ the table's capacity: the slot is in the row
  const int page = a.base.block_table[static_cast<i64>(t.batch) * a.base.max_pages + key0 / P.page_size];
  if (page < 0 || page >= a.num_pages) return;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int key = key0 + 8 * rr;  // the same page: a 64-key tile never straddles one
    if (key < t.len)
      sg[rr] = a.kv_scale[a.kv_scale_per_row ? static_cast<i64>(page) * P.page_size + key % P.page_size : 0];
  }
}

// Zeroes the content bytes of key rows [first, 64) of a ring stage (whole 128-byte lines:
// the swizzle permutes 16-byte units within a line). A fixed walk over the whole stage (16
// units a thread): no division by the row count, nothing held across the loop.
template <auto P>
ATTNJIT_DEVICE void zero_tail_rows(u8* stage, int first) {
  using T = Traits<P>;
  constexpr int kUnits = kContentBoxes * P.block_n * 8;
#pragma unroll 1
  for (int k = 0; k < kUnits / kWarpgroupThreads; ++k) {
    const int i = thread_in_warpgroup() + k * kWarpgroupThreads;
    const int unit = i % 8, row = (i / 8) % P.block_n, c = i / (8 * P.block_n);
    if (row >= first)
      *reinterpret_cast<uint4*>(stage + c * T::kKChunkBytes + row * 128 + unit * 16) = make_uint4(0, 0, 0, 0);
  }
}

// Sᵀ = K·Qᵀ for one ring stage: 16 / score_chain e4m3 content steps of score_chain k32
// wgmmas each, then the rope (bf16 k16 × 4, or e4m3 k32 × 2 for 576-byte rows), each step
// into a fresh accumulator added in f32 (fp8 wgmma adds into its accumulator with ~13
// mantissa bits: the chain's length is the error's), two in flight.
template <auto P>
ATTNJIT_DEVICE void scores(float (&acc)[Traits<P>::kAcc], u32 k_addr, u32 q8_addr, u32 qr_addr, bool rope_e4m3) {
  using T = Traits<P>;
  constexpr int kChain = P.score_chain;
  constexpr int kSteps = kContentBoxes * 4 / kChain + 1;
  // Two steps in flight: the next step's wgmma runs under this one's adds. (At N = 32 the
  // second step's 16 registers fit once the epilogue's slot is kept in shared memory.)
  constexpr int kFlight = 2;
  const u32 kr_addr = k_addr + kContentBoxes * T::kKChunkBytes;
  float part[kFlight][T::kAcc];
#pragma unroll
  for (int i = 0; i < T::kAcc; ++i) acc[i] = 0.0f;
#pragma unroll
  for (int j = 0; j < kSteps + kFlight - 1; ++j) {
    if (j < kSteps) {
      float(&d)[T::kAcc] = part[j % kFlight];
      wgmma_fence();  // d was read by the adds of step j - kFlight
      if (j < kSteps - 1) {
#pragma unroll
        for (int kk = 0; kk < kChain; ++kk) {
          const u32 kb = static_cast<u32>((j * kChain + kk) * 32);  // content byte of this k32
          wgmma_ss<DType::kE4M3, T::kRows>(d, KTile<P>::desc(k_addr, kb), QTile<P>::desc(q8_addr, kb), kk > 0);
        }
      } else if (rope_e4m3) {
#pragma unroll
        for (int kk = 0; kk < 2; ++kk)
          wgmma_ss<DType::kE4M3, T::kRows>(d, KTile<P>::desc(kr_addr, kk * 32), QTile<P>::desc(qr_addr, kk * 32),
                                           kk > 0);
      } else {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          wgmma_ss<DType::kBF16, T::kRows>(d, KTile<P>::desc(kr_addr, kk * 32), QTile<P>::desc(qr_addr, kk * 32),
                                           kk > 0);
      }
      wgmma_commit();
    }
    const int done = j - (kFlight - 1);  // the step whose result is added now
    if (done >= 0) {
      if (j < kSteps) {
        wgmma_wait<kFlight - 1>();
      } else {
        wgmma_wait<0>();
      }
      float(&d)[T::kAcc] = part[done % kFlight];
      wgmma_fence_operands(d);
#pragma unroll
      for (int i = 0; i < T::kAcc; ++i) acc[i] += d[i];
    }
  }
}

// The column max of v over the warpgroup's 64 keys: a butterfly over the 8 lanes sharing a
// column set, then the four warps through shared memory (red, one barrier).
template <auto P>
ATTNJIT_DEVICE void column_reduce_max(float (&v)[Traits<P>::kCols], float (*red)[Traits<P>::kRows], int wg) {
  const int tid = thread_in_warpgroup();
#pragma unroll
  for (int c = 0; c < Traits<P>::kCols; ++c) {
    v[c] = fmaxf(v[c], __shfl_xor_sync(0xffffffffu, v[c], 4));
    v[c] = fmaxf(v[c], __shfl_xor_sync(0xffffffffu, v[c], 8));
    v[c] = fmaxf(v[c], __shfl_xor_sync(0xffffffffu, v[c], 16));
    if (tid % 32 < 4) red[tid / 32][acc_column(tid, c)] = v[c];
  }
  named_barrier_sync(own_barrier(wg), kWarpgroupThreads);
#pragma unroll
  for (int c = 0; c < Traits<P>::kCols; ++c) {
    const int n = acc_column(tid, c);
    v[c] = fmaxf(fmaxf(red[0][n], red[1][n]), fmaxf(red[2][n], red[3][n]));
  }
}

// P′ (fragment floats) → e4m3 words in vt_fragment.cuh's key order: warp w's keys are the
// 16-key group w, whose k positions 4t..4t+3 hold keys {2t, 2t+1, 8+2t, 9+2t}. Lanes g = 2t
// and 2t+1 (lane ^ 4) hold those keys two by two; one shuffle trades a column's pair so
// the even lane writes the word of its even column and the odd lane of its odd column.
template <auto P>
ATTNJIT_DEVICE void store_p(const float (&p)[Traits<P>::kAcc], u8* p8) {
  const int tid = thread_in_warpgroup();
  const int g = (tid % 32) / 4;
  const bool odd = g % 2 != 0;
#pragma unroll
  for (int j = 0; j < Traits<P>::kRows / 8; ++j) {
    const u32 even_col = e4m3x2(p[4 * j], p[4 * j + 2]);     // keys g, g + 8 of column 8j + 2q
    const u32 odd_col = e4m3x2(p[4 * j + 1], p[4 * j + 3]);  // … of column 8j + 2q + 1
    const u32 other = __shfl_xor_sync(0xffffffffu, odd ? even_col : odd_col, 4);
    const u32 word = odd ? __byte_perm(other, odd_col, 0x5140) : __byte_perm(even_col, other, 0x5140);
    const int n = 8 * j + 2 * (tid % 4) + (odd ? 1 : 0);
    const int kpos = 16 * (tid / 32) + 4 * (g / 2);
    *reinterpret_cast<u32*>(p8 + PTile<P>::byte_offset(static_cast<u32>(n), static_cast<u32>(kpos))) = word;
  }
}

// Oᵀ += Vᵀ·P′ᵀ over one 64-key stage: per 32-key half, the 8 dim blocks' Vᵀ fragments, then
// their 8 RS wgmmas (the fragments stay live until retired). At N = 32 Oᵀ alone is 128
// registers: the second half's fragments reuse the first's after its wgmmas retire (two
// sets in flight spill there).
template <auto P>
ATTNJIT_DEVICE void accumulate_pv(float (&o)[Traits<P>::kDimBlocks][Traits<P>::kAcc], u32 v_addr, u32 p_addr) {
  using T = Traits<P>;
  constexpr int kSets = T::kRows >= 32 ? 1 : 2;
  u32 frag[kSets][T::kDimBlocks][4];
#pragma unroll
  for (int ks = 0; ks < 2; ++ks) {
    if (kSets == 1 && ks > 0) wgmma_wait<0>();
#pragma unroll
    for (int mb = 0; mb < T::kDimBlocks; ++mb)
      fp8_vt_fragment(frag[ks % kSets][mb], v_addr + (mb / 2) * T::kKChunkBytes + ks * 32 * kBoxBytes,
                      (mb % 2) * 64, true);
    wgmma_fence();
#pragma unroll
    for (int mb = 0; mb < T::kDimBlocks; ++mb)
      wgmma_rs<DType::kE4M3, T::kRows>(o[mb], frag[ks % kSets][mb], PTile<P>::desc(p_addr, 32u * ks), true);
    wgmma_commit();
  }
  wgmma_wait<0>();
#pragma unroll
  for (int mb = 0; mb < T::kDimBlocks; ++mb) wgmma_fence_operands(o[mb]);
}

// The merge's exchange area: the ring, free once both walks are over (every load was
// consumed). [source half][4 blocks][kAcc][128 threads] floats.
template <auto P>
ATTNJIT_DEVICE float* exchange(SharedStorage<P>& s) {
  return reinterpret_cast<float*>(&s.ring[0][0]);
}

// Warpgroup kHalf hands the other the Oᵀ blocks of the other's half (dims 256·(1 − kHalf) ..).
template <auto P, int kHalf>
ATTNJIT_DEVICE void hand_over(SharedStorage<P>& s, const float (&o)[Traits<P>::kDimBlocks][Traits<P>::kAcc]) {
  hand_over_half<Traits<P>::kAcc, kHalf>(exchange(s), o);
}

// The merge and warpgroup kHalf's half of the output (dims 256·kHalf ..), after both
// hand_overs.
template <auto P, int kHalf>
ATTNJIT_DEVICE void finish(SharedStorage<P>& s, const Args& a, const md::Tile& walked,
                           float (&o)[Traits<P>::kDimBlocks][Traits<P>::kAcc], const float (&m)[Traits<P>::kCols],
                           const float (&l)[Traits<P>::kCols]) {
  using T = Traits<P>;
  constexpr int kMine = 4 * kHalf;
  const int tid = thread_in_warpgroup(), warp = tid / 32, g = (tid % 32) / 4;
  md::Tile t = walked;
  t.slot = s.slot;  // (walked's slot is dead since the walk began)
  float l_all[T::kCols], m_all[T::kCols];
  merge_half<T::kAcc, kHalf>(exchange(s), o, m, l, s.stats[1 - kHalf][0], s.stats[1 - kHalf][1], m_all, l_all);

  // out[row n][dim] = Oᵀ[dim][n]·2⁻⁸/l: A rows g and g+8 of a block are dims 2g and 2g+1
  // (vt_fragment.cuh), accumulators i and i + 2 of one column: one bf16x2 (or float2).
  const layout::mla_decode::Args& b = a.base;
  const int rows_b = t.seq.q_len * P.num_heads;
  const EpilogueRows rows = epilogue_rows<P>(b, t);
#pragma unroll
  for (int c = 0; c < T::kCols; ++c) {
    const int n = acc_column(tid, c);
    if (t.row0 + n >= rows_b) continue;
    const float inv_l = l_all[c] > 0.0f ? kInvHeadroom / l_all[c] : 0.0f;
    const i64 base = (rows.row0 + n) * kValueDim + 16 * warp + 2 * g;
    const int i0 = 4 * (c / 2) + c % 2;  // column c's accumulators: rows g (i0) and g + 8 (i0 + 2)
#pragma unroll
    for (int blk = 0; blk < 4; ++blk) {
      const i64 at = base + 64 * (kMine + blk);
      const float lo = o[kMine + blk][i0] * inv_l, hi = o[kMine + blk][i0 + 2] * inv_l;
      if (!rows.partial)
        static_cast<u32*>(b.out)[at / 2] = pack2<DType::kBF16>(lo, hi);
      else
        *reinterpret_cast<float2*>(b.part_out + at) = make_float2(lo, hi);
    }
    if (kHalf == 0 && warp == 0 && g == 0)  // one thread per column writes its lse
      store_lse<P>(b, t, rows, n, l_all[c] > 0.0f ? (m_all[c] + __log2f(l_all[c])) * kLn2 : neg_inf());
  }
}

// ---- the consumer role ----------------------------------------------------------------------

// Warpgroup wg's walk over the CTA's tiles wg, wg + 2, …, then its final m and l, the merge
// and its half of the output.
template <auto P>
ATTNJIT_DEVICE void consumer(SharedStorage<P>& s, const TmaDesc& kv_map, const TmaDesc& rope_map, const Args& a,
                             const md::Tile& t, int wg) {
  using T = Traits<P>;
  const int tid = thread_in_warpgroup(), warp = tid / 32, g = (tid % 32) / 4;
  const int rows_b = t.seq.q_len * P.num_heads;
  // cq per column: σ_Q·scale·log2e, in shared memory (registers are what N = 32 lacks).
  // Columns past the sequence's rows keep cq = 0 and finite values; they are never written,
  // and a column of Oᵀ depends on its own column of P′ only.
  if (tid < T::kRows) {
    const int gr = t.row0 + tid;
    s.cq[wg][tid] = gr < rows_b ? a.q_scale[q_scale_index(a.q_scale_mode, t.seq.start + gr / P.num_heads,
                                                           gr % P.num_heads, P.num_heads)] *
                                      a.base.scale_log2
                                : 0.0f;
  }
  named_barrier_sync(own_barrier(wg), kWarpgroupThreads);
  float m[T::kCols], l[T::kCols];  // per column: the running max of y, Σp
#pragma unroll
  for (int c = 0; c < T::kCols; ++c) {
    m[c] = neg_inf();
    l[c] = 0.0f;
  }
  float o[T::kDimBlocks][T::kAcc];
#pragma unroll
  for (int mb = 0; mb < T::kDimBlocks; ++mb)
#pragma unroll
    for (int i = 0; i < T::kAcc; ++i) o[mb][i] = 0.0f;

  const int count = t.tile_end - t.tile_begin;
  if (wg < count) mbarrier_wait(&s.q_full, 0);
  const u32 q8_addr = smem_u32(s.q8), qr_addr = smem_u32(s.q_rope), p_addr = smem_u32(s.p8[wg]);
  float sg_next[2] = {0.0f, 0.0f};
  if (wg < count) fetch_sigma<P>(a, t, t.tile_begin + wg, sg_next);
  for (int n = wg; n < count; n += T::kConsumers) {
    const int tile = t.tile_begin + n, st = n % P.stages;
    const float sg[2] = {sg_next[0], sg_next[1]};
    if (n + T::kConsumers < count) fetch_sigma<P>(a, t, tile + T::kConsumers, sg_next);
    mbarrier_wait(&s.kv_full[st], static_cast<u32>(n / P.stages) & 1u);
    const int valid = t.len - tile * P.block_n;
    if (valid < P.block_n) {
      zero_tail_rows<P>(s.ring[st], valid);
      fence_proxy_async_smem();  // the zeros are read by wgmma
      named_barrier_sync(own_barrier(wg), kWarpgroupThreads);
    }
    const u32 stage_addr = smem_u32(s.ring[st]);
    float acc[T::kAcc];  // Sᵀ, then y, then P′
    scores<P>(acc, stage_addr, q8_addr, qr_addr, a.rope_e4m3 != 0);

    // y = S·cq·σ + log2 σ on visible keys, -inf elsewhere (by selection: NaN rope past L).
    const int key0 = tile * P.block_n + 16 * warp + g;
    float lg[2], inv[2];
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const bool ok = sg[rr] > 0.0f;  // 0 past the length (fetch_sigma), NaN fails too
      lg[rr] = ok ? __log2f(sg[rr]) : neg_inf();
      inv[rr] = ok ? kInvHeadroom / sg[rr] : 0.0f;
    }
    float cmax[T::kCols];
#pragma unroll
    for (int c = 0; c < T::kCols; ++c) cmax[c] = neg_inf();
    const auto to_y = [&](bool causal) {  // inlined twice, once a constant each way
#pragma unroll
      for (int i = 0; i < T::kAcc; ++i) {
        const int c = acc_col_of(i), rr = (i / 2) % 2;
        // σ is 0 past the length; with q_len > 1 query token j sees keys < len − q_len + j + 1
        // (recomputed here: a per-column limit array costs the registers N = 32 lacks).
        const bool causal_ok =
            !causal || key0 + 8 * rr <= t.len - t.seq.q_len + (t.row0 + acc_column(tid, c)) / P.num_heads;
        const bool vis = causal_ok && sg[rr] > 0.0f;
        acc[i] = vis ? acc[i] * s.cq[wg][acc_column(tid, c)] * sg[rr] + lg[rr] : neg_inf();
        cmax[c] = fmaxf(cmax[c], acc[i]);
      }
    };
    // A tile every query token sees whole (its last key at or before token 0's limit, as all
    // but the last tiles of a sequence) skips the per-element causal test.
    if (P.max_q_len == 1 || (tile + 1) * P.block_n <= t.len - t.seq.q_len + 1)
      to_y(false);
    else
      to_y(true);
    column_reduce_max<P>(cmax, s.red[wg], wg);
    // Every thread of this warpgroup is past the previous tile's P·V: refill its stage.
    if (P.stages == 4 && tid == 0 && n >= T::kConsumers && n - T::kConsumers + P.stages < count)
      load_kv<P>(s, kv_map, rope_map, a, t.batch, tile - T::kConsumers + P.stages, n - T::kConsumers + P.stages);
    // A column's rescale factor is 1 unless its max grew; a tile where no column's did (every
    // warp holds all N columns, so the vote is the same in all four) skips Oᵀ's rescale,
    // 16·N / 4 multiplies a thread.
    bool grew = false;
#pragma unroll
    for (int c = 0; c < T::kCols; ++c) grew = grew || cmax[c] > m[c];
    if (__any_sync(0xffffffffu, grew)) {
      float alpha[T::kCols];
#pragma unroll
      for (int c = 0; c < T::kCols; ++c) {
        const bool up = cmax[c] > m[c];  // m = -inf: any visible key
        alpha[c] = up ? exp2f(m[c] - cmax[c]) : 1.0f;
        m[c] = up ? cmax[c] : m[c];
        l[c] *= alpha[c];
      }
#pragma unroll
      for (int mb = 0; mb < T::kDimBlocks; ++mb)
#pragma unroll
        for (int i = 0; i < T::kAcc; ++i) o[mb][i] *= alpha[acc_col_of(i)];
    }
#pragma unroll
    for (int i = 0; i < T::kAcc; ++i) {
      const int c = acc_col_of(i), rr = (i / 2) % 2;
      const float shift = (m[c] == neg_inf() ? 0.0f : m[c]) - kHeadroom;  // no visible key yet: p = 0
      const float p = exp2f(acc[i] - shift);
      l[c] += p * inv[rr];
      acc[i] = p;
    }
    store_p<P>(acc, s.p8[wg]);
    fence_proxy_async_smem();  // P′ is read by wgmma
    named_barrier_sync(own_barrier(wg), kWarpgroupThreads);
    accumulate_pv<P>(o, stage_addr, p_addr);
    if (P.stages == 2) {  // the next tile is this stage's: refill it now, once all are done
      named_barrier_sync(own_barrier(wg), kWarpgroupThreads);
      if (tid == 0 && n + P.stages < count) load_kv<P>(s, kv_map, rope_map, a, t.batch, tile + P.stages, n + P.stages);
    }
  }

  // l over the warpgroup (lanes, then warps); this warpgroup's final m and l to smem.
#pragma unroll
  for (int c = 0; c < T::kCols; ++c) {
    l[c] += __shfl_xor_sync(0xffffffffu, l[c], 4);
    l[c] += __shfl_xor_sync(0xffffffffu, l[c], 8);
    l[c] += __shfl_xor_sync(0xffffffffu, l[c], 16);
    if (tid % 32 < 4) s.red[wg][warp][acc_column(tid, c)] = l[c];
  }
  named_barrier_sync(own_barrier(wg), kWarpgroupThreads);
#pragma unroll
  for (int c = 0; c < T::kCols; ++c) {
    const int n = acc_column(tid, c);
    l[c] = (s.red[wg][0][n] + s.red[wg][1][n]) + (s.red[wg][2][n] + s.red[wg][3][n]);
    if (tid < 4) {
      s.stats[wg][0][n] = m[c];
      s.stats[wg][1][n] = l[c];
    }
  }
  // The merge: whole-CTA barriers in the code both warpgroups run (inside hand_over<0> /
  // <1> each would be its own instruction).
  __syncthreads();  // both walks over: the ring is free
  if (wg == 0)
    hand_over<P, 0>(s, o);
  else
    hand_over<P, 1>(s, o);
  __syncthreads();  // both halves handed over, stats written
  if (wg == 0)
    finish<P, 0>(s, a, t, o, m, l);
  else
    finish<P, 1>(s, a, t, o, m, l);
}

// ---- entry ------------------------------------------------------------------------------

template <auto P>
__global__ void __launch_bounds__(Traits<P>::kThreads, 1)
    kernel(const __grid_constant__ TmaDesc q_map,     // u8 [total_q·h, 640 | 576], box [N, 128 B], SW128
           const __grid_constant__ TmaDesc kv_map,    // u8 [pages·page_size, 640 | 576 | 512], box [64, 128 B], SW128
           const __grid_constant__ TmaDesc rope_map,  // kv_map, or u8 [pages·page_size, 128], SW128
           const Args args) {
  static_assert(kPlanMatches<P>, "mla_decode_fp8/layout.cuh's smem_bytes is not this SharedStorage's");
  const int item = cta_item(args.base);
  if (item < 0) return;
  extern __shared__ u8 smem_raw[];
  // Aligned by an offset from smem_raw, not through an integer: the compiler keeps the
  // shared state space and emits LDS/STS (a u64 round trip makes every access generic).
  auto& s = *reinterpret_cast<SharedStorage<P>*>(smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u));
  init_cta<kDynamicSmemBytes<P>, P.stages>(s, q_map, kv_map, rope_map);
  const md::Tile t = md::locate<P>(args.base, item);
  if (threadIdx.x == 0) s.slot = t.slot;  // read after the merge's barriers
  if (threadIdx.x == 0 && t.tile_begin < t.tile_end) {
    load_q8<P>(s, q_map, t);
    for (int i = 0; i < P.stages && t.tile_begin + i < t.tile_end; ++i)
      load_kv<P>(s, kv_map, rope_map, args, t.batch, t.tile_begin + i, i);
  }
  consumer<P>(s, kv_map, rope_map, args, t, warpgroup_id_uniform());
  pdl_launch_dependents();
}

}  // namespace attnjit::mla_decode_fp8::narrow
