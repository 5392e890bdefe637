// float64 reference for mla_decode_sparse and its comparison (mla_sparse_reference.hpp).
#include "harness/mla_sparse_reference.hpp"

#include "attnjit/ops/mla_decode_fp8.hpp"
#include "harness/device.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace attnjit::harness {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double bf16_value(const uint8_t* p) {
  uint16_t b;
  std::memcpy(&b, p, 2);
  const uint32_t u = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The clamped key count of a source for token g of sequence `batch`.
int key_count(const MlaSparseSource& s, int64_t g, int batch) {
  if (s.lens.empty()) return s.topk;
  const int n = s.lens[static_cast<size_t>(s.lens_per_token ? g : batch)];
  return std::clamp(n, 0, s.topk);
}

// Appends the valid rows of token g's list in `s` (indices outside the pool skipped).
void collect(const MlaSparseSource& s, int64_t g, int batch, std::vector<const uint8_t*>& rows,
             int row_bytes) {
  const int n = key_count(s, g, batch);
  for (int j = 0; j < n; ++j) {
    const int idx = s.indices[static_cast<size_t>(g * s.stride + j)];
    if (idx < 0 || idx >= s.rows) continue;
    rows.push_back(s.pool.data() + static_cast<size_t>(idx) * row_bytes);
  }
}

size_t lse_offset(const MlaSparseProblem& p, int64_t g, int batch, int head) {
  if (p.q_offsets.empty()) {
    const int64_t t = g % p.q_len;
    return static_cast<size_t>((int64_t{batch} * p.num_heads + head) * p.q_len + t);
  }
  return static_cast<size_t>(int64_t{head} * p.total_q + g);
}

}  // namespace

double mla_sparse_e4m3(uint8_t code) { return attnjit::e4m3_to_float(code); }  // exact in float

void mla_sparse_dequantize(const uint8_t* row, bool fp8, double* out, bool products_in_bf16) {
  if (!fp8) {
    for (int d = 0; d < kMlaQkDim; ++d) out[d] = bf16_value(row + 2 * d);
    return;
  }
  for (int d = 0; d < kMlaVDim; ++d) {
    float scale;
    std::memcpy(&scale, row + 512 + 4 * (d / 128), 4);
    if (!products_in_bf16) {
      out[d] = mla_sparse_e4m3(row[d]) * static_cast<double>(scale);
      continue;
    }
    const float product = static_cast<float>(mla_sparse_e4m3(row[d])) * scale;  // as the kernel
    out[d] = bf16_to_float(float_to_bf16(product));
  }
  for (int d = 0; d < kMlaQkDim - kMlaVDim; ++d) out[kMlaVDim + d] = bf16_value(row + 528 + 2 * d);
}

namespace {

// Token g's rows of `r` (every head), from its valid keys; `k` and `scores` are the
// calling thread's scratch.
void reference_token(const MlaSparseProblem& p, int64_t g, int b, MlaSparseReference& r,
                     std::vector<const uint8_t*>& rows, std::vector<double>& k,
                     std::vector<double>& scores) {
  const int h = p.num_heads;
  const int row_bytes = p.fp8 ? kMlaSparseFp8RowBytes : kMlaSparseBf16RowBytes;
  rows.clear();
  collect(p.main, g, b, rows, row_bytes);
  if (p.has_extra) collect(p.extra, g, b, rows, row_bytes);
  r.keys[static_cast<size_t>(g)] = static_cast<int>(rows.size());
  if (rows.empty()) return;
  k.resize(rows.size() * kMlaQkDim);
  for (size_t j = 0; j < rows.size(); ++j)
    mla_sparse_dequantize(rows[j], p.fp8, &k[j * kMlaQkDim], p.fp8_products_in_bf16);
  scores.resize(rows.size());
  for (int head = 0; head < h; ++head) {
    const size_t row = static_cast<size_t>(g) * h + head;
    const float* q = p.q.data() + row * kMlaQkDim;
    double m = kNegInf, magnitude = 0.0;
    for (size_t j = 0; j < rows.size(); ++j) {
      double s = 0.0, a = 0.0;
      for (int d = 0; d < kMlaQkDim; ++d) {
        const double x = static_cast<double>(q[d]) * k[j * kMlaQkDim + d];
        s += x;
        a += std::abs(x);
      }
      scores[j] = s * p.softmax_scale;
      m = std::max(m, scores[j]);
      magnitude = std::max(magnitude, a * p.softmax_scale);
    }
    double sum = 0.0;
    double* o = r.out.data() + row * kMlaVDim;
    for (size_t j = 0; j < rows.size(); ++j) {
      const double w = std::exp(scores[j] - m);
      sum += w;
      for (int d = 0; d < kMlaVDim; ++d) o[d] += w * k[j * kMlaQkDim + d];
    }
    const double sink = p.sink.empty() ? kNegInf : static_cast<double>(p.sink[static_cast<size_t>(head)]);
    const double denom = sum + (sink == kNegInf ? 0.0 : std::exp(sink - m));  // +inf: out 0
    for (int d = 0; d < kMlaVDim; ++d) o[d] = std::isinf(denom) ? 0.0 : o[d] / denom;
    r.lse[row] = m + std::log(sum);
    r.max_logit[row] = m;
    r.score_magnitude[row] = magnitude;
  }
}

}  // namespace

MlaSparseReference mla_sparse_reference(const MlaSparseProblem& p, const std::vector<char>* only) {
  const int h = p.num_heads;
  const size_t n_rows = static_cast<size_t>(p.total_q) * h;
  MlaSparseReference r;
  r.out.assign(n_rows * kMlaVDim, 0.0);
  r.lse.assign(n_rows, kNegInf);
  r.max_logit.assign(n_rows, kNegInf);
  r.score_magnitude.assign(n_rows, 0.0);
  r.keys.assign(static_cast<size_t>(p.total_q), -1);
  r.batch_of.assign(static_cast<size_t>(p.total_q), -1);
  for (int b = 0; b < p.batch; ++b) {
    int start = b * p.q_len, count = p.q_len;
    if (!p.q_offsets.empty()) {  // as the kernel clamps them
      start = std::clamp(p.q_offsets[static_cast<size_t>(b)], 0, p.total_q);
      const int end = std::clamp(p.q_offsets[static_cast<size_t>(b) + 1], start, p.total_q);
      count = std::min(end - start, p.q_len);
    }
    for (int g = start; g < start + count; ++g) r.batch_of[static_cast<size_t>(g)] = b;
  }
  std::vector<int64_t> todo;
  for (int64_t g = 0; g < p.total_q; ++g) {
    int& b = r.batch_of[static_cast<size_t>(g)];
    if (b >= 0 && only != nullptr && !(*only)[static_cast<size_t>(g)]) b = -1;  // not judged
    if (b >= 0) todo.push_back(g);
  }
  // Tokens are independent and write disjoint rows: threads take them one at a time (a
  // token is h · keys · 1088 multiply-adds, far more than the atomic), so even the few
  // sampled tokens of a bench shape spread over threads.
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t n_threads = std::max<size_t>(1, std::min<size_t>({hw, 32, todo.size()}));
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    std::vector<const uint8_t*> rows;
    std::vector<double> k, scores;
    try {
      for (size_t i; (i = next.fetch_add(1)) < todo.size();)
        reference_token(p, todo[i], r.batch_of[static_cast<size_t>(todo[i])], r, rows, k, scores);
    } catch (...) {  // bad_alloc: rethrown on the calling thread
      std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
      next = todo.size();
    }
  };
  std::vector<std::thread> pool;
  for (size_t i = 1; i < n_threads; ++i) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
  return r;
}

MlaComparison mla_sparse_compare(const MlaSparseProblem& p, const MlaSparseReference& ref,
                                 std::span<const float> out, std::span<const float> lse,
                                 const MlaCompareLimits& limits) {
  const int h = p.num_heads;
  const size_t n_rows = static_cast<size_t>(p.total_q) * h;
  if (out.size() < n_rows * kMlaVDim || (!lse.empty() && lse.size() < n_rows))
    throw std::invalid_argument("mla_sparse_compare: out or lse is smaller than the shapes need");
  MlaComparison c;
  double err2 = 0.0, ref2 = 0.0;
  for (int64_t g = 0; g < p.total_q; ++g) {
    const int keys = ref.keys[static_cast<size_t>(g)];
    if (keys < 0) continue;  // no sequence owns this ragged row
    const int b = ref.batch_of[static_cast<size_t>(g)];
    for (int head = 0; head < h; ++head) {
      const size_t row = static_cast<size_t>(g) * h + head;
      const float* o = out.data() + row * kMlaVDim;
      const double* r = ref.out.data() + row * kMlaVDim;
      if (!lse.empty()) {
        const float l = lse[lse_offset(p, g, b, head)];
        if (std::isnan(l) || l == std::numeric_limits<float>::infinity())
          ++c.lse_nonfinite;
        else if ((keys == 0) != (l == -std::numeric_limits<float>::infinity()))
          ++c.lse_wrong_inf;
        else if (keys > 0)
          c.lse_max_abs_err = std::max(c.lse_max_abs_err, std::abs(double{l} - ref.lse[row]));
      }
      if (keys == 0) {
        c.empty_rows_not_zero += std::any_of(o, o + kMlaVDim, [](float x) { return x != 0.0f; });
        continue;
      }
      c.nonfinite_out += std::count_if(o, o + kMlaVDim, [](float x) { return !std::isfinite(x); });
      double row_ref2 = 0.0, row_max = 0.0;
      for (int d = 0; d < kMlaVDim; ++d) {
        const double e = std::abs(static_cast<double>(o[d]) - r[d]);
        err2 += e * e;
        row_ref2 += r[d] * r[d];
        row_max = (e <= row_max) ? row_max : (std::isnan(e) ? HUGE_VAL : e);
      }
      ref2 += row_ref2;
      const double rel = row_max / std::max(std::sqrt(row_ref2 / kMlaVDim), 1e-30);
      if (c.checked_rows == 0 || rel > c.worst_row_err) {
        c.worst_row_err = rel;
        c.worst_row = {b, static_cast<int>(g), head};
      }
      ++c.checked_rows;
    }
  }
  c.rel_l2 = ref2 > 0.0 ? std::sqrt(err2 / ref2) : (err2 > 0.0 ? HUGE_VAL : 0.0);
  if (std::isnan(c.rel_l2)) c.rel_l2 = HUGE_VAL;
  c.passed = c.rel_l2 <= limits.rel_l2 && c.worst_row_err <= limits.row_max_err &&
             c.lse_max_abs_err <= limits.lse_abs && c.nonfinite_out == 0 &&
             c.empty_rows_not_zero == 0 && c.lse_wrong_inf == 0 && c.lse_nonfinite == 0;
  return c;
}

std::string MlaMaxLogitComparison::summary() const {
  return fmt::format(
      "{}: max abs err {:.3e}, worst err/tolerance {:.3g} at (token {}, h {}) over {} checked rows; "
      "over the limit {}, wrong -inf {}, nonfinite {}",
      passed ? "ok" : "FAILED", max_abs_err, worst_ratio, worst_row.t, worst_row.h, checked_rows,
      over_limit, wrong_inf, nonfinite);
}

MlaMaxLogitComparison mla_sparse_compare_max_logit(const MlaSparseProblem& p, const MlaSparseReference& ref,
                                                   std::span<const float> max_logit,
                                                   const MlaMaxLogitLimits& limits) {
  const int h = p.num_heads;
  if (max_logit.size() < static_cast<size_t>(p.total_q) * h)
    throw std::invalid_argument("mla_sparse_compare_max_logit: max_logit is smaller than the shapes need");
  if (ref.max_logit.size() < static_cast<size_t>(p.total_q) * h)
    throw std::invalid_argument("mla_sparse_compare_max_logit: the reference has no max logit");
  MlaMaxLogitComparison c;
  for (int64_t g = 0; g < p.total_q; ++g) {
    const int keys = ref.keys[static_cast<size_t>(g)];
    if (keys < 0) continue;  // not computed: not judged
    const int b = ref.batch_of[static_cast<size_t>(g)];
    for (int head = 0; head < h; ++head) {
      const double got = max_logit[lse_offset(p, g, b, head)];
      if (keys == 0) {
        c.wrong_inf += got != kNegInf;
        continue;
      }
      if (!std::isfinite(got)) {
        ++c.nonfinite;
        continue;
      }
      const size_t row = static_cast<size_t>(g) * h + head;
      const double want = ref.max_logit[row];
      const double err = std::abs(got - want);
      const double tolerance = limits.base * (1.0 + std::abs(want)) + limits.per_magnitude * ref.score_magnitude[row];
      const double ratio = err / tolerance;
      c.max_abs_err = std::max(c.max_abs_err, err);
      c.over_limit += ratio > 1.0;
      if (c.checked_rows == 0 || ratio > c.worst_ratio) {
        c.worst_ratio = ratio;
        c.worst_row = {b, static_cast<int>(g), head};
      }
      ++c.checked_rows;
    }
  }
  c.passed = c.over_limit == 0 && c.wrong_inf == 0 && c.nonfinite == 0;
  return c;
}

}  // namespace attnjit::harness
