// float64 reference for mla_decode_sparse and its comparison (mla_sparse_reference.hpp).
#include "harness/mla_sparse_reference.hpp"

#include "attnjit/ops/mla_decode_fp8.hpp"
#include "harness/device.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

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

MlaSparseReference mla_sparse_reference(const MlaSparseProblem& p, const std::vector<char>* only) {
  const int h = p.num_heads;
  const int row_bytes = p.fp8 ? kMlaSparseFp8RowBytes : kMlaSparseBf16RowBytes;
  MlaSparseReference r;
  r.out.assign(static_cast<size_t>(p.total_q) * h * kMlaVDim, 0.0);
  r.lse.assign(static_cast<size_t>(p.total_q) * h, kNegInf);
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
  std::vector<const uint8_t*> rows;
  std::vector<double> k, scores;
  for (int64_t g = 0; g < p.total_q; ++g) {
    const int b = r.batch_of[static_cast<size_t>(g)];
    if (b < 0) continue;
    if (only != nullptr && !(*only)[static_cast<size_t>(g)]) {
      r.batch_of[static_cast<size_t>(g)] = -1;  // not judged
      continue;
    }
    rows.clear();
    collect(p.main, g, b, rows, row_bytes);
    if (p.has_extra) collect(p.extra, g, b, rows, row_bytes);
    r.keys[static_cast<size_t>(g)] = static_cast<int>(rows.size());
    if (rows.empty()) continue;
    k.resize(rows.size() * kMlaQkDim);
    for (size_t j = 0; j < rows.size(); ++j)
      mla_sparse_dequantize(rows[j], p.fp8, &k[j * kMlaQkDim], p.fp8_products_in_bf16);
    scores.resize(rows.size());
    for (int head = 0; head < h; ++head) {
      const float* q = p.q.data() + (static_cast<size_t>(g) * h + head) * kMlaQkDim;
      double m = kNegInf;
      for (size_t j = 0; j < rows.size(); ++j) {
        double s = 0.0;
        for (int d = 0; d < kMlaQkDim; ++d) s += static_cast<double>(q[d]) * k[j * kMlaQkDim + d];
        scores[j] = s * p.softmax_scale;
        m = std::max(m, scores[j]);
      }
      double sum = 0.0;
      double* o = r.out.data() + (static_cast<size_t>(g) * h + head) * kMlaVDim;
      for (size_t j = 0; j < rows.size(); ++j) {
        const double w = std::exp(scores[j] - m);
        sum += w;
        for (int d = 0; d < kMlaVDim; ++d) o[d] += w * k[j * kMlaQkDim + d];
      }
      const double sink = p.sink.empty() ? kNegInf : static_cast<double>(p.sink[static_cast<size_t>(head)]);
      const double denom = sum + (sink == kNegInf ? 0.0 : std::exp(sink - m));  // +inf: out 0
      for (int d = 0; d < kMlaVDim; ++d) o[d] = std::isinf(denom) ? 0.0 : o[d] / denom;
      r.lse[static_cast<size_t>(g) * h + head] = m + std::log(sum);
    }
  }
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

}  // namespace attnjit::harness
