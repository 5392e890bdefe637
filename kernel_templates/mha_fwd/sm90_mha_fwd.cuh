#pragma once
// sm90_mha_fwd: FlashAttention forward on Hopper (the FA3 design, written for this library).
//
// A unit = one block of block_m query rows of one (sequence, head) over one split of its KV
// tiles (mha_fwd/schedule.cuh). block_m / 64 consumer warpgroups (two, or three at 168
// registers each), each owning 64 rows: S = Q·Kᵀ (SS wgmma, N = block_n), score mod, mask
// (boundary tiles only), online softmax in exp2, P converted in registers, O += P·V (RS
// wgmma, N = dv). K and V stream through a `stages`-deep ring with separate barriers (S of a
// tile needs only its K; K is released after S, V after P·V). The warpgroups take turns
// issuing their GEMMs and each overlaps its softmax of tile i with its own P·V of tile i−1
// (see consumer()).
// Two launches (P.persistent):
// - grid: a CTA per unit; thread 0 issues the TMA loads — Q and the first `stages` tiles up
//   front, then each freed K / V stage's refill while its warpgroup's GEMMs run — so all 8
//   warps keep 255 registers (Traits::kThreads);
// - persistent: a CTA per SM walks a list of units; a producer warpgroup (one thread)
//   streams every unit's Q and K/V through the ring, so the next unit's loads land under
//   the current one's last tiles and epilogue, and a unit's start costs no load latency.
//
// Stale rows: keys past a sequence (the next sequence's rows, a page's unused tail, NaN
// included) are masked by replacement in S, and their V rows are zeroed in shared memory
// before P·V (0 × NaN = NaN would leak otherwise). Packed GQA (group g > 0): the rows of a
// CTA are (position, query head) pairs of one KV head, row = pos·g + head_in_group, so
// decode with few query positions still fills the 64-row wgmma tiles.
// Split-KV: num_splits == 1 writes out (and lse) directly; otherwise a normalized f32
// partial and its lse go to the workspace and mha_fwd/combine.cuh merges them (and adds
// the sink, which belongs to the whole row, not to one split).
#include "common/arch.cuh"
#include "common/fence.cuh"
#include "common/mbarrier.cuh"
#include "common/named_barrier.cuh"
#include "common/numeric.cuh"
#include "common/tma.cuh"
#include "common/types.cuh"
#include "common/warpgroup.cuh"
#include "common/wgmma.cuh"
#include "mha_fwd/mask.cuh"
#include "mha_fwd/params.cuh"
#include "mha_fwd/rows.cuh"

namespace attnjit::mha_fwd {

template <auto P>
using QTile = WgmmaKMajorTile<Swizzle::k128B, P.block_m>;  // Q: K-major, block_m rows
template <auto P>
using KTile = WgmmaKMajorTile<Swizzle::k128B, P.block_n>;  // K: K-major, block_n rows
template <auto P>
using VTile = WgmmaMNMajorTile<Swizzle::k128B, P.block_n>;  // V: MN-major, block_n key rows

// ---- TMA issue (thread 0) ----------------------------------------------------------------

// KV tile `tile` of the sequence into `dst`: kChunks column boxes of 64 × block_n, split
// into page pieces when paged (page from the block table; a slot past the table or a
// garbage entry gives an out-of-range coordinate, which TMA fills with zeros — never a
// read outside the pool).
template <auto P, int kChunks>
ATTNJIT_DEVICE void load_kv_tile(const TmaDesc& map, MBarrier* bar, u8* dst, const Args& a,
                                 const Work<P>& w, int tile) {
  using T = Traits<P>;
  if constexpr (P.kv_layout == Layout::kPaged) {
    const int* table = a.block_table + static_cast<i64>(w.batch) * a.max_pages;
#pragma unroll
    for (int piece = 0; piece < T::kPiecesPerTile; ++piece) {
      const int token = tile * P.block_n + piece * T::kPageRows;
      const int slot = token / P.page_size;
      const int page = slot < a.max_pages ? table[slot] : -1;
#pragma unroll
      for (int c = 0; c < kChunks; ++c)
        tma_load_4d(map, bar, dst + c * T::kKChunkBytes + piece * T::kPageRows * T::kSpan,
                    c * T::kSpanCols, w.kv_head, token % P.page_size, page);
    }
  } else {
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
      tma_load_3d(map, bar, dst + c * T::kKChunkBytes, c * T::kSpanCols, w.kv_head,
                  w.k_row0 + tile * P.block_n);
  }
}

// Q [block_m rows][d] into Q buffer qb: (positions × heads-in-group) boxes; rows past q are
// zero-filled, rows of the next sequence are computed and never stored.
template <auto P>
ATTNJIT_DEVICE void load_q(SharedStorage<P>& s, const TmaDesc& q_map, const Work<P>& w, int qb) {
  using T = Traits<P>;
  mbarrier_arrive_expect_tx(&s.q_full[qb], T::kQBytes);
  const int q_head = T::kPacked ? w.kv_head * T::kGroup : w.head;
  const int q_pos = w.q_row0 + w.row0 / T::kGroup;
#pragma unroll
  for (int c = 0; c < T::kQkChunks; ++c)
    tma_load_3d(q_map, &s.q_full[qb], s.q[qb] + c * T::kQChunkBytes, c * T::kSpanCols, q_head,
                q_pos);
}

// K and V of the CTA's i-th tile (`tile` in the sequence) into stage i % stages.
template <auto P>
ATTNJIT_DEVICE void load_kv(SharedStorage<P>& s, const TmaDesc& k_map, const TmaDesc& v_map,
                            const Args& a, const Work<P>& w, int tile, int i) {
  using T = Traits<P>;
  const int st = i % P.stages;
  mbarrier_arrive_expect_tx(&s.k_full[st], T::kKBytes);
  load_kv_tile<P, T::kQkChunks>(k_map, &s.k_full[st], s.k[st], a, w, tile);
  mbarrier_arrive_expect_tx(&s.v_full[st], T::kVBytes);
  load_kv_tile<P, T::kVChunks>(v_map, &s.v_full[st], s.v[st], a, w, tile);
}

// Where a unit sits in the CTA's load streams (persistent: units run back to back). KV tile
// g of the stream (counting every unit's tiles) lives in stage g % stages, in its
// (g / stages)-th use; Q load q in buffer q % kQBuffers. A grid launch has one unit at 0, 0.
struct StreamPos {
  int tile;  // stream index of the unit's first KV tile
  int q;     // Q loads before the unit's
};
template <auto P>
ATTNJIT_DEVICE int stage_of(int g) { return g % P.stages; }
template <auto P>
ATTNJIT_DEVICE u32 parity_of(int g) { return static_cast<u32>(g / P.stages) & 1u; }

// ---- producer (persistent: warpgroup 0, one thread) ----------------------------------------

// Streams the loads of the CTA's whole unit list: per unit with keys, its KV tiles through
// the ring (each stage refilled once every consumer warp released its previous use) and its
// Q (once the buffer's previous unit finished its last S). It runs up to `stages` tiles and
// kQBuffers units ahead of the consumers, so the next unit's Q and first tiles land under
// the current unit's last tiles and epilogue.
template <auto P>
ATTNJIT_DEVICE void producer(SharedStorage<P>& s, const TmaDesc& q_map, const TmaDesc& k_map,
                             const TmaDesc& v_map, const Args& a) {
  using T = Traits<P>;
  int g = 0, qn = 0;  // KV tiles and Q loads issued so far
  for (UnitWalk<P> u = UnitWalk<P>::first(); u.valid(a); u.advance(a)) {
    const Work<P> w = locate<P>(a, u.coords(a));
    if (w.row0 >= w.rows) continue;  // no rows: the consumers skip it too
#pragma unroll 1
    for (int t = w.tile_begin; t < w.tile_end; ++t, ++g) {
      const int st = stage_of<P>(g);
      // The stage's previous use (g − stages) completed phase parity_of(g) ^ 1 of its empty.
      if (g >= P.stages) mbarrier_wait_parked(&s.k_empty[st], parity_of<P>(g) ^ 1u);
      mbarrier_arrive_expect_tx(&s.k_full[st], T::kKBytes);
      load_kv_tile<P, T::kQkChunks>(k_map, &s.k_full[st], s.k[st], a, w, t);
      if (t == w.tile_begin) {  // Q after the first K: a single buffer waits for the last S
        const int qb = qn % T::kQBuffers;
        if (qn >= T::kQBuffers)
          mbarrier_wait_parked(&s.q_empty[qb], static_cast<u32>(qn / T::kQBuffers - 1) & 1u);
        load_q<P>(s, q_map, w, qb);
        ++qn;
      }
      if (g >= P.stages) mbarrier_wait_parked(&s.v_empty[st], parity_of<P>(g) ^ 1u);
      mbarrier_arrive_expect_tx(&s.v_full[st], T::kVBytes);
      load_kv_tile<P, T::kVChunks>(v_map, &s.v_full[st], s.v[st], a, w, t);
    }
  }
}

// ---- consumers (warpgroups 0 .. kConsumers − 1, after the producer when there is one) -----

// S [64 × block_n] = Q [64 × d] · K [block_n × d]ᵀ, d/16 k-steps back to back (issue only).
template <auto P>
ATTNJIT_DEVICE void issue_qk(float (&sc)[P.block_n / 2], u32 q_addr, u32 k_addr, int wg) {
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < P.head_dim / 16; ++ks)
    wgmma_ss<P.dtype, P.block_n>(sc, QTile<P>::desc(q_addr, ks * 32, wg * kWgmmaM),
                                 KTile<P>::desc(k_addr, ks * 32), ks > 0);
  wgmma_commit();
}

// O [64 × dv] += P [64 × kN] · V [kN × dv] (issue only; P from registers): the first kN/16
// k16 steps.
template <auto P, int kN>
ATTNJIT_DEVICE void issue_pv(float (&o)[P.head_dim_v / 2], u32 (&pa)[P.block_n / 16][4], u32 v_addr) {
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kN / 16; ++ks)
    wgmma_rs<P.dtype, P.head_dim_v, WgmmaMajor::kMN>(o, pa[ks], VTile<P>::desc(v_addr, ks * 16), true);
  wgmma_commit();
}

// Half-width last tile (causal-like masks): where none of a warpgroup's 64 rows sees the
// upper half of the unit's last KV tile — the first warpgroup on a 128-key diagonal — it
// runs softmax and P·V of that tile over the lower half only (S stays whole: see
// consumer_step). Needs whole k16 steps.
template <auto P>
inline constexpr bool kHalfLastTile = Traits<P>::kCausalLike && P.block_n % 32 == 0;

// True when warpgroup wg's rows see no key of the upper half of the unit's last tile.
template <auto P>
ATTNJIT_DEVICE bool upper_half_unseen(const Work<P>& w, const Args& a, int wg) {
  using T = Traits<P>;
  const int last_row = min(w.row0 + (wg + 1) * kWgmmaM - 1, w.rows - 1);
  const int hi = key_hi<P>(last_row / T::kGroup + w.s_k - w.s_q, w.s_k, a);
  return hi < (w.tile_end - 1) * P.block_n + P.block_n / 2;
}

// The consumer warpgroups take turns issuing their GEMMs (FA3's ping-pong, a round-robin
// with three): warpgroup w waits for its turn, issues S of tile i and P·V of tile i−1, and
// hands the turn to the next, so each warpgroup's softmax runs while the others' GEMMs keep
// the tensor cores busy. The turn circulates across the CTA's units without a break: a
// unit's first S takes no turn, and its first turn comes straight from the last issue of
// the unit before (a restart per unit made warpgroup 0 wait for the last one's epilogue,
// first S and first softmax at every unit boundary).
ATTNJIT_DEVICE u32 turn_of(int wg) { return bar_of(Bar::kTurn, wg); }
template <auto P>
ATTNJIT_DEVICE int next_wg(int wg) { return wg + 1 == Traits<P>::kConsumers ? 0 : wg + 1; }
// Before the CTA's first unit: warpgroup 0 goes first (the last one hands it the turn).
template <auto P>
ATTNJIT_DEVICE void turns_begin(int wg) {
  if (wg == Traits<P>::kConsumers - 1) named_barrier_arrive(turn_of(0), 2 * kWarpgroupThreads);
}
// After the CTA's last unit: warpgroup 0 takes the last hand-over, which has no GEMM to
// issue, so every arrive has its sync.
template <auto P>
ATTNJIT_DEVICE void turns_end(int wg) {
  if (wg == 0) named_barrier_sync(turn_of(0), 2 * kWarpgroupThreads);
}

// A consumer warpgroup's unit, as its steps see it (registers aside).
template <auto P>
struct UnitCtx {
  SharedStorage<P>& s;
  const TmaDesc& k_map;
  const TmaDesc& v_map;
  const Args& a;
  const Work<P>& w;
  int wg;         // consumer index, 0 .. kConsumers − 1
  StreamPos pos;  // the unit's place in the load streams
  int n;          // KV tiles of the unit
  int qb;         // its Q buffer
  // Persistent: after the unit's last S every warp releases its Q buffer.
  ATTNJIT_DEVICE void release_q_after(int i) const {
    if (Traits<P>::kProducer && i == n - 1 && lane_id() == 0) mbarrier_arrive(&s.q_empty[qb]);
  }
};

// Step i ≥ 1 of a consumer's main loop: softmax over the first kN keys of tile i, P·V_{i−1}
// over all of tile i−1's. It overlaps, inside the warpgroup, the softmax of tile i with
// P·V of tile i−1 (FA3's intra-warpgroup overlap): issue S_i, issue P·V_{i−1}, wait for S_i
// only, softmax, then wait for P·V_{i−1}, rescale O and convert P_i. It waits for its own
// wgmmas before it returns, so the caller may choose kN at run time without a wgmma
// crossing a branch. S is computed whole even when kN is half: a narrower S wgmma (a
// prefix of the fragment) made ptxas serialize the kernel's wgmmas (C7511), and the tensor
// cores are not what limits these tiles — the softmax is.
// Registers: S (block_n/2) + P (block_n/4) + O (dv/2) floats live at once.
template <auto P, int kN>
ATTNJIT_DEVICE void consumer_step(const UnitCtx<P>& c, int i, const RowRule<P>& rule,
                                  float (&o)[P.head_dim_v / 2], RowState& rs,
                                  float (&sc)[P.block_n / 2], u32 (&pa)[P.block_n / 16][4],
                                  float (&scale)[2]) {
  using T = Traits<P>;
  SharedStorage<P>& s = c.s;
  const Work<P>& w = c.w;
  const int tile = w.tile_begin + i;
  const int g = c.pos.tile + i;  // stream index of tile i
  const int st = stage_of<P>(g), prev = stage_of<P>(g - 1);
  mbarrier_wait(&s.k_full[st], parity_of<P>(g));
  mbarrier_wait(&s.v_full[prev], parity_of<P>(g - 1));
  named_barrier_sync(turn_of(c.wg), 2 * kWarpgroupThreads);
  issue_qk<P>(sc, smem_u32(s.q[c.qb]), smem_u32(s.k[st]), c.wg);
  issue_pv<P, P.block_n>(o, pa, smem_u32(s.v[prev]));
  named_barrier_arrive(turn_of(next_wg<P>(c.wg)), 2 * kWarpgroupThreads);
  // Grid launch, while they run: thread 0 refills K of tile i−1's stage (every warpgroup
  // finished S_{i−1}) and V of tile i−2's stage (every warpgroup finished P·V_{i−2}).
  // Stream index = i here (one unit).
  if (!T::kProducer && threadIdx.x == 0) {
    if (i - 1 + P.stages < c.n) {
      mbarrier_wait(&s.k_empty[prev], static_cast<u32>((i - 1) / P.stages) & 1u);
      const int j = i - 1 + P.stages;
      mbarrier_arrive_expect_tx(&s.k_full[prev], T::kKBytes);
      load_kv_tile<P, T::kQkChunks>(c.k_map, &s.k_full[prev], s.k[prev], c.a, w, w.tile_begin + j);
    }
    if (i >= 2 && i - 2 + P.stages < c.n) {
      const int pst = (i - 2) % P.stages;
      mbarrier_wait(&s.v_empty[pst], static_cast<u32>((i - 2) / P.stages) & 1u);
      const int j = i - 2 + P.stages;
      mbarrier_arrive_expect_tx(&s.v_full[pst], T::kVBytes);
      load_kv_tile<P, T::kVChunks>(c.v_map, &s.v_full[pst], s.v[pst], c.a, w, w.tile_begin + j);
    }
  }
  wgmma_wait<1>();  // S_i done; P·V_{i−1} may still run
  wgmma_fence_operands(sc);
  if (lane_id() == 0) mbarrier_arrive(&s.k_empty[st]);
  c.release_q_after(i);
  const bool rescale = softmax<P, kN>(sc, rs, scale, rule, w, tile, c.a);
  wgmma_wait<0>();  // P·V_{i−1} done: its P registers and V stage are free
  wgmma_fence_operands(o);
#pragma unroll
  for (int ks = 0; ks < P.block_n / 16; ++ks) wgmma_fence_operands(pa[ks]);
  if (lane_id() == 0) mbarrier_arrive(&s.v_empty[prev]);
  if (rescale)  // warp-uniform; rare once m has settled (lazy rescale)
#pragma unroll
    for (int i2 = 0; i2 < P.head_dim_v / 2; ++i2) o[i2] *= scale[(i2 / 2) % 2];
#pragma unroll
  for (int ks = 0; ks < kN / 16; ++ks) wgmma_acc_to_a_fragment<P.dtype>(sc, ks, pa[ks]);
}

// P·V of the unit's last tile over its first kN keys, waited for. Its keys past the
// sequence (a partial tile) may be NaN in V: zero those rows first (every warp of this
// warpgroup, then a warpgroup barrier).
template <auto P, int kN>
ATTNJIT_DEVICE void consumer_last_pv(const UnitCtx<P>& c, float (&o)[P.head_dim_v / 2],
                                     u32 (&pa)[P.block_n / 16][4]) {
  SharedStorage<P>& s = c.s;
  const int gl = c.pos.tile + c.n - 1, lst = stage_of<P>(gl);
  const int key0 = (c.w.tile_end - 1) * P.block_n;
  mbarrier_wait(&s.v_full[lst], parity_of<P>(gl));
  if (key0 + kN > c.w.s_k) {
    zero_v_rows<P>(s.v[lst], c.w.s_k - key0);
    fence_proxy_async_smem();  // generic-proxy zeros, read by wgmma (async proxy)
    named_barrier_sync(bar_of(Bar::kTailZeroed, c.wg), kWarpgroupThreads);
  }
  named_barrier_sync(turn_of(c.wg), 2 * kWarpgroupThreads);
  issue_pv<P, kN>(o, pa, smem_u32(s.v[lst]));
  named_barrier_arrive(turn_of(next_wg<P>(c.wg)), 2 * kWarpgroupThreads);
  wgmma_wait<0>();
  wgmma_fence_operands(o);
  if (Traits<P>::kProducer && lane_id() == 0) mbarrier_arrive(&s.v_empty[lst]);  // the next unit's
}

// One consumer warpgroup on one unit: tile 0's S and softmax, steps 1 .. n−1 (the last
// one half-width where kHalfLastTile allows), the last tile's P·V, the epilogue.
// wg: the consumer index (0 .. kConsumers − 1); pos: the unit's place in the load streams.
template <auto P>
ATTNJIT_DEVICE void consumer(SharedStorage<P>& s, const TmaDesc& k_map, const TmaDesc& v_map,
                             const Args& a, const Work<P>& w, int wg, const StreamPos pos) {
  using T = Traits<P>;
  float o[P.head_dim_v / 2];  // O [64 × dv] f32 accumulator fragment
#pragma unroll
  for (int i = 0; i < P.head_dim_v / 2; ++i) o[i] = 0.0f;
  RowState rs{{neg_inf(), neg_inf()}, {0.0f, 0.0f}};
  const int tid = thread_in_warpgroup();
  const RowRule<P> rule = row_rule<P>(w, a, wg * kWgmmaM + wgmma_acc_coord(tid, 0).row,
                                      wg * kWgmmaM + wgmma_acc_coord(tid, 2).row);
  const int n = w.tile_end - w.tile_begin;
  if (n > 0) {
    const UnitCtx<P> c{s, k_map, v_map, a, w, wg, pos, n, pos.q % T::kQBuffers};
    float sc[P.block_n / 2];    // S_i, then P_i (f32)
    u32 pa[P.block_n / 16][4];  // P_{i−1} as the RS A operand: k16 step ks = columns [16ks, +16)
    float scale[2];

    // Tile 0: S and softmax (nothing to overlap with yet).
    mbarrier_wait(&s.q_full[c.qb], static_cast<u32>(pos.q / T::kQBuffers) & 1u);
    const int g0 = pos.tile;
    mbarrier_wait(&s.k_full[stage_of<P>(g0)], parity_of<P>(g0));
    issue_qk<P>(sc, smem_u32(s.q[c.qb]), smem_u32(s.k[stage_of<P>(g0)]), wg);
    wgmma_wait<0>();
    wgmma_fence_operands(sc);
    if (lane_id() == 0) mbarrier_arrive(&s.k_empty[stage_of<P>(g0)]);
    c.release_q_after(0);
    softmax<P, P.block_n>(sc, rs, scale, rule, w, w.tile_begin, a);
#pragma unroll
    for (int ks = 0; ks < P.block_n / 16; ++ks) wgmma_acc_to_a_fragment<P.dtype>(sc, ks, pa[ks]);

    constexpr int kFull = P.block_n, kHalf = P.block_n / 2;
    bool half = false;
    if constexpr (kHalfLastTile<P>) half = n > 1 && upper_half_unseen<P>(w, a, wg);
#pragma unroll 1
    for (int i = 1; i < (half ? n - 1 : n); ++i)
      consumer_step<P, kFull>(c, i, rule, o, rs, sc, pa, scale);
    if constexpr (kHalfLastTile<P>) {
      if (half) {
        consumer_step<P, kHalf>(c, n - 1, rule, o, rs, sc, pa, scale);
        consumer_last_pv<P, kHalf>(c, o, pa);
      } else {
        consumer_last_pv<P, kFull>(c, o, pa);
      }
    } else {
      consumer_last_pv<P, kFull>(c, o, pa);
    }
  }
  epilogue<P>(o, rs, a, w, wg);
}

// Persistent: a consumer warpgroup's walk over the CTA's units (the producer's list).
template <auto P>
ATTNJIT_DEVICE void consumer_units(SharedStorage<P>& s, const TmaDesc& k_map, const TmaDesc& v_map,
                                   const Args& a, int wg) {
  StreamPos pos{0, 0};
  turns_begin<P>(wg);
  for (UnitWalk<P> u = UnitWalk<P>::first(); u.valid(a); u.advance(a)) {
    const Work<P> w = locate<P>(a, u.coords(a));
    if (w.row0 >= w.rows) continue;  // row blocks past this sequence's queries
    consumer<P>(s, k_map, v_map, a, w, wg, pos);
    const int n = w.tile_end - w.tile_begin;
    pos.tile += n;
    pos.q += n > 0 ? 1 : 0;
  }
  turns_end<P>(wg);
}

// ---- entry -----------------------------------------------------------------------------

// Grid launch: (m_tiles, heads (h_q, or h_kv when packed), batch × splits) CTAs of one unit.
// Persistent: (CTAs, 1, 1), at most one per SM, walking schedule.cuh's list. Traits::kThreads.
template <auto P>
__global__ void __launch_bounds__(Traits<P>::kThreads, Traits<P>::kMinCtasPerSm)
    kernel(const __grid_constant__ TmaDesc q_map,  // q [rows, h_q, d], box [block_m/g, g, 64]
           const __grid_constant__ TmaDesc k_map,  // k [rows, h_kv, d] or [pages, page, h_kv, d]
           const __grid_constant__ TmaDesc v_map,  // v likewise with dv
           const Args args) {
  static_assert(kPlanMatches<P>, "mha_fwd/layout.cuh's smem_bytes is not this SharedStorage's");
  extern __shared__ u8 smem_raw[];
  auto& s = *reinterpret_cast<SharedStorage<P>*>(
      (reinterpret_cast<u64>(smem_raw) + 1023) & ~u64(1023));
  if (threadIdx.x == 0) {
    u32 dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    if (dyn < kDynamicSmemBytes<P>) __trap();  // host and device disagree on the plan
    prefetch_tma_desc(q_map);
    prefetch_tma_desc(k_map);
    prefetch_tma_desc(v_map);
    for (int i = 0; i < Traits<P>::kQBuffers; ++i) {
      mbarrier_init(&s.q_full[i], 1);
      mbarrier_init(&s.q_empty[i], Traits<P>::kReleaseArrivals);
    }
    for (int i = 0; i < P.stages; ++i) {
      mbarrier_init(&s.k_full[i], 1);
      mbarrier_init(&s.v_full[i], 1);
      mbarrier_init(&s.k_empty[i], Traits<P>::kReleaseArrivals);
      mbarrier_init(&s.v_empty[i], Traits<P>::kReleaseArrivals);
    }
    fence_mbarrier_init();
  }
  __syncthreads();
  if constexpr (Traits<P>::kProducer) {
    // The roles are the two arms of this if/else: ptxas budgets each under its setmaxnreg.
    if (warpgroup_id_uniform() == 0) {
      warpgroup_reg_dealloc<Traits<P>::kProducerRegs>();
      if (threadIdx.x == 0) producer<P>(s, q_map, k_map, v_map, args);
    } else {
      warpgroup_reg_alloc<Traits<P>::kConsumerRegs>();
      consumer_units<P>(s, k_map, v_map, args, warpgroup_id_uniform() - 1);
    }
  } else {
    const Work<P> w = locate<P>(args, grid_unit());
    if (w.row0 < w.rows) {  // row blocks past this sequence's queries have nothing to do
      if (threadIdx.x == 0 && w.tile_begin < w.tile_end) {  // Q and the first stages
        load_q<P>(s, q_map, w, 0);
        for (int i = 0; i < P.stages && w.tile_begin + i < w.tile_end; ++i)
          load_kv<P>(s, k_map, v_map, args, w, w.tile_begin + i, i);
      }
      const int wg = warpgroup_id_uniform();
      turns_begin<P>(wg);
      consumer<P>(s, k_map, v_map, args, w, wg, StreamPos{0, 0});
      turns_end<P>(wg);
    }
  }
  pdl_launch_dependents();  // the combine kernel may start its prologue
}

}  // namespace attnjit::mha_fwd
