#pragma once
// sm90_mla_decode_fp8: MLA decode over an fp8 (e4m3) latent cache with per-row scales, rope
// in bf16 — first version: the fp8 rows are widened to bf16 in shared memory and the bf16
// wgmma structure of mla_decode's softmax_wg schedule (sm90_mla_decode.cuh) runs on them.
//
// One CTA = 64 packed query rows (q_idx·h + head) of one sequence over one piece of its
// 32-key tiles. Three warpgroups (384 threads):
//   softmax (WG0)  widens each fp8 tile from the TMA ring into a bf16 K/V tile (exact:
//                  every e4m3 value is a bf16), reads σ_KV of its keys, S = Q·Kᵀ (bf16),
//                  x = S·σ_Q·σ_KV·scale·log2e, online softmax on x, P′ = p·σ_KV (bf16: its
//                  exponent range holds any σ, so no renormalization) to shared memory;
//   PV (WG1, WG2)  O[:, half] = O·scale + P′ · V[:, half], V = the widened content.
// Q is widened once (content exact, rope as given: both already in "dot" units), so
// S = q_c·k_c + q_r·k_r exactly in f32 and the scales enter as f32 factors.
// Rows past a sequence's length are written as zeros into the bf16 tile and their σ is 0,
// by selection: the fp8 codes there (NaN included) are never read into a product.
//
// Why a bf16 P·V and not the fp8 one of docs (Oᵀ = Vᵀ·P′ᵀ): this is the correct baseline;
// the fp8 path replaces widen_kv and both GEMMs, the schedule, the split and the epilogue
// stay. The widening costs the softmax warpgroup ~2 conversions per element.
#include "common/arch.cuh"
#include "common/fence.cuh"
#include "common/mbarrier.cuh"
#include "common/named_barrier.cuh"
#include "common/numeric.cuh"
#include "common/tma.cuh"
#include "common/types.cuh"
#include "common/warpgroup.cuh"
#include "common/wgmma.cuh"
#include "mla_decode/common.cuh"
#include "mla_decode/sm90_mla_decode.cuh"  // RowState
#include "mla_decode_fp8/e4m3.cuh"
#include "mla_decode_fp8/layout.cuh"

namespace attnjit::mla_decode_fp8 {

namespace md = attnjit::mla_decode;

// The schedule's item this CTA runs, or -1: none. These kernels run one piece per CTA (the
// balance kernel's pieces form, launch_balance's packable false), so a CTA's run of items
// holds at most one; static splits read item 0 (unused).
ATTNJIT_DEVICE int cta_item(const layout::mla_decode::Args& a) {
  const md::Items its = md::cta_items(a);
  return its.begin < its.end ? its.begin : -1;
}
using namespace attnjit::layout::mla_decode_fp8;

// P is the config's template fields (mla_decode_fp8_config.def): P.num_heads, P.max_q_len,
// P.page_size, P.block_m, P.block_n, P.stages — the names mla_decode's locate() reads.
template <auto P>
struct Traits {
  static constexpr int kThreads = 3 * kWarpgroupThreads;
  static constexpr int kChunks = 9;                          // bf16 tile: 9 × 64 dims
  static constexpr int kChunkBytes = P.block_n * 128;        // [block_n][128 B], 128B-swizzled
  static constexpr int kTileBytes = kChunks * kChunkBytes;   // 36 KiB at 32 keys
  static constexpr int kQChunkBytes = P.block_m * 128;
  static constexpr int kQBytes = kChunks * kQChunkBytes;     // 72 KiB
  static constexpr int kBoxRowsQ = P.block_m;                // fp8 staging: kRowBoxes × [rows][128 B]
  static constexpr int kRingBytes = kRowBoxes * P.block_n * kBoxBytes;  // 20 KiB at 32 keys
  static constexpr int kPBytes = P.block_m * P.block_n * 2;  // P′ [64][block_n] bf16, SW64
  static constexpr int kUnitsPerRow = kContentBytes / 8 + kRopeBytes / 16;  // 64 + 8
  static constexpr int kHalfCols = kValueDim / 2;

  static_assert(P.block_m == kWgmmaM, "one wgmma M of query rows");
  static_assert(P.block_n == 32, "32-key tiles: a P′ row is one 64-byte swizzle span");
  static_assert(P.stages >= 2 && P.stages <= 3, "2..3 fp8 stages");
  static_assert(P.fp8_mma == 0, "this file is the widening schedule");
  static_assert(P.page_size >= 64 && P.page_size <= 256 && (P.page_size & (P.page_size - 1)) == 0,
                "page size is a power of two in 64..256 (a tile never straddles pages)");
  static_assert(P.num_heads >= 1 && P.num_heads <= 128 && P.max_q_len >= 1 && P.max_q_len <= 8,
                "h 1..128, q_len 1..8");
};

// Named barriers (id 0 is __syncthreads). 1..3 as in mla_decode's softmax_wg schedule.
enum class Bar : u32 {
  kPFree = 1,    // both PV warpgroups are done with P′, the row scales and bf16 tile i-1
  kPReady = 2,   // WG0 wrote P′ and the row scales of this tile (and its bf16 tile)
  kStats = 3,    // WG0 wrote the final row max / sum
  kWidened = 4,  // WG0 (128 threads): a widened tile is complete, its fp8 stage is read
};

template <auto P>
struct SharedStorage {
  using T = Traits<P>;
  alignas(1024) u8 q[T::kQBytes];              // Q bf16 [64][576] as 9 chunks, SW128
  alignas(1024) u8 kv[2][T::kTileBytes];       // K/V bf16 [32][576] as 9 chunks, SW128;
                                               // before tile 0: Q's fp8 staging
  alignas(1024) u8 ring[P.stages][T::kRingBytes];  // fp8 rows: 5 × [32][128 B], unswizzled
  alignas(1024) u8 p[T::kPBytes];              // P′ [64][32] bf16, SW64 (wgmma A, K-major)
  float sigma[2][P.block_n];                   // σ_KV of bf16 tile kv[i % 2] (0 past L)
  float row_scale[P.block_m];
  float row_max[P.block_m];
  float row_sum[P.block_m];
  MBarrier q_full;
  MBarrier kv_full[P.stages];
};

template <auto P>
inline constexpr unsigned kDynamicSmemBytes = sizeof(SharedStorage<P>) + 1024;
template <auto P>
inline constexpr bool kPlanMatches =
    kDynamicSmemBytes<P> == smem_bytes(P.block_m, P.block_n, P.stages, 0);

template <auto P>
using QTile = WgmmaKMajorTile<Swizzle::k128B, P.block_m>;
template <auto P>
using KTile = WgmmaKMajorTile<Swizzle::k128B, P.block_n>;
template <auto P>
using PTile = WgmmaKMajorTile<Swizzle::k64B, P.block_m>;
template <auto P>
using VTile = WgmmaMNMajorTile<Swizzle::k128B, P.block_n>;


// ---- TMA issue (thread 0) ---------------------------------------------------------------

// Q's 640-byte rows of this tile into the staging area (over kv[0..1]).
template <auto P>
ATTNJIT_DEVICE void load_q(SharedStorage<P>& s, const TmaDesc& q_map, const md::Tile& t) {
  using T = Traits<P>;
  const int q_row = t.seq.start * P.num_heads + t.row0;
  mbarrier_arrive_expect_tx(&s.q_full, kRowBoxes * T::kBoxRowsQ * kBoxBytes);
  for (int c = 0; c < kRowBoxes; ++c)
    tma_load_2d(q_map, &s.q_full, &s.kv[0][0] + c * T::kBoxRowsQ * kBoxBytes, c * kBoxBytes, q_row);
}

// Q's rows for the fp8 wgmma kernels (fp8_mma 1 and the narrow schedule): the 4 content
// boxes into q8 and the rope box into q_rope, each [block_m][128 B] (128B-swizzled maps).
template <auto P, class Storage>
ATTNJIT_DEVICE void load_q8(Storage& s, const TmaDesc& q_map, const md::Tile& t) {
  constexpr u32 kChunkBytes = P.block_m * kBoxBytes;
  static_assert(sizeof(s.q_rope) == kChunkBytes && sizeof(s.q8) == kContentBoxes * kChunkBytes,
                "q8: 4 content boxes, q_rope: one box, of block_m rows each");
  const int q_row = t.seq.start * P.num_heads + t.row0;
  mbarrier_arrive_expect_tx(&s.q_full, kRowBoxes * kChunkBytes);
  for (int c = 0; c < kContentBoxes; ++c)
    tma_load_2d(q_map, &s.q_full, s.q8 + c * kChunkBytes, c * kBoxBytes, q_row);
  tma_load_2d(q_map, &s.q_full, s.q_rope, kContentBytes, q_row);
}

// fp8 tile `tile` of sequence `batch` into ring stage i % stages: 4 content boxes from the
// kv map, the rope box from the rope map (the same map at column 512 for 640-byte rows).
// Both schedules' Storage: ring[stages][kRowBoxes · block_n · 128 B] and kv_full[stages].
template <auto P, class Storage>
ATTNJIT_DEVICE void load_kv(Storage& s, const TmaDesc& kv_map, const TmaDesc& rope_map,
                            const Args& a, int batch, int tile, int i) {
  constexpr u32 kStageBytes = kRowBoxes * P.block_n * kBoxBytes;
  static_assert(sizeof(s.ring[0]) == kStageBytes, "a ring stage is the 5 boxes of one tile");
  const int st = i % P.stages;
  const int* table = a.base.block_table + static_cast<i64>(batch) * a.base.max_pages;
  mbarrier_arrive_expect_tx(&s.kv_full[st], kStageBytes);
  const int token = tile * P.block_n;
  const int slot = token / P.page_size;
  // A slot past the table loads a fully out-of-bounds box: zeros, bytes still counted.
  const int page = slot < a.base.max_pages ? table[slot] : -1;
  const int row = page * P.page_size + token % P.page_size;
  for (int c = 0; c < kContentBoxes; ++c)
    tma_load_2d(kv_map, &s.kv_full[st], s.ring[st] + c * P.block_n * kBoxBytes, c * kBoxBytes, row,
                CacheHint::kEvictFirst);
  tma_load_2d(rope_map, &s.kv_full[st], s.ring[st] + kContentBoxes * P.block_n * kBoxBytes,
              a.rope_col, row, CacheHint::kEvictFirst);
}

// ---- the fp8 wgmma kernels' epilogue rows (fp8_mma 1 and the narrow schedule) ----------

// Where a tile's rows go: out / lse (a whole sequence) or its partial slot.
struct EpilogueRows {
  bool partial;
  i64 row0;  // packed row of the tile's first row in out or part_out
};
template <auto P>
ATTNJIT_DEVICE EpilogueRows epilogue_rows(const layout::mla_decode::Args& b, const md::Tile& t) {
  const bool partial = t.slot >= 0;
  return {partial, partial ? static_cast<i64>(t.slot) * b.q.q_len * P.num_heads + t.row0
                           : static_cast<i64>(t.seq.start) * P.num_heads + t.row0};
}

// The lse of the tile's row n (natural log), to lse when wanted or to its partial slot.
template <auto P>
ATTNJIT_DEVICE void store_lse(const layout::mla_decode::Args& b, const md::Tile& t, const EpilogueRows& r, int n,
                              float lse) {
  if (r.partial) {
    b.part_lse[r.row0 + n] = lse;
  } else if (b.lse != nullptr) {
    const int gr = t.row0 + n;
    b.lse[md::lse_index(b.q, t.batch, t.seq, P.num_heads, gr % P.num_heads, gr / P.num_heads)] = lse;
  }
}

// ---- widening (WG0) -----------------------------------------------------------------------

// Staged rows (kRowBoxes × [kRows][128 B]) → a bf16 tile (9 × [kRows][128 B], SW128). Rows
// >= `valid` are written as zeros without reading their bytes. One 8-byte content unit or
// one rope unit (16 bf16 bytes, or 8 e4m3 bytes of a 576-byte row) per step; consecutive
// threads take consecutive units of a row.
template <int kRows>
ATTNJIT_DEVICE void widen(const u8* staged, u8* tile, int valid, bool rope_e4m3) {
  constexpr int kUnits = kContentBytes / 8 + kRopeBytes / 16;
  const u8* rope = staged + kContentBoxes * kRows * kBoxBytes;
  // Rolled: unrolled, its addresses stay live next to S and ptxas spills under the
  // 168-register cap of 384 threads.
#pragma unroll 1
  for (int i = thread_in_warpgroup(); i < kRows * kUnits; i += kWarpgroupThreads) {
    const int row = i / kUnits, k = i % kUnits;
    uint4 v = make_uint4(0, 0, 0, 0);
    u32 dst;  // byte offset in the bf16 tile before the swizzle
    if (k < kContentBytes / 8) {  // dims 8k .. 8k+7
      dst = (k / 8) * kRows * 128 + row * 128 + (k % 8) * 16;
      if (row < valid)
        v = widen8(*reinterpret_cast<const uint2*>(staged + (k / 16) * kRows * kBoxBytes +
                                                   row * kBoxBytes + (k % 16) * 8));
    } else {  // rope dims 8j .. 8j+7
      const int j = k - kContentBytes / 8;
      dst = 8 * kRows * 128 + row * 128 + j * 16;
      if (row < valid)
        v = rope_e4m3 ? widen8(*reinterpret_cast<const uint2*>(rope + row * kBoxBytes + j * 8))
                      : *reinterpret_cast<const uint4*>(rope + row * kBoxBytes + j * 16);
    }
    *reinterpret_cast<uint4*>(tile + swizzle_byte_offset<Swizzle::k128B>(dst)) = v;
  }
}

// c_row = σ_Q · scale · log2(e) for this thread's two accumulator rows (0 for padding rows):
// σ_Q per token, per token and head, or one for all (q_scale_mode).
template <auto P>
ATTNJIT_DEVICE void row_q_factors(const Args& a, const md::Tile& t, int tid, float (&c_row)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int gr = t.row0 + wgmma_acc_coord(tid, 2 * r).row;
    const i64 idx = q_scale_index(a.q_scale_mode, t.seq.start + gr / P.num_heads, gr % P.num_heads,
                                  P.num_heads);
    c_row[r] = gr < t.seq.q_len * P.num_heads ? a.q_scale[idx] * a.base.scale_log2 : 0.0f;
  }
}

// σ_KV of key tid of a tile, for threads tid < block_n (0 past the length, or for a table
// entry that is not a page: by selection, so a NaN or Inf there never enters). Fetched a
// tile ahead into a register and stored to shared memory after the tile's TMA wait: its two
// dependent global loads (table, then scale) held warp 0, and with it the warpgroup's next
// barrier, for a quarter of the fp8 kernel's softmax time when fetched per tile (ncu).
template <auto P>
ATTNJIT_DEVICE float fetch_sigma(const Args& a, int batch, int tile, int len) {
  const int tid = thread_in_warpgroup();
  const int key = tile * P.block_n + tid;
  float v = 0.0f;
  if (tid < P.block_n && key < len) {
    const int page = a.base.block_table[static_cast<i64>(batch) * a.base.max_pages + key / P.page_size];
    if (page >= 0 && page < a.num_pages)
      v = a.kv_scale[a.kv_scale_per_row ? static_cast<i64>(page) * P.page_size + key % P.page_size : 0];
  }
  return v;
}
template <auto P>
ATTNJIT_DEVICE void store_sigma(float* sigma, float v) {
  if (thread_in_warpgroup() < P.block_n) sigma[thread_in_warpgroup()] = v;
}

// Writes one PV warpgroup's O[64 × 256] (columns half·256 + 0..256) normalized by l: bf16
// out and lse, or (a piece of a cut sequence) the f32 partial and its lse, which
// mla_decode's combine merges. mla_decode's write_output does the same for any dtype; this
// one addresses from one pointer per row (thread t's pairs are u32 / float2 units
// 4j + t % 4), which keeps it under the 168-register cap next to this kernel's roles.
template <auto P>
ATTNJIT_DEVICE void write_output(const float (&o)[kValueDim / 4], int half, const Args& a,
                                 const md::Tile& t, const float (&m)[2], const float (&l)[2]) {
  const layout::mla_decode::Args& b = a.base;
  const int tid = thread_in_warpgroup();
  const int rows_b = t.seq.q_len * P.num_heads;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int gr = t.row0 + wgmma_acc_coord(tid, 2 * r).row;  // packed row = q_idx·h + head
    if (gr >= rows_b) continue;
    const bool empty = !(l[r] > 0.0f);
    const float inv = empty ? 0.0f : 1.0f / l[r];
    const float lse = empty ? neg_inf() : (m[r] + __log2f(l[r])) * kLn2;
    if (t.slot < 0) {
      u32* out = static_cast<u32*>(b.out) +
                 ((static_cast<i64>(t.seq.start) * P.num_heads + gr) * kValueDim + half * 256) / 2 + tid % 4;
#pragma unroll
      for (int j = 0; j < 32; ++j) out[4 * j] = pack2<DType::kBF16>(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
      if (b.lse != nullptr && half == 0 && tid % 4 == 0)
        b.lse[md::lse_index(b.q, t.batch, t.seq, P.num_heads, gr % P.num_heads, gr / P.num_heads)] = lse;
    } else {
      const i64 prow = static_cast<i64>(t.slot) * b.q.q_len * P.num_heads + gr;
      float2* out = reinterpret_cast<float2*>(b.part_out + prow * kValueDim + half * 256) + tid % 4;
#pragma unroll
      for (int j = 0; j < 32; ++j) out[4 * j] = make_float2(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
      if (half == 0 && tid % 4 == 0) b.part_lse[prow] = lse;
    }
  }
}

// ---- roles ----------------------------------------------------------------------------------

// WG0: widen, S = Q·Kᵀ, scaled online softmax, P′ = p·σ_KV and the row scales to smem.
template <auto P>
ATTNJIT_DEVICE void softmax_warpgroup(SharedStorage<P>& s, const TmaDesc& kv_map,
                                      const TmaDesc& rope_map, const Args& a, const md::Tile& t) {
  using T = Traits<P>;
  const int tid = thread_in_warpgroup();
  float sc[P.block_n / 2];  // S, then x, then P′: [64 × 32] accumulator fragment
  md::RowState rs{{neg_inf(), neg_inf()}, {0.0f, 0.0f}};
  int limit[2];
  md::row_limits<P>(t, limit);
  float c_row[2];
  row_q_factors<P>(a, t, tid, c_row);
  if (t.tile_begin < t.tile_end) {  // no tile: no Q was loaded; the stats below are empty
    mbarrier_wait(&s.q_full, 0);
    widen<P.block_m>(&s.kv[0][0], s.q, P.block_m, a.rope_e4m3);
    named_barrier_sync(Bar::kWidened, kWarpgroupThreads);  // staging read before tile 0 lands on it
  }
  const u32 q_addr = smem_u32(s.q);
  float sigma_next = t.tile_begin < t.tile_end ? fetch_sigma<P>(a, t.batch, t.tile_begin, t.len) : 0.0f;
  for (int tile = t.tile_begin, i = 0; tile < t.tile_end; ++tile, ++i) {
    const int st = i % P.stages, buf = i % 2;
    const int valid = t.len - tile * P.block_n;  // keys of this tile inside the sequence
    // kv[buf] is free: the PV warpgroups finished tile i-2 before WG0 passed kPFree at i-1.
    const float sigma = sigma_next;  // fetched a tile ahead: the loads' latency is hidden
    if (tile + 1 < t.tile_end) sigma_next = fetch_sigma<P>(a, t.batch, tile + 1, t.len);
    mbarrier_wait(&s.kv_full[st], static_cast<u32>(i / P.stages) & 1u);
    widen<P.block_n>(s.ring[st], s.kv[buf], valid, a.rope_e4m3);
    store_sigma<P>(s.sigma[buf], sigma);
    fence_proxy_async_smem();  // the widened tile is read by wgmma (async proxy)
    named_barrier_sync(Bar::kWidened, kWarpgroupThreads);
    if (tid == 0 && tile + P.stages < t.tile_end)  // stage st is read: refill it
      load_kv<P>(s, kv_map, rope_map, a, t.batch, tile + P.stages, i + P.stages);
    const u32 k_addr = smem_u32(s.kv[buf]);

    // S[64 × 32] = Q[64 × 576] · K[32 × 576]ᵀ: 9 chunks × 4 k16 steps, unrolled.
    wgmma_fence();
#pragma unroll
    for (int c = 0; c < T::kChunks; ++c) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const u32 k_byte = static_cast<u32>(c * 128 + kk * 32);
        wgmma_ss<DType::kBF16, P.block_n>(sc, QTile<P>::desc(q_addr, k_byte),
                                          KTile<P>::desc(k_addr, k_byte), c > 0 || kk > 0);
      }
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(sc);

    // x = S·c_row·σ_KV, masked by replacement; the row max is taken on x (σ varies by key).
    const int key0 = tile * P.block_n;
    float tile_max[2] = {neg_inf(), neg_inf()};
#pragma unroll
    for (int i2 = 0; i2 < P.block_n / 2; ++i2) {
      const int r = (i2 / 2) % 2;
      const int col = wgmma_acc_coord(tid, i2).col;
      const float x = key0 + col <= limit[r] ? sc[i2] * c_row[r] * s.sigma[buf][col] : neg_inf();
      sc[i2] = x;
      tile_max[r] = fmaxf(tile_max[r], x);
    }
    float scale[2];
    md::update_row_max(rs, tile_max, scale);
    // p counts in l; P′ = p·σ_KV goes to P·V (the dequantization of V, folded into P).
#pragma unroll
    for (int i2 = 0; i2 < P.block_n / 2; ++i2) {
      const int r = (i2 / 2) % 2;
      const float p = rs.m[r] == neg_inf() ? 0.0f : exp2f(sc[i2] - rs.m[r]);
      rs.l[r] += p;
      sc[i2] = p * s.sigma[buf][wgmma_acc_coord(tid, i2).col];
    }

    named_barrier_sync(Bar::kPFree, 3 * kWarpgroupThreads);
#pragma unroll
    for (int i2 = 0; i2 < P.block_n / 2; i2 += 2) {
      const WgmmaCoord c = wgmma_acc_coord(tid, i2);
      *reinterpret_cast<u32*>(s.p + PTile<P>::byte_offset(c.row, c.col * 2)) =
          pack2<DType::kBF16>(sc[i2], sc[i2 + 1]);
    }
    if (tid % 4 == 0) {
      s.row_scale[wgmma_acc_coord(tid, 0).row] = scale[0];
      s.row_scale[wgmma_acc_coord(tid, 2).row] = scale[1];
    }
    fence_proxy_async_smem();
    named_barrier_arrive(Bar::kPReady, 3 * kWarpgroupThreads);
  }

  md::store_row_stats(rs, s.row_max, s.row_sum, tid);
  named_barrier_arrive(Bar::kStats, 3 * kWarpgroupThreads);
}

// WG1 / WG2: O[:, half·256 + 0..256) = O·scale + P′ · V[:, same columns] (bf16 tile i % 2).
template <auto P>
ATTNJIT_DEVICE void pv_warpgroup(SharedStorage<P>& s, const Args& a, const md::Tile& t, int half) {
  using T = Traits<P>;
  const int tid = thread_in_warpgroup();
  float o[T::kHalfCols / 2];  // O[64 × 256] f32 accumulator fragment
#pragma unroll
  for (int i = 0; i < T::kHalfCols / 2; ++i) o[i] = 0.0f;
  const u32 p_addr = smem_u32(s.p);
  const u32 v_col_byte = static_cast<u32>(half * T::kHalfCols * 2);
  for (int tile = t.tile_begin, i = 0; tile < t.tile_end; ++tile, ++i) {
    if (i == 0) named_barrier_arrive(Bar::kPFree, 3 * kWarpgroupThreads);  // P′ starts free
    named_barrier_sync(Bar::kPReady, 3 * kWarpgroupThreads);
    const u32 v_addr = smem_u32(s.kv[i % 2]);
    const float scale0 = s.row_scale[wgmma_acc_coord(tid, 0).row];
    const float scale1 = s.row_scale[wgmma_acc_coord(tid, 2).row];
#pragma unroll
    for (int i2 = 0; i2 < T::kHalfCols / 2; ++i2) o[i2] *= (i2 / 2) % 2 ? scale1 : scale0;
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < P.block_n / 16; ++ks)
      wgmma_ss<DType::kBF16, T::kHalfCols, WgmmaMajor::kK, WgmmaMajor::kMN>(
          o, PTile<P>::desc(p_addr, ks * 32), VTile<P>::desc(v_addr, ks * 16, v_col_byte), true);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(o);
    if (tile + 1 < t.tile_end) named_barrier_arrive(Bar::kPFree, 3 * kWarpgroupThreads);
  }
  named_barrier_sync(Bar::kStats, 3 * kWarpgroupThreads);
  const int r0 = wgmma_acc_coord(tid, 0).row, r1 = wgmma_acc_coord(tid, 2).row;
  const float m[2] = {s.row_max[r0], s.row_max[r1]};
  const float l[2] = {s.row_sum[r0], s.row_sum[r1]};
  write_output<P>(o, half, a, t, m, l);
}

// ---- entry ------------------------------------------------------------------------------

// Both schedules' CTA setup: the launch gave the shared memory the plan sized (a trap, not
// a silent overrun, if not), the maps are prefetched, and Storage's mbarriers (q_full,
// kv_full[kStages]) are initialized before any thread uses them.
template <unsigned kSmemBytes, int kStages, class Storage>
ATTNJIT_DEVICE void init_cta(Storage& s, const TmaDesc& q_map, const TmaDesc& kv_map, const TmaDesc& rope_map) {
  if (threadIdx.x == 0) {
    u32 dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    if (dyn < kSmemBytes) __trap();
    prefetch_tma_desc(q_map);
    prefetch_tma_desc(kv_map);
    prefetch_tma_desc(rope_map);
    mbarrier_init(&s.q_full, 1);
    for (int i = 0; i < kStages; ++i) mbarrier_init(&s.kv_full[i], 1);
    fence_mbarrier_init();
  }
  __syncthreads();
}

template <auto P>
__global__ void __launch_bounds__(Traits<P>::kThreads, 1)
    kernel(const __grid_constant__ TmaDesc q_map,     // u8 [total_q·h, 640], box [64, 128 B]
           const __grid_constant__ TmaDesc kv_map,    // u8 [pages·page_size, 640 | 512], box [32, 128 B]
           const __grid_constant__ TmaDesc rope_map,  // kv_map, or u8 [pages·page_size, 128]
           const Args args) {
  static_assert(kPlanMatches<P>, "mla_decode_fp8/layout.cuh's smem_bytes is not this SharedStorage's");
  const int item = cta_item(args.base);
  if (item < 0) return;
  extern __shared__ u8 smem_raw[];
  auto& s = *reinterpret_cast<SharedStorage<P>*>(
      (reinterpret_cast<u64>(smem_raw) + 1023) & ~u64(1023));
  const int wg = warpgroup_id_uniform();
  init_cta<kDynamicSmemBytes<P>, P.stages>(s, q_map, kv_map, rope_map);
  const md::Tile t = md::locate<P>(args.base, item);
  if (threadIdx.x == 0 && t.tile_begin < t.tile_end) {
    load_q<P>(s, q_map, t);
    for (int i = 0; i < P.stages && t.tile_begin + i < t.tile_end; ++i)
      load_kv<P>(s, kv_map, rope_map, args, t.batch, t.tile_begin + i, i);
  }
  if (wg == 0) {
    softmax_warpgroup<P>(s, kv_map, rope_map, args, t);
  } else {
    pv_warpgroup<P>(s, args, t, wg - 1);
  }
  pdl_launch_dependents();
}

}  // namespace attnjit::mla_decode_fp8
