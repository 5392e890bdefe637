#pragma once
// sm90_mla_decode_sparse: DeepSeek V3.2 sparse MLA decode on Hopper.
//
// One CTA = 64 heads (row tile blockIdx.x) of one query token (blockIdx.z = batch·q_len +
// q_idx) over one split (blockIdx.y) of that token's key list: its main top-k keys, then
// its extra-cache keys, cut into 64-key tiles. Query tokens of a sequence share no keys
// (each has its own indices), so rows are never packed across tokens; h < 64 leaves the
// tile's other rows idle (their output is discarded).
//
// Three warpgroups, mla_decode's softmax_wg schedule (sm90_mla_decode.cuh) as the model:
//   WG0  gathers KV tiles by index into the 128B-swizzled layout wgmma reads (bf16 rows by
//        16-byte cp.async, zero-filled for a skipped index; fp8 rows loaded, dequantized
//        to bf16 with their block scales and stored), then S = Q·Kᵀ, mask, online softmax;
//        P and the row rescale factors to shared memory;
//   WG1, WG2  O[:, half] = O·scale + P·V[:, half] (V = the first 512 columns of the tile).
// A tile's stage is refilled once both P·V warpgroups are done with it (Bar::kPFree), so
// the gather of tile i + 1 overlaps the P·V of tile i.
//
// Safety: an index outside [0, rows) is never dereferenced — its K/V row is zero-filled and
// its score replaced by -inf, so NaN in unreferenced rows cannot reach the output. A row
// that sees no valid key writes out 0 and lse -inf.
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
#include "mla_decode_sparse/layout.cuh"

namespace attnjit::mla_decode_sparse {

using namespace attnjit::layout::mla_decode_sparse;
using mla_decode::lse_index;
using mla_decode::Seq;
using mla_decode::sequence;

enum class CacheLayout : int { kFp8, kBF16 };

template <auto P>
struct Traits {
  static constexpr int kThreads = 3 * kWarpgroupThreads;
  static constexpr int kChunks = kHeadDim * 2 / 128;       // 9 column spans of 64 bf16
  static constexpr int kVChunks = kValueDim * 2 / 128;     // 8 of them are V
  static constexpr int kChunkBytes = P.block_n * 128;      // [block_n keys][128 B]
  static constexpr int kTileBytes = kChunks * kChunkBytes;  // 72 KiB
  static constexpr int kQBytes = kChunks * 64 * 128;       // Q [64 rows][576] bf16
  static constexpr int kPBytes = 64 * P.block_n * 2;       // P [64 rows][64 keys] bf16
  static constexpr int kHalfCols = kValueDim / 2;          // output columns per P·V warpgroup
  static constexpr int kBarThreads = kThreads;             // every named barrier: all three
  static constexpr bool kFp8 = P.cache_layout == CacheLayout::kFp8;

  static_assert(P.block_n == 64, "64-key tiles: P is one 128-byte swizzle span per row");
  static_assert(P.stages == 2, "Q + 2 × 72 KiB tiles fill the 227 KiB");
  static_assert(P.num_heads >= 8 && P.num_heads <= 128, "h in 8..128");
};

enum class Bar : u32 {
  kPFree = 1,   // both P·V warpgroups finished reading P and the scales of the last tile
  kPReady = 2,  // WG0 wrote P and the row scales of this tile
  kStats = 3,   // WG0 wrote the final row max and sum (it arrives, the P·V warpgroups wait)
};

template <auto P>
struct SharedStorage {
  using T = Traits<P>;
  alignas(1024) u8 q[T::kQBytes];                // Q [64 rows][576] as 9 chunks
  alignas(1024) u8 kv[P.stages][T::kTileBytes];  // K [64 keys][576] as 9 chunks; V = chunks 0..7
  alignas(1024) u8 p[T::kPBytes];                // P [64 rows][64 keys], 128B swizzle
  int valid[P.stages][P.block_n];                // 1: the key's row was gathered; 0: masked
  float row_scale[64];                           // exp2(m_old - m_new) of the current tile
  float row_max[64];                             // final m (log2 units)
  float row_sum[64];                             // final l
  MBarrier q_full;
  MBarrier kv_full[P.stages];  // the 128 WG0 threads' stores of a stage are complete
};

template <auto P>
inline constexpr unsigned kDynamicSmemBytes = sizeof(SharedStorage<P>) + 1024;
template <auto P>
inline constexpr bool kPlanMatches = kDynamicSmemBytes<P> == smem_bytes(P.block_n, P.stages);

using QTile = WgmmaKMajorTile<Swizzle::k128B, 64>;     // Q and P: K-major, 64 rows
using KTile = WgmmaKMajorTile<Swizzle::k128B, 64>;     // K: K-major, 64 key rows
using VTile = WgmmaMNMajorTile<Swizzle::k128B, 64>;    // V: MN-major, 64 key rows

// What a CTA works on.
struct Work {
  int batch, q_idx, slot;  // slot: the partial this CTA writes, or -1: out directly
  i64 token;               // row of q / indices
  int row0;                // first head of this CTA's tile
  int n_main, n_keys;      // the token's main keys, main + extra
  int tile_begin, tile_end;
};

ATTNJIT_DEVICE int clamped_length(const Pool& p, i64 token, int batch) {
  if (p.rows == nullptr) return 0;
  const int n = p.lens == nullptr ? p.topk : p.lens[p.lens_per_token ? token : batch];
  return n < 0 ? 0 : (n > p.topk ? p.topk : n);
}

template <auto P>
ATTNJIT_DEVICE Work locate(const Args& a, const Seq& seq) {
  Work w;
  const int z = static_cast<int>(blockIdx.z);
  w.batch = z / a.q.q_len;
  w.q_idx = z % a.q.q_len;
  w.row0 = static_cast<int>(blockIdx.x) * 64;
  w.token = static_cast<i64>(seq.start) + w.q_idx;
  w.n_main = clamped_length(a.main, w.token, w.batch);
  w.n_keys = w.n_main + clamped_length(a.extra, w.token, w.batch);
  const int split = static_cast<int>(blockIdx.y);
  w.slot = a.num_splits > 1 ? w.batch * a.num_splits + split : -1;
  const int tiles = (w.n_keys + P.block_n - 1) / P.block_n;
  const int per_split = (tiles + a.num_splits - 1) / a.num_splits;
  w.tile_begin = min(tiles, split * per_split);
  w.tile_end = min(tiles, w.tile_begin + per_split);
  return w;
}

// Key `j` of the token's list: the byte address of its row, or null when the index is
// skipped (outside [0, rows)) or j is past the list.
template <auto P>
ATTNJIT_DEVICE const u8* key_row(const Args& a, const Work& w, int j) {
  if (j >= w.n_keys) return nullptr;
  // Field by field: a reference chosen at run time between two members of the parameter
  // block would make ptxas copy the whole block to local memory.
  const bool main = j < w.n_main;
  const int* indices = main ? a.main.indices : a.extra.indices;
  const i64 stride = main ? a.main.stride : a.extra.stride;
  const int num_rows = main ? a.main.num_rows : a.extra.num_rows;
  const u8* rows = static_cast<const u8*>(main ? a.main.rows : a.extra.rows);
  const int idx = indices[w.token * stride + (main ? j : j - w.n_main)];
  if (idx < 0 || idx >= num_rows) return nullptr;
  return rows + static_cast<i64>(idx) * row_bytes(Traits<P>::kFp8);
}

// e4m3 pair (low byte first) → two f32, exactly (through f16).
ATTNJIT_DEVICE void e4m3x2_to_f32(unsigned short v, float& lo, float& hi) {
  u32 h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(v));
  asm("{.reg .b16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h;}"
      : "=f"(lo), "=f"(hi)
      : "r"(h2));
}

// WG0 fills stage `st` with tile `tile` of the key list. Thread t serves key t / 2; the
// two threads of a key take alternate 16-byte units, so a pair covers one 32-byte sector.
// bf16: 36 cp.async each, zero-filled for a skipped key (src-size 0 reads nothing).
// fp8: 16 content units (16 e4m3 → 32 bytes of bf16, times the block's scale) and 4 rope
// units each. Ends with the stores complete, made visible to wgmma (async proxy), and
// this thread's arrival on kv_full[st].
template <auto P>
ATTNJIT_DEVICE void gather_tile(SharedStorage<P>& s, const Args& a, const Work& w, int tile, int st) {
  using T = Traits<P>;
  const int tid = thread_in_warpgroup();
  const int key = tid / 2, half = tid % 2;
  const u8* row = key_row<P>(a, w, tile * P.block_n + key);
  // Shared addresses as u32 throughout: `s` was realigned through integer arithmetic, so
  // plain pointer stores would be generic ones (common/smem.cuh).
  if (half == 0) st_shared_u32(smem_u32(&s.valid[st][key]), row != nullptr ? 1u : 0u);
  const u32 dst0 = smem_u32(s.kv[st]);
  if constexpr (!T::kFp8) {
    const u8* src_base = row != nullptr ? row : static_cast<const u8*>(a.main.rows);
    const u32 src_bytes = row != nullptr ? 16u : 0u;
#pragma unroll 4
    for (int i = 0; i < kBf16RowBytes / 32; ++i) {
      const int unit = 2 * i + half;
      const u32 dst = dst0 + KTile::byte_offset(static_cast<u32>(key), static_cast<u32>(16 * unit));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst),
                   "l"(src_base + 16 * unit), "r"(src_bytes)
                   : "memory");
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
  } else {
    float scale[kFp8Scales] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (row != nullptr) {
      const float4 sc = *reinterpret_cast<const float4*>(row + kFp8ScaleOffset);
      scale[0] = sc.x, scale[1] = sc.y, scale[2] = sc.z, scale[3] = sc.w;
    }
    // Fully unrolled: unit / 8 = i / 4 is then a constant, so `scale` stays in registers.
#pragma unroll
    for (int i = 0; i < kValueDim / 32; ++i) {  // 16 content units of 16 values
      const int unit = 2 * i + half;
      uint4 raw = make_uint4(0, 0, 0, 0);
      if (row != nullptr) raw = __ldg(reinterpret_cast<const uint4*>(row) + unit);
      const float sc = scale[i * 32 / kFp8ScaleBlock];
      const u32 words[4] = {raw.x, raw.y, raw.z, raw.w};
      u32 out[8];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        float f0, f1, f2, f3;
        e4m3x2_to_f32(static_cast<unsigned short>(words[k] & 0xffffu), f0, f1);
        e4m3x2_to_f32(static_cast<unsigned short>(words[k] >> 16), f2, f3);
        out[2 * k] = pack2<DType::kBF16>(f0 * sc, f1 * sc);
        out[2 * k + 1] = pack2<DType::kBF16>(f2 * sc, f3 * sc);
      }
      // 16 bf16 = 32 bytes: two 16-byte units of the bf16 row, each at its swizzled place.
      st_shared_16(dst0 + KTile::byte_offset(key, 32 * unit), make_uint4(out[0], out[1], out[2], out[3]));
      st_shared_16(dst0 + KTile::byte_offset(key, 32 * unit + 16), make_uint4(out[4], out[5], out[6], out[7]));
    }
#pragma unroll
    for (int i = 0; i < kRopeDims * 2 / 32; ++i) {  // 4 rope units of 8 bf16, as stored
      const int unit = 2 * i + half;
      uint4 raw = make_uint4(0, 0, 0, 0);
      if (row != nullptr) raw = __ldg(reinterpret_cast<const uint4*>(row + kFp8RopeOffset) + unit);
      st_shared_16(dst0 + KTile::byte_offset(key, 2 * kValueDim + 16 * unit), raw);
    }
  }
  fence_proxy_async_smem();  // the generic-proxy stores are read by wgmma (async proxy)
  mbarrier_arrive(&s.kv_full[st]);
}

struct RowState {
  float m[2];  // running max (log2 units, scaled)
  float l[2];  // running sum of exp2 (this thread's columns; reduced at the end)
};

// WG0: gathers, then per tile S = Q·Kᵀ, mask, online softmax; P and scales to shared memory.
template <auto P>
ATTNJIT_DEVICE void softmax_warpgroup(SharedStorage<P>& s, const Args& a, const Work& w) {
  const int tid = thread_in_warpgroup();
  float sc[P.block_n / 2];  // S, then P: [64 × 64] accumulator fragment
  RowState rs{{neg_inf(), neg_inf()}, {0.0f, 0.0f}};
  for (int i = 0; i < P.stages && w.tile_begin + i < w.tile_end; ++i)
    gather_tile<P>(s, a, w, w.tile_begin + i, i);
  if (w.tile_begin < w.tile_end) mbarrier_wait(&s.q_full, 0);
  const u32 q_addr = smem_u32(s.q);
  for (int tile = w.tile_begin, i = 0; tile < w.tile_end; ++tile, ++i) {
    const int st = i % P.stages;
    mbarrier_wait(&s.kv_full[st], static_cast<u32>(i / P.stages) & 1u);
    const u32 k_addr = smem_u32(s.kv[st]);
    // S[64 × 64] = Q[64 × 576] · K[64 × 576]ᵀ: 9 chunks × 4 k16 steps, fully unrolled
    // (a rolled loop made ptxas serialize the wgmmas, see sm90_mla_decode.cuh).
    wgmma_fence();
#pragma unroll
    for (int c = 0; c < Traits<P>::kChunks; ++c)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const u32 k_byte = static_cast<u32>(c * 128 + kk * 32);
        wgmma_ss<DType::kBF16, P.block_n>(sc, QTile::desc(q_addr, k_byte), KTile::desc(k_addr, k_byte),
                                          c > 0 || kk > 0);
      }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(sc);

    // Mask skipped keys by replacement, then the online softmax (4 lanes share a row).
    float tile_max[2] = {neg_inf(), neg_inf()};
    const u32 valid_addr = smem_u32(s.valid[st]);
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

    named_barrier_sync(static_cast<u32>(Bar::kPFree), Traits<P>::kBarThreads);
    const u32 p_addr = smem_u32(s.p);
#pragma unroll
    for (int i2 = 0; i2 < P.block_n / 2; i2 += 2) {
      const WgmmaCoord c = wgmma_acc_coord(tid, i2);
      st_shared_u32(p_addr + QTile::byte_offset(c.row, c.col * 2), pack2<DType::kBF16>(sc[i2], sc[i2 + 1]));
    }
    if (tid % 4 == 0) {
      st_shared_f32(smem_u32(&s.row_scale[wgmma_acc_coord(tid, 0).row]), scale[0]);
      st_shared_f32(smem_u32(&s.row_scale[wgmma_acc_coord(tid, 2).row]), scale[1]);
    }
    fence_proxy_async_smem();  // P is read by the P·V warpgroups' wgmma
    named_barrier_arrive(static_cast<u32>(Bar::kPReady), Traits<P>::kBarThreads);
    // Tile i - 1's stage is free (both P·V warpgroups passed kPFree after reading it):
    // refill it with the tile `stages` after it, while they run P·V of tile i.
    if (tile > w.tile_begin && tile - 1 + P.stages < w.tile_end)
      gather_tile<P>(s, a, w, tile - 1 + P.stages, (i - 1) % P.stages);
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
  named_barrier_arrive(static_cast<u32>(Bar::kStats), Traits<P>::kBarThreads);
}

// Writes one P·V warpgroup's O[64 × 256] (columns [half·256, +256)) for its two rows per
// thread. Unsplit: bf16 out and lse, with the sink in the denominator; split: the f32
// partial and its lse (the combine applies the sink). A row with l = 0 saw no key.
template <auto P>
ATTNJIT_DEVICE void write_output(const float (&o)[kValueDim / 4], int half, const Args& a,
                                 const Work& w, const Seq& seq, const float (&m)[2],
                                 const float (&l)[2]) {
  constexpr int kHalfCols = kValueDim / 2;
  const int tid = thread_in_warpgroup();
  // Float i of this thread sits at column col0 + 8·(i/4) (+1 for odd i): one base pointer
  // per row and compile-time offsets, so the 64 stores of a row need no address registers.
  const int col0 = half * kHalfCols + wgmma_acc_coord(tid, 0).col;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int head = w.row0 + wgmma_acc_coord(tid, 2 * r).row;
    if (head >= P.num_heads) continue;  // a row of the next token's (h < 64), discarded
    const bool empty = !(l[r] > 0.0f);
    const float lse = empty ? neg_inf() : (m[r] + __log2f(l[r])) * kLn2;
    const int prow = w.q_idx * P.num_heads + head;  // packed row, as mla_decode's partials
    if (w.slot < 0) {
      const float sink = a.sink != nullptr ? a.sink[head] * kLog2e : neg_inf();
      const float denom = l[r] + (empty || sink == neg_inf() ? 0.0f : exp2f(sink - m[r]));
      const float inv = empty ? 0.0f : 1.0f / denom;
      u32* out = reinterpret_cast<u32*>(static_cast<u16*>(a.out) +
                                        ((static_cast<u64>(seq.start) * P.num_heads + prow) * kValueDim +
                                         static_cast<u32>(col0)));
#pragma unroll
      for (int i = 2 * r; i < kHalfCols / 2; i += 4)
        out[4 * (i / 4)] = pack2<DType::kBF16>(o[i] * inv, o[i + 1] * inv);
      if (a.lse != nullptr && half == 0 && tid % 4 == 0)
        a.lse[lse_index(a.q, w.batch, seq, P.num_heads, head, w.q_idx)] = lse;
    } else {
      const float inv = empty ? 0.0f : 1.0f / l[r];
      const u64 part = static_cast<u64>(w.slot) * static_cast<u32>(a.q.q_len * P.num_heads) + prow;
      float2* out = reinterpret_cast<float2*>(a.part_out + part * kValueDim + static_cast<u32>(col0));
#pragma unroll
      for (int i = 2 * r; i < kHalfCols / 2; i += 4) out[4 * (i / 4)] = make_float2(o[i] * inv, o[i + 1] * inv);
      if (half == 0 && tid % 4 == 0) a.part_lse[part] = lse;
    }
  }
}

// WG1 / WG2: O[:, half·256 + 0..256) = O·scale + P · V[:, same columns], P from smem.
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
  for (int tile = w.tile_begin, i = 0; tile < w.tile_end; ++tile, ++i) {
    const int st = i % P.stages;
    if (tile == w.tile_begin) named_barrier_arrive(static_cast<u32>(Bar::kPFree), T::kBarThreads);
    named_barrier_sync(static_cast<u32>(Bar::kPReady), T::kBarThreads);
    // Already complete (WG0 waited on it first): makes its stores visible here.
    mbarrier_wait(&s.kv_full[st], static_cast<u32>(i / P.stages) & 1u);
    const u32 v_addr = smem_u32(s.kv[st]);
    const float scale0 = ld_shared_f32(smem_u32(&s.row_scale[wgmma_acc_coord(tid, 0).row]));
    const float scale1 = ld_shared_f32(smem_u32(&s.row_scale[wgmma_acc_coord(tid, 2).row]));
#pragma unroll
    for (int i2 = 0; i2 < T::kHalfCols / 2; ++i2) o[i2] *= (i2 / 2) % 2 ? scale1 : scale0;
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < P.block_n / 16; ++ks)
      wgmma_ss<DType::kBF16, T::kHalfCols, WgmmaMajor::kK, WgmmaMajor::kMN>(
          o, QTile::desc(p_addr, ks * 32), VTile::desc(v_addr, ks * 16, v_col_byte), true);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(o);
    if (tile + 1 < w.tile_end) named_barrier_arrive(static_cast<u32>(Bar::kPFree), T::kBarThreads);
  }
  named_barrier_sync(static_cast<u32>(Bar::kStats), T::kBarThreads);
  const int r0 = wgmma_acc_coord(tid, 0).row, r1 = wgmma_acc_coord(tid, 2).row;
  const float m[2] = {ld_shared_f32(smem_u32(&s.row_max[r0])), ld_shared_f32(smem_u32(&s.row_max[r1]))};
  const float l[2] = {ld_shared_f32(smem_u32(&s.row_sum[r0])), ld_shared_f32(smem_u32(&s.row_sum[r1]))};
  write_output<P>(o, half, a, w, seq, m, l);
}

template <auto P>
__global__ void __launch_bounds__(Traits<P>::kThreads, 1)
    kernel(const __grid_constant__ TmaDesc q_map,  // [total_q·h, 576] bf16, box [64, 64]
           const Args args) {
  static_assert(kPlanMatches<P>, "mla_decode_sparse/layout.cuh's smem_bytes is not this SharedStorage's");
  const Seq seq = sequence(args.q, static_cast<int>(blockIdx.z) / args.q.q_len);
  if (static_cast<int>(blockIdx.z) % args.q.q_len >= seq.q_len) return;  // ragged: no such token
  extern __shared__ u8 smem_raw[];
  auto& s = *reinterpret_cast<SharedStorage<P>*>((reinterpret_cast<u64>(smem_raw) + 1023) & ~u64(1023));
  const Work w = locate<P>(args, seq);
  const int wg = warpgroup_id_uniform();
  if (threadIdx.x == 0) {
    u32 dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    if (dyn < kDynamicSmemBytes<P>) __trap();  // host and device disagree on the plan
    prefetch_tma_desc(q_map);
    mbarrier_init(&s.q_full, 1);
    for (int i = 0; i < P.stages; ++i) mbarrier_init(&s.kv_full[i], kWarpgroupThreads);
    fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0 && w.tile_begin < w.tile_end) {  // this token's 64 head rows
    const int q_row = static_cast<int>(w.token) * P.num_heads + w.row0;
    mbarrier_arrive_expect_tx(&s.q_full, Traits<P>::kQBytes);
    for (int c = 0; c < Traits<P>::kChunks; ++c)
      tma_load_2d(q_map, &s.q_full, s.q + c * 64 * 128, c * 64, q_row);
  }
  if (wg == 0)
    softmax_warpgroup<P>(s, args, w);
  else
    pv_warpgroup<P>(s, args, w, seq, wg - 1);
  pdl_launch_dependents();  // the combine kernel may start its prologue
}

}  // namespace attnjit::mla_decode_sparse
