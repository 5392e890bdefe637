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
  static constexpr bool kFp8 = P.cache_layout == CacheLayout::kFp8;
  static constexpr int kThreads = 3 * kWarpgroupThreads;
  static constexpr int kChunks = kHeadDim * 2 / 128;       // 9 column spans of 64 bf16
  static constexpr int kChunkBytes = P.block_n * 128;      // [block_n keys][128 B]
  static constexpr int kTileBytes = kChunks * kChunkBytes;  // 36 KiB at 32 keys
  static constexpr int kQBytes = kChunks * 64 * 128;       // Q [64 rows][576] bf16
  static constexpr int kPBytes = 64 * P.block_n * 2;       // P [64 rows][block_n keys] bf16
  // P rows are one swizzle span: 64 keys fill 128 B, 32 keys 64 B.
  static constexpr Swizzle kPSwizzle = P.block_n == 64 ? Swizzle::k128B : Swizzle::k64B;
  static constexpr int kHalfCols = kValueDim / 2;          // output columns per P·V warpgroup
  static constexpr int kBarThreads = kThreads;             // kPFree, kPReady, kStats: all three
  static constexpr int kKvStages = kv_stages(kFp8, P.stages);
  static constexpr int kRawStages = kFp8 ? P.stages : 0;
  static constexpr int kRawBytes = raw_tile_bytes(P.block_n);
  // The softmax warpgroup's threads per key when it gathers or dequantizes a tile.
  static constexpr int kThreadsPerKey = kWarpgroupThreads / P.block_n;

  static_assert(P.block_n == 32 || P.block_n == 64, "32- or 64-key tiles (P is one swizzle span)");
  static_assert(P.stages >= 2 && P.stages <= 4, "gather ring of 2..4 tiles");
  static_assert(P.num_heads >= 8 && P.num_heads <= 128, "h in 8..128");
};

enum class Bar : u32 {
  kPFree = 1,     // both P·V warpgroups finished reading P and the scales of the last tile
  kPReady = 2,    // WG0 wrote P and the row scales of this tile
  kStats = 3,     // WG0 wrote the final row max and sum (it arrives, the P·V warpgroups wait)
  kWg0 = 4,       // WG0 only: its gather bookkeeping (valid) or widened tile is complete
};

// The fp8 raw ring: rows as stored (kRawRowStride apart), filled by cp.async.
template <auto P, bool kFp8 = Traits<P>::kFp8>
struct RawRing {};
template <auto P>
struct RawRing<P, true> {
  alignas(128) u8 raw[Traits<P>::kRawStages][Traits<P>::kRawBytes];
  int raw_valid[Traits<P>::kRawStages][P.block_n];  // 1: the key's row was gathered
  MBarrier raw_full[Traits<P>::kRawStages];         // the 128 WG0 threads' cp.async landed
};

template <auto P>
struct SharedStorage : RawRing<P> {
  using T = Traits<P>;
  alignas(1024) u8 q[T::kQBytes];                     // Q [64 rows][576] as 9 chunks
  alignas(1024) u8 kv[T::kKvStages][T::kTileBytes];   // K [block_n keys][576] as 9 chunks; V = chunks 0..7
  alignas(1024) u8 p[T::kPBytes];                     // P [64 rows][block_n keys], kPSwizzle
  int valid[T::kKvStages][P.block_n];                 // 1: the key's row was gathered; 0: masked
  float row_scale[64];                                // exp2(m_old - m_new) of the current tile
  float row_max[64];                                  // final m (log2 units)
  float row_sum[64];                                  // final l
  MBarrier q_full;
  MBarrier kv_full[T::kKvStages];  // bf16: the 128 WG0 threads' cp.async of a stage landed
};

template <auto P>
inline constexpr unsigned kDynamicSmemBytes = sizeof(SharedStorage<P>) + 1024;
template <auto P>
inline constexpr bool kPlanMatches =
    kDynamicSmemBytes<P> == smem_bytes(Traits<P>::kFp8, P.block_n, P.stages);

using QTile = WgmmaKMajorTile<Swizzle::k128B, 64>;  // Q: K-major, 64 rows
template <auto P>
using KTile = WgmmaKMajorTile<Swizzle::k128B, P.block_n>;  // K: K-major, block_n key rows
template <auto P>
using PTile = WgmmaKMajorTile<Traits<P>::kPSwizzle, 64>;  // P: K-major, 64 rows
template <auto P>
using VTile = WgmmaMNMajorTile<Swizzle::k128B, P.block_n>;  // V: MN-major, block_n key rows

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

// The index of key `j` of the token's list as stored (any value), or -1 past the list.
// Loaded a tile before its gather, so the load's latency hides behind a tile's S.
template <auto P>
ATTNJIT_DEVICE int key_index(const Args& a, const Work& w, int j) {
  if (j >= w.n_keys) return -1;
  // Field by field: a reference chosen at run time between two members of the parameter
  // block would make ptxas copy the whole block to local memory.
  const bool main = j < w.n_main;
  const int* indices = main ? a.main.indices : a.extra.indices;
  const i64 stride = main ? a.main.stride : a.extra.stride;
  return indices[w.token * stride + (main ? j : j - w.n_main)];
}

// Key `j`'s row address for index `idx`, or null when idx is outside [0, rows) of its pool
// or j is past the list: such a row is never dereferenced.
template <auto P>
ATTNJIT_DEVICE const u8* key_row(const Args& a, const Work& w, int j, int idx) {
  if (j >= w.n_keys) return nullptr;
  const bool main = j < w.n_main;
  const int num_rows = main ? a.main.num_rows : a.extra.num_rows;
  const u8* rows = static_cast<const u8*>(main ? a.main.rows : a.extra.rows);
  if (idx < 0 || idx >= num_rows) return nullptr;
  return rows + static_cast<i64>(idx) * row_bytes(Traits<P>::kFp8);
}

ATTNJIT_DEVICE void cp_async_16(u32 dst, const void* src, u32 src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}

// The mbarrier's arrival for this thread fires when its earlier cp.async have landed
// (.noinc: the barrier's count of 128 already holds it).
ATTNJIT_DEVICE void cp_async_arrive(MBarrier* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_u32(bar)) : "memory");
}

// WG0 starts the gather of tile `tile` (relative index i) without waiting for it: key
// tid / kThreadsPerKey, 16-byte units part, part + kThreadsPerKey, ... of its row, so the
// threads of a key read adjacent units. A skipped key's units are zero-filled (src-size 0
// reads nothing). bf16: into KV stage i % kKvStages at the swizzled places wgmma reads,
// completing on kv_full; fp8: the row as stored into raw stage i % kRawStages, completing
// on raw_full. `idx` is the key's index, loaded a tile earlier; on return it holds the
// index of the same key of the next tile.
template <auto P>
ATTNJIT_DEVICE void gather_tile(SharedStorage<P>& s, const Args& a, const Work& w, int tile, int i, int& idx) {
  using T = Traits<P>;
  const int tid = thread_in_warpgroup();
  const int key = tid / T::kThreadsPerKey, part = tid % T::kThreadsPerKey;
  const int j = tile * P.block_n + key;
  const u8* row = key_row<P>(a, w, j, idx);
  idx = key_index<P>(a, w, j + P.block_n);
  const u8* src = row != nullptr ? row : static_cast<const u8*>(a.main.rows);
  const u32 src_bytes = row != nullptr ? 16u : 0u;
  // Shared addresses as u32 throughout: `s` was realigned through integer arithmetic, so
  // plain pointer stores would be generic ones (common/smem.cuh).
  if constexpr (!T::kFp8) {
    const int st = i % T::kKvStages;
    if (part == 0) st_shared_u32(smem_u32(&s.valid[st][key]), row != nullptr ? 1u : 0u);
    const u32 dst0 = smem_u32(s.kv[st]);
#pragma unroll
    for (int u = part; u < kBf16RowBytes / 16; u += T::kThreadsPerKey)
      cp_async_16(dst0 + KTile<P>::byte_offset(static_cast<u32>(key), static_cast<u32>(16 * u)), src + 16 * u,
                  src_bytes);
    cp_async_arrive(&s.kv_full[st]);
  } else {
    const int st = i % T::kRawStages;
    if (part == 0) st_shared_u32(smem_u32(&s.raw_valid[st][key]), row != nullptr ? 1u : 0u);
    const u32 dst0 = smem_u32(s.raw[st]) + static_cast<u32>(key * kRawRowStride);
#pragma unroll
    for (int u = part; u < kFp8RowBytes / 16; u += T::kThreadsPerKey) cp_async_16(dst0 + 16 * u, src + 16 * u, src_bytes);
    cp_async_arrive(&s.raw_full[st]);
  }
}

// e4m3 pair (low byte first) → two f32, exactly (through f16).
ATTNJIT_DEVICE void e4m3x2_to_f32(unsigned short v, float& lo, float& hi) {
  u32 h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(v));
  asm("{.reg .b16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h;}"
      : "=f"(lo), "=f"(hi)
      : "r"(h2));
}

// fp8, WG0: raw stage i % kRawStages (landed) → KV stage i % 2 in bf16: content = e4m3 ·
// its 128-block's scale rounded to bf16 (a skipped key's zero-filled row gives 0), rope
// copied, the key's validity carried over. Key tid / kThreadsPerKey, content units of 16
// values part, part + kThreadsPerKey, ... (adjacent threads read adjacent 16 bytes). Ends
// with the stores visible to wgmma and WG0 past kWg0, so the raw stage may be refilled.
template <auto P>
ATTNJIT_DEVICE void widen_tile(SharedStorage<P>& s, int i) {
  using T = Traits<P>;
  const int tid = thread_in_warpgroup();
  const int key = tid / T::kThreadsPerKey, part = tid % T::kThreadsPerKey;
  const int rst = i % T::kRawStages, st = i % T::kKvStages;
  mbarrier_wait(&s.raw_full[rst], static_cast<u32>(i / T::kRawStages) & 1u);
  const u32 src = smem_u32(s.raw[rst]) + static_cast<u32>(key * kRawRowStride);
  const u32 dst0 = smem_u32(s.kv[st]);
  if (part == 0) st_shared_u32(smem_u32(&s.valid[st][key]), ld_shared_u32(smem_u32(&s.raw_valid[rst][key])));
  const uint4 sc4 = ld_shared_16(src + kFp8ScaleOffset);
  const float scale[kFp8Scales] = {__uint_as_float(sc4.x), __uint_as_float(sc4.y), __uint_as_float(sc4.z),
                                   __uint_as_float(sc4.w)};
  // Unit u = part + k·kThreadsPerKey lies in block (k·kThreadsPerKey) / 8 for every part
  // (kThreadsPerKey divides 8): a constant index, so `scale` stays in registers.
  static_assert(8 % T::kThreadsPerKey == 0, "a unit's scale block must not depend on part");
#pragma unroll
  for (int k = 0; k < kValueDim / 16 / T::kThreadsPerKey; ++k) {  // 16 e4m3 → 32 bytes of bf16
    const int u = part + k * T::kThreadsPerKey;
    const uint4 raw = ld_shared_16(src + 16 * u);
    const float sc = scale[k * T::kThreadsPerKey * 16 / kFp8ScaleBlock];
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
    st_shared_16(dst0 + KTile<P>::byte_offset(key, 32 * u), make_uint4(out[0], out[1], out[2], out[3]));
    st_shared_16(dst0 + KTile<P>::byte_offset(key, 32 * u + 16), make_uint4(out[4], out[5], out[6], out[7]));
  }
#pragma unroll
  for (int u = part; u < kRopeDims * 2 / 16; u += T::kThreadsPerKey)  // 8 rope units of 8 bf16, as stored
    st_shared_16(dst0 + KTile<P>::byte_offset(key, 2 * kValueDim + 16 * u), ld_shared_16(src + kFp8RopeOffset + 16 * u));
  fence_proxy_async_smem();  // the generic-proxy stores are read by wgmma (async proxy)
  named_barrier_sync(static_cast<u32>(Bar::kWg0), kWarpgroupThreads);
}

struct RowState {
  float m[2];  // running max (log2 units, scaled)
  float l[2];  // running sum of exp2 (this thread's columns; reduced at the end)
};

// WG0: runs the gather ahead, then per tile S = Q·Kᵀ, mask, online softmax; P and scales to
// shared memory. bf16: tiles i + 1 .. i + stages - 1 are in flight while S runs on tile i.
// fp8: raw tiles i + 1 .. i + stages are in flight, tile i + 1 is widened after tile i's
// P is handed over (while the P·V warpgroups run), and its raw stage refilled.
template <auto P>
ATTNJIT_DEVICE void softmax_warpgroup(SharedStorage<P>& s, const Args& a, const Work& w) {
  using T = Traits<P>;
  const int tid = thread_in_warpgroup();
  float sc[P.block_n / 2];  // S, then P: [64 × block_n] accumulator fragment
  RowState rs{{neg_inf(), neg_inf()}, {0.0f, 0.0f}};
  constexpr int kAhead = T::kFp8 ? T::kRawStages : T::kKvStages - 1;  // tiles gathered before the loop
  int idx = key_index<P>(a, w, w.tile_begin * P.block_n + tid / T::kThreadsPerKey);
  for (int i = 0; i < kAhead && w.tile_begin + i < w.tile_end; ++i)
    gather_tile<P>(s, a, w, w.tile_begin + i, i, idx);
  if constexpr (!T::kFp8) {
    named_barrier_sync(static_cast<u32>(Bar::kWg0), kWarpgroupThreads);  // valid[] of the first tiles
  } else {
    if (w.tile_begin < w.tile_end) {
      widen_tile<P>(s, 0);
      if (w.tile_begin + kAhead < w.tile_end) gather_tile<P>(s, a, w, w.tile_begin + kAhead, kAhead, idx);
    }
  }
  if (w.tile_begin < w.tile_end) mbarrier_wait(&s.q_full, 0);
  const u32 q_addr = smem_u32(s.q);
  for (int tile = w.tile_begin, i = 0; tile < w.tile_end; ++tile, ++i) {
    const int st = i % T::kKvStages;
    if constexpr (!T::kFp8) {
      mbarrier_wait(&s.kv_full[st], static_cast<u32>(i / T::kKvStages) & 1u);
      fence_proxy_async_smem();  // cp.async wrote in the generic proxy; wgmma reads in the async one
    }
    const u32 k_addr = smem_u32(s.kv[st]);
    // S[64 × block_n] = Q[64 × 576] · K[block_n × 576]ᵀ: 9 chunks × 4 k16 steps, fully
    // unrolled (a rolled loop made ptxas serialize the wgmmas, see sm90_mla_decode.cuh).
    wgmma_fence();
#pragma unroll
    for (int c = 0; c < T::kChunks; ++c)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const u32 k_byte = static_cast<u32>(c * 128 + kk * 32);
        wgmma_ss<DType::kBF16, P.block_n>(sc, QTile::desc(q_addr, k_byte), KTile<P>::desc(k_addr, k_byte),
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
    // Past kPFree the P·V warpgroups are done with tile i - 1, so its KV stage is free.
    if constexpr (!T::kFp8) {
      if (tile + kAhead < w.tile_end) gather_tile<P>(s, a, w, tile + kAhead, i + kAhead, idx);
    } else if (tile + 1 < w.tile_end) {
      widen_tile<P>(s, i + 1);  // into tile i - 1's KV stage; its raw stage is then free
      if (tile + 1 + kAhead < w.tile_end) gather_tile<P>(s, a, w, tile + 1 + kAhead, i + 1 + kAhead, idx);
    }
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
    const int st = i % T::kKvStages;
    if (tile == w.tile_begin) named_barrier_arrive(static_cast<u32>(Bar::kPFree), T::kBarThreads);
    named_barrier_sync(static_cast<u32>(Bar::kPReady), T::kBarThreads);
    if constexpr (!T::kFp8) {
      // Already complete (WG0 waited on it first): makes the cp.async data visible here.
      mbarrier_wait(&s.kv_full[st], static_cast<u32>(i / T::kKvStages) & 1u);
      fence_proxy_async_smem();
    }  // fp8: WG0 widened the tile, fenced, then arrived on kPReady
    const u32 v_addr = smem_u32(s.kv[st]);
    const float scale0 = ld_shared_f32(smem_u32(&s.row_scale[wgmma_acc_coord(tid, 0).row]));
    const float scale1 = ld_shared_f32(smem_u32(&s.row_scale[wgmma_acc_coord(tid, 2).row]));
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
    // One arrival per WG0 thread, fired by its cp.async (cp_async_arrive).
    for (int i = 0; i < Traits<P>::kKvStages; ++i) mbarrier_init(&s.kv_full[i], kWarpgroupThreads);
    if constexpr (Traits<P>::kFp8)
      for (int i = 0; i < Traits<P>::kRawStages; ++i) mbarrier_init(&s.raw_full[i], kWarpgroupThreads);
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
