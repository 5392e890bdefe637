#pragma once
// sm90_mla_decode: absorbed-MLA decode over a paged latent cache on Hopper.
//
// One CTA = one tile of 64 query rows (q_len × heads packed, row = t·h + head) of one
// sequence, over one split of its KV tiles. Three warpgroups (384 threads):
//   softmax  (WG0)  S = Q·Kᵀ (36 k16 steps, N = block_n), mask, online softmax; P and the row
//                   rescale factors to shared memory;
//   PV       (WG1, WG2)  O[:, half] = O·scale + P·V[:, half] for output columns [0, 256)
//                   and [256, 512), P from shared memory.
// V is the first 512 columns of the K tile already in shared memory (never loaded twice).
// O[64 × 512] f32 is too large for one warpgroup's registers, hence two PV halves; with
// softmax in its own warpgroup, S of tile i+1 overlaps P·V of tile i.
//
// No separate producer warpgroup: ptxas compiles every role under the kernel-wide register
// cap (65,536 / threads; setmaxnreg does not raise it), and a m64n256 wgmma with its 128
// accumulators needs ~154, which a fourth warpgroup (cap 128) would not leave. TMA loads
// come from thread 0 of WG0: Q and the first two tiles up front, then tile j+1 as soon as
// both PV warpgroups have finished tile j-1 (the kPFree barrier softmax waits on anyway),
// which is the moment its stage is free: the K half of a stage is released earlier (after
// S), the V half only after P·V. Softmax also zeroes stale V rows of a partial last tile,
// since it has the registers to spare.
// Split-KV: the CTA's tiles are the split's share of ceil(L / 64) tiles, computed here
// from the length on the GPU. num_splits == 1 writes the output directly; otherwise a
// normalized f32 partial plus its lse go to the workspace and mla_decode_combine merges.
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

namespace attnjit::mla_decode {

template <auto P>
struct Traits {
  static constexpr int kThreads = 3 * kWarpgroupThreads;
  static constexpr int kElem = dtype_bytes(P.dtype);
  static constexpr int kBoxCols = 128 / kElem;                 // one 128B-swizzle span
  static constexpr int kChunks = kHeadDim / kBoxCols;          // 9 column boxes per tile
  static constexpr int kVChunks = kValueDim / kBoxCols;        // 8 of them are V
  static constexpr int kChunkBytes = P.block_n * 128;          // K tile chunk: [block_n][128 B]
  static constexpr int kTileBytes = kChunks * kChunkBytes;     // one K tile (72 KiB at 64 keys)
  static constexpr int kQChunkBytes = P.block_m * 128;         // Q chunk: [64 rows][128 B]
  static constexpr int kQBytes = kChunks * kQChunkBytes;       // 72 KiB
  // P [64 rows × block_n keys] is a K-major wgmma A tile: one swizzle span per row.
  static constexpr Swizzle kPSwizzle = P.block_n * kElem == 128 ? Swizzle::k128B : Swizzle::k64B;
  static constexpr int kPBytes = P.block_m * P.block_n * kElem;
  static constexpr int kPageRows = P.page_size < P.block_n ? P.page_size : P.block_n;
  static constexpr int kPiecesPerTile = P.block_n / kPageRows; // pages per KV tile
  static constexpr int kHalfCols = kValueDim / 2;               // output columns per consumer
  static constexpr int kConsumerThreads = 3 * kWarpgroupThreads;  // named-barrier count

  static_assert(P.schedule == Schedule::kSoftmaxWarpgroup, "this file is the softmax_wg schedule");
  static_assert(P.dtype == DType::kBF16 || P.dtype == DType::kF16, "q/cache are bf16 or f16");
  static_assert(P.block_m == kWgmmaM, "one wgmma M of query rows");
  static_assert(P.block_n == 32 || P.block_n == 64, "32- or 64-key tiles (one P swizzle span)");
  static_assert(P.swizzle == Swizzle::k128B, "tiles are 128B-swizzled");
  static_assert(P.stages >= 2 && P.stages <= 4, "2..4 KV stages (the host checks the total fits)");
  static_assert(P.num_heads >= 1 && P.num_heads <= 128, "h in 1..128");
  static_assert(P.max_q_len >= 1 && P.max_q_len <= 8, "q_len bound 1..8");
  static_assert(P.page_size >= 16 && P.page_size <= 256 &&
                    (P.page_size & (P.page_size - 1)) == 0,
                "page size is a power of two in 16..256");
};

// Named barriers (id 0 is __syncthreads).
enum class Bar : u32 {
  kPFree = 1,    // both PV warpgroups finished reading P (and the scales) of the last tile
  kPReady = 2,   // the softmax warpgroup wrote P and the row scales of this tile
  kStats = 3,    // the softmax warpgroup wrote the final row max / sum (it arrives, the PV
                 // warpgroups wait: bar.sync is barrier.sync.aligned, which PTX requires all
                 // threads that sync on it to reach through one instruction)
};

// The shared-memory plan. Tiles first (1024-aligned: the 128B swizzle repeat).
template <auto P>
struct SharedStorage {
  using T = Traits<P>;
  alignas(1024) u8 q[T::kQBytes];                 // Q  [64 rows][576] as 9 chunks
  alignas(1024) u8 kv[P.stages][T::kTileBytes];   // K  [block_n keys][576] as 9 chunks; V = chunks 0..7
  alignas(1024) u8 p[T::kPBytes];                 // P  [64 rows][block_n keys], kPSwizzle
  float row_scale[P.block_m];                     // exp2(m_old - m_new) of the current tile
  float row_max[P.block_m];                       // final m (log2 units)
  float row_sum[P.block_m];                       // final l
  MBarrier q_full;
  MBarrier kv_full[P.stages];  // TMA of a KV stage complete (its release is Bar::kPFree)
};

template <auto P>
inline constexpr unsigned kDynamicSmemBytes = sizeof(SharedStorage<P>) + 1024;

// The host launches with the plan in mla_decode/layout.cuh: it must be this layout's.
template <auto P>
inline constexpr bool kPlanMatches =
    kDynamicSmemBytes<P> == smem_bytes(dtype_bytes(P.dtype), P.block_m, P.block_n, P.stages,
                                       /*seesaw=*/false);

// ---- TMA issue (one thread) -------------------------------------------------------------

// Q rows of this tile: rows [start·h + row0, +64) of q viewed as [total_q·h, 576].
template <auto P>
ATTNJIT_DEVICE void load_q(SharedStorage<P>& s, const TmaDesc& q_map, const Args& a,
                           const Tile& t) {
  using T = Traits<P>;
  const int q_row = t.seq.start * P.num_heads + t.row0;
  mbarrier_arrive_expect_tx(&s.q_full, T::kQBytes);
  for (int c = 0; c < T::kChunks; ++c)
    tma_load_2d(q_map, &s.q_full, s.q + c * T::kQChunkBytes, c * T::kBoxCols, q_row);
}

// KV tile `tile` (the i-th of this CTA, over all its pieces) of sequence `batch` into stage
// i % stages, the (i / stages)-th fill of that stage: 9 column
// boxes per page piece, page from the block table.
template <auto P>
ATTNJIT_DEVICE void load_kv(SharedStorage<P>& s, const TmaDesc& kv_map, const Args& a, int batch,
                            int tile, int i) {
  using T = Traits<P>;
  const int st = i % P.stages;
  const int* table = a.block_table + static_cast<i64>(batch) * a.max_pages;
  mbarrier_arrive_expect_tx(&s.kv_full[st], T::kTileBytes);
#pragma unroll
  for (int piece = 0; piece < T::kPiecesPerTile; ++piece) {
    const int token = tile * P.block_n + piece * T::kPageRows;
    const int slot = token / P.page_size;
    // A slot past the table (possible when capacity is not a multiple of 64) loads a
    // fully out-of-bounds box: zeros, and the byte count still completes the barrier.
    const int page = slot < a.max_pages ? table[slot] : -1;
    const int row = page * P.page_size + token % P.page_size;
    for (int c = 0; c < T::kChunks; ++c)
      tma_load_2d(kv_map, &s.kv_full[st],
                  s.kv[st] + c * T::kChunkBytes + piece * T::kPageRows * 128, c * T::kBoxCols,
                  row, CacheHint::kEvictFirst);
  }
}

// ---- consumers -------------------------------------------------------------------------

template <auto P>
using QTile = WgmmaKMajorTile<Swizzle::k128B, P.block_m>;  // Q: K-major, 64 rows
template <auto P>
using KTile = WgmmaKMajorTile<Swizzle::k128B, P.block_n>;  // K: K-major, block_n rows
template <auto P>
using PTile = WgmmaKMajorTile<Traits<P>::kPSwizzle, P.block_m>;  // P: K-major, 64 rows
template <auto P>
using VTile = WgmmaMNMajorTile<Swizzle::k128B, P.block_n>;  // V: MN-major, block_n key rows

// Zeroes key rows [first, 64) of the 8 V chunks of a KV tile: rows past the sequence may
// hold NaN, and P = 0 does not cancel NaN (0 × NaN = NaN). S of those keys is masked by
// replacement; the zeros are published to the PV warpgroups by Bar::kPReady.
template <auto P>
ATTNJIT_DEVICE void zero_tail_rows(u8* tile, int first) {
  using T = Traits<P>;
  const int rows = P.block_n - first;
  // A row of a chunk is one 128-byte line (swizzling permutes 16-byte units inside it).
  for (int i = thread_in_warpgroup(); i < rows * T::kVChunks * 8; i += kWarpgroupThreads) {
    const int unit = i % 8, row = first + (i / 8) % rows, chunk = i / (8 * rows);
    *reinterpret_cast<uint4*>(tile + chunk * T::kChunkBytes + row * 128 + unit * 16) =
        make_uint4(0, 0, 0, 0);
  }
}

// Per-thread row state: each thread owns 2 rows of the 64 (wgmma_acc_coord: i/2 % 2).
struct RowState {
  float m[2];  // running max (log2 units, scaled)
  float l[2];  // running sum of exp2 (this thread's columns; reduced at the end)
};

// One tile's update of a row's running max (the softmax warpgroup of softmax_wg and of
// mla_decode_fp8's kernels): the 4 lanes sharing a row reduce the tile's max with two
// shuffles; scale[r] rescales the row's earlier terms (l here, O in the PV warpgroups).
// While a row has seen no key, m stays -inf: scale 1 and p 0 (no inf - inf).
ATTNJIT_DEVICE void update_row_max(RowState& rs, float (&tile_max)[2], float (&scale)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
    const float m_new = fmaxf(rs.m[r], tile_max[r]);
    scale[r] = m_new == neg_inf() ? 1.0f : exp2f(rs.m[r] - m_new);
    rs.m[r] = m_new;
    rs.l[r] *= scale[r];
  }
}

// The final row statistics for the PV warpgroups' epilogue: each row's l summed over its 4
// lanes, then one lane per row stores m and l (row_max, row_sum: [64] in shared memory).
ATTNJIT_DEVICE void store_row_stats(RowState& rs, float* row_max, float* row_sum, int tid) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    rs.l[r] += __shfl_xor_sync(0xffffffffu, rs.l[r], 1);
    rs.l[r] += __shfl_xor_sync(0xffffffffu, rs.l[r], 2);
  }
  if (tid % 4 == 0) {
    row_max[wgmma_acc_coord(tid, 0).row] = rs.m[0];
    row_sum[wgmma_acc_coord(tid, 0).row] = rs.l[0];
    row_max[wgmma_acc_coord(tid, 2).row] = rs.m[1];
    row_sum[wgmma_acc_coord(tid, 2).row] = rs.l[1];
  }
}

// Writes one warpgroup's O[64 × 256] (output columns [half·256, half·256 + 256)) for its
// two rows per thread, normalized by the row sums `l`; m is the final row max (log2
// units). Unsplit: out (q's dtype) and lse; split: the f32 partial and its lse. A row with
// l = 0 saw no key: zeros and lse -inf.
template <auto P>
ATTNJIT_DEVICE void write_output(const float (&o)[kValueDim / 4], int half, const Args& a,
                                 const Tile& t, const float (&m)[2], const float (&l)[2]) {
  constexpr int kElem = dtype_bytes(P.dtype);
  constexpr int kHalfCols = kValueDim / 2;
  const int row0 = t.row0;
  const int tid = static_cast<int>(threadIdx.x) % kWarpgroupThreads;
  const int rows_b = t.seq.q_len * P.num_heads;    // this sequence's rows
  const int part_rows = a.q.q_len * P.num_heads;   // a partial's rows (the bound)
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int gr = row0 + wgmma_acc_coord(tid, 2 * r).row;  // packed row = q_idx·h + head
    if (gr >= rows_b) continue;
    const bool empty = !(l[r] > 0.0f);
    const float inv = empty ? 0.0f : 1.0f / l[r];
    const float lse = empty ? neg_inf() : (m[r] + __log2f(l[r])) * kLn2;
    if (t.slot < 0) {
      u8* out = static_cast<u8*>(a.out) +
                ((static_cast<i64>(t.seq.start) * P.num_heads + gr) * kValueDim + half * kHalfCols) *
                    kElem;
#pragma unroll
      for (int i = 2 * r; i < kHalfCols / 2; i += 4) {
        const int col = wgmma_acc_coord(tid, i).col;
        *reinterpret_cast<u32*>(out + col * kElem) = pack2<P.dtype>(o[i] * inv, o[i + 1] * inv);
      }
      if (a.lse != nullptr && half == 0 && tid % 4 == 0)
        a.lse[lse_index(a.q, t.batch, t.seq, P.num_heads, gr % P.num_heads, gr / P.num_heads)] = lse;
    } else {
      const i64 prow = static_cast<i64>(t.slot) * part_rows + gr;
      float* out = a.part_out + prow * kValueDim + half * kHalfCols;
#pragma unroll
      for (int i = 2 * r; i < kHalfCols / 2; i += 4) {
        const int col = wgmma_acc_coord(tid, i).col;
        *reinterpret_cast<float2*>(out + col) = make_float2(o[i] * inv, o[i + 1] * inv);
      }
      if (half == 0 && tid % 4 == 0) a.part_lse[prow] = lse;
    }
  }
}

// WG1: S = Q·Kᵀ, mask, online softmax; P and the row scales to shared memory. `done`:
// KV tiles the CTA's earlier pieces walked (stage and phase run on across pieces); q_phase:
// the phase of this piece's Q load.
template <auto P>
ATTNJIT_DEVICE void softmax_warpgroup(SharedStorage<P>& s, const TmaDesc& kv_map, const Args& a,
                                      const Tile& t, int done, u32 q_phase) {
  using T = Traits<P>;
  const int tid = thread_in_warpgroup();
  float sc[P.block_n / 2];  // S, then P: [64 × block_n] accumulator fragment
  RowState rs{{neg_inf(), neg_inf()}, {0.0f, 0.0f}};
  // Last key each of this thread's two rows sees (causal: L - q_len + q_idx).
  int limit[2];
  row_limits<P>(t, limit);

  if (t.tile_begin < t.tile_end) mbarrier_wait(&s.q_full, q_phase);
  const u32 q_addr = smem_u32(s.q);
  for (int tile = t.tile_begin, i = done; tile < t.tile_end; ++tile, ++i) {
    const int st = i % P.stages;
    mbarrier_wait(&s.kv_full[st], static_cast<u32>(i / P.stages) & 1u);
    const u32 k_addr = smem_u32(s.kv[st]);

    // S[64 × block_n] = Q[64 × 576] · K[block_n × 576]ᵀ: 9 chunks × 4 k16 steps, fully
    // unrolled. A rolled chunk loop made ptxas serialize every wgmma (C7520, a wait after
    // each); unrolled, the 36 issue back to back and this warpgroup has the registers for
    // their descriptors (it holds only S).
    wgmma_fence();
#pragma unroll
    for (int c = 0; c < T::kChunks; ++c) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const u32 k_byte = static_cast<u32>(c * 128 + kk * 32);
        wgmma_ss<P.dtype, P.block_n>(sc, QTile<P>::desc(q_addr, k_byte),
                                     KTile<P>::desc(k_addr, k_byte), c > 0 || kk > 0);
      }
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(sc);
    const int valid = t.len - tile * P.block_n;  // keys of this tile inside the sequence
    if (valid < P.block_n) zero_tail_rows<P>(s.kv[st], valid);

    // Mask by replacement (a NaN score from a stale row must not survive) and update the
    // running max; the 4 lanes sharing a row reduce with two shuffles.
    const int key0 = tile * P.block_n;
    float tile_max[2] = {neg_inf(), neg_inf()};
#pragma unroll
    for (int i2 = 0; i2 < P.block_n / 2; ++i2) {
      const int r = (i2 / 2) % 2;
      const int key = key0 + wgmma_acc_coord(tid, i2).col;
      const float x = key <= limit[r] ? sc[i2] * a.scale_log2 : neg_inf();
      sc[i2] = x;
      tile_max[r] = fmaxf(tile_max[r], x);
    }
    float scale[2];
    update_row_max(rs, tile_max, scale);
#pragma unroll
    for (int i2 = 0; i2 < P.block_n / 2; ++i2) {
      const int r = (i2 / 2) % 2;
      const float p = rs.m[r] == neg_inf() ? 0.0f : exp2f(sc[i2] - rs.m[r]);
      sc[i2] = p;
      rs.l[r] += p;
    }

    // P [64 × block_n] (K-major, one swizzle span per row: the wgmma A layout) and the
    // scales, once both PV warpgroups are done with the previous ones.
    named_barrier_sync(Bar::kPFree, T::kConsumerThreads);
    // Tile i-1's stage is free now (its K was read by S long ago, its V by P·V): refill it
    // with the tile `stages` after it.
    if (tid == 0 && tile > t.tile_begin && tile - 1 + P.stages < t.tile_end)
      load_kv<P>(s, kv_map, a, t.batch, tile - 1 + P.stages, i - 1 + P.stages);
#pragma unroll
    for (int i2 = 0; i2 < P.block_n / 2; i2 += 2) {
      const WgmmaCoord c = wgmma_acc_coord(tid, i2);
      *reinterpret_cast<u32*>(s.p + PTile<P>::byte_offset(c.row, c.col * T::kElem)) =
          pack2<P.dtype>(sc[i2], sc[i2 + 1]);
    }
    if (tid % 4 == 0) {
      s.row_scale[wgmma_acc_coord(tid, 0).row] = scale[0];
      s.row_scale[wgmma_acc_coord(tid, 2).row] = scale[1];
    }
    fence_proxy_async_smem();  // P (and zeroed V rows) are read by the PV warpgroups' wgmma
    named_barrier_arrive(Bar::kPReady, T::kConsumerThreads);
  }

  // Final row statistics for the PV warpgroups' epilogue.
  store_row_stats(rs, s.row_max, s.row_sum, tid);
  named_barrier_arrive(Bar::kStats, T::kConsumerThreads);  // nothing left to wait for here
}

// WG2 / WG3: O[:, half·256 + 0..256) = O·scale + P · V[:, same columns], P from smem.
template <auto P>
ATTNJIT_DEVICE void pv_warpgroup(SharedStorage<P>& s, const Args& a, const Tile& t, int half,
                                 int done) {
  using T = Traits<P>;
  const int tid = thread_in_warpgroup();
  float o[T::kHalfCols / 2];  // O[64 × 256] f32 accumulator fragment (128 per thread)
#pragma unroll
  for (int i = 0; i < T::kHalfCols / 2; ++i) o[i] = 0.0f;
  const u32 p_addr = smem_u32(s.p);
  const u32 v_col_byte = static_cast<u32>(half * T::kHalfCols * T::kElem);
  for (int tile = t.tile_begin, i = done; tile < t.tile_end; ++tile, ++i) {
    const int st = i % P.stages;
    if (tile == t.tile_begin) named_barrier_arrive(Bar::kPFree, T::kConsumerThreads);  // P starts free
    named_barrier_sync(Bar::kPReady, T::kConsumerThreads);
    // Already complete (softmax waited on it first): makes the TMA writes visible here.
    mbarrier_wait(&s.kv_full[st], static_cast<u32>(i / P.stages) & 1u);
    const u32 k_addr = smem_u32(s.kv[st]);
    const float scale0 = s.row_scale[wgmma_acc_coord(tid, 0).row];
    const float scale1 = s.row_scale[wgmma_acc_coord(tid, 2).row];
#pragma unroll
    for (int i2 = 0; i2 < T::kHalfCols / 2; ++i2) o[i2] *= (i2 / 2) % 2 ? scale1 : scale0;
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < P.block_n / 16; ++ks)
      wgmma_ss<P.dtype, T::kHalfCols, WgmmaMajor::kK, WgmmaMajor::kMN>(
          o, PTile<P>::desc(p_addr, ks * 32), VTile<P>::desc(k_addr, ks * 16, v_col_byte), true);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(o);
    if (tile + 1 < t.tile_end) named_barrier_arrive(Bar::kPFree, T::kConsumerThreads);
  }
  named_barrier_sync(Bar::kStats, T::kConsumerThreads);
  const int r0 = wgmma_acc_coord(tid, 0).row, r1 = wgmma_acc_coord(tid, 2).row;
  const float m[2] = {s.row_max[r0], s.row_max[r1]};
  const float l[2] = {s.row_sum[r0], s.row_sum[r1]};
  write_output<P>(o, half, a, t, m, l);
}

// ---- entry -----------------------------------------------------------------------------

template <auto P>
__global__ void __launch_bounds__(Traits<P>::kThreads, 1)
    kernel(const __grid_constant__ TmaDesc q_map,   // [total_q·h, 576], box [64, 64]
           const __grid_constant__ TmaDesc kv_map,  // [pages·page_size, 576], box [min(64, page), 64]
           const Args args) {
  static_assert(kPlanMatches<P>, "mla_decode/layout.cuh's smem_bytes is not this SharedStorage's");
  const Items items = cta_items(args);
  if (items.begin >= items.end) return;  // balanced: no piece for this CTA
  using T = Traits<P>;
  extern __shared__ u8 smem_raw[];
  auto& s = *reinterpret_cast<SharedStorage<P>*>(
      (reinterpret_cast<u64>(smem_raw) + 1023) & ~u64(1023));
  const int wg = warpgroup_id_uniform();
  if (threadIdx.x == 0) {
    u32 dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    if (dyn < kDynamicSmemBytes<P>) __trap();  // host and device disagree on the plan
    prefetch_tma_desc(q_map);
    prefetch_tma_desc(kv_map);
    mbarrier_init(&s.q_full, 1);
    for (int i = 0; i < P.stages; ++i) mbarrier_init(&s.kv_full[i], 1);
    fence_mbarrier_init();
  }
  __syncthreads();
  // The CTA's pieces, one after the other (balanced: possibly of several sequences; static:
  // one). Each fills the pipeline afresh; stage and barrier phases run on (done, q_loads).
  int done = 0;
  u32 q_loads = 0;
  for (int item = items.begin; item < items.end; ++item) {
    const Tile t = locate<P>(args, item);
    if (threadIdx.x == 0 && t.tile_begin < t.tile_end) {  // Q and the first stages
      load_q<P>(s, q_map, args, t);
      for (int i = 0; i < P.stages && t.tile_begin + i < t.tile_end; ++i)
        load_kv<P>(s, kv_map, args, t.batch, t.tile_begin + i, done + i);
    }
    if (wg == 0) {
      softmax_warpgroup<P>(s, kv_map, args, t, done, q_loads & 1u);
    } else {
      pv_warpgroup<P>(s, args, t, wg - 1, done);
    }
    if (t.tile_begin < t.tile_end) ++q_loads;
    done += t.tile_end - t.tile_begin;
    // The next piece's loads overwrite Q, the stages and P, and its statistics the row
    // max and sums, which this piece's threads still read.
    fence_proxy_async_smem();
    __syncthreads();
  }
  pdl_launch_dependents();  // the combine kernel may start its prologue
}

}  // namespace attnjit::mla_decode
