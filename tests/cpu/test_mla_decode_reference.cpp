// The mla float64 reference's own sanity, without a GPU (hand-computed rows, the causal
// rule, empty rows, page order, sampling, bad tables, and the comparison's own checks).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "attnjit/ops/mla_decode.hpp"
#include "ops/registry.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/harness.hpp"

using namespace attnjit;

// ---- the float64 reference itself -----------------------------------------------------

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A small problem whose cache is NaN except for each sequence's rows below its length.
struct TinyProblem {
  int batch, q_len, heads, page, pages, max_pages;
  std::vector<float> q, cache;
  std::vector<int32_t> table, lens;

  TinyProblem(int b, int ql, int h, int pg, std::vector<int32_t> lengths, uint64_t seed)
      : batch(b), q_len(ql), heads(h), page(pg), lens(std::move(lengths)) {
    std::mt19937_64 gen(seed);
    std::normal_distribution<float> n(0.0f, 1.0f);
    max_pages = 0;
    int used = 0;
    for (int l : lens) {
      max_pages = std::max(max_pages, (l + pg - 1) / pg + 1);
      used += (l + pg - 1) / pg;
    }
    pages = used + 2;
    std::vector<int32_t> order(static_cast<size_t>(pages));
    for (int i = 0; i < pages; ++i) order[static_cast<size_t>(i)] = pages - 1 - i;  // reversed
    q.resize(static_cast<size_t>(b) * ql * h * 576);
    for (float& x : q) x = n(gen);
    cache.assign(static_cast<size_t>(pages) * pg * 576, kNaN);
    table.assign(static_cast<size_t>(b) * max_pages, -1);
    size_t next = 0;
    for (int s = 0; s < b; ++s)
      for (int p = 0; p * pg < lens[static_cast<size_t>(s)]; ++p) {
        const int32_t page_id = order[next++];
        table[static_cast<size_t>(s) * max_pages + p] = page_id;
        for (int r = 0; r < pg && p * pg + r < lens[static_cast<size_t>(s)]; ++r)
          for (int d = 0; d < 576; ++d)
            cache[(static_cast<size_t>(page_id) * pg + r) * 576 + d] = n(gen);
      }
  }

  test::MlaProblem problem(double scale = 0.1) const {
    test::MlaProblem p;
    p.batch = batch;
    p.q_len = q_len;
    p.num_heads = heads;
    p.page_size = page;
    p.num_pages = pages;
    p.max_pages = max_pages;
    p.q = q;
    p.kv_cache = cache;
    p.block_table = table;
    p.cache_lens = lens;
    p.softmax_scale = scale;
    return p;
  }
  const float* key(int b, int j) const {
    const int32_t pg = table[static_cast<size_t>(b) * max_pages + j / page];
    return cache.data() + (static_cast<size_t>(pg) * page + j % page) * 576;
  }
  const float* query(int b, int t, int h) const {
    return q.data() + ((static_cast<size_t>(b) * q_len + t) * heads + h) * 576;
  }
};

double dot576(const float* a, const float* b) {
  double s = 0;
  for (int d = 0; d < 576; ++d) s += double(a[d]) * double(b[d]);
  return s;
}

}  // namespace

TEST_CASE("mla reference: hand-computed rows, causal rule and empty rows", "[mla_reference]") {
  // Sequence 0: L = 1 (q_len 3: queries 0, 1 see nothing, query 2 sees key 0).
  // Sequence 1: L = 2 (query 0 nothing, 1 sees key 0, 2 sees keys 0 and 1).
  // Sequence 2: L = 0. Page size 16 (so one partial page each); NaN everywhere else.
  const TinyProblem tp(3, 3, 2, 16, {1, 2, 0}, 7);
  const double scale = 0.1;
  const test::MlaReference ref = test::mla_reference(tp.problem(scale));
  REQUIRE(ref.rows.size() == 3 * 3 * 2);
  auto idx = [](int b, int t, int h) { return static_cast<size_t>((b * 3 + t) * 2 + h); };
  const double inf = std::numeric_limits<double>::infinity();
  for (int h = 0; h < 2; ++h) {
    for (auto [b, t] : std::initializer_list<std::pair<int, int>>{
             {0, 0}, {0, 1}, {1, 0}, {2, 0}, {2, 1}, {2, 2}}) {
      const size_t i = idx(b, t, h);
      CHECK(ref.visible[i] == 0);
      CHECK(ref.lse[i] == -inf);
      for (int d = 0; d < 512; ++d) CHECK(ref.out[i * 512 + d] == 0.0);
    }
    // One key: out = its first 512 dims, lse = its score.
    for (auto [b, t] : std::initializer_list<std::pair<int, int>>{{0, 2}, {1, 1}}) {
      const size_t i = idx(b, t, h);
      CHECK(ref.visible[i] == 1);
      CHECK(ref.lse[i] == Approx(scale * dot576(tp.query(b, t, h), tp.key(b, 0))).epsilon(1e-12));
      for (int d = 0; d < 512; ++d) CHECK(ref.out[i * 512 + d] == Approx(tp.key(b, 0)[d]));
    }
    // Two keys: the softmax mix, by hand.
    const size_t i = idx(1, 2, h);
    CHECK(ref.visible[i] == 2);
    const double s0 = scale * dot576(tp.query(1, 2, h), tp.key(1, 0));
    const double s1 = scale * dot576(tp.query(1, 2, h), tp.key(1, 1));
    const double m = std::max(s0, s1);
    const double w0 = std::exp(s0 - m), w1 = std::exp(s1 - m);
    CHECK(ref.lse[i] == Approx(m + std::log(w0 + w1)).epsilon(1e-12));
    for (int d = 0; d < 512; ++d)
      CHECK(ref.out[i * 512 + d] ==
            Approx((w0 * tp.key(1, 0)[d] + w1 * tp.key(1, 1)[d]) / (w0 + w1)).epsilon(1e-12));
  }
}

TEST_CASE("mla reference: page order and sampling do not change the answer", "[mla_reference]") {
  TinyProblem tp(2, 2, 4, 16, {70, 33}, 11);
  const test::MlaReference a = test::mla_reference(tp.problem());
  for (double x : a.out) REQUIRE(std::isfinite(x));  // no NaN row was read
  // Move every page to a new slot (rotate the pool) and rewrite the table to match.
  TinyProblem moved = tp;
  for (int p = 0; p < tp.pages; ++p) {
    const int to = (p + 3) % tp.pages;
    std::copy_n(tp.cache.begin() + static_cast<ptrdiff_t>(p) * 16 * 576, 16 * 576,
                moved.cache.begin() + static_cast<ptrdiff_t>(to) * 16 * 576);
  }
  for (int32_t& e : moved.table)
    if (e >= 0) e = (e + 3) % tp.pages;
  const test::MlaReference b = test::mla_reference(moved.problem());
  CHECK(a.out == b.out);
  CHECK(a.lse == b.lse);
  // A sampled subset gives the same numbers for its rows and includes every edge row.
  std::mt19937_64 gen(3);
  const auto rows = test::mla_sample_rows(tp.problem(), 5, gen);
  for (int s = 0; s < 2; ++s)
    for (int t : {0, 1})
      for (int h : {0, 3})
        CHECK(std::find(rows.begin(), rows.end(), test::MlaRow{s, t, h}) != rows.end());
  const test::MlaReference c = test::mla_reference(tp.problem(), rows);
  for (size_t i = 0; i < rows.size(); ++i) {
    const size_t full = static_cast<size_t>((rows[i].b * 2 + rows[i].t) * 4 + rows[i].h);
    CHECK(c.lse[i] == a.lse[full]);
    for (int d = 0; d < 512; ++d) CHECK(c.out[i * 512 + d] == a.out[full * 512 + d]);
  }
}

TEST_CASE("mla reference: bad table entries for visible keys are refused", "[mla_reference]") {
  TinyProblem tp(1, 1, 1, 16, {20}, 5);
  tp.table[1] = tp.pages;  // key 16..19 live on logical page 1
  CHECK_THROWS_AS(test::mla_reference(tp.problem()), std::invalid_argument);
  tp.lens[0] = 16;  // page 1 no longer visible: its garbage entry is never followed
  CHECK_NOTHROW(test::mla_reference(tp.problem()));
}

TEST_CASE("mla_compare catches poison, non-zero empty rows and wrong lse", "[mla_reference]") {
  const TinyProblem tp(2, 2, 2, 16, {40, 1}, 9);  // sequence 1: query 0 sees no key
  const test::MlaProblem p = tp.problem();
  const test::MlaReference ref = test::mla_reference(p);
  std::vector<float> out(2 * 2 * 2 * 512), lse(2 * 2 * 2);
  for (size_t i = 0; i < ref.rows.size(); ++i) {
    const auto& r = ref.rows[i];
    for (int d = 0; d < 512; ++d)
      out[((static_cast<size_t>(r.b) * 2 + r.t) * 2 + r.h) * 512 + d] = float(ref.out[i * 512 + d]);
    lse[(static_cast<size_t>(r.b) * 2 + r.h) * 2 + r.t] = float(ref.lse[i]);
  }
  CHECK(test::mla_compare(p, ref, out, lse).passed);
  CHECK(test::mla_compare(p, ref, out, {}).passed);  // lse not requested

  auto o = out;
  o[7] = kNaN;  // an element left poisoned
  auto c = test::mla_compare(p, ref, o, lse);
  CHECK(!c.passed);
  CHECK(c.nonfinite_out == 1);
  o = out;
  o[((1 * 2 + 0) * 2 + 1) * 512 + 3] = 1e-30f;  // (b 1, t 0, h 1) sees no key: must be 0
  c = test::mla_compare(p, ref, o, lse);
  CHECK(!c.passed);
  CHECK(c.empty_rows_not_zero == 1);
  o = out;
  for (int d = 0; d < 512; ++d) o[d] *= 1.1f;  // one row 10% off
  c = test::mla_compare(p, ref, o, lse);
  CHECK(!c.passed);
  CHECK(c.worst_row == test::MlaRow{0, 0, 0});
  CHECK(c.worst_row_err > 0.05);
  auto l = lse;
  l[(1 * 2 + 0) * 2 + 0] = -100.0f;  // should be -inf
  c = test::mla_compare(p, ref, out, l);
  CHECK(c.lse_wrong_inf == 1);
  l = lse;
  l[0] += 0.01f;
  c = test::mla_compare(p, ref, out, l);
  CHECK(!c.passed);
  CHECK(c.lse_max_abs_err > 1e-3);
}
