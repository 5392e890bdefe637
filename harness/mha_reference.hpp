#pragma once
// float64 reference for mha_fwd (FlashAttention forward with GQA, masks, score mods, sinks,
// padded / ragged / paged K/V) and the comparison that judges a GPU result against it.
// Pure C++ (no Catch2, no driver), so that a benchmark can link it too and never report a
// wrong kernel's speed. Only the enums of the public header are used from the library.
//
// Conventions (docs/design.md, "Conventions shared by every op"; attnjit/ops/mha_fwd.hpp):
//   - query i of a sequence with s_q queries and s_k keys is aligned bottom-right:
//     i' = i + s_k − s_q; key j is visible when 0 ≤ j < s_k and the mask allows it:
//       causal j ≤ i';  window (L, R): i' − L ≤ j ≤ i' + R (−1 = unbounded);
//       causal_window = window(L, 0);  chunked (c): ⌊j/c⌋ = ⌊i'/c⌋ and j ≤ i';
//   - score s_j = softmax_scale · q·k_j, then softcap s = cap·tanh(s/cap) or ALiBi
//     s += −slope_h·(i' − j) (before masking: the mask only selects keys);
//   - lse = log Σ_visible exp(s_j), sink excluded; out = Σ softmax · v;
//   - sink: out *= exp(lse) / (exp(lse) + exp(sink_h)); sink = +inf gives out = 0;
//   - a row that sees no key: out = 0 exactly, lse = −inf, whatever the sink;
//   - GQA: query head h reads KV head h / (h_q / h_kv);
//   - only K/V rows of visible keys are read (rows past a sequence's length, unused pages
//     and garbage block-table entries may be NaN / anything; the reference reading one
//     would show NaN in its own output, or throw for a table entry outside the pool).
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "attnjit/ops/mha_fwd.hpp"

namespace attnjit::harness {

// Host copies of one call's inputs. Values are floats already rounded to the kernel's
// input dtype (bf16/f16), so the reference sees exactly what the GPU sees. Every layout is
// described as rows: q/out rows are [total_q, h_q, ·] (padded [b, s_q] flattens to that),
// K/V rows are [kv_rows, h_kv, ·] (padded [b, s_k], ragged [total_k], paged [pages·page]).
struct MhaProblem {
  int batch = 0;
  int h_q = 0;
  int h_kv = 0;
  int d = 0;   // q·k head dim
  int dv = 0;  // v / out head dim
  std::vector<int> q_lens;        // [batch] queries of each sequence
  std::vector<int> k_lens;        // [batch] keys of each sequence (paged: kv_lens)
  std::vector<int64_t> q_starts;  // [batch] first q/out row (padded b·s_q, ragged q_offsets[b])
  int64_t total_q = 0;            // rows of q and out; lse is [h_q, total_q]
  std::span<const float> q;       // [total_q, h_q, d]

  // K/V rows. Contiguous: sequence b's key j is row k_starts[b] + j. Paged: row
  // block_table[b][j / page_size]·page_size + j % page_size.
  bool paged = false;
  std::vector<int64_t> k_starts;          // contiguous: [batch] (padded b·s_k, ragged k_offsets[b])
  int page_size = 0;                      // paged
  int max_pages = 0;                      // paged: block table width
  std::span<const int32_t> block_table;   // paged: [batch, max_pages]
  int64_t kv_rows = 0;                    // rows in k and v (paged: num_pages · page_size)
  std::span<const float> k;               // [kv_rows, h_kv, d]
  std::span<const float> v;               // [kv_rows, h_kv, dv]

  MaskKind mask = MaskKind::kNone;
  int window_left = -1;
  int window_right = -1;
  int chunk = 0;
  ScoreMod score_mod = ScoreMod::kNone;
  double softcap = 0.0;
  std::span<const float> alibi_slopes;  // [h_q] when score_mod is alibi
  std::span<const float> sink;          // [h_q] logits; empty: no sink
  double softmax_scale = 0.0;
};

// Starts of equal-length sequences: {0, len, 2·len, ...} ([batch]).
std::vector<int64_t> mha_padded_starts(int batch, int len);
// Starts of ragged sequences from their lengths (exclusive prefix sum, [batch]); the
// offsets tensor is these plus the total at the end.
std::vector<int64_t> mha_ragged_starts(const std::vector<int>& lens);

// The mask rule written literally, for one (query i, key j) of a sequence.
bool mha_key_visible(MaskKind mask, int window_left, int window_right, int chunk, int64_t i,
                     int64_t s_q, int64_t s_k, int64_t j);

// Every mask's visible keys form one interval [lo, hi] (count 0 when hi < lo).
struct MhaKeyRange {
  int64_t lo = 0;
  int64_t hi = -1;
  int64_t count() const { return hi >= lo ? hi - lo + 1 : 0; }
};
MhaKeyRange mha_key_range(MaskKind mask, int window_left, int window_right, int chunk, int64_t i,
                          int64_t s_q, int64_t s_k);
MhaKeyRange mha_key_range(const MhaProblem& p, int b, int i);

// Σ over rows (every head) of the keys each row sees: the FLOP count's pairs.
int64_t mha_visible_pairs(const MhaProblem& p);

// One output row: out[q_starts[b] + i, h, 0:dv] and lse[h, q_starts[b] + i].
struct MhaRow {
  int b = 0;
  int i = 0;
  int h = 0;
  friend bool operator==(const MhaRow&, const MhaRow&) = default;
};

// Every (b, i, h) row, in output order.
std::vector<MhaRow> mha_all_rows(const MhaProblem& p);

// `count` random rows plus every edge row: for each non-empty sequence its first and last
// query (i = 0, q_len−1) with the first and last head. Duplicates removed, output order.
std::vector<MhaRow> mha_sample_rows(const MhaProblem& p, int count, std::mt19937_64& gen);

struct MhaReference {
  std::vector<MhaRow> rows;
  std::vector<double> out;      // [rows.size(), dv]
  std::vector<double> lse;      // [rows.size()]; −inf for a row that sees no key
  std::vector<int64_t> visible; // [rows.size()] keys each row sees
};

// The reference for `rows` (empty span: every row), spread over threads. Throws
// std::invalid_argument for an inconsistent problem (sizes, lengths past the capacity, a
// block-table entry a visible key needs outside the pool): a broken test, not a kernel bug.
MhaReference mha_reference(const MhaProblem& p, std::span<const MhaRow> rows = {});

struct MhaCompareLimits {
  double rel_l2 = 1e-2;       // ||gpu − ref|| / ||ref|| over the checked non-zero rows
  double row_max_err = 4e-2;  // max |gpu − ref| in a row / the row's reference RMS
  double lse_abs = 1e-3;
};

struct MhaComparison {
  // Numeric, over the reference's rows whose answer is not exactly zero.
  double rel_l2 = 0.0;
  double worst_row_err = 0.0;  // max |gpu − ref| / rms(ref row)
  MhaRow worst_row;
  double lse_max_abs_err = 0.0;
  int64_t checked_rows = 0;
  // Structural, over the whole output (which rows are zero follows from lengths, mask and
  // sinks, so every row is judged, sampled or not).
  int64_t nonfinite_out = 0;        // NaN/inf (e.g. poison left behind) in rows that see keys
  int64_t empty_rows_not_zero = 0;  // rows whose answer is 0 (no key, or sink +inf) with x != 0
  int64_t lse_wrong_inf = 0;        // −inf where a key is visible, or not −inf where none is
  int64_t lse_nonfinite = 0;        // NaN/+inf anywhere in lse (poison left behind)
  bool passed = false;
  std::string summary() const;  // one line with every number above
};

// Judges `out` [total_q, h_q, dv] (GPU output converted to float) and, when not empty,
// `lse` [h_q, total_q] against `ref`.
MhaComparison mha_compare(const MhaProblem& p, const MhaReference& ref, std::span<const float> out,
                          std::span<const float> lse, const MhaCompareLimits& limits = {});

}  // namespace attnjit::harness
