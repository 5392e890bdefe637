#pragma once
// sm90_mla_decode_fp8_seesaw (config schedule 1): mla_decode_fp8 on mla_decode's seesaw
// kernel. A third warpgroup widens the fp8 rows into the bf16 tiles the two seesaw
// warpgroups read, so the math is mla_decode's: 64-key tiles, S and the softmax split over
// two warpgroups that take turns (sm90_mla_decode_seesaw.cuh has the design).
//
// 384 threads: WG0 / WG1 the seesaw's even and odd roles, WG2 the producer. The roles'
// feed (WideningFeed) stages, when the seesaw would load a buffer half, that half's fp8
// boxes ([64 rows][128 B], unswizzled) inside the bf16 tile itself — content box b in
// chunk 2b + 1, the rope box in chunk 8 — and Q's five boxes likewise. The producer's four
// warps take 16 rows each of every staged half, in the order the roles free them, widen
// box b into its two swizzled chunks 2b, 2b + 1 and complete each chunk's kv_full. Box b's
// staged row r lies in chunk 2b + 1's row r, which only the lanes that read it overwrite,
// after reading it: no second buffer, for which the seesaw's 224 KiB leave no room.
//
// Widening is exact (e4m3 and the stored rope are bf16 values), so S = q_c·k_c + q_r·k_r
// in f32 as in the widening kernel, and the scales enter as f32 factors: the feed's row
// factor σ_Q · scale · log2 e (the producer writes it per Q row) and its key factor σ_KV,
// applied to S before the softmax and to P before P·V (P′ = p·σ_KV in bf16, whose exponent
// range holds any σ). Rows past a length, of a table entry that is not a page, or of Q's
// padding are written as zeros with σ = 0 by selection: their fp8 codes (NaN included)
// and scales never reach a product.
#include "common/warpgroup.cuh"
#include "mla_decode/sm90_mla_decode_seesaw.cuh"
#include "mla_decode_fp8/e4m3.cuh"
#include "mla_decode_fp8/layout.cuh"

namespace attnjit::mla_decode_fp8::seesaw8 {

namespace md = attnjit::mla_decode;
namespace ss = attnjit::mla_decode::seesaw;
using namespace attnjit::layout::mla_decode_fp8;

// The seesaw reads its config by field name; this is mla_decode's view of an fp8 config.
struct View {
  DType dtype;
  md::Schedule schedule;
  Swizzle swizzle;
  int num_heads, max_q_len, page_size, block_m, block_n, stages;
};
template <auto P8>
inline constexpr View kView{DType::kBF16, md::Schedule::kSeesaw, Swizzle::k128B, P8.num_heads,
                            P8.max_q_len, P8.page_size, P8.block_m, P8.block_n, P8.stages};

// Register budgets (setmaxnreg) within the 168 per thread a 384-thread CTA is launched with
// (setmaxnreg only moves registers between warpgroups: a larger total blocks forever).
inline constexpr int kLaunchRegs = 168;
inline constexpr int kConsumerRegs = 232;
inline constexpr int kProducerRegs = 40;
inline constexpr int kProducerThreads = kWarpgroupThreads;  // each arrives on q_full / kv_full

template <auto V>
using Storage = ss::SharedStorage<V>;
template <auto V>
using T = ss::Traits<V>;

// ---- the feed (the roles' side) ------------------------------------------------------------

// First pool row of KV tile `tile` (64 keys: one page holds it), or -1: the table entry is
// not a page of the pool.
template <auto V>
ATTNJIT_DEVICE int tile_row(const md::Args& a, int num_pages, int batch, int tile) {
  const int token = tile * V.block_n;
  const int page = a.block_table[static_cast<i64>(batch) * a.max_pages + token / V.page_size];
  return page >= 0 && page < num_pages ? page * V.page_size + token % V.page_size : -1;
}

struct WideningFeed {
  const TmaDesc* rope_map;  // the kv map (rope at column rope_col) or kv_rope
  int rope_col;
  int num_pages;

  // Q's fp8 boxes into its odd chunks and chunk 8, and the first pair's KV halves.
  template <auto V>
  ATTNJIT_DEVICE void piece_start(Storage<V>& s, const TmaDesc& q_map, const TmaDesc& kv_map,
                                  const md::Args& a, const md::Tile& t) const {
    constexpr u32 kChunk = T<V>::kQChunkBytes;
    const int q_row = t.seq.start * V.num_heads + t.row0;
    mbarrier_arrive_expect_tx(&s.q_staged, kRowBoxes * kChunk);
    for (int b = 0; b < kContentBoxes; ++b)
      tma_load_2d(q_map, &s.q_staged, s.q + (2 * b + 1) * kChunk, b * kBoxBytes, q_row);
    tma_load_2d(q_map, &s.q_staged, s.q + 8 * kChunk, kContentBytes, q_row);
    refill<V, 0>(s, kv_map, a, t.batch, t.tile_begin, 0);
    refill<V, 1>(s, kv_map, a, t.batch, t.tile_begin, 0);
    if (t.tile_begin + 1 < t.tile_end) {
      refill<V, 1>(s, kv_map, a, t.batch, t.tile_begin + 1, 1);
      refill<V, 0>(s, kv_map, a, t.batch, t.tile_begin + 1, 1);
    }
  }

  // Half kHalf of KV tile `tile` into buffer `buf`: content boxes 2·kHalf, 2·kHalf + 1 (and
  // the rope box for the hi half). A row that is not in the pool lands zeros (the producer
  // zeroes the tile's rows by its own count all the same). No L2 prefetch of the next
  // tile: it was measured (241 µs against 235 at (128, 1, 16, 4096)); DRAM's latency is not
  // what the widening waits on.
  template <auto V, int kHalf>
  ATTNJIT_DEVICE void refill(Storage<V>& s, const TmaDesc& kv_map, const md::Args& a, int batch,
                             int tile, int buf) const {
    constexpr u32 kChunk = T<V>::kChunkBytes;
    const int r = tile_row<V>(a, num_pages, batch, tile);
    const int row = r < 0 ? -V.block_n : r;  // fully out of bounds
    MBarrier* bar = &s.kv_staged[buf][kHalf];
    mbarrier_arrive_expect_tx(bar, (kHalf == 0 ? 2 : 3) * kChunk);
    for (int b = 2 * kHalf; b < 2 * kHalf + 2; ++b)
      tma_load_2d(kv_map, bar, s.kv[buf] + (2 * b + 1) * kChunk, b * kBoxBytes, row,
                  CacheHint::kEvictFirst);
    if (kHalf == 1)
      tma_load_2d(*rope_map, bar, s.kv[buf] + 8 * kChunk, rope_col, row, CacheHint::kEvictFirst);
  }

  // σ_Q · scale · log2 e of Q tile row `row`, written by the producer into row_sum[0].
  template <auto V>
  ATTNJIT_DEVICE float row_factor(u32 base, const md::Args&, int row) const {
    return ld_shared_f32(base + ss::Offsets<V>::kRowSum + 4 * static_cast<u32>(row));
  }

  // S (or P) · σ_KV of each key of buffer `buf`'s tile.
  template <auto V>
  ATTNJIT_DEVICE void scale_keys(float (&sc)[T<V>::kSAcc], u32 base, int buf) const {
    const int tid = thread_in_warpgroup();
    const u32 sigma = base + ss::Offsets<V>::kSigma + static_cast<u32>(buf * V.block_n * 4);
#pragma unroll
    for (int i = 0; i < T<V>::kSAcc; i += 4) {  // accumulators i, i+1 (row r) and i+2, i+3
      const u32 col = static_cast<u32>(wgmma_acc_coord(tid, i).col);  // (row r + 8): same keys
      const float s0 = ld_shared_f32(sigma + 4 * col), s1 = ld_shared_f32(sigma + 4 * col + 4);
      sc[i] *= s0;
      sc[i + 1] *= s1;
      sc[i + 2] *= s0;
      sc[i + 3] *= s1;
    }
  }
};

// ---- widening (the producer's side) ----------------------------------------------------------

// Byte offset of 16-byte unit u of row r in a [64][128 B] 128B-swizzled chunk.
ATTNJIT_DEVICE u32 swizzled(int r, int u) { return static_cast<u32>(r * 128 + ((u ^ (r & 7)) << 4)); }

// One warp, rows 16w .. 16w + 15: an e4m3 box staged in chunk `hi` ([rows][128 B]) → bf16
// chunks `lo` (its codes 0..63) and `hi` (64..127). Rows >= valid become zeros.
ATTNJIT_DEVICE void widen_box_rows(u32 lo, u32 hi, int r0, int valid) {
  const int lane = lane_id(), v = lane % 8;  // 16 codes 16v .. 16v + 15 of the box row
  const u32 dst = v < 4 ? lo : hi;
  const int unit = 2 * (v % 4);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = r0 + lane / 8 + 4 * i;
    uint4 x = ld_shared_16(hi + static_cast<u32>(r * 128 + v * 16));
    __syncwarp();  // row r's 8 readers are done before its writers (in chunk hi) start
    if (r >= valid) x = make_uint4(0, 0, 0, 0);
    const uint4 a = widen8(make_uint2(x.x, x.y)), b = widen8(make_uint2(x.z, x.w));
    // Lanes v >= 4 store their odd unit first: each store's 8 lanes of a row then hit 8
    // distinct 16-byte bank groups.
    st_shared_16(dst + swizzled(r, unit + (v >= 4)), v >= 4 ? b : a);
    st_shared_16(dst + swizzled(r, unit + (v < 4)), v >= 4 ? a : b);
  }
}

// One warp, rows 16w .. 16w + 15 of the rope box staged in chunk c8 → bf16 chunk c8 in place:
// 8 bf16 units per row swizzled, or (576-byte rows) 64 e4m3 codes widened.
ATTNJIT_DEVICE void widen_rope_rows(u32 c8, int r0, int valid, bool e4m3) {
  const int lane = lane_id();
  if (!e4m3) {
    const int v = lane % 8;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = r0 + lane / 8 + 4 * i;
      uint4 x = ld_shared_16(c8 + static_cast<u32>(r * 128 + v * 16));
      __syncwarp();
      if (r >= valid) x = make_uint4(0, 0, 0, 0);
      st_shared_16(c8 + swizzled(r, v), x);
    }
  } else {
    const int v = lane % 4;  // codes 16v .. 16v + 15 → units 2v, 2v + 1
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = r0 + lane / 4 + 8 * i;
      uint4 x = ld_shared_16(c8 + static_cast<u32>(r * 128 + v * 16));
      __syncwarp();
      if (r >= valid) x = make_uint4(0, 0, 0, 0);
      st_shared_16(c8 + swizzled(r, 2 * v), widen8(make_uint2(x.x, x.y)));
      st_shared_16(c8 + swizzled(r, 2 * v + 1), widen8(make_uint2(x.z, x.w)));
    }
  }
}

// This thread's generic-proxy writes → visible to the roles' wgmma (and loads) once `bar`
// completes. Every producer thread arrives for its own writes (the barriers count 128):
// one arrive per warp after a __syncwarp orders the same under PTX, but racecheck does not
// follow that chain.
ATTNJIT_DEVICE void publish(MBarrier* bar) {
  fence_proxy_async_smem();
  mbarrier_arrive(bar);
}

// σ_Q of Q tile row r (0 for padding rows): per token, per token and head, or one.
template <auto V>
ATTNJIT_DEVICE float q_sigma(const Args& a, const md::Tile& t, int r) {
  const int gr = t.row0 + r;
  if (gr >= t.seq.q_len * V.num_heads) return 0.0f;
  return a.q_scale[q_scale_index(a.q_scale_mode, t.seq.start + gr / V.num_heads, gr % V.num_heads,
                                 V.num_heads)];
}

// Q of piece t: this warp's 16 rows of the four content boxes and the rope, and their
// row factors.
template <auto V>
ATTNJIT_DEVICE void widen_q(Storage<V>& s, const Args& a, const md::Tile& t, u32 phase) {
  constexpr u32 kChunk = T<V>::kQChunkBytes;
  const int r0 = 16 * warp_in_warpgroup();
  const u32 q = smem_u32(s.q);
  const int valid = t.seq.q_len * V.num_heads - t.row0;
  mbarrier_wait(&s.q_staged, phase);
  for (int b = 0; b < kContentBoxes; ++b)
    widen_box_rows(q + 2 * b * kChunk, q + (2 * b + 1) * kChunk, r0, valid);
  widen_rope_rows(q + 8 * kChunk, r0, valid, a.rope_e4m3 != 0);
  if (lane_id() < 16) s.row_sum[0][r0 + lane_id()] = q_sigma<V>(a, t, r0 + lane_id()) * a.base.scale_log2;
  publish(&s.q_full);
}

// This warp's 16 rows of half `half` of buffer `buf`, holding KV tile `tile`; the hi half
// also writes the rows' σ_KV (read by the roles after all nine chunks' waits).
template <auto V>
ATTNJIT_DEVICE void widen_half(Storage<V>& s, const Args& a, const md::Tile& t, int tile, int buf,
                               int half, u32 phase) {
  constexpr u32 kChunk = T<V>::kChunkBytes;
  const int r0 = 16 * warp_in_warpgroup();
  const u32 kv = smem_u32(s.kv[buf]);
  const int row = tile_row<V>(a.base, a.num_pages, t.batch, tile);
  const int valid = row < 0 ? 0 : min(V.block_n, t.len - tile * V.block_n);
  float sigma = 0.0f;
  if (half == 1 && lane_id() < 16 && r0 + lane_id() < valid)
    sigma = a.kv_scale[a.kv_scale_per_row ? static_cast<i64>(row + r0 + lane_id()) : 0];
  mbarrier_wait(&s.kv_staged[buf][half], phase);
  for (int b = 2 * half; b < 2 * half + 2; ++b) {
    widen_box_rows(kv + 2 * b * kChunk, kv + (2 * b + 1) * kChunk, r0, valid);
    publish(&s.kv_full[buf][2 * b]);
    mbarrier_arrive(&s.kv_full[buf][2 * b + 1]);
  }
  if (half == 1) {
    if (lane_id() < 16) s.kv_sigma[buf][r0 + lane_id()] = sigma;
    widen_rope_rows(kv + 8 * kChunk, r0, valid, a.rope_e4m3 != 0);
    publish(&s.kv_full[buf][8]);
  }
}

// The producer walks the CTA's pieces as the roles do and widens each staged half in the
// order the roles free them: per pair even lo, odd hi, even hi, odd lo. Each buffer's halves
// are staged once per tile of its parity: their barriers' phases are those counts mod 2.
template <auto V>
ATTNJIT_DEVICE void produce(Storage<V>& s, const Args& a, const md::Items items) {
  u32 fills[2] = {0, 0}, pieces = 0;
#pragma unroll 1
  for (int item = items.begin; item < items.end; ++item) {
    const md::Tile t = md::locate<V>(a.base, item);
    if (t.tile_begin >= t.tile_end) continue;
    widen_q<V>(s, a, t, pieces++ & 1u);
#pragma unroll 1
    for (int even = t.tile_begin; even < t.tile_end; even += 2) {
      const bool has_odd = even + 1 < t.tile_end;
      widen_half<V>(s, a, t, even, 0, 0, fills[0] & 1u);
      if (has_odd) widen_half<V>(s, a, t, even + 1, 1, 1, fills[1] & 1u);
      widen_half<V>(s, a, t, even, 0, 1, fills[0]++ & 1u);
      if (has_odd) widen_half<V>(s, a, t, even + 1, 1, 0, fills[1]++ & 1u);
    }
  }
}

// ---- entry --------------------------------------------------------------------------------

template <auto P>
__global__ void __launch_bounds__(3 * kWarpgroupThreads, 1)
    kernel(const __grid_constant__ TmaDesc q_map,     // [total_q·h, 640 | 576] u8, box [64, 128]
           const __grid_constant__ TmaDesc kv_map,    // [pages·page_size, 640|576|512], box [64, 128]
           const __grid_constant__ TmaDesc rope_map,  // the kv map (rope at column 512) or kv_rope
           const Args args) {
  constexpr View V = kView<P>;
  static_assert(P.schedule == 1 && P.fp8_mma == 0, "this file is the seesaw schedule");
  static_assert(ss::kPlanMatches<V>, "mla_decode/layout.cuh's smem_bytes is not this SharedStorage's");
  static_assert(smem_bytes(P.block_m, P.block_n, P.stages, P.fp8_mma, P.schedule) ==
                    ss::kDynamicSmemBytes<V>,
                "mla_decode_fp8/layout.cuh's plan is not the seesaw's");
  static_assert(2 * kConsumerRegs + kProducerRegs <= 3 * kLaunchRegs,
                "register budgets exceed the launch's allocation");
  const md::Items items = md::cta_items(args.base);
  if (items.begin >= items.end) return;  // balanced: no piece for this CTA
  extern __shared__ u8 smem_raw[];
  auto& s = *reinterpret_cast<Storage<V>*>((reinterpret_cast<u64>(smem_raw) + 1023) & ~u64(1023));
  const int wg = warpgroup_id_uniform();
  if (threadIdx.x == 0) {
    u32 dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    if (dyn < ss::kDynamicSmemBytes<V>) __trap();  // host and device disagree on the plan
    if (!ss::layout_ok<V>(s)) __trap();
    prefetch_tma_desc(q_map);
    prefetch_tma_desc(kv_map);
    prefetch_tma_desc(rope_map);
    mbarrier_init(&s.q_full, kProducerThreads);
    mbarrier_init(&s.q_staged, 1);
    for (int b = 0; b < 2; ++b) {
      for (int c = 0; c < T<V>::kChunks; ++c) mbarrier_init(&s.kv_full[b][c], kProducerThreads);
      for (int h = 0; h < 2; ++h) mbarrier_init(&s.kv_staged[b][h], 1);
    }
    fence_mbarrier_init();
  }
  __syncthreads();

  if (wg == 2) {
    warpgroup_reg_dealloc<kProducerRegs>();
    produce<V>(s, args, items);
  } else {
    warpgroup_reg_alloc<kConsumerRegs>();
    const WideningFeed feed{&rope_map, args.rope_col, args.num_pages};
    if (wg == 0)
      ss::walk_pieces<V, 0>(s, q_map, kv_map, args.base, items, feed);
    else
      ss::walk_pieces<V, 1>(s, q_map, kv_map, args.base, items, feed);
  }
  pdl_launch_dependents();  // the combine kernel may start its prologue
}

}  // namespace attnjit::mla_decode_fp8::seesaw8
