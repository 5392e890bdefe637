#pragma once
// float64 reference for mla_decode_sparse (DeepSeek V3.2 top-k decode) and
// mla_prefill_sparse (the same attention, every token its own one-token sequence) on the
// dequantized cache rows, and the comparisons that judge a GPU result against it. Pure C++
// (no Catch2, no driver), like mla_reference.hpp, whose comparison record it shares.
//
// Semantics (runtime/include/attnjit/ops/mla_decode_sparse.hpp):
//   - token g's keys: the first n = clamp(len, 0, topk) entries of its main index row, then
//     those of its extra row, one softmax over both; an index outside [0, rows) is skipped
//     (never read); duplicates count as often as they appear;
//   - k = the dequantized row (fp8: e4m3 · its 128-value block's scale; rope bf16), V = k's
//     first 512 dims; scores = softmax_scale · q·k;
//   - sink (per head, natural-log units): denominator only; lse excludes it;
//   - max logit (prefill): the largest score over the token's valid keys, natural units,
//     sink excluded;
//   - a token with no valid key: out 0, lse -inf, max logit -inf.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "harness/mla_reference.hpp"

namespace attnjit::harness {

inline constexpr int kMlaSparseFp8RowBytes = 656;
inline constexpr int kMlaSparseBf16RowBytes = 1152;

// One key source: a pool of rows and each token's index row.
struct MlaSparseSource {
  std::span<const uint8_t> pool;      // [rows, row bytes]: 656-byte fp8 or 576 bf16 values
  int64_t rows = 0;
  std::span<const int32_t> indices;   // token g's row starts at g·stride
  int64_t stride = 0;
  int topk = 0;
  std::span<const int32_t> lens;      // empty: every token reads topk
  bool lens_per_token = false;        // lens[g] (else lens[batch of g])
};

struct MlaSparseProblem {
  int batch = 0;
  int q_len = 1;                     // padded: every sequence's; ragged: the bound
  int num_heads = 0;
  bool fp8 = true;
  std::vector<int32_t> q_offsets;    // ragged: [batch + 1]; empty: padded
  int total_q = 0;
  std::span<const float> q;          // [total_q, h, 576], bf16-rounded
  MlaSparseSource main;
  bool has_extra = false;
  MlaSparseSource extra;
  std::span<const float> sink;       // [h] or empty
  double softmax_scale = 0.0;
  // fp8: round each dequantized value e4m3 · scale (an f32 product) to bf16, as the kernel
  // does before its bf16 wgmma. Exact products would judge that precision choice instead
  // of the attention: with block scales ~1e3 one bf16 rounding moves a score by ~2.
  bool fp8_products_in_bf16 = false;
};

// The value of an e4m3 (fn) code; NaN for 0x7f / 0xff.
double mla_sparse_e4m3(uint8_t code);
// Row `r` of `pool` as 576 doubles (fp8: content × block scale, rope as stored; with
// products_in_bf16, each f32 product e4m3 · scale rounded to bf16 RN-even).
void mla_sparse_dequantize(const uint8_t* row, bool fp8, double* out /* [576] */,
                           bool products_in_bf16 = false);

struct MlaSparseReference {
  std::vector<double> out;     // [total_q, h, 512]
  std::vector<double> lse;     // [total_q, h]; -inf for a token with no valid key
  std::vector<double> max_logit;  // [total_q, h]: max_j softmax_scale·q·k_j; -inf without keys
  // [total_q, h]: softmax_scale · max_j Σ_d |q_d·k_jd| over the valid keys (0 without):
  // the size of the terms a score sums, which bounds its rounding error.
  std::vector<double> score_magnitude;
  std::vector<int> keys;       // [total_q] valid keys each token attends; -1: the token
                               // belongs to no sequence (ragged), its output is untouched
  std::vector<int> batch_of;   // [total_q] its sequence, or -1
};

// `only` (when given, [total_q]): the tokens to compute; the others get keys -1 and are
// not judged (a bench shape's full float64 reference takes minutes). Tokens are spread
// over threads; each is computed by one thread in a fixed order, so the result does not
// depend on the thread count.
MlaSparseReference mla_sparse_reference(const MlaSparseProblem& p, const std::vector<char>* only = nullptr);

// Judges `out` [total_q, h, 512] and, when not empty, `lse` (padded [b, h, q_len], ragged
// [h, total_q]) against `ref`; rows of uncovered ragged tokens are not judged.
MlaComparison mla_sparse_compare(const MlaSparseProblem& p, const MlaSparseReference& ref,
                                 std::span<const float> out, std::span<const float> lse,
                                 const MlaCompareLimits& limits = {});

// The max logit's tolerance, per (token, head) with reference value m and score magnitude
// M (score_magnitude): base · (1 + |m|) + per_magnitude · M. Why these terms:
//   - q and k reach the kernel as bf16, which the reference reads exactly, and a product
//     of two bf16 values is exact in f32; only the sum over 576 dims and the scaling
//     round. f32 accumulation in any order is off by at most 576 · 2^-24 ≈ 2^-14.8 of
//     Σ|q_d·k_d| (Hopper's tensor cores truncate while aligning addends: at most twice
//     that), scaled by softmax_scale into M's units: ~2^-14 · M;
//   - a kernel may round one factor to bf16 on the way (e.g. q · scale · log2 e held in
//     bf16 for the wgmma): 2^-9 relative per element, ≤ 2^-9 · M on the score. The
//     default per_magnitude 2^-8 admits that with a factor 2 to spare and the f32 terms
//     above 60 times over. For N(0, 1) data (M ≈ 27, scores' σ ≈ 1.7 at scale 192^-½) it
//     is 0.1, a quarter of the usual gap between a top-2048's two largest scores
//     (σ / √(2 ln 2048) ≈ 0.45) and far below a max in log2 units (× 1.44 of m ≈ 6);
//   - the scale, the log2 ↔ natural conversions and the f32 store: a few f32 roundings of
//     |m| (2^-22 relative); base 1e-3 also floors the tolerance where m ≈ 0.
struct MlaMaxLogitLimits {
  double base = 1e-3;
  double per_magnitude = 0x1p-8;
};

struct MlaMaxLogitComparison {
  double max_abs_err = 0.0;  // over the judged rows with keys
  double worst_ratio = 0.0;  // max of |gpu - ref| / tolerance: ≤ 1 passes
  MlaRow worst_row;          // b = token's sequence, t = token, h = head
  int64_t checked_rows = 0;
  int64_t over_limit = 0;    // rows with keys whose error exceeds their tolerance
  int64_t wrong_inf = 0;     // not -inf where the token has no valid key
  int64_t nonfinite = 0;     // NaN or ±inf where it has one (poison left behind)
  bool passed = false;
  std::string summary() const;  // one line with every number above
};

// Judges `max_logit`, laid out as mla_sparse_compare's lse (padded [b, h, q_len], ragged
// [h, total_q]; prefill = padded with q_len 1: [tokens, h]), against `ref`; tokens the
// reference did not compute are not judged.
MlaMaxLogitComparison mla_sparse_compare_max_logit(const MlaSparseProblem& p, const MlaSparseReference& ref,
                                                   std::span<const float> max_logit,
                                                   const MlaMaxLogitLimits& limits = {});

}  // namespace attnjit::harness
