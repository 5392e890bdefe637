#pragma once
// The seesaw mla_decode kernel's plan and pieces (sm90_mla_decode_seesaw.cuh is the kernel
// and its design): the shared-memory plan and its named barriers, the TMA issue, the three
// GEMM shapes, the softmax steps on accumulator fragments and the output epilogue. Each is
// a function the two warpgroup roles call; none holds state of its own.
#include "common/act_quant.cuh"
#include "common/arch.cuh"
#include "common/fence.cuh"
#include "common/mbarrier.cuh"
#include "common/named_barrier.cuh"
#include "common/numeric.cuh"
#include "common/smem.cuh"
#include "common/tma.cuh"
#include "common/types.cuh"
#include "common/warpgroup.cuh"
#include "common/wgmma.cuh"
#include "mla_decode/common.cuh"

namespace attnjit::mla_decode::seesaw {

template <auto P>
struct Traits {
  static constexpr int kThreads = 2 * kWarpgroupThreads;
  static constexpr int kElem = dtype_bytes(P.dtype);
  static constexpr int kBoxCols = 128 / kElem;              // one 128B-swizzle span
  static constexpr int kChunks = kHeadDim / kBoxCols;       // 9 column boxes per row
  static constexpr int kLoChunks = kChunks / 2;             // 0..3: V columns [0, 256)
  static constexpr int kRopeChunk = kChunks - 1;            // 8: the 64 rope dims
  static constexpr int kChunkBytes = P.block_n * 128;       // K tile chunk: [64 keys][128 B]
  static constexpr int kTileBytes = kChunks * kChunkBytes;  // 72 KiB
  static constexpr int kQChunkBytes = P.block_m * 128;      // Q chunk: [64 rows][128 B]
  static constexpr int kQBytes = kChunks * kQChunkBytes;    // 72 KiB
  static constexpr int kPBytes = P.block_m * P.block_n * kElem;  // P [64 × 64]: 8 KiB
  static constexpr int kPageRows = P.page_size < P.block_n ? P.page_size : P.block_n;
  static constexpr int kPiecesPerTile = P.block_n / kPageRows;  // pages per KV tile
  static constexpr int kHalfCols = kValueDim / 2;               // O columns per warpgroup
  static constexpr int kAcc = kHalfCols / 2;                    // O accumulators per thread
  static constexpr int kSAcc = P.block_n / 2;                   // S accumulators per thread
  static constexpr int kStageBytes = P.block_m * (kValueDim * 4 + 32);  // f32 output staging

  static_assert(P.schedule == Schedule::kSeesaw, "this file is the seesaw schedule");
  static_assert(P.dtype == DType::kBF16 || P.dtype == DType::kF16, "q/cache are bf16 or f16");
  static_assert(P.block_m == kWgmmaM, "one wgmma M of query rows");
  static_assert(P.block_n == 64, "64-key tiles: P is one 128B swizzle span per row");
  static_assert(P.stages == 2, "two KV buffers, the even and the odd tile of a pair");
  static_assert(P.swizzle == Swizzle::k128B, "tiles are 128B-swizzled");
  static_assert(kPBytes == kQChunkBytes, "P_odd takes the place of Q's rope chunk");
  static_assert(kStageBytes <= 2 * kTileBytes, "the output staging tile fits the KV buffers");
  static_assert(kLoChunks * kBoxCols == kHalfCols, "the lo half of a tile is WG0's V columns");
  static_assert(P.num_heads >= 1 && P.num_heads <= 128, "h in 1..128");
  static_assert(P.max_q_len >= 1 && P.max_q_len <= 8, "q_len bound 1..8");
  static_assert(P.page_size >= 16 && P.page_size <= 256 &&
                    (P.page_size & (P.page_size - 1)) == 0,
                "page size is a power of two in 16..256");
};

// Named barriers (id 0 is __syncthreads). "A → B": A arrives, B waits; once per pair each.
enum class Bar : u32 {
  kEvenMax = 1,     // WG0 → WG1: row_max and scale_even of the even tile are written
  kOddMax = 2,      // WG1 → WG0: row_max and scale_odd of the odd tile are written (and
                    // WG1's reads of the previous p_even retired)
  kPEvenReady = 3,  // WG0 → WG1: P_even (scaled to the pair's max) is in smem
  kPOddReady = 4,   // WG1 → WG0: P_odd is in smem
  kRowSums = 5,     // both: partial row sums written for the epilogue
  kWg0Local = 6,    // inside one warpgroup: zeroed V rows visible before its wgmma
  kWg1Local = 7,
  kOutStaged = 8,   // both: normalized O is in the staging tile
  kPiece = 9,       // both: a piece's start (Q's rope copied, row_max reset) and end (its
                    // smem reads done). It, kRowSums and kOutStaged are reached from each
                    // warpgroup's own copy of the piece loop: unaligned syncs
};
inline constexpr u32 kBothWarpgroups = 2 * kWarpgroupThreads;

template <auto P>
struct SharedStorage {
  // After the tile loop the KV buffers hold the output staging tile (write_output).
  using T = Traits<P>;
  alignas(1024) u8 q[T::kQBytes];         // Q [64 rows][576] as 9 chunks; chunk 8 → P_odd
  alignas(1024) u8 kv[2][T::kTileBytes];  // K [64 keys][576] as 9 chunks; V = chunks 0..7
  alignas(1024) u8 p_even[T::kPBytes];    // P_even [64 rows][64 keys], K-major, 128B swizzle
  float row_max[P.block_m];               // running m (log2 units) after the latest tile
  float scale_even[P.block_m];            // exp2(m_before - m_even) of the current pair
  float scale_odd[P.block_m];             // exp2(m_even - m_odd) of the current pair
  float row_sum[2][P.block_m];            // each warpgroup's l at the end (a widening feed
                                          // keeps its rows' score factors in [0] until then)
  float kv_sigma[2][P.block_n];           // a widening feed's σ_KV of buffer b's keys
  MBarrier q_full;
  // Chunk c of buffer b landed. One barrier per chunk so that S starts on the first chunk
  // while the rest are in flight (WG0 refills chunks 0..3, WG1 chunks 4..8).
  MBarrier kv_full[2][Traits<P>::kChunks];
  // A widening feed's fp8 boxes landed: half h of buffer b (0: chunks 0..3, 1: 4..8), Q.
  MBarrier kv_staged[2][2];
  MBarrier q_staged;
};

template <auto P>
inline constexpr unsigned kDynamicSmemBytes = sizeof(SharedStorage<P>) + 1024;

// The host launches with the plan in mla_decode/layout.cuh: it must be this layout's.
template <auto P>
inline constexpr bool kPlanMatches =
    kDynamicSmemBytes<P> == smem_bytes(dtype_bytes(P.dtype), P.block_m, P.block_n, P.stages,
                                       /*seesaw=*/true);

// Byte offsets of the operands from the (1024-aligned) storage base: the roles keep one
// base address in a register instead of one per region (registers are at the 255 cap).
// NVRTC has no offsetof; the kernel checks these against the struct once (layout_ok).
template <auto P>
struct Offsets {
  using T = Traits<P>;
  static constexpr u32 kQ = 0;
  static constexpr u32 kKv0 = kQ + T::kQBytes;       // 72 KiB: 1024-aligned already
  static constexpr u32 kKv1 = kKv0 + T::kTileBytes;
  static constexpr u32 kPEven = kKv1 + T::kTileBytes;
  static constexpr u32 kPOdd = kQ + T::kRopeChunk * T::kQChunkBytes;  // Q's rope chunk
  static constexpr u32 kRowMax = kPEven + T::kPBytes;
  static constexpr u32 kScaleEven = kRowMax + 4 * P.block_m;
  static constexpr u32 kScaleOdd = kScaleEven + 4 * P.block_m;
  static constexpr u32 kRowSum = kScaleOdd + 4 * P.block_m;
  static constexpr u32 kSigma = kRowSum + 8 * P.block_m;
};

template <auto P>
ATTNJIT_DEVICE bool layout_ok(const SharedStorage<P>& s) {
  using O = Offsets<P>;
  const u32 base = smem_u32(&s);
  return smem_u32(s.q) - base == O::kQ && smem_u32(s.kv[0]) - base == O::kKv0 &&
         smem_u32(s.kv[1]) - base == O::kKv1 && smem_u32(s.p_even) - base == O::kPEven &&
         smem_u32(s.row_max) - base == O::kRowMax &&
         smem_u32(s.scale_even) - base == O::kScaleEven &&
         smem_u32(s.scale_odd) - base == O::kScaleOdd && smem_u32(s.row_sum) - base == O::kRowSum &&
         smem_u32(s.kv_sigma) - base == O::kSigma;
}

template <auto P>
using QTile = WgmmaKMajorTile<Swizzle::k128B, P.block_m>;  // Q (and P): K-major, 64 rows
template <auto P>
using KTile = WgmmaKMajorTile<Swizzle::k128B, P.block_n>;  // K: K-major, 64 key rows
template <auto P>
using VTile = WgmmaMNMajorTile<Swizzle::k128B, P.block_n>;  // V: MN-major, 64 key rows

// ---- TMA issue (one thread) -------------------------------------------------------------

template <auto P>
ATTNJIT_DEVICE void load_q(SharedStorage<P>& s, const TmaDesc& q_map, const Args& a,
                           const Tile& t) {
  using T = Traits<P>;
  const int q_row = t.seq.start * P.num_heads + t.row0;
  mbarrier_arrive_expect_tx(&s.q_full, T::kQBytes);
  for (int c = 0; c < T::kChunks; ++c)
    tma_load_2d(q_map, &s.q_full, s.q + c * T::kQChunkBytes, c * T::kBoxCols, q_row);
}

// Chunks [kC0, kC1) of KV tile `tile` of sequence `batch` into buffer `buf`, chunk by chunk
// (each completes its own barrier), page pieces from the block table.
template <auto P, int kC0, int kC1>
ATTNJIT_DEVICE void load_kv_part(SharedStorage<P>& s, const TmaDesc& kv_map, const Args& a,
                                 int batch, int tile, int buf) {
  using T = Traits<P>;
  const int* table = a.block_table + static_cast<i64>(batch) * a.max_pages;
  int row[T::kPiecesPerTile];  // first cache row of each page piece of the tile
#pragma unroll
  for (int piece = 0; piece < T::kPiecesPerTile; ++piece) {
    const int token = tile * P.block_n + piece * T::kPageRows;
    const int slot = token / P.page_size;
    // A slot past the table (capacity not a multiple of 64) loads a fully out-of-bounds
    // box: zeros, and the byte count still completes the barrier.
    const int page = slot < a.max_pages ? table[slot] : -1;
    row[piece] = page * P.page_size + token % P.page_size;
  }
#pragma unroll
  for (int c = kC0; c < kC1; ++c) {
    MBarrier* bar = &s.kv_full[buf][c];
    mbarrier_arrive_expect_tx(bar, T::kChunkBytes);
#pragma unroll
    for (int piece = 0; piece < T::kPiecesPerTile; ++piece)
      tma_load_2d(kv_map, bar, s.kv[buf] + c * T::kChunkBytes + piece * T::kPageRows * 128,
                  c * T::kBoxCols, row[piece], CacheHint::kEvictFirst);
  }
}

template <auto P>
ATTNJIT_DEVICE void load_kv_lo(SharedStorage<P>& s, const TmaDesc& kv_map, const Args& a,
                               int batch, int tile, int buf) {
  load_kv_part<P, 0, Traits<P>::kLoChunks>(s, kv_map, a, batch, tile, buf);
}
template <auto P>
ATTNJIT_DEVICE void load_kv_hi(SharedStorage<P>& s, const TmaDesc& kv_map, const Args& a,
                               int batch, int tile, int buf) {
  using T = Traits<P>;
  load_kv_part<P, T::kLoChunks, T::kChunks>(s, kv_map, a, batch, tile, buf);
}

// ---- who fills the buffers ----------------------------------------------------------------
// The roles say when Q and each half of a KV buffer may be (re)filled, and the feed issues
// the loads; it also owns the score scales. TmaFeed (mla_decode): bf16 / f16 boxes straight
// into the tiles, one softmax scale. mla_decode_fp8's widening feed (its seesaw kernel) stages
// fp8 boxes that a producer warpgroup widens, with a factor per row (σ_Q) and per key (σ_KV).
struct TmaFeed {
  template <auto P>
  ATTNJIT_DEVICE void piece_start(SharedStorage<P>& s, const TmaDesc& q_map, const TmaDesc& kv_map,
                                  const Args& a, const Tile& t) const {
    load_q<P>(s, q_map, a, t);
    load_kv_lo<P>(s, kv_map, a, t.batch, t.tile_begin, 0);
    load_kv_hi<P>(s, kv_map, a, t.batch, t.tile_begin, 0);
    if (t.tile_begin + 1 < t.tile_end) {
      load_kv_hi<P>(s, kv_map, a, t.batch, t.tile_begin + 1, 1);
      load_kv_lo<P>(s, kv_map, a, t.batch, t.tile_begin + 1, 1);
    }
  }
  template <auto P, int kHalf>
  ATTNJIT_DEVICE void refill(SharedStorage<P>& s, const TmaDesc& kv_map, const Args& a, int batch,
                             int tile, int buf) const {
    if constexpr (kHalf == 0)
      load_kv_lo<P>(s, kv_map, a, batch, tile, buf);
    else
      load_kv_hi<P>(s, kv_map, a, batch, tile, buf);
  }
  // Raw score of row `row` → log2 units: softmax_scale · log2 e.
  template <auto P>
  ATTNJIT_DEVICE float row_factor(u32, const Args& a, int) const { return a.scale_log2; }
  // Per-key factors of buffer `buf`'s tile on S (and on P before P·V): none.
  template <auto P>
  ATTNJIT_DEVICE void scale_keys(float (&)[Traits<P>::kSAcc], u32, int) const {}
};

// ---- GEMMs ------------------------------------------------------------------------------

// Issues S[64 × 64] (+)= Q · K[buf]ᵀ over chunks [kC0, kC1) (4 k16 steps each), each as
// soon as its TMA barrier (bars[c], this phase) completes; Q's rope chunk comes from
// registers (q_rope[k-step]: RS A fragments), the others from smem. The first k-step of
// the whole S (kFirst, chunk kC0) overwrites. Not committed here.
template <auto P, int kC0, int kC1, bool kFirst>
ATTNJIT_DEVICE void issue_qk(float (&sc)[Traits<P>::kSAcc], u32 q_addr, u32 k_addr,
                             const u32 (&q_rope)[4][4], MBarrier* bars, u32 phase) {
  using T = Traits<P>;
  // The 36 descriptors are loop-invariant: without this opaque copy the compiler hoists
  // all of them (72 × 64-bit) out of the tile loop and spills them.
  opaque(q_addr);
  opaque(k_addr);
  const u64 q_desc = QTile<P>::desc(q_addr, 0), k_desc = KTile<P>::desc(k_addr, 0);
#pragma unroll
  for (int c = kC0; c < kC1; ++c) {
    mbarrier_wait(&bars[c], phase);
    wgmma_fence();  // after a wait loop: keeps ptxas from serializing the wgmma (C7520)
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const u32 k_byte = static_cast<u32>(c * 128 + kk * 32);
      const bool accumulate = !(kFirst && c == kC0 && kk == 0);
      if (c == T::kRopeChunk)
        wgmma_rs<P.dtype, P.block_n>(sc, q_rope[kk], k_desc + desc_step<KTile<P>>(k_byte),
                                     accumulate);
      else
        wgmma_ss<P.dtype, P.block_n>(sc, q_desc + desc_step<QTile<P>>(k_byte),
                                     k_desc + desc_step<KTile<P>>(k_byte), accumulate);
    }
  }
}

// O[:, half] += P · V[buf][:, half] with P from registers (this warpgroup's own tile).
template <auto P>
ATTNJIT_DEVICE void issue_pv_local(float (&o)[Traits<P>::kAcc], const u32 (&p)[4][4], u32 v_addr,
                                   int half) {
  using T = Traits<P>;
  const u32 col_byte = static_cast<u32>(half * T::kHalfCols * T::kElem);
  opaque(v_addr);
  const u64 v_desc = VTile<P>::desc(v_addr, 0, col_byte);
#pragma unroll
  for (int ks = 0; ks < P.block_n / 16; ++ks)
    wgmma_rs<P.dtype, T::kHalfCols, WgmmaMajor::kMN>(
        o, p[ks], v_desc + desc_step<VTile<P>>(static_cast<u32>(ks * 16)), true);
}

// O[:, half] += P · V[buf][:, half] with P from shared memory (the other warpgroup's tile).
template <auto P>
ATTNJIT_DEVICE void issue_pv_remote(float (&o)[Traits<P>::kAcc], u32 p_addr, u32 v_addr, int half) {
  using T = Traits<P>;
  const u32 col_byte = static_cast<u32>(half * T::kHalfCols * T::kElem);
  opaque(p_addr);
  opaque(v_addr);
  const u64 p_desc = QTile<P>::desc(p_addr, 0), v_desc = VTile<P>::desc(v_addr, 0, col_byte);
#pragma unroll
  for (int ks = 0; ks < P.block_n / 16; ++ks)
    wgmma_ss<P.dtype, T::kHalfCols, WgmmaMajor::kK, WgmmaMajor::kMN>(
        o, p_desc + desc_step<QTile<P>>(static_cast<u32>(ks * 32)),
        v_desc + desc_step<VTile<P>>(static_cast<u32>(ks * 16)), true);
}

// ---- softmax pieces ---------------------------------------------------------------------

// Raw scores → masked (by replacement: a NaN score of a stale key must not survive) raw
// scores and the row max of the tile, reduced over the 4 lanes of a row.
template <auto P>
ATTNJIT_DEVICE void mask_and_max(float (&sc)[Traits<P>::kSAcc], bool masked, int key0,
                                 const int (&limit)[2], float (&tile_max)[2]) {
  const int tid = thread_in_warpgroup();
  tile_max[0] = tile_max[1] = neg_inf();
#pragma unroll
  for (int i = 0; i < Traits<P>::kSAcc; ++i) {
    const int r = (i / 2) % 2;
    float x = sc[i];
    if (masked) x = key0 + wgmma_acc_coord(tid, i).col <= limit[r] ? x : neg_inf();
    sc[i] = x;
    tile_max[r] = fmaxf(tile_max[r], x);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
  }
}

// Raw scores → P = exp2(s·c − m) in place (one FFMA + one MUFU each; max taken on raw
// scores, c = the row's factor ≥ 0: scale·log2 e, times σ_Q for fp8); returns this thread's
// part of the row sums. A row whose m is still -inf has seen no key: its p are exp2(−inf) = 0.
template <auto P>
ATTNJIT_DEVICE void exponentiate(float (&sc)[Traits<P>::kSAcc], const float (&m)[2],
                                 const float (&scale_log2)[2], float (&sum)[2]) {
  float neg_m[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    neg_m[r] = m[r] == neg_inf() ? 0.0f : -m[r];
    sum[r] = 0.0f;
  }
#pragma unroll
  for (int i = 0; i < Traits<P>::kSAcc; ++i) {
    const int r = (i / 2) % 2;
    const float p = exp2_ftz(fmaf(sc[i], scale_log2[r], neg_m[r]));
    sc[i] = p;
    sum[r] += p;
  }
}

template <auto P>
ATTNJIT_DEVICE void scale_rows(float (&o)[Traits<P>::kAcc], const float (&f)[2]) {
#pragma unroll
  for (int i = 0; i < Traits<P>::kAcc; ++i) o[i] *= f[(i / 2) % 2];
}

// P (f32 accumulators, times f per row) → RS A fragments, one per k16 step.
template <auto P>
ATTNJIT_DEVICE void to_a_fragments(const float (&sc)[Traits<P>::kSAcc], u32 (&frag)[4][4]) {
#pragma unroll
  for (int ks = 0; ks < P.block_n / 16; ++ks) wgmma_acc_to_a_fragment<P.dtype>(sc, ks, frag[ks]);
}

// P · f (per row) → a [64 × 64] K-major 128B-swizzled smem tile (the wgmma A layout),
// then fenced for the async proxy that reads it.
template <auto P>
ATTNJIT_DEVICE void store_p(const float (&sc)[Traits<P>::kSAcc], const float (&f)[2], u32 tile) {
  using T = Traits<P>;
  // 16 swizzled addresses per thread, loop-invariant: computed here from opaque values
  // rather than hoisted out of the tile loop (and spilled).
  u32 tid = static_cast<u32>(thread_in_warpgroup());
  opaque(tile);
  opaque(tid);
#pragma unroll
  for (int i = 0; i < T::kSAcc; i += 2) {
    const WgmmaCoord c = wgmma_acc_coord(static_cast<int>(tid), i);
    const float g = f[(i / 2) % 2];
    st_shared_u32(tile + QTile<P>::byte_offset(c.row, c.col * T::kElem),
                  pack2<P.dtype>(sc[i] * g, sc[i + 1] * g));
  }
  fence_proxy_async_smem();
}

// Zeroes key rows [first, 64) of this warpgroup's 4 V chunks of a KV tile (stale rows may
// hold NaN, and P = 0 does not cancel NaN), then syncs the warpgroup so that every warp's
// zeros are visible to its wgmma. Only the last tile of a sequence can be partial.
template <auto P>
ATTNJIT_DEVICE void zero_v_rows(u32 tile, int first, int half) {
  using T = Traits<P>;
  // A row of a chunk is one 128-byte line (swizzling permutes its 16-byte units): a warp
  // zeroes one row of all 4 chunks (32 units), the 4 warps take every 4th row.
  const int tid = thread_in_warpgroup();
  const u32 base = tile + static_cast<u32>(half * T::kLoChunks * T::kChunkBytes +
                                           (tid % 32 / 8) * T::kChunkBytes + tid % 8 * 16);
#pragma unroll 1
  for (int row = first + tid / 32; row < P.block_n; row += 4)
    st_shared_zero16(base + static_cast<u32>(row * 128));
  fence_proxy_async_smem();
  named_barrier_sync(half == 0 ? Bar::kWg0Local : Bar::kWg1Local, kWarpgroupThreads);
}

// ---- epilogue ----------------------------------------------------------------------------

// Staged rows [0, 64) (pitch bytes apart) → dst rows row0.. (kRowBytes apart), 16 bytes
// per thread per step; rows at or past rows_b (the sequence's q_len·h) are the tile's
// padding and stay unwritten.
template <auto P, int kRowBytes>
ATTNJIT_DEVICE void copy_rows(u32 stage, u32 pitch, u8* dst, int row0, int rows_b) {
  constexpr int kUnits = kRowBytes / 16;
#pragma unroll 1
  for (int u = static_cast<int>(threadIdx.x); u < P.block_m * kUnits; u += Traits<P>::kThreads) {
    const int row = u / kUnits, piece = u % kUnits;
    if (row0 + row >= rows_b) break;  // rows are in order: the rest are padding too
    *reinterpret_cast<uint4*>(dst + static_cast<i64>(row0 + row) * kRowBytes + piece * 16) =
        ld_shared_16(stage + static_cast<u32>(row) * pitch + static_cast<u32>(piece) * 16);
  }
}

// The e4m3 form of the unsplit output (a.out_scale set; bf16 only): each staged bf16 row
// quantized per 128-column group as the MLA branch's output projection takes it
// (common/act_quant.cuh: the codes it would have made from the bf16 row) — codes to out,
// σ to out_scale. A warp takes a (row, group), 4 values a lane: 8-byte reads of 256
// contiguous stage bytes, 4-byte stores of 128 contiguous code bytes, and few registers at
// the end of a kernel that runs at the limit (16 values a lane spilled 8 bytes there).
template <auto P>
ATTNJIT_DEVICE void quantize_rows(u32 stage, u32 pitch, u8* codes, float* scales, int row0, int rows_b) {
  constexpr int kGroups = kValueDim / 128, kWarps = Traits<P>::kThreads / kWarpSize;
#pragma unroll 1
  for (int p = static_cast<int>(threadIdx.x) / kWarpSize; p < P.block_m * kGroups; p += kWarps) {
    const int row = p / kGroups, g = p % kGroups;
    if (row0 + row >= rows_b) break;  // warp-uniform: rows are in order, the rest padding
    const i64 out_row = row0 + row;
    act_quantize_group(stage + static_cast<u32>(row) * pitch + static_cast<u32>(g * 256),
                       codes + out_row * kValueDim + g * 128, scales + out_row * kGroups + g);
  }
}

// Output through shared memory (the KV buffers are free once both warpgroups have passed
// kRowSums): each thread writes its normalized O fragment into a row-major staging tile,
// then all 256 threads copy whole rows out in 16-byte pieces, coalesced. Row pitches are
// padded by 16 / 32 bytes so that the 8 rows one fragment store touches hit distinct banks.
//   unsplit: [64 rows][512] in q's dtype → out (and lse, from WG0), or its e4m3 codes and
//            σ per 128 columns (quantize_rows)
//   split:   [64 rows][512] f32 → the partial for mla_decode_combine (and its lse)
// m: final row max (log2 units); l: the full row sum (0: the row saw no key → 0, -inf).
template <auto P>
ATTNJIT_DEVICE void write_output(u32 stage, const float (&o)[Traits<P>::kAcc], int half,
                                 const Args& a, const Tile& t, const float (&m)[2],
                                 const float (&l)[2]) {
  using T = Traits<P>;
  constexpr u32 kPitch = kValueDim * T::kElem + 16;   // unsplit staging row
  constexpr u32 kPitchF32 = kValueDim * 4 + 32;       // split staging row
  const bool split = t.slot >= 0;
  const int tid = thread_in_warpgroup();
  const int row0 = t.row0;
  const int rows_b = t.seq.q_len * P.num_heads;            // this sequence's rows
  const int part_rows = a.q.q_len * P.num_heads;           // a partial's rows (the bound)
  const i64 part_row0 = static_cast<i64>(t.slot) * part_rows;
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) inv[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
  opaque(stage);
#pragma unroll
  for (int i = 0; i < T::kAcc; i += 2) {
    const WgmmaCoord c = wgmma_acc_coord(tid, i);
    const u32 col = static_cast<u32>(half * T::kHalfCols + c.col);
    const float x = o[i] * inv[(i / 2) % 2], y = o[i + 1] * inv[(i / 2) % 2];
    if (split)
      st_shared_f32x2(stage + c.row * kPitchF32 + col * 4, x, y);
    else
      st_shared_u32(stage + c.row * kPitch + col * T::kElem, pack2<P.dtype>(x, y));
  }
  if (half == 0 && tid % 4 == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int gr = row0 + wgmma_acc_coord(tid, 2 * r).row;  // packed row = q_idx·h + head
      if (gr >= rows_b) continue;
      const float lse = l[r] > 0.0f ? (m[r] + __log2f(l[r])) * kLn2 : neg_inf();
      if (split)
        a.part_lse[part_row0 + gr] = lse;
      else if (a.lse != nullptr)
        a.lse[lse_index(a.q, t.batch, t.seq, P.num_heads, gr % P.num_heads, gr / P.num_heads)] = lse;
    }
  }
  named_barrier_sync_unaligned(Bar::kOutStaged, kBothWarpgroups);

  if (split)
    copy_rows<P, kValueDim * 4>(stage, kPitchF32,
                                reinterpret_cast<u8*>(a.part_out + part_row0 * kValueDim), row0,
                                rows_b);
  else if (P.dtype == DType::kBF16 && a.out_scale != nullptr)
    quantize_rows<P>(stage, kPitch, static_cast<u8*>(a.out) + static_cast<i64>(t.seq.start) * P.num_heads * kValueDim,
                     a.out_scale + static_cast<i64>(t.seq.start) * P.num_heads * (kValueDim / 128), row0, rows_b);
  else
    copy_rows<P, kValueDim * T::kElem>(
        stage, kPitch,
        static_cast<u8*>(a.out) + static_cast<i64>(t.seq.start) * P.num_heads * kValueDim * T::kElem,
        row0, rows_b);
}

}  // namespace attnjit::mla_decode::seesaw
