#include "harness/mha_reference.hpp"

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
constexpr double kPosInf = std::numeric_limits<double>::infinity();

[[noreturn]] void broken(const std::string& what) {
  throw std::invalid_argument("mha_reference: " + what);
}

int64_t floor_div(int64_t a, int64_t b) {  // b > 0; rounds toward −inf (i' may be negative)
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

size_t q_index(const MhaProblem& p, int b, int i, int h) {
  return (static_cast<size_t>(p.q_starts[static_cast<size_t>(b)] + i) * p.h_q + h) *
         static_cast<size_t>(p.d);
}
size_t out_index(const MhaProblem& p, int b, int i, int h) {
  return (static_cast<size_t>(p.q_starts[static_cast<size_t>(b)] + i) * p.h_q + h) *
         static_cast<size_t>(p.dv);
}
size_t lse_index(const MhaProblem& p, int b, int i, int h) {
  return static_cast<size_t>(h) * static_cast<size_t>(p.total_q) +
         static_cast<size_t>(p.q_starts[static_cast<size_t>(b)] + i);
}

// K/V row of key j of sequence b. Only called for visible keys, so a garbage table entry
// past a sequence's used pages is never looked at.
int64_t kv_row(const MhaProblem& p, int b, int64_t j) {
  if (!p.paged) return p.k_starts[static_cast<size_t>(b)] + j;
  const int64_t logical = j / p.page_size;
  if (logical >= p.max_pages)
    broken(fmt::format("key {} of sequence {} needs page {} of a {}-wide table", j, b, logical,
                       p.max_pages));
  const int32_t page = p.block_table[static_cast<size_t>(b) * p.max_pages + logical];
  const int64_t num_pages = p.kv_rows / p.page_size;
  if (page < 0 || page >= num_pages)
    broken(fmt::format("block_table[{}][{}] = {} is outside the pool of {} pages", b, logical, page,
                       num_pages));
  return int64_t{page} * p.page_size + j % p.page_size;
}

double sink_of(const MhaProblem& p, int h) {
  return p.sink.empty() ? kNegInf : static_cast<double>(p.sink[static_cast<size_t>(h)]);
}

// The answer of row (b, i, h) is exactly zero: no visible key, or a +inf sink.
bool zero_row(const MhaProblem& p, int b, int i, int h) {
  return mha_key_range(p, b, i).count() == 0 || sink_of(p, h) == kPosInf;
}

void check_problem(const MhaProblem& p) {
  if (p.batch < 0 || p.h_q <= 0 || p.h_kv <= 0 || p.d <= 0 || p.dv <= 0)
    broken("batch, heads and head dims must be positive");
  if (p.h_q % p.h_kv != 0) broken(fmt::format("h_q {} is not a multiple of h_kv {}", p.h_q, p.h_kv));
  const size_t b = static_cast<size_t>(p.batch);
  if (p.q_lens.size() != b || p.k_lens.size() != b || p.q_starts.size() != b ||
      (!p.paged && p.k_starts.size() != b))
    broken("q_lens, k_lens, q_starts (and k_starts when contiguous) need one entry per sequence");
  const auto need = [](size_t have, size_t want, const char* what) {
    if (have < want)
      broken(fmt::format("{} holds {} values, the shapes need {}", what, have, want));
  };
  need(p.q.size(), static_cast<size_t>(p.total_q) * p.h_q * p.d, "q");
  need(p.k.size(), static_cast<size_t>(p.kv_rows) * p.h_kv * p.d, "k");
  need(p.v.size(), static_cast<size_t>(p.kv_rows) * p.h_kv * p.dv, "v");
  if (p.score_mod == ScoreMod::kAlibi) need(p.alibi_slopes.size(), static_cast<size_t>(p.h_q), "alibi_slopes");
  if (!p.sink.empty()) need(p.sink.size(), static_cast<size_t>(p.h_q), "sink");
  if (p.score_mod == ScoreMod::kSoftcap && !(p.softcap > 0.0)) broken("softcap must be > 0");
  if (p.mask == MaskKind::kChunked && p.chunk <= 0) broken("chunk must be > 0");
  if (p.paged) {
    if (p.page_size <= 0 || p.kv_rows % p.page_size != 0) broken("kv_rows must be whole pages");
    need(p.block_table.size(), b * static_cast<size_t>(p.max_pages), "block_table");
  }
  for (size_t s = 0; s < b; ++s) {
    if (p.q_lens[s] < 0 || p.k_lens[s] < 0) broken(fmt::format("sequence {} has a negative length", s));
    if (p.q_starts[s] < 0 || p.q_starts[s] + p.q_lens[s] > p.total_q)
      broken(fmt::format("sequence {}'s queries run past total_q {}", s, p.total_q));
    if (p.paged) {
      if (p.k_lens[s] > int64_t{p.max_pages} * p.page_size)
        broken(fmt::format("sequence {} has {} keys, the table holds {}", s, p.k_lens[s],
                           int64_t{p.max_pages} * p.page_size));
    } else if (p.k_starts[s] < 0 || p.k_starts[s] + p.k_lens[s] > p.kv_rows) {
      broken(fmt::format("sequence {}'s keys run past kv_rows {}", s, p.kv_rows));
    }
  }
}

// Rows of one (sequence, head): they share K/V, so each key is converted once for all of
// them. A task holds at most kRowsPerTask rows so that one long sequence spreads over threads.
struct Task {
  int b = 0, h = 0;
  std::vector<size_t> slots;  // indices into MhaReference::rows
  int64_t cost = 0;           // Σ visible keys: longest first
};

void compute_task(const MhaProblem& p, const Task& t, MhaReference& r) {
  const int hk = t.h / (p.h_q / p.h_kv);
  const double sink = sink_of(p, t.h);
  const double slope =
      p.score_mod == ScoreMod::kAlibi ? static_cast<double>(p.alibi_slopes[static_cast<size_t>(t.h)]) : 0.0;
  const int64_t s_q = p.q_lens[static_cast<size_t>(t.b)], s_k = p.k_lens[static_cast<size_t>(t.b)];

  // The union of the rows' key intervals: only these keys are converted (and read).
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = -1;
  std::vector<MhaKeyRange> ranges(t.slots.size());
  for (size_t n = 0; n < t.slots.size(); ++n) {
    ranges[n] = mha_key_range(p, t.b, r.rows[t.slots[n]].i);
    if (ranges[n].count() == 0) continue;
    lo = std::min(lo, ranges[n].lo);
    hi = std::max(hi, ranges[n].hi);
  }
  const int64_t nk = hi >= lo ? hi - lo + 1 : 0;
  // kd [nk, d], vd [nk, dv]: keys lo..hi of KV head hk in double.
  std::vector<double> kd(static_cast<size_t>(nk) * p.d), vd(static_cast<size_t>(nk) * p.dv);
  for (int64_t j = 0; j < nk; ++j) {
    const size_t row = static_cast<size_t>(kv_row(p, t.b, lo + j)) * p.h_kv + hk;
    std::copy_n(p.k.data() + row * p.d, p.d, kd.begin() + static_cast<ptrdiff_t>(j * p.d));
    std::copy_n(p.v.data() + row * p.dv, p.dv, vd.begin() + static_cast<ptrdiff_t>(j * p.dv));
  }

  std::vector<double> qd(static_cast<size_t>(p.d)), s, acc(static_cast<size_t>(p.dv));
  for (size_t n = 0; n < t.slots.size(); ++n) {
    const size_t slot = t.slots[n];
    const int i = r.rows[slot].i;
    const MhaKeyRange kr = ranges[n];
    double* out = r.out.data() + slot * static_cast<size_t>(p.dv);
    r.visible[slot] = kr.count();
    if (kr.count() == 0) {  // no key: 0 and −inf whatever the sink
      std::fill_n(out, p.dv, 0.0);
      r.lse[slot] = kNegInf;
      continue;
    }
    const float* qs = p.q.data() + q_index(p, t.b, i, t.h);
    std::copy_n(qs, p.d, qd.begin());
    const int64_t ip = i + s_k - s_q;
    s.resize(static_cast<size_t>(kr.count()));
    for (int64_t j = kr.lo; j <= kr.hi; ++j) {
      const double* kj = kd.data() + (j - lo) * p.d;
      double a[4] = {0, 0, 0, 0};  // independent partial sums: faster, still float64
      int e = 0;
      for (; e + 4 <= p.d; e += 4)
        for (int u = 0; u < 4; ++u) a[u] += qd[static_cast<size_t>(e + u)] * kj[e + u];
      for (; e < p.d; ++e) a[0] += qd[static_cast<size_t>(e)] * kj[e];
      double x = p.softmax_scale * ((a[0] + a[1]) + (a[2] + a[3]));
      if (p.score_mod == ScoreMod::kSoftcap) x = p.softcap * std::tanh(x / p.softcap);
      if (p.score_mod == ScoreMod::kAlibi) x += -slope * static_cast<double>(ip - j);
      s[static_cast<size_t>(j - kr.lo)] = x;
    }
    const double m = *std::max_element(s.begin(), s.end());
    double sum = 0.0;
    for (double& x : s) sum += (x = std::exp(x - m));
    const double lse = m + std::log(sum);
    r.lse[slot] = lse;
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t j = kr.lo; j <= kr.hi; ++j) {
      const double pj = s[static_cast<size_t>(j - kr.lo)];
      const double* vj = vd.data() + (j - lo) * p.dv;
      for (int e = 0; e < p.dv; ++e) acc[static_cast<size_t>(e)] += pj * vj[e];
    }
    // Sink: exp(lse) / (exp(lse) + exp(sink)) = 1 / (1 + exp(sink − lse)); +inf → 0, −inf → 1.
    const double keep = 1.0 / (1.0 + std::exp(sink - lse));
    for (int e = 0; e < p.dv; ++e) out[e] = acc[static_cast<size_t>(e)] / sum * keep;
  }
}

}  // namespace

std::vector<int64_t> mha_padded_starts(int batch, int len) {
  std::vector<int64_t> s(static_cast<size_t>(std::max(batch, 0)));
  for (size_t b = 0; b < s.size(); ++b) s[b] = static_cast<int64_t>(b) * len;
  return s;
}

std::vector<int64_t> mha_ragged_starts(const std::vector<int>& lens) {
  std::vector<int64_t> s(lens.size());
  int64_t at = 0;
  for (size_t b = 0; b < lens.size(); ++b) {
    s[b] = at;
    at += lens[b];
  }
  return s;
}

bool mha_key_visible(MaskKind mask, int window_left, int window_right, int chunk, int64_t i,
                     int64_t s_q, int64_t s_k, int64_t j) {
  if (j < 0 || j >= s_k) return false;
  const int64_t ip = i + s_k - s_q;
  switch (mask) {
    case MaskKind::kNone: return true;
    case MaskKind::kCausal: return j <= ip;
    case MaskKind::kWindow:
      return (window_left < 0 || ip - window_left <= j) && (window_right < 0 || j <= ip + window_right);
    case MaskKind::kCausalWindow: return (window_left < 0 || ip - window_left <= j) && j <= ip;
    case MaskKind::kChunked:
      if (chunk <= 0) broken("chunk must be > 0");
      return floor_div(j, chunk) == floor_div(ip, chunk) && j <= ip;
  }
  broken("unknown mask kind");
}

MhaKeyRange mha_key_range(MaskKind mask, int window_left, int window_right, int chunk, int64_t i,
                          int64_t s_q, int64_t s_k) {
  const int64_t ip = i + s_k - s_q;
  MhaKeyRange r{0, s_k - 1};
  switch (mask) {
    case MaskKind::kNone: break;
    case MaskKind::kCausal: r.hi = ip; break;
    case MaskKind::kWindow:
      if (window_left >= 0) r.lo = ip - window_left;
      if (window_right >= 0) r.hi = ip + window_right;
      break;
    case MaskKind::kCausalWindow:
      if (window_left >= 0) r.lo = ip - window_left;
      r.hi = ip;
      break;
    case MaskKind::kChunked:
      if (chunk <= 0) broken("chunk must be > 0");
      r.lo = floor_div(ip, chunk) * chunk;
      r.hi = ip;
      break;
  }
  r.lo = std::max<int64_t>(r.lo, 0);
  r.hi = std::min<int64_t>(r.hi, s_k - 1);
  if (r.hi < r.lo) r = MhaKeyRange{0, -1};
  return r;
}

MhaKeyRange mha_key_range(const MhaProblem& p, int b, int i) {
  return mha_key_range(p.mask, p.window_left, p.window_right, p.chunk, i,
                       p.q_lens[static_cast<size_t>(b)], p.k_lens[static_cast<size_t>(b)]);
}

int64_t mha_visible_pairs(const MhaProblem& p) {
  int64_t pairs = 0;
  for (int b = 0; b < p.batch; ++b)
    for (int i = 0; i < p.q_lens[static_cast<size_t>(b)]; ++i) pairs += mha_key_range(p, b, i).count();
  return pairs * p.h_q;
}

std::vector<MhaRow> mha_all_rows(const MhaProblem& p) {
  std::vector<MhaRow> rows;
  for (int b = 0; b < p.batch; ++b)
    for (int i = 0; i < p.q_lens[static_cast<size_t>(b)]; ++i)
      for (int h = 0; h < p.h_q; ++h) rows.push_back({b, i, h});
  return rows;
}

std::vector<MhaRow> mha_sample_rows(const MhaProblem& p, int count, std::mt19937_64& gen) {
  std::set<std::tuple<int64_t, int>> picked;  // (q row, head): output order
  std::vector<int> nonempty;
  for (int b = 0; b < p.batch; ++b) {
    const int ql = p.q_lens[static_cast<size_t>(b)];
    if (ql == 0) continue;
    nonempty.push_back(b);
    for (int i : {0, ql - 1})
      for (int h : {0, p.h_q - 1}) picked.insert({p.q_starts[static_cast<size_t>(b)] + i, h});
  }
  if (!nonempty.empty()) {
    std::uniform_int_distribution<size_t> db(0, nonempty.size() - 1);
    std::uniform_int_distribution<int> dh(0, p.h_q - 1);
    for (int n = 0; n < count; ++n) {
      const int b = nonempty[db(gen)];
      const int i = std::uniform_int_distribution<int>(0, p.q_lens[static_cast<size_t>(b)] - 1)(gen);
      picked.insert({p.q_starts[static_cast<size_t>(b)] + i, dh(gen)});
    }
  }
  // Back from flat q rows to (b, i): sequences may share no rows, so a row has one owner.
  std::map<int64_t, int> owner;  // first row → sequence
  for (int b : nonempty) owner[p.q_starts[static_cast<size_t>(b)]] = b;
  std::vector<MhaRow> rows;
  for (const auto& [row, h] : picked) {
    const auto it = std::prev(owner.upper_bound(row));
    rows.push_back({it->second, static_cast<int>(row - it->first), h});
  }
  return rows;
}

MhaReference mha_reference(const MhaProblem& p, std::span<const MhaRow> rows) {
  check_problem(p);
  MhaReference r;
  r.rows = rows.empty() ? mha_all_rows(p) : std::vector<MhaRow>(rows.begin(), rows.end());
  r.out.assign(r.rows.size() * static_cast<size_t>(p.dv), std::numeric_limits<double>::quiet_NaN());
  r.lse.assign(r.rows.size(), std::numeric_limits<double>::quiet_NaN());
  r.visible.assign(r.rows.size(), 0);

  std::map<std::pair<int, int>, std::vector<size_t>> by_bh;
  for (size_t n = 0; n < r.rows.size(); ++n) {
    const MhaRow& row = r.rows[n];
    if (row.b < 0 || row.b >= p.batch || row.i < 0 || row.i >= p.q_lens[static_cast<size_t>(row.b)] ||
        row.h < 0 || row.h >= p.h_q)
      broken(fmt::format("row (b {}, i {}, h {}) is outside the problem", row.b, row.i, row.h));
    by_bh[{row.b, row.h}].push_back(n);
  }
  constexpr size_t kRowsPerTask = 64;
  std::vector<Task> tasks;
  for (auto& [key, slots] : by_bh)
    for (size_t n = 0; n < slots.size(); n += kRowsPerTask) {
      Task t{key.first, key.second, {}, 0};
      t.slots.assign(slots.begin() + static_cast<ptrdiff_t>(n),
                     slots.begin() + static_cast<ptrdiff_t>(std::min(n + kRowsPerTask, slots.size())));
      for (size_t s : t.slots) t.cost += 1 + mha_key_range(p, t.b, r.rows[s].i).count();
      tasks.push_back(std::move(t));
    }
  // Longest first so that one long sequence does not finish last on its own.
  std::sort(tasks.begin(), tasks.end(), [](const Task& a, const Task& b) { return a.cost > b.cost; });

  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t n_threads = std::min<size_t>({hw, 64, std::max<size_t>(tasks.size(), 1)});
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    try {
      for (size_t n; (n = next.fetch_add(1)) < tasks.size();) compute_task(p, tasks[n], r);
    } catch (...) {
      std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
      next = tasks.size();  // stop the others early
    }
  };
  std::vector<std::thread> pool;
  for (size_t n = 1; n < n_threads; ++n) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
  return r;
}

std::string MhaComparison::summary() const {
  return fmt::format(
      "{}: rel_l2 {:.3e}, worst row err {:.3e} at (b {}, i {}, h {}), lse max abs err {:.3e} "
      "over {} checked rows; nonfinite out {}, empty rows not zero {}, lse wrong -inf {}, "
      "lse nonfinite {}",
      passed ? "ok" : "FAILED", rel_l2, worst_row_err, worst_row.b, worst_row.i, worst_row.h,
      lse_max_abs_err, checked_rows, nonfinite_out, empty_rows_not_zero, lse_wrong_inf,
      lse_nonfinite);
}

MhaComparison mha_compare(const MhaProblem& p, const MhaReference& ref, std::span<const float> out,
                          std::span<const float> lse, const MhaCompareLimits& limits) {
  const size_t n_rows = static_cast<size_t>(p.total_q) * p.h_q;
  if (out.size() < n_rows * p.dv || (!lse.empty() && lse.size() < n_rows))
    throw std::invalid_argument("mha_compare: out or lse is smaller than the shapes need");
  MhaComparison c;
  constexpr float kNegInfF = -std::numeric_limits<float>::infinity();
  const size_t dv = static_cast<size_t>(p.dv);

  // Structural checks over every row: which rows are zero follows from lengths, mask, sinks.
  for (int b = 0; b < p.batch; ++b)
    for (int i = 0; i < p.q_lens[static_cast<size_t>(b)]; ++i) {
      const bool no_key = mha_key_range(p, b, i).count() == 0;
      for (int h = 0; h < p.h_q; ++h) {
        const float* o = out.data() + out_index(p, b, i, h);
        if (zero_row(p, b, i, h))
          c.empty_rows_not_zero += std::any_of(o, o + dv, [](float x) { return x != 0.0f; });
        else
          c.nonfinite_out += std::count_if(o, o + dv, [](float x) { return !std::isfinite(x); });
        if (lse.empty()) continue;
        const float l = lse[lse_index(p, b, i, h)];
        if (std::isnan(l) || l == std::numeric_limits<float>::infinity())
          ++c.lse_nonfinite;
        else if (no_key != (l == kNegInfF))
          ++c.lse_wrong_inf;
      }
    }

  // Numeric checks over the reference's rows whose answer is not exactly zero.
  double err2 = 0.0, ref2 = 0.0;
  for (size_t n = 0; n < ref.rows.size(); ++n) {
    const MhaRow& row = ref.rows[n];
    if (ref.visible[n] == 0) continue;
    if (!lse.empty()) {  // lse does not include the sink: judged even for +inf-sink rows
      const double e = std::abs(static_cast<double>(lse[lse_index(p, row.b, row.i, row.h)]) - ref.lse[n]);
      c.lse_max_abs_err = (e <= c.lse_max_abs_err) ? c.lse_max_abs_err : (std::isnan(e) ? HUGE_VAL : e);
    }
    if (zero_row(p, row.b, row.i, row.h)) continue;
    const float* o = out.data() + out_index(p, row.b, row.i, row.h);
    const double* r = ref.out.data() + n * dv;
    double row_ref2 = 0.0, row_max = 0.0;
    for (size_t e = 0; e < dv; ++e) {
      const double d = std::abs(static_cast<double>(o[e]) - r[e]);
      err2 += d * d;
      row_ref2 += r[e] * r[e];
      // NaN compares false: count it as an infinite error rather than none.
      row_max = (d <= row_max) ? row_max : (std::isnan(d) ? HUGE_VAL : d);
    }
    ref2 += row_ref2;
    const double rms = std::max(std::sqrt(row_ref2 / static_cast<double>(dv)), 1e-300);
    const double rel = row_max / rms;
    if (c.checked_rows == 0 || !(rel <= c.worst_row_err)) {
      c.worst_row_err = std::isnan(rel) ? HUGE_VAL : rel;
      c.worst_row = row;
    }
    ++c.checked_rows;
  }
  c.rel_l2 = ref2 > 0.0 ? std::sqrt(err2 / ref2) : (err2 > 0.0 ? HUGE_VAL : 0.0);
  if (std::isnan(c.rel_l2)) c.rel_l2 = HUGE_VAL;
  c.passed = c.rel_l2 <= limits.rel_l2 && c.worst_row_err <= limits.row_max_err &&
             c.lse_max_abs_err <= limits.lse_abs && c.nonfinite_out == 0 &&
             c.empty_rows_not_zero == 0 && c.lse_wrong_inf == 0 && c.lse_nonfinite == 0;
  return c;
}

}  // namespace attnjit::harness
