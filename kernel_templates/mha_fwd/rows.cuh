#pragma once
// mha_fwd: what a consumer warpgroup does to its 64 rows between the GEMMs (the kernel is
// sm90_mha_fwd.cuh): the online softmax of a score tile in exp2 (score mod, mask on
// boundary tiles, lazy rescale), zeroing a V tile's stale rows, and the epilogue that
// writes out and lse (or the split's f32 partial).
#include "common/arch.cuh"
#include "common/numeric.cuh"
#include "common/types.cuh"
#include "common/warpgroup.cuh"
#include "common/wgmma.cuh"
#include "mha_fwd/mask.cuh"
#include "mha_fwd/params.cuh"

namespace attnjit::mha_fwd {

// Online-softmax state of this thread's two rows (the 4 lanes of a row hold partial sums;
// they are reduced once, in the epilogue).
struct RowState {
  float m[2];  // running max, log2 units
  float l[2];  // running Σ exp2(s − m) over this thread's columns
};

// Share of the exponentials on the FMA pipe (one in kExp2PolyEvery; 0: none). At d64 the
// exponentials take as long on the MUFU as the tile's GEMMs on the tensor cores, so some go
// to a polynomial; how many is measured, per key tile, on an H100 (docs/performance.md,
// "What the heuristics rest on"): 1 in 5 for 128 and 208 keys (against 1 in 3: d64 1k
// −3 %, 4k −4 %, 8k −2 %, causal 1k −1.3 %; 1 in 2 lost 7 %), 1 in 3 for the other tiles
// (192 keys, causal 4k and 8k: 1 in 5 lost 1.5–2 %).
template <auto P>
inline constexpr int kExp2PolyEvery =
    P.head_dim > 64 ? 0 : (P.block_n == 128 || P.block_n == 208 ? 5 : 3);

// Lazy rescale: a row's running max m (log2 units) moves only when a tile's max passes it
// by more than kRescaleSlack, so most tiles leave O unscaled; p ≤ 2^8 stays far from f32
// and bf16 limits. Not at dv 256: the branch around O's 128-register rescale cost the
// persistent d256 consumer a spill.
template <auto P>
inline constexpr float kRescaleSlack = P.head_dim_v < 256 ? 8.0f : 0.0f;

// A row's max and sum over its block_n/4 elements of this thread run as kRowChains<P>
// independent chains, combined at the end: one chain per row is a string of dependent
// FMNMX / FADD that a warp alone on its scheduler issues one per latency (measured on an
// H100: d64 causal 1k −3 %, the other rows within noise). Element i (row (i/2) % 2) goes to
// chain i % 2 + 2·((i/4) % (kRowChains/2)): the pair of a column group, alternating groups.
// One chain at dv 256: four cost the persistent d256 consumer (O alone is 128 registers) a
// spill.
template <auto P>
inline constexpr int kRowChains = P.head_dim_v < 256 ? 4 : 1;
template <int kChains>
ATTNJIT_DEVICE constexpr int chain_of(int i) {
  return kChains == 1 ? 0 : i % 2 + 2 * ((i / 4) % (kChains / 2));
}
// Element i starts its chain (its row's first element, or the first kChains/2 column
// groups): no identity to fold in.
template <int kChains>
ATTNJIT_DEVICE constexpr bool starts_chain(int i) {
  return kChains == 1 ? i < 4 && i % 2 == 0 : i / 4 < kChains / 2;
}

// Combines a row's chains: c0, or ((c0 op c1) op (c2 op c3)).
template <int kChains, typename Op>
ATTNJIT_DEVICE float fold_chains(const float (&c)[kChains], Op op) {
  static_assert(kChains == 1 || kChains == 4, "one chain or two pairs");
  if constexpr (kChains == 1) {
    return c[0];
  } else {
    return op(op(c[0], c[1]), op(c[2], c[3]));
  }
}

// S [64 × kN] (raw q·k) → P = exp2(s − m_new) in place; updates m and l, writes to
// `scale` the factor exp2(m_old − m_new) each row's O must be scaled by, and returns
// whether any row of the warp has a factor other than 1. kMasked: boundary tile. kN: the
// tile's first kN keys (block_n, or half of it on a warpgroup's half-width last tile).
// Without a score mod the scale folds into the exponent's FFMA (max taken on raw scores,
// scale > 0): exp2(raw·c − m), one FFMA + one MUFU per element.
template <auto P, bool kMasked, int kN>
ATTNJIT_DEVICE bool softmax_tile(float (&sc)[P.block_n / 2], RowState& rs, float (&scale)[2],
                                 const RowRule<P>& rule, int key0, const Args& a) {
  constexpr bool kFused = P.score_mod == Mod::kNone;
  constexpr int kPolyEvery = kExp2PolyEvery<P>;
  const int tid = thread_in_warpgroup();
  constexpr int kChains = kRowChains<P>;
  static_assert(kN >= 8 * kChains / 2, "every chain needs an element");
  // The mask test against the thread's first key: element i sits at a compile-time offset
  // from it, so a bound costs one compare with an immediate, and masks whose rows all
  // start at key 0 (none, causal) test only the upper bound.
  const int key_t = key0 + wgmma_acc_coord(tid, 0).col;
  const int lo_t[2] = {rule.lo[0] - key_t, rule.lo[1] - key_t};
  const int hi_t[2] = {rule.hi[0] - key_t, rule.hi[1] - key_t};
  float row_max[2][kChains];  // [row][chain]
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) {
    const int r = (i / 2) % 2;
    const int dk = wgmma_acc_coord(0, i).col;  // key − key_t
    float x = sc[i];
    if constexpr (!kFused)
      x = score_log2<P>(x, key_t + dk, static_cast<float>(rule.ip[r]), rule.slope_log2[r], a);
    // Replacement, not addition: a NaN score of a stale key must not survive.
    if constexpr (kMasked)
      x = (kKeysFromZero<P> || dk >= lo_t[r]) && dk <= hi_t[r] ? x : neg_inf();
    sc[i] = x;
    float& m = row_max[r][chain_of<kChains>(i)];
    m = starts_chain<kChains>(i) ? x : fmaxf(m, x);
  }
  auto max2 = [](float x, float y) { return fmaxf(x, y); };
  float tile_max[2] = {fold_chains(row_max[0], max2), fold_chains(row_max[1], max2)};
  float neg_m[2];  // −m_new, or 0 while a row has seen no key (its p are exp2(−inf) = 0)
  bool grown = false;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
    const float m_tile = kFused ? tile_max[r] * a.scale_log2 : tile_max[r];
    // Lazy rescale (FA4): m moves only when the tile's max passes it by more than
    // kRescaleSlack, so a tile's p may reach 2^kRescaleSlack (l and O stay relative to the
    // m they use; lse and the output are exact for any m). A row that has seen no key has
    // m = −inf, which any finite max passes; −inf never passes it (never inf − inf).
    float m_new;
    if constexpr (kRescaleSlack<P> > 0.0f) {
      const bool grow = m_tile > rs.m[r] + kRescaleSlack<P>;
      m_new = grow ? m_tile : rs.m[r];
      scale[r] = grow ? exp2_ftz(rs.m[r] - m_new) : 1.0f;
      grown = grown || grow;
    } else {
      m_new = fmaxf(rs.m[r], m_tile);
      scale[r] = m_new == neg_inf() ? 1.0f : exp2_ftz(rs.m[r] - m_new);
    }
    neg_m[r] = m_new == neg_inf() ? 0.0f : -m_new;
    rs.m[r] = m_new;
  }
  float row_sum[2][kChains];  // [row][chain]: this tile's Σ p
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) {
    const int r = (i / 2) % 2;
    const float x = kFused ? fmaf(sc[i], a.scale_log2, neg_m[r]) : sc[i] + neg_m[r];
    // ex2.approx.ftz: weights below 2^-126 are 0 next to the row max's 1 (exp2f spends
    // three more instructions per element on them). At d64 the exponentials take as long
    // on the MUFU as the tile's GEMMs on the tensor cores: one in kPolyEvery goes to the
    // FMA pipe instead (unmasked tiles only: exp2_poly needs finite arguments).
    const float p = kPolyEvery > 0 && !kMasked && i % kPolyEvery == kPolyEvery - 1 ? exp2_poly(x)
                                                                                   : exp2_ftz(x);
    sc[i] = p;
    float& l = row_sum[r][chain_of<kChains>(i)];
    l = starts_chain<kChains>(i) ? p : l + p;
  }
  auto add2 = [](float x, float y) { return x + y; };
#pragma unroll
  for (int r = 0; r < 2; ++r) rs.l[r] = fmaf(rs.l[r], scale[r], fold_chains(row_sum[r], add2));
  // Whether any row of the warp moved its m: else O needs no rescale (scale is 1).
  return kRescaleSlack<P> > 0.0f ? __any_sync(0xffffffffu, grown) : true;
}

// Zeroes key rows [first, block_n) of a V tile (all dv columns): stale rows may hold NaN.
template <auto P>
ATTNJIT_DEVICE void zero_v_rows(u8* v_tile, int first) {
  using T = Traits<P>;
  const int rows = P.block_n - first;
  // A row of a chunk is one 128-byte line; swizzling permutes 16-byte units inside it.
  for (int i = thread_in_warpgroup(); i < rows * T::kVChunks * 8; i += kWarpgroupThreads) {
    const int unit = i % 8, row = first + (i / 8) % rows, chunk = i / (8 * rows);
    *reinterpret_cast<uint4*>(v_tile + chunk * T::kKChunkBytes + row * T::kSpan + unit * 16) =
        make_uint4(0, 0, 0, 0);
  }
}

// Writes this warpgroup's 64 rows: out (+ lse) when unsplit, else the f32 partial + lse.
template <auto P>
ATTNJIT_DEVICE void epilogue(const float (&o)[P.head_dim_v / 2], RowState& rs, const Args& a,
                             const Work<P>& w, int wg) {
  using T = Traits<P>;
  const int tid = thread_in_warpgroup();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    rs.l[r] += __shfl_xor_sync(0xffffffffu, rs.l[r], 1);
    rs.l[r] += __shfl_xor_sync(0xffffffffu, rs.l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = w.row0 + wg * kWgmmaM + wgmma_acc_coord(tid, 2 * r).row;
    if (row >= w.rows) continue;
    const int head = T::kPacked ? w.kv_head * T::kGroup + row % T::kGroup : w.head;
    const int q_row = w.q_row0 + row / T::kGroup;
    const bool empty = !(rs.l[r] > 0.0f);  // saw no key (m = -inf, l = 0)
    const float lse = empty ? neg_inf() : (rs.m[r] + __log2f(rs.l[r])) * kLn2;
    if (a.num_splits == 1) {
      float denom = rs.l[r];
      if constexpr (P.sink) {
        // out ·= e^lse / (e^lse + e^sink): the sink joins the denominator only.
        if (!empty) denom += exp2f(a.sink[head] * kLog2e - rs.m[r]);
      }
      const float inv = empty ? 0.0f : 1.0f / denom;
      u8* out = static_cast<u8*>(a.out) +
                (static_cast<i64>(q_row) * a.h_q + head) * P.head_dim_v * T::kElem;
#pragma unroll
      for (int i = 2 * r; i < P.head_dim_v / 2; i += 4) {
        const int col = wgmma_acc_coord(tid, i).col;
        *reinterpret_cast<u32*>(out + col * T::kElem) = pack2<P.dtype>(o[i] * inv, o[i + 1] * inv);
      }
      if (a.lse != nullptr && tid % 4 == 0) a.lse[static_cast<i64>(head) * a.total_q + q_row] = lse;
    } else {
      const float inv = empty ? 0.0f : 1.0f / rs.l[r];
      float* out = a.part_out +
                   ((static_cast<i64>(w.split) * a.total_q + q_row) * a.h_q + head) * P.head_dim_v;
#pragma unroll
      for (int i = 2 * r; i < P.head_dim_v / 2; i += 4) {
        const int col = wgmma_acc_coord(tid, i).col;
        *reinterpret_cast<float2*>(out + col) = make_float2(o[i] * inv, o[i + 1] * inv);
      }
      if (tid % 4 == 0)
        a.part_lse[(static_cast<i64>(w.split) * a.h_q + head) * a.total_q + q_row] = lse;
    }
  }
}

// Softmax of the tile's first kN keys; masks only where some row of the CTA sees part of
// them (boundary tiles).
template <auto P, int kN>
ATTNJIT_DEVICE bool softmax(float (&sc)[P.block_n / 2], RowState& rs, float (&scale)[2],
                            const RowRule<P>& rule, const Work<P>& w, int tile, const Args& a) {
  const int key0 = tile * P.block_n;
  if (key0 < w.lo_max || key0 + kN - 1 > w.hi_min) {
    return softmax_tile<P, true, kN>(sc, rs, scale, rule, key0, a);
  } else {
    return softmax_tile<P, false, kN>(sc, rs, scale, rule, key0, a);
  }
}

}  // namespace attnjit::mha_fwd
