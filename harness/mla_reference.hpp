#pragma once
// float64 reference for mla_decode (absorbed MLA over a paged latent cache) and the
// comparison that judges a GPU result against it. Pure C++ (no Catch2, no driver) so
// that the benchmark can link it too and never report a wrong kernel's speed.
//
// Conventions (docs/design.md, "Conventions shared by every op"):
//   - scores s_j = softmax_scale · q·k_j over all 576 dims; V = the first 512 dims of k_j;
//   - causal when q_len > 1: query t of a sequence of length L sees keys 0 .. L-q_len+t;
//   - a row that sees no key: out = 0 exactly, lse = -inf;
//   - only cache rows below a sequence's visible count are read (rows past L may be NaN,
//     and the reference reading one would show up as NaN in its own output).
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace attnjit::harness {

inline constexpr int kMlaQkDim = 576;
inline constexpr int kMlaVDim = 512;

// Host copies of one call's inputs. Values are floats already rounded to the kernel's
// input dtype (bf16/f16), so the reference sees exactly what the GPU sees.
struct MlaProblem {
  int batch = 0;
  int q_len = 1;
  int num_heads = 0;
  int page_size = 64;
  int num_pages = 0;
  int max_pages = 0;                     // block table width
  std::span<const float> q;              // [batch, q_len, num_heads, 576]
  std::span<const float> kv_cache;       // [num_pages, page_size, 576]
  std::span<const int32_t> block_table;  // [batch, max_pages]
  std::span<const int32_t> cache_lens;   // [batch]
  double softmax_scale = 0.0;
};

// One output row: out[b, t, h, 0:512] and lse[b, h, t].
struct MlaRow {
  int b = 0;
  int t = 0;
  int h = 0;
  friend bool operator==(const MlaRow&, const MlaRow&) = default;
};

// Keys query t of a sequence of length L sees (0 when L < q_len leaves it none).
int mla_visible_keys(int cache_len, int q_len, int t);

// Every (b, t, h) row, in output order.
// A bench problem's block table: the batch's pages in random order, each sequence taking the
// next ⌈len / page⌉ of them (rows of ⌈max_len / page⌉ entries, 0 past a sequence's pages);
// ref_table folds every page into the first period_pages (the problems store one period of
// cache rows and read page p as page p % period_pages).
struct MlaPageTable {
  int max_pages = 0, num_pages = 0;
  std::vector<int32_t> table, ref_table;
};
MlaPageTable mla_random_page_table(std::span<const int32_t> lens, int max_len, int page,
                                   int period_pages, std::mt19937_64& gen);

std::vector<MlaRow> mla_all_rows(const MlaProblem& p);

// `count` random rows plus every edge row: for each sequence the first and last query
// (t = 0, q_len-1) with the first and last head. Duplicates removed, output order.
std::vector<MlaRow> mla_sample_rows(const MlaProblem& p, int count, std::mt19937_64& gen);

struct MlaReference {
  std::vector<MlaRow> rows;
  std::vector<double> out;   // [rows.size(), 512]
  std::vector<double> lse;   // [rows.size()]; -inf for a row that sees no key
  std::vector<int> visible;  // [rows.size()] keys each row sees
};

// The reference for `rows` (empty span: every row). Rows are spread over threads.
// Throws std::invalid_argument when a block-table entry a visible key needs is outside
// [0, num_pages) — a broken test, not a kernel bug.
MlaReference mla_reference(const MlaProblem& p, std::span<const MlaRow> rows = {});

struct MlaCompareLimits {
  double rel_l2 = 1e-2;       // ||gpu - ref|| / ||ref|| over the checked non-empty rows
  double row_max_err = 4e-2;  // max |gpu - ref| in a row / the row's reference RMS
  double lse_abs = 1e-3;
};

// lse_abs for scores of any magnitude: 1e-3 + per_unit · max |lse| over the finite
// reference values. The kernels keep scores in f32, so the lse error grows with |S|
// (~1e-6 of it for bf16 wgmma; fp8 wgmma's accumulator loses more).
double mla_lse_limit(std::span<const double> ref_lse, double per_unit);

struct MlaComparison {
  // Numeric, over the reference's rows.
  double rel_l2 = 0.0;
  double worst_row_err = 0.0;  // max |gpu - ref| / rms(ref row)
  MlaRow worst_row;
  double lse_max_abs_err = 0.0;
  int64_t checked_rows = 0;
  // Structural, over the whole output (every row's visible count is known from lengths).
  int64_t nonfinite_out = 0;        // NaN/inf (e.g. poison left behind) in rows that see keys
  int64_t empty_rows_not_zero = 0;  // rows that see no key with any element != 0
  int64_t lse_wrong_inf = 0;        // -inf where a key is visible, or not -inf where none is
  int64_t lse_nonfinite = 0;        // NaN/+inf anywhere in lse (poison left behind)
  bool passed = false;
  std::string summary() const;  // one line with every number above
};

// Judges `out` [batch, q_len, num_heads, 512] (GPU output converted to float) and, when
// not empty, `lse` [batch, num_heads, q_len] against `ref`.
MlaComparison mla_compare(const MlaProblem& p, const MlaReference& ref, std::span<const float> out,
                          std::span<const float> lse, const MlaCompareLimits& limits = {});

}  // namespace attnjit::harness
