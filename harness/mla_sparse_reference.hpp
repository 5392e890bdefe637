#pragma once
// float64 reference for mla_decode_sparse (DeepSeek V3.2 top-k decode) on the dequantized
// cache rows, and the comparison that judges a GPU result against it. Pure C++ (no
// Catch2, no driver), like mla_reference.hpp, whose comparison record it shares.
//
// Semantics (runtime/include/attnjit/ops/mla_decode_sparse.hpp):
//   - token g's keys: the first n = clamp(len, 0, topk) entries of its main index row, then
//     those of its extra row, one softmax over both; an index outside [0, rows) is skipped
//     (never read); duplicates count as often as they appear;
//   - k = the dequantized row (fp8: e4m3 · its 128-value block's scale; rope bf16), V = k's
//     first 512 dims; scores = softmax_scale · q·k;
//   - sink (per head, natural-log units): denominator only; lse excludes it;
//   - a token with no valid key: out 0, lse -inf.
#include <cstdint>
#include <span>
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
  std::vector<int> keys;       // [total_q] valid keys each token attends; -1: the token
                               // belongs to no sequence (ragged), its output is untouched
  std::vector<int> batch_of;   // [total_q] its sequence, or -1
};

// `only` (when given, [total_q]): the tokens to compute; the others get keys -1 and are
// not judged (a bench shape's full float64 reference takes minutes).
MlaSparseReference mla_sparse_reference(const MlaSparseProblem& p, const std::vector<char>* only = nullptr);

// Judges `out` [total_q, h, 512] and, when not empty, `lse` (padded [b, h, q_len], ragged
// [h, total_q]) against `ref`; rows of uncovered ragged tokens are not judged.
MlaComparison mla_sparse_compare(const MlaSparseProblem& p, const MlaSparseReference& ref,
                                 std::span<const float> out, std::span<const float> lse,
                                 const MlaCompareLimits& limits = {});

}  // namespace attnjit::harness
