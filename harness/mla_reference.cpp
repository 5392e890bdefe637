#include "harness/mla_reference.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <tuple>

namespace attnjit::harness {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

size_t q_offset(const MlaProblem& p, int b, int t, int h) {
  return ((static_cast<size_t>(b) * p.q_len + t) * p.num_heads + h) * kMlaQkDim;
}
size_t out_offset(const MlaProblem& p, int b, int t, int h) {
  return ((static_cast<size_t>(b) * p.q_len + t) * p.num_heads + h) * kMlaVDim;
}
size_t lse_offset(const MlaProblem& p, int b, int t, int h) {
  return (static_cast<size_t>(b) * p.num_heads + h) * p.q_len + t;
}

// Cache row of key j of sequence b. Only called for visible keys, so a garbage entry
// past a sequence's used pages is never looked at.
const float* key_row(const MlaProblem& p, int b, int j) {
  const int logical = j / p.page_size;
  if (logical >= p.max_pages)
    throw std::invalid_argument(
        fmt::format("mla_reference: key {} of sequence {} needs page {} of a {}-wide table", j, b,
                    logical, p.max_pages));
  const int32_t page = p.block_table[static_cast<size_t>(b) * p.max_pages + logical];
  if (page < 0 || page >= p.num_pages)
    throw std::invalid_argument(
        fmt::format("mla_reference: block_table[{}][{}] = {} is outside the pool of {} pages", b,
                    logical, page, p.num_pages));
  return p.kv_cache.data() +
         (static_cast<size_t>(page) * p.page_size + j % p.page_size) * kMlaQkDim;
}

// Rows of one (b, t): they share the visible key set, so each key row is read once for
// all of their heads.
struct Group {
  int b = 0, t = 0;
  std::vector<size_t> slots;  // indices into MlaReference::rows
};

void compute_group(const MlaProblem& p, const Group& g, MlaReference& r) {
  const int n_keys = mla_visible_keys(p.cache_lens[static_cast<size_t>(g.b)], p.q_len, g.t);
  const size_t nh = g.slots.size();
  for (size_t s : g.slots) r.visible[s] = n_keys;
  if (n_keys == 0) {
    for (size_t s : g.slots) {
      std::fill_n(r.out.begin() + static_cast<ptrdiff_t>(s * kMlaVDim), kMlaVDim, 0.0);
      r.lse[s] = kNegInf;
    }
    return;
  }
  // qd [nh, 576]: the group's query rows in double.
  std::vector<double> qd(nh * kMlaQkDim);
  for (size_t i = 0; i < nh; ++i) {
    const float* src = p.q.data() + q_offset(p, g.b, g.t, r.rows[g.slots[i]].h);
    std::copy(src, src + kMlaQkDim, qd.begin() + static_cast<ptrdiff_t>(i * kMlaQkDim));
  }
  // scores [nh, n_keys]
  std::vector<double> scores(nh * static_cast<size_t>(n_keys));
  std::vector<double> kd(kMlaQkDim);
  for (int j = 0; j < n_keys; ++j) {
    const float* k = key_row(p, g.b, j);
    std::copy(k, k + kMlaQkDim, kd.begin());
    for (size_t i = 0; i < nh; ++i) {
      const double* qi = qd.data() + i * kMlaQkDim;
      double acc[4] = {0, 0, 0, 0};  // independent partial sums: faster, still float64
      for (int d = 0; d < kMlaQkDim; d += 4)
        for (int u = 0; u < 4; ++u) acc[u] += qi[d + u] * kd[static_cast<size_t>(d + u)];
      scores[i * static_cast<size_t>(n_keys) + static_cast<size_t>(j)] =
          p.softmax_scale * ((acc[0] + acc[1]) + (acc[2] + acc[3]));
    }
  }
  // Softmax numerators in place; denominators and lse per head.
  std::vector<double> denom(nh);
  for (size_t i = 0; i < nh; ++i) {
    double* s = scores.data() + i * static_cast<size_t>(n_keys);
    const double m = *std::max_element(s, s + n_keys);
    double sum = 0.0;
    for (int j = 0; j < n_keys; ++j) sum += (s[j] = std::exp(s[j] - m));
    denom[i] = sum;
    r.lse[g.slots[i]] = m + std::log(sum);
  }
  // out [nh, 512] = P · V, V = the first 512 dims of each visible row.
  std::vector<double> acc(nh * kMlaVDim, 0.0);
  std::vector<double> vd(kMlaVDim);
  for (int j = 0; j < n_keys; ++j) {
    const float* v = key_row(p, g.b, j);
    std::copy(v, v + kMlaVDim, vd.begin());
    for (size_t i = 0; i < nh; ++i) {
      const double pj = scores[i * static_cast<size_t>(n_keys) + static_cast<size_t>(j)];
      double* a = acc.data() + i * kMlaVDim;
      for (int d = 0; d < kMlaVDim; ++d) a[d] += pj * vd[static_cast<size_t>(d)];
    }
  }
  for (size_t i = 0; i < nh; ++i)
    for (int d = 0; d < kMlaVDim; ++d)
      r.out[g.slots[i] * kMlaVDim + static_cast<size_t>(d)] = acc[i * kMlaVDim + d] / denom[i];
}

void check_problem(const MlaProblem& p) {
  const auto need = [](size_t have, size_t want, const char* what) {
    if (have < want)
      throw std::invalid_argument(
          fmt::format("mla_reference: {} holds {} values, the shapes need {}", what, have, want));
  };
  const size_t b = static_cast<size_t>(p.batch), ql = static_cast<size_t>(p.q_len),
               h = static_cast<size_t>(p.num_heads);
  need(p.q.size(), b * ql * h * kMlaQkDim, "q");
  need(p.kv_cache.size(), static_cast<size_t>(p.num_pages) * p.page_size * kMlaQkDim, "kv_cache");
  need(p.block_table.size(), b * static_cast<size_t>(p.max_pages), "block_table");
  need(p.cache_lens.size(), b, "cache_lens");
  if (p.page_size <= 0 || p.q_len <= 0)
    throw std::invalid_argument("mla_reference: page_size and q_len must be positive");
}

}  // namespace

int mla_visible_keys(int cache_len, int q_len, int t) {
  const int n = cache_len - q_len + t + 1;
  return std::clamp(n, 0, std::max(cache_len, 0));
}

MlaPageTable mla_random_page_table(std::span<const int32_t> lens, int max_len, int page,
                                   int period_pages, std::mt19937_64& gen) {
  MlaPageTable t;
  t.max_pages = (max_len + page - 1) / page;
  for (int l : lens) t.num_pages += (l + page - 1) / page;
  std::vector<int32_t> pool(static_cast<size_t>(t.num_pages));
  for (int i = 0; i < t.num_pages; ++i) pool[static_cast<size_t>(i)] = i;
  std::shuffle(pool.begin(), pool.end(), gen);
  t.table.assign(lens.size() * static_cast<size_t>(t.max_pages), 0);
  size_t next = 0;
  for (size_t b = 0; b < lens.size(); ++b)
    for (int p = 0; p * page < lens[b]; ++p) t.table[b * t.max_pages + p] = pool[next++];
  t.ref_table = t.table;
  for (auto& e : t.ref_table) e %= period_pages;
  return t;
}

std::vector<MlaRow> mla_all_rows(const MlaProblem& p) {
  std::vector<MlaRow> rows;
  rows.reserve(static_cast<size_t>(p.batch) * p.q_len * p.num_heads);
  for (int b = 0; b < p.batch; ++b)
    for (int t = 0; t < p.q_len; ++t)
      for (int h = 0; h < p.num_heads; ++h) rows.push_back({b, t, h});
  return rows;
}

std::vector<MlaRow> mla_sample_rows(const MlaProblem& p, int count, std::mt19937_64& gen) {
  std::set<std::tuple<int, int, int>> picked;
  for (int b = 0; b < p.batch; ++b)
    for (int t : {0, p.q_len - 1})
      for (int h : {0, p.num_heads - 1}) picked.insert({b, t, h});
  std::uniform_int_distribution<int> db(0, p.batch - 1), dt(0, p.q_len - 1), dh(0, p.num_heads - 1);
  for (int i = 0; i < count; ++i) picked.insert({db(gen), dt(gen), dh(gen)});
  std::vector<MlaRow> rows;
  for (const auto& [b, t, h] : picked) rows.push_back({b, t, h});
  return rows;
}

MlaReference mla_reference(const MlaProblem& p, std::span<const MlaRow> rows) {
  check_problem(p);
  MlaReference r;
  r.rows = rows.empty() ? mla_all_rows(p) : std::vector<MlaRow>(rows.begin(), rows.end());
  r.out.assign(r.rows.size() * kMlaVDim, std::numeric_limits<double>::quiet_NaN());
  r.lse.assign(r.rows.size(), std::numeric_limits<double>::quiet_NaN());
  r.visible.assign(r.rows.size(), 0);

  std::map<std::pair<int, int>, Group> by_bt;
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const MlaRow& row = r.rows[i];
    if (row.b < 0 || row.b >= p.batch || row.t < 0 || row.t >= p.q_len || row.h < 0 ||
        row.h >= p.num_heads)
      throw std::invalid_argument(fmt::format(
          "mla_reference: row ({}, {}, {}) is outside the problem", row.b, row.t, row.h));
    Group& g = by_bt[{row.b, row.t}];
    g.b = row.b;
    g.t = row.t;
    g.slots.push_back(i);
  }
  // At most kHeadsPerTask heads per task: a sampled long sequence has few (b, t) groups,
  // and one task per group would leave most threads idle. Each task re-reads its keys,
  // which costs little next to 4 heads' dot products.
  constexpr size_t kHeadsPerTask = 4;
  std::vector<Group> groups;
  for (auto& [key, g] : by_bt)
    for (size_t i = 0; i < g.slots.size(); i += kHeadsPerTask) {
      Group task{g.b, g.t, {}};
      task.slots.assign(
          g.slots.begin() + static_cast<ptrdiff_t>(i),
          g.slots.begin() + static_cast<ptrdiff_t>(std::min(i + kHeadsPerTask, g.slots.size())));
      groups.push_back(std::move(task));
    }
  // Longest groups first so that one long sequence does not finish last on its own.
  std::sort(groups.begin(), groups.end(), [&](const Group& a, const Group& b) {
    return static_cast<int64_t>(a.slots.size()) * p.cache_lens[static_cast<size_t>(a.b)] >
           static_cast<int64_t>(b.slots.size()) * p.cache_lens[static_cast<size_t>(b.b)];
  });

  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t n_threads = std::min<size_t>({hw, 32, groups.size()});
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    try {
      for (size_t i; (i = next.fetch_add(1)) < groups.size();) compute_group(p, groups[i], r);
    } catch (...) {
      std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
      next = groups.size();  // stop the others early
    }
  };
  std::vector<std::thread> pool;
  for (size_t i = 1; i < n_threads; ++i) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
  return r;
}

std::string MlaComparison::summary() const {
  return fmt::format(
      "{}: rel_l2 {:.3e}, worst row err {:.3e} at (b {}, t {}, h {}), lse max abs err {:.3e} "
      "over {} checked rows; nonfinite out {}, empty rows not zero {}, lse wrong -inf {}, "
      "lse nonfinite {}",
      passed ? "ok" : "FAILED", rel_l2, worst_row_err, worst_row.b, worst_row.t, worst_row.h,
      lse_max_abs_err, checked_rows, nonfinite_out, empty_rows_not_zero, lse_wrong_inf,
      lse_nonfinite);
}

MlaComparison mla_compare(const MlaProblem& p, const MlaReference& ref, std::span<const float> out,
                          std::span<const float> lse, const MlaCompareLimits& limits) {
  const size_t n_rows = static_cast<size_t>(p.batch) * p.q_len * p.num_heads;
  if (out.size() < n_rows * kMlaVDim || (!lse.empty() && lse.size() < n_rows))
    throw std::invalid_argument("mla_compare: out or lse is smaller than the shapes need");
  MlaComparison c;
  constexpr float kNegInfF = -std::numeric_limits<float>::infinity();

  // Structural checks over every row: which rows see no key follows from the lengths.
  for (int b = 0; b < p.batch; ++b)
    for (int t = 0; t < p.q_len; ++t) {
      const bool empty = mla_visible_keys(p.cache_lens[static_cast<size_t>(b)], p.q_len, t) == 0;
      for (int h = 0; h < p.num_heads; ++h) {
        const float* o = out.data() + out_offset(p, b, t, h);
        if (empty) {
          c.empty_rows_not_zero += std::any_of(o, o + kMlaVDim, [](float x) { return x != 0.0f; });
        } else {
          c.nonfinite_out +=
              std::count_if(o, o + kMlaVDim, [](float x) { return !std::isfinite(x); });
        }
        if (lse.empty()) continue;
        const float l = lse[lse_offset(p, b, t, h)];
        if (std::isnan(l) || l == std::numeric_limits<float>::infinity())
          ++c.lse_nonfinite;
        else if (empty != (l == kNegInfF))
          ++c.lse_wrong_inf;
      }
    }

  // Numeric checks over the reference's rows that see keys.
  double err2 = 0.0, ref2 = 0.0;
  for (size_t i = 0; i < ref.rows.size(); ++i) {
    if (ref.visible[i] == 0) continue;
    const MlaRow& row = ref.rows[i];
    const float* o = out.data() + out_offset(p, row.b, row.t, row.h);
    const double* r = ref.out.data() + i * kMlaVDim;
    double row_ref2 = 0.0, row_max = 0.0;
    for (int d = 0; d < kMlaVDim; ++d) {
      const double e = std::abs(static_cast<double>(o[d]) - r[d]);
      err2 += e * e;
      row_ref2 += r[d] * r[d];
      // NaN compares false: count it as an infinite error rather than none.
      row_max = (e <= row_max) ? row_max : (std::isnan(e) ? HUGE_VAL : e);
    }
    ref2 += row_ref2;
    const double rms = std::max(std::sqrt(row_ref2 / kMlaVDim), 1e-30);
    const double rel = row_max / rms;
    if (c.checked_rows == 0 || rel > c.worst_row_err) {
      c.worst_row_err = rel;
      c.worst_row = row;
    }
    ++c.checked_rows;
    if (!lse.empty()) {
      const double e =
          std::abs(static_cast<double>(lse[lse_offset(p, row.b, row.t, row.h)]) - ref.lse[i]);
      c.lse_max_abs_err =
          (e <= c.lse_max_abs_err) ? c.lse_max_abs_err : (std::isnan(e) ? HUGE_VAL : e);
    }
  }
  c.rel_l2 = ref2 > 0.0 ? std::sqrt(err2 / ref2) : (err2 > 0.0 ? HUGE_VAL : 0.0);
  if (std::isnan(c.rel_l2)) c.rel_l2 = HUGE_VAL;
  c.passed = c.rel_l2 <= limits.rel_l2 && c.worst_row_err <= limits.row_max_err &&
             c.lse_max_abs_err <= limits.lse_abs && c.nonfinite_out == 0 &&
             c.empty_rows_not_zero == 0 && c.lse_wrong_inf == 0 && c.lse_nonfinite == 0;
  return c;
}

double mla_lse_limit(std::span<const double> ref_lse, double per_unit) {
  double m = 0.0;
  for (double x : ref_lse)
    if (std::isfinite(x)) m = std::max(m, std::abs(x));
  return 1e-3 + per_unit * m;
}

}  // namespace attnjit::harness
