#pragma once
// mha_fwd: where a CTA's work lies (sequence, head, rows, KV tiles of its split) and the
// per-row visibility and score rules. Everything a CTA derives from GPU-resident lengths is
// clamped here, so the kernel stays inside q/out and the page pool whatever they hold.
//
// Visibility (docs/design.md): query position i of a sequence, aligned bottom-right
// i' = i + s_k − s_q, sees keys j with lo(i') ≤ j ≤ hi(i') and 0 ≤ j < s_k:
//   none           lo = 0                     hi = s_k − 1
//   causal         lo = 0                     hi = i'
//   window (L, R)  lo = i' − L (L = −1: 0)    hi = i' + R (R = −1: s_k − 1)
//   causal_window  as window with R = 0
//   chunked (c)    lo = ⌊i'/c⌋·c              hi = i'
// lo and hi never decrease with i', which is what makes a tile's key range and the
// "fully visible, skip the mask" test a question about the tile's first and last rows.
#include "common/arch.cuh"
#include "common/numeric.cuh"
#include "mha_fwd/params.cuh"
#include "mha_fwd/schedule.cuh"

namespace attnjit::mha_fwd {

template <auto P>
struct Work {
  int batch, split;
  int head;      // query head (unpacked) or KV head (packed: rows hold `group` query heads)
  int kv_head;
  int row0;      // first packed row of this CTA in the sequence (row = pos·G + g)
  int rows;      // packed rows of the sequence (s_q · G)
  int q_row0;    // q/out tensor row of the sequence's first query
  int s_q, s_k;
  int k_row0;    // contiguous KV: tensor row of the sequence's first key
  int tile_begin, tile_end;  // KV tiles of this split
  int lo_max, hi_min;        // visibility bounds shared by every row of the CTA
};

ATTNJIT_DEVICE int clampi(int x, int lo, int hi) { return x < lo ? lo : (x > hi ? hi : x); }

// Floor division for a possibly negative numerator (i' < 0 when s_q > s_k).
ATTNJIT_DEVICE int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Masks under which every row's keys start at 0 (lo = 0): a tile's mask test is hi only.
template <auto P>
inline constexpr bool kKeysFromZero = P.mask == Mask::kNone || P.mask == Mask::kCausal;

// Inclusive key bounds of the row at aligned position ip (before the 0 ≤ j < s_k clamp).
template <auto P>
ATTNJIT_DEVICE int key_lo(int ip, const Args& a) {
  if constexpr (P.mask == Mask::kWindow || P.mask == Mask::kCausalWindow)
    return a.window_left < 0 ? 0 : ip - a.window_left;
  if constexpr (P.mask == Mask::kChunked) return floor_div(ip, a.chunk) * a.chunk;
  return 0;
}
template <auto P>
ATTNJIT_DEVICE int key_hi(int ip, int s_k, const Args& a) {
  if constexpr (P.mask == Mask::kCausal || P.mask == Mask::kChunked ||
                P.mask == Mask::kCausalWindow)
    return ip;
  if constexpr (P.mask == Mask::kWindow) return a.window_right < 0 ? s_k - 1 : ip + a.window_right;
  return s_k - 1;
}

// The Work of unit u (schedule.cuh).
template <auto P>
ATTNJIT_DEVICE Work<P> locate(const Args& a, const UnitCoords u) {
  using T = Traits<P>;
  Work<P> w;
  w.batch = u.z / a.num_splits;
  w.split = u.z % a.num_splits;
  w.head = u.head;
  w.kv_head = T::kPacked ? w.head : w.head / a.q_per_kv;
  // Causal-like masks make later row blocks longer: launch those first (longest first).
  w.row0 = (T::kCausalLike ? a.m_tiles - 1 - u.x : u.x) * P.block_m;

  if constexpr (P.ragged) {
    w.q_row0 = clampi(a.q_offsets[w.batch], 0, a.total_q);
    w.s_q = clampi(a.q_offsets[w.batch + 1], w.q_row0, a.total_q) - w.q_row0;
  } else {
    w.q_row0 = w.batch * a.s_q;
    w.s_q = a.s_q;
  }
  if constexpr (P.kv_layout == Layout::kPaged) {
    w.k_row0 = 0;
    w.s_k = clampi(a.kv_lens[w.batch], 0, a.max_pages * P.page_size);
  } else if constexpr (P.ragged) {
    w.k_row0 = clampi(a.k_offsets[w.batch], 0, a.total_k);
    w.s_k = clampi(a.k_offsets[w.batch + 1], w.k_row0, a.total_k) - w.k_row0;
  } else {
    w.k_row0 = w.batch * a.s_k;
    w.s_k = a.s_k;
  }
  w.rows = w.s_q * T::kGroup;

  // Key range of the CTA: from the first row's lo to the last valid row's hi.
  const int last_row = min(w.row0 + P.block_m, w.rows) - 1;
  const int ip_first = w.row0 / T::kGroup + w.s_k - w.s_q;
  const int ip_last = last_row / T::kGroup + w.s_k - w.s_q;
  const int n_lo = max(0, key_lo<P>(ip_first, a));
  const int n_hi = min(w.s_k - 1, key_hi<P>(ip_last, w.s_k, a));  // inclusive
  w.lo_max = key_lo<P>(ip_last, a);
  w.hi_min = min(w.s_k - 1, key_hi<P>(ip_first, w.s_k, a));
  int first = 0, tiles = 0;
  if (w.row0 < w.rows && n_hi >= n_lo) {
    first = n_lo / P.block_n;
    tiles = n_hi / P.block_n + 1 - first;
  }
  const int per_split = (tiles + a.num_splits - 1) / a.num_splits;
  w.tile_begin = first + min(tiles, w.split * per_split);
  w.tile_end = first + min(tiles, (w.split + 1) * per_split);
  return w;
}

// Per-row state of a consumer thread: it owns two rows of its warpgroup's 64
// (wgmma_acc_coord: the float pair i belongs to row r = (i / 2) % 2).
template <auto P>
struct RowRule {
  int lo[2], hi[2];    // inclusive visible key bounds (clamped to [0, s_k − 1])
  int ip[2];           // aligned query position (ALiBi distance)
  float slope_log2[2]; // ALiBi slope · log2(e)
};

template <auto P>
ATTNJIT_DEVICE RowRule<P> row_rule(const Work<P>& w, const Args& a, int local_row0,
                                   int local_row1) {
  using T = Traits<P>;
  RowRule<P> r;
  const int local[2] = {local_row0, local_row1};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = w.row0 + local[i];
    const int ip = row / T::kGroup + w.s_k - w.s_q;
    r.ip[i] = ip;
    r.lo[i] = max(0, key_lo<P>(ip, a));
    r.hi[i] = min(w.s_k - 1, key_hi<P>(ip, w.s_k, a));
    r.slope_log2[i] = 0.0f;
    if constexpr (P.score_mod == Mod::kAlibi) {
      const int head = T::kPacked ? w.head * T::kGroup + row % T::kGroup : w.head;
      r.slope_log2[i] = a.alibi[clampi(head, 0, a.h_q - 1)] * kLog2e;
    }
  }
  return r;
}

// Raw q·k → score in log2 units, score mod applied (before masking, as docs/design.md says).
template <auto P>
ATTNJIT_DEVICE float score_log2(float raw, int key, float ip, float slope_log2, const Args& a) {
  if constexpr (P.score_mod == Mod::kSoftcap) {
    // tanh(x) = 1 − 2 / (e^{2x} + 1): ex2.approx is accurate to ~2^-22 where
    // tanh.approx.f32 is only ~2^-11, which the f16 tolerance would notice. Saturates
    // correctly at ±inf.
    const float e = exp2f(raw * a.softcap_inv * 2.8853900817779268f);  // e^{2x}
    return a.softcap_log2 * (1.0f - 2.0f / (e + 1.0f));
  } else if constexpr (P.score_mod == Mod::kAlibi) {
    // s += −slope·(i' − j)
    return raw * a.scale_log2 + slope_log2 * (static_cast<float>(key) - ip);
  } else {
    return raw * a.scale_log2;
  }
}

}  // namespace attnjit::mha_fwd
