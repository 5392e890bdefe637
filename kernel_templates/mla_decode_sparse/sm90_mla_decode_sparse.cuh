#pragma once
// sm90_mla_decode_sparse: DeepSeek V3.2 sparse MLA decode on Hopper.
//
// One CTA = 64 heads (row tile) of one query token (blockIdx.x = (batch·q_len + q_idx) ·
// row_tiles + row tile, layout.cuh) over one split (blockIdx.y) of that token's key list:
// its main top-k keys, then its extra-cache keys, gathered in 32-key tiles (the ring's
// stages) and computed in block_n-key steps (bf16 64: two adjacent stages; fp8 32). Query
// tokens of a sequence share no keys (each has its own indices), so rows are never packed
// across tokens; h < 64 leaves the tile's other rows idle (their output is discarded).
// mla_prefill_sparse runs this kernel with every token a one-token sequence.
//
// Three warpgroups, in one of three schedules (config `schedule`), each in its own file:
//   two_consumers (two_consumers.cuh, the default on both layouts but fp8 at h ≤ 16): a
//        producer gathers (and on fp8 rows widens the lo halves), two consumers each
//        compute S over 64 of a step's 128 keys and P·V for half the columns.
//   softmax_wg (softmax_wg.cuh, opt-in): mla_decode's softmax-warpgroup structure, the
//        two P·V warpgroups gathering.
//   narrow (narrow.cuh, fp8 at h 8 and 16, its own kernel entry and shared memory): the
//        keys on wgmma's M, the heads on N.
// This file holds what the first two share (the shared-memory plan, key rows, the fp8
// widening of 16 values, the output, the kernel) and the CTA's work, which all three read.
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
enum class Schedule : int { kSoftmaxWarpgroup, kTwoConsumers, kNarrow };

template <auto P>
struct Traits {
  static constexpr bool kFp8 = P.cache_layout == CacheLayout::kFp8;
  static constexpr bool kTwoConsumers = P.schedule == Schedule::kTwoConsumers;
  static constexpr int kThreads = 3 * kWarpgroupThreads;
  static constexpr int kChunks = kHeadDim * 2 / 128;       // 9 column spans of 64 bf16
  // Rows are gathered in 32-key tiles (the ring's stages); S and P·V step over block_n
  // keys, one or two adjacent stages (a 64-key step reads Q once per 64 keys, and its
  // 64x64 wgmmas balance their shared-memory operands against the tensor math).
  static constexpr int kTileKeys = kGatherKeys;
  // Keys per step: softmax_wg's S covers block_n keys; two_consumers' two S (one per
  // consumer) cover block_n keys each.
  static constexpr int kStepKeys = kTwoConsumers ? 2 * P.block_n : P.block_n;
  static constexpr int kStepTiles = kStepKeys / kTileKeys;  // gather tiles per step
  static constexpr int kTileBytes = kChunks * kTileKeys * 128;  // 36 KiB
  static constexpr int kQBytes = kChunks * 64 * 128;       // Q [64 rows][576] bf16
  static constexpr int kPBytes = 64 * P.block_n * 2;       // P [64 rows][block_n keys] bf16
  // A P row (block_n keys) is one swizzle span: 64 or 128 bytes.
  static constexpr Swizzle kPSwizzle = P.block_n == 32 ? Swizzle::k64B : Swizzle::k128B;
  static constexpr int kHalfCols = kValueDim / 2;          // output columns per P·V warpgroup
  // Register budgets (setmaxnreg) within the 3 × 168 the launch grants: the P·V warpgroups
  // hold O[64 × 256] (128 f32) and gather beside it; WG0 holds S[64 × block_n] only.
  static constexpr int kSoftmaxRegs = 120;
  static constexpr int kPvRegs = 192;
  static_assert(kSoftmaxRegs + 2 * kPvRegs <= 3 * 168, "register budgets over the launch's");
  // two_consumers: the producer only gathers (88: bf16 this step's and the next step's 8
  // indices and the row math without spills, 72 spilled; fp8 also widens the lo halves,
  // two keys' raw bytes, 32 registers, at a time); a consumer holds O[64 × 256], S[64 × 64]
  // and P's RS fragments, and on fp8 widens a hi half beside them (ptxas fits them in 208;
  // at 200 it spilled).
  static constexpr int kProducerRegs = 88;
  static constexpr int kConsumerRegs = 208;
  static_assert(kProducerRegs + 2 * kConsumerRegs <= 3 * 168, "register budgets over the launch's");
  static constexpr int kBarThreads = kThreads;             // kPFree, kPReady, kStats, kFirstTiles: all three
  static constexpr int kKvStages = kv_stages(kFp8, P.stages, kTwoConsumers);
  static constexpr int kRawStages = raw_ring(kFp8, kTwoConsumers) ? P.stages : 0;
  static constexpr int kRawBytes = raw_tile_bytes(kTileKeys);
  static constexpr int kRingRows = kKvStages * kTileKeys;  // KV ring: key rows of every stage
  // A P·V warpgroup's threads per key when it gathers or widens its half of a tile.
  static constexpr int kThreadsPerKey = kWarpgroupThreads / kTileKeys;
  static constexpr int kHalfUnits = kValueDim * 2 / 16 / 2;   // bf16 content: 16-byte units per half row
  static constexpr int kHalfRopeUnits = kRopeDims * 2 / 16 / 2;  // bf16 rope: 4 per half row
  static constexpr int kRowTiles = row_tiles(P.num_heads);  // CTAs per query token

  // 32-key gather tiles: 4 bf16 (or 3 raw fp8) in flight beside Q. (64-key gather tiles
  // fit only 2 bf16 stages, and their gather spilled the P·V warpgroups' registers.)
  // softmax_wg's fp8 widens into 2 bf16 stages, one 32-key step each.
  static_assert(P.block_n == 32 || (P.block_n == 64 && (!kFp8 || kTwoConsumers)),
                "32-key steps, or 64 for bf16 and two_consumers");
  static_assert(P.stages >= 2 && P.stages <= 4, "gather ring of 2..4 tiles");
  static_assert(kKvStages % kStepTiles == 0 && (kTwoConsumers || kKvStages >= 2 * kStepTiles),
                "the ring holds whole steps; softmax_wg two at least (S of one beside P·V of the "
                "other); two_consumers refills each half of a step's buffers as it is read");
  static_assert(P.num_heads >= 8 && P.num_heads <= 128, "h in 8..128");
  static_assert(!kTwoConsumers || (P.block_n == 64 && P.stages == 4),
                "two_consumers: a 64-key S per consumer (two ring stages each), 4 stages");
  // cluster 2: the token's two head tiles share each gathered row (pair.cuh).
  static constexpr bool kPaired = P.cluster == 2;
  static_assert(P.cluster == 1 || (kPaired && kTwoConsumers && !kFp8 && kRowTiles == 2),
                "cluster 2: bf16 two_consumers, a token's two 64-head tiles");
  // persistent: a CTA per SM walks the grid's x items (persistent.cuh).
  static constexpr bool kPersistent = P.persistent;
  static_assert(!kPersistent || (kTwoConsumers && !kFp8 && !kPaired), "persistent: bf16 two_consumers, cluster 1");
};

enum class Bar : u32 {
  kPFree = 1,     // both P·V warpgroups read P and the scales of the last tile, and
                  // finished the gather / widening that followed it (WG0 reads those later)
  kPReady = 2,    // WG0 wrote P and the row scales of this tile
  kStats = 3,     // WG0 wrote the final row max and sum (it arrives, the P·V warpgroups wait)
  kFirstTiles = 4,  // the P·V warpgroups gathered (fp8: and widened) the first tiles
};

// softmax_wg's fp8 raw ring: rows as stored (kRawRowStride apart), filled by cp.async.
template <auto P, bool kRaw = (Traits<P>::kRawStages > 0)>
struct RawRing {};
template <auto P>
struct RawRing<P, true> {
  alignas(128) u8 raw[Traits<P>::kRawStages][Traits<P>::kRawBytes];
  int raw_valid[Traits<P>::kRawStages][kGatherKeys];  // 1: the key's row was gathered
  MBarrier raw_full[Traits<P>::kRawStages][2];      // per half: its 128 threads' cp.async landed
};

// two_consumers: what the consumers exchange each step, and the buffer halves' free
// signals (two_consumers.cuh names the hand-offs).
template <auto P, bool kTwo = Traits<P>::kTwoConsumers>
struct ConsumerExchange {};
template <auto P>
struct ConsumerExchange<P, true> {
  // rows[0]: the step's running row max (log2 units), WG1's then WG2's; after the last
  // step rows[c] holds consumer c's row sums.
  float rows[2][64];
  MBarrier kv_empty[Traits<P>::kKvStages];  // per (64-key buffer, column half): read
  // cluster 2 only (pair.cuh): per fill, this CTA's gathered rows landed; the other CTA's
  // consumers released that half.
  MBarrier landed[Traits<P>::kKvStages];
  MBarrier peer_free[Traits<P>::kKvStages];
  MBarrier rope_sent;  // the other CTA received this one's copy of buffer 0's hi half
};

template <auto P>
struct SharedStorage : RawRing<P> {
  using T = Traits<P>;
  alignas(1024) u8 q[T::kQBytes];                     // Q [64 rows][576] as 9 chunks
  // The KV ring: K [stages · 32 keys][576] as 9 chunks of [rows][128 B], stage st's keys
  // at rows [32·st, +32), so adjacent stages form one 64-row step; V = chunks 0..7.
  alignas(1024) u8 kv[T::kKvStages * T::kTileBytes];
  alignas(1024) u8 p[T::kPBytes];                     // P [64 rows][block_n keys], kPSwizzle
  int valid[T::kRingRows];                            // per ring row: 1 gathered; 0 masked
  float row_scale[64];                                // exp2(m_old - m_new) of the current tile
  float row_max[64];                                  // final m (log2 units)
  float row_sum[64];                                  // final l
  MBarrier q_full;
  MBarrier kv_full[T::kKvStages];  // bf16: both halves' cp.async of a stage landed
                                   // (two_consumers: of a buffer's column half)
  ConsumerExchange<P> x;           // two_consumers only (else empty, within the rounding)
};

template <auto P>
inline constexpr unsigned kDynamicSmemBytes = sizeof(SharedStorage<P>) + 1024;
template <auto P>
inline constexpr bool kPlanMatches =
    kDynamicSmemBytes<P> == smem_bytes(Traits<P>::kFp8, P.block_n, P.stages, Traits<P>::kTwoConsumers);

using QTile = WgmmaKMajorTile<Swizzle::k128B, 64>;  // Q: K-major, 64 rows
template <auto P>
using KTile = WgmmaKMajorTile<Swizzle::k128B, Traits<P>::kRingRows>;  // K: K-major, the ring's rows
template <auto P>
using PTile = WgmmaKMajorTile<Traits<P>::kPSwizzle, 64>;  // P: K-major, 64 rows
template <auto P>
using VTile = WgmmaMNMajorTile<Swizzle::k128B, Traits<P>::kRingRows>;  // V: MN-major, the ring's rows

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

// This CTA's query token slot, batch·q_len + q_idx (grid x = bx, layout.cuh's row_tiles).
template <int kRowTiles>
ATTNJIT_DEVICE int token_slot_of(u32 bx) {
  return static_cast<int>(bx / static_cast<unsigned>(kRowTiles));
}
template <auto P>
ATTNJIT_DEVICE int token_slot(u32 bx = blockIdx.x) {
  return token_slot_of<Traits<P>::kRowTiles>(bx);
}

// The work of CTA (bx, blockIdx.y) for a schedule that walks steps of kStepKeys keys, each
// kStepTiles tiles (tile_begin and tile_end count tiles).
template <int kRowTiles, int kStepKeys, int kStepTiles>
ATTNJIT_DEVICE Work locate_steps(const Args& a, const Seq& seq, u32 bx) {
  Work w;
  const int z = token_slot_of<kRowTiles>(bx);
  w.batch = z / a.q.q_len;
  w.q_idx = z % a.q.q_len;
  w.row0 = static_cast<int>(bx % static_cast<unsigned>(kRowTiles)) * 64;
  w.token = static_cast<i64>(seq.start) + w.q_idx;
  w.n_main = clamped_length(a.main, w.token, w.batch);
  w.n_keys = w.n_main + clamped_length(a.extra, w.token, w.batch);
  const int split = static_cast<int>(blockIdx.y);
  w.slot = a.num_splits > 1 ? w.batch * a.num_splits + split : -1;
  // A split's run is whole steps, so a step padded past the key list's end (its keys
  // masked) never reaches into the next split's keys.
  const int steps = (w.n_keys + kStepKeys - 1) / kStepKeys;
  const int per_split = (steps + a.num_splits - 1) / a.num_splits * kStepTiles;
  w.tile_begin = min(steps * kStepTiles, split * per_split);
  w.tile_end = min(steps * kStepTiles, w.tile_begin + per_split);
  return w;
}

// In 32-key gather tiles.
template <auto P>
ATTNJIT_DEVICE Work locate(const Args& a, const Seq& seq, u32 bx = blockIdx.x) {
  using T = Traits<P>;
  return locate_steps<T::kRowTiles, T::kStepKeys, T::kStepTiles>(a, seq, bx);
}

// The CTA's Seq and Work again, from an opaque block index (not CSE'd with the prologue's):
// for the output of a role whose loop leaves no registers to hold them (ptxas spilled
// them). The parts the output does not read are dead code.
template <auto P>
ATTNJIT_DEVICE Work relocate(const Args& a, Seq& seq, u32 bx = blockIdx.x) {
  opaque(bx);
  seq = sequence(a.q, token_slot<P>(bx) / a.q.q_len);
  return locate<P>(a, seq, bx);
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
template <bool kFp8>
ATTNJIT_DEVICE const u8* gathered_row(const Args& a, const Work& w, int j, int idx) {
  if (j >= w.n_keys) return nullptr;
  const bool main = j < w.n_main;
  const int num_rows = main ? a.main.num_rows : a.extra.num_rows;
  const u8* rows = static_cast<const u8*>(main ? a.main.rows : a.extra.rows);
  if (idx < 0 || idx >= num_rows) return nullptr;
  return rows + static_cast<i64>(idx) * row_bytes(kFp8);
}
template <auto P>
ATTNJIT_DEVICE const u8* key_row(const Args& a, const Work& w, int j, int idx) {
  return gathered_row<Traits<P>::kFp8>(a, w, j, idx);
}

// Key j's row as one checked 32-bit code: its row in its pool, bit 31 set when that is the
// extra pool, or kSkipped (index outside its pool, or j past the list). two_consumers'
// producer checks each index once a step and forms both of its fills' addresses from the
// code alone (key_row in every fill made its producer issue ~10 instructions a copy).
inline constexpr u32 kSkipped = ~0u;
inline constexpr u32 kExtraPool = 1u << 31;
template <auto P>
ATTNJIT_DEVICE u32 key_code(const Args& a, const Work& w, int j, int idx) {
  if (j >= w.n_keys) return kSkipped;
  const bool main = j < w.n_main;
  const int num_rows = main ? a.main.num_rows : a.extra.num_rows;
  if (idx < 0 || idx >= num_rows) return kSkipped;
  return static_cast<u32>(idx) | (main ? 0u : kExtraPool);
}
// key_code of a key known to be in the main list.
ATTNJIT_DEVICE u32 main_code(const Args& a, int idx) {
  return static_cast<u32>(idx) < static_cast<u32>(a.main.num_rows) ? static_cast<u32>(idx) : kSkipped;
}
// The row of a code; kSkipped reads as the main pool's first row (a zero-byte copy's source).
template <auto P>
ATTNJIT_DEVICE const u8* code_row(const Args& a, u32 code) {
  const u32 c = code == kSkipped ? 0u : code;
  const void* rows = (c & kExtraPool) != 0 ? a.extra.rows : a.main.rows;
  return static_cast<const u8*>(rows) + static_cast<u64>(c & ~kExtraPool) * static_cast<u32>(row_bytes(Traits<P>::kFp8));
}

ATTNJIT_DEVICE void cp_async_16(u32 dst, const void* src, u32 src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}

// The mbarrier's arrival for this thread fires when its earlier cp.async have landed
// (.noinc: the barrier's count, one per gathering thread, already holds it).
ATTNJIT_DEVICE void cp_async_arrive(MBarrier* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_u32(bar)) : "memory");
}

// e4m3 pair (low byte first) → two f32, exactly (through f16).
ATTNJIT_DEVICE void e4m3x2_to_f32(unsigned short v, float& lo, float& hi) {
  u32 h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(v));
  asm("{.reg .b16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h;}"
      : "=f"(lo), "=f"(hi)
      : "r"(h2));
}

// 16 e4m3 (one uint4) · sc → 16 bf16 (two uint4), each product rounded once: both
// schedules' widening.
ATTNJIT_DEVICE void widen16(const uint4& raw, float sc, uint4& lo, uint4& hi) {
  const u32 words[4] = {raw.x, raw.y, raw.z, raw.w};
  u32 out[8];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    float f0, f1, f2, f3;
    e4m3x2_to_f32(static_cast<unsigned short>(words[q] & 0xffffu), f0, f1);
    e4m3x2_to_f32(static_cast<unsigned short>(words[q] >> 16), f2, f3);
    out[2 * q] = pack2<DType::kBF16>(f0 * sc, f1 * sc);
    out[2 * q + 1] = pack2<DType::kBF16>(f2 * sc, f3 * sc);
  }
  lo = make_uint4(out[0], out[1], out[2], out[3]);
  hi = make_uint4(out[4], out[5], out[6], out[7]);
}

// A row's output statistics, for both output paths (write_output, narrow's finish). m: the
// row's max (log2 units, scaled), l: its sum; l = 0: the row saw no key.
ATTNJIT_DEVICE float row_lse(float m, float l) { return l > 0.0f ? (m + __log2f(l)) * kLn2 : neg_inf(); }
// Unsplit: the output's factor, 1 / (l + the sink's term); 0 for a row with no key.
ATTNJIT_DEVICE float unsplit_inv(const Args& a, int head, float m, float l) {
  const bool empty = !(l > 0.0f);
  const float sink = a.sink != nullptr ? a.sink[head] * kLog2e : neg_inf();
  const float denom = l + (empty || sink == neg_inf() ? 0.0f : exp2f(sink - m));
  return empty ? 0.0f : 1.0f / denom;
}
// Unsplit: lse (without the sink, DESIGN.md) and max logit of (token, head), once per row.
ATTNJIT_DEVICE void store_row_stats(const Args& a, const Work& w, const Seq& seq, int num_heads, int head, float m,
                                    float l) {
  const i64 at = lse_index(a.q, w.batch, seq, num_heads, head, w.q_idx);
  if (a.lse != nullptr) a.lse[at] = row_lse(m, l);
  if (a.max_logit != nullptr) a.max_logit[at] = l > 0.0f ? m * kLn2 : neg_inf();
}
// Split: the partial's row, slot · (q_len·h) + the packed row q_idx·h + head.
ATTNJIT_DEVICE u64 partial_row(const Args& a, const Work& w, int num_heads, int head) {
  return static_cast<u64>(w.slot) * static_cast<u32>(a.q.q_len * num_heads) + (w.q_idx * num_heads + head);
}

struct RowState {
  float m[2];  // running max (log2 units, scaled)
  float l[2];  // running sum of exp2 (this thread's columns; reduced at the end)
};

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
    const int prow = w.q_idx * P.num_heads + head;  // packed row, as mla_decode's partials
    if (w.slot < 0) {
      const float inv = unsplit_inv(a, head, m[r], l[r]);
      u32* out = reinterpret_cast<u32*>(static_cast<u16*>(a.out) +
                                        ((static_cast<u64>(seq.start) * P.num_heads + prow) * kValueDim +
                                         static_cast<u32>(col0)));
#pragma unroll
      for (int i = 2 * r; i < kHalfCols / 2; i += 4)
        out[4 * (i / 4)] = pack2<DType::kBF16>(o[i] * inv, o[i + 1] * inv);
      if (half == 0 && tid % 4 == 0) store_row_stats(a, w, seq, P.num_heads, head, m[r], l[r]);
    } else {
      const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
      const u64 part = partial_row(a, w, P.num_heads, head);
      float2* out = reinterpret_cast<float2*>(a.part_out + part * kValueDim + static_cast<u32>(col0));
#pragma unroll
      for (int i = 2 * r; i < kHalfCols / 2; i += 4) out[4 * (i / 4)] = make_float2(o[i] * inv, o[i + 1] * inv);
      if (half == 0 && tid % 4 == 0) a.part_lse[part] = row_lse(m[r], l[r]);
    }
  }
}

// Q's 64 head rows of the CTA's token (w.row0 on): 9 TMA boxes on s.q_full.
template <auto P>
ATTNJIT_DEVICE void load_q(const TmaDesc& q_map, SharedStorage<P>& s, const Work& w) {
  const int q_row = static_cast<int>(w.token) * P.num_heads + w.row0;
  mbarrier_arrive_expect_tx(&s.q_full, Traits<P>::kQBytes);
  for (int c = 0; c < Traits<P>::kChunks; ++c) tma_load_2d(q_map, &s.q_full, s.q + c * 64 * 128, c * 64, q_row);
}

}  // namespace attnjit::mla_decode_sparse

#include "mla_decode_sparse/softmax_wg.cuh"
#include "mla_decode_sparse/two_consumers.cuh"
#include "mla_decode_sparse/narrow.cuh"  // its own kernel entry (narrow::kernel)

namespace attnjit::mla_decode_sparse {

// Thread 0, before the CTA's first barrier: the plan check, Q's descriptor and every
// mbarrier's count.
template <auto P>
ATTNJIT_DEVICE void init_shared(const TmaDesc& q_map, SharedStorage<P>& s) {
  u32 dyn;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
  if (dyn < kDynamicSmemBytes<P>) __trap();  // host and device disagree on the plan
  prefetch_tma_desc(q_map);
  mbarrier_init(&s.q_full, 1);
  // softmax_wg: one arrival per gathering thread and half row, fired by its cp.async
  // (cp_async_arrive): both P·V warpgroups fill a KV stage; a raw stage's half is one
  // warpgroup's. two_consumers: its own counts (two_consumers.cuh).
  if constexpr (Traits<P>::kTwoConsumers) {
    init_consumer_barriers<P>(s);
  } else {
    for (int i = 0; i < Traits<P>::kKvStages; ++i) mbarrier_init(&s.kv_full[i], 2 * kWarpgroupThreads);
  }
  if constexpr (Traits<P>::kRawStages > 0)
    for (int i = 0; i < Traits<P>::kRawStages; ++i)
      for (int h = 0; h < 2; ++h) mbarrier_init(&s.raw_full[i][h], kWarpgroupThreads);
  fence_mbarrier_init();
}

}  // namespace attnjit::mla_decode_sparse

#include "mla_decode_sparse/persistent.cuh"

namespace attnjit::mla_decode_sparse {

template <auto P>
__global__ void __launch_bounds__(Traits<P>::kThreads, 1)
    kernel(const __grid_constant__ TmaDesc q_map,  // [total_q·h, 576] bf16, box [64, 64]
           const Args args) {
  static_assert(kPlanMatches<P>, "mla_decode_sparse/layout.cuh's smem_bytes is not this SharedStorage's");
  if constexpr (Traits<P>::kPersistent) {
    persistent_kernel<P>(q_map, args);
    return;
  }
  const Seq seq = sequence(args.q, token_slot<P>() / args.q.q_len);
  if (token_slot<P>() % args.q.q_len >= seq.q_len) return;  // ragged: no such token
  extern __shared__ u8 smem_raw[];
  auto& s = *reinterpret_cast<SharedStorage<P>*>((reinterpret_cast<u64>(smem_raw) + 1023) & ~u64(1023));
  const Work w = locate<P>(args, seq);
  const int wg = warpgroup_id_uniform();
  if (threadIdx.x == 0) init_shared<P>(q_map, s);
  // cluster 2: the other CTA arrives on and copies into this one's barriers and ring.
  if constexpr (Traits<P>::kPaired)
    cluster_sync();
  else
    __syncthreads();
  if (threadIdx.x == 0 && w.tile_begin < w.tile_end) load_q<P>(q_map, s, w);
  if constexpr (Traits<P>::kTwoConsumers) {
    if (wg == 0) {
      warpgroup_reg_dealloc<Traits<P>::kProducerRegs>();
      producer_warpgroup<P>(s, args, w);
    } else {
      warpgroup_reg_alloc<Traits<P>::kConsumerRegs>();
      consumer_warpgroup<P>(s, args, w, wg - 1);
    }
  } else if (wg == 0) {
    warpgroup_reg_dealloc<Traits<P>::kSoftmaxRegs>();
    softmax_warpgroup<P>(s, args, w);
  } else {
    warpgroup_reg_alloc<Traits<P>::kPvRegs>();
    pv_warpgroup<P>(s, args, w, seq, wg - 1);
  }
  // cluster 2: neither CTA leaves while the other may still copy into it or arrive on it.
  if constexpr (Traits<P>::kPaired) cluster_sync();
  pdl_launch_dependents();  // the combine kernel may start its prologue
}

}  // namespace attnjit::mla_decode_sparse
