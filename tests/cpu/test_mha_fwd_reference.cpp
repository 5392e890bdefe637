// The mha float64 reference's own sanity, without a GPU (hand-computed rows, every mask
// rule, score mods, sinks, GQA, paging, and the comparison's own checks), so that the GPU
// tests judge against something known to be right.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attnjit/ops/mha_fwd.hpp"
#include "ops/mha_fwd/config.hpp"
#include "ops/registry.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/harness.hpp"
#include "cpu/mha_fwd_sweep.hpp"

using namespace attnjit;
using test::kAllMasks;
using test::kHeadDims;

// ---- the float64 reference itself -----------------------------------------------------

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

enum class Form { kPadded, kRagged, kPaged };

// A small problem with random N(0,1) values; K/V rows that no sequence owns are NaN
// (paged: rows past each length, unused pages; ragged: a tail past the last sequence).
struct Tiny {
  Form form;
  int h_q, h_kv, d, dv, page = 4;
  std::vector<int> q_lens, k_lens;
  std::vector<float> q, k, v, sink, slopes;
  std::vector<int32_t> table;
  int max_pages = 0;
  int64_t total_q = 0, kv_rows = 0;

  Tiny(Form f, std::vector<int> ql, std::vector<int> kl, int hq, int hkv, int dd, int ddv,
       uint64_t seed, int page_size = 4)
      : form(f), h_q(hq), h_kv(hkv), d(dd), dv(ddv), page(page_size), q_lens(std::move(ql)),
        k_lens(std::move(kl)) {
    std::mt19937_64 gen(seed);
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (int l : q_lens) total_q += l;
    q.resize(static_cast<size_t>(total_q) * hq * dd);
    for (float& x : q) x = n(gen);
    if (form == Form::kPaged) {
      int used = 0;
      for (int l : k_lens) {
        max_pages = std::max(max_pages, (l + page - 1) / page + 1);
        used += (l + page - 1) / page;
      }
      const int pages = used + 2;
      kv_rows = int64_t{pages} * page;
      k.assign(static_cast<size_t>(kv_rows) * hkv * dd, kNaN);
      v.assign(static_cast<size_t>(kv_rows) * hkv * ddv, kNaN);
      table.assign(k_lens.size() * static_cast<size_t>(max_pages), -1);
      int next = pages - 1;  // pages handed out in reverse order
      for (size_t b = 0; b < k_lens.size(); ++b)
        for (int p = 0; p * page < k_lens[b]; ++p) {
          const int32_t id = next--;
          table[b * static_cast<size_t>(max_pages) + static_cast<size_t>(p)] = id;
          for (int r = 0; r < page && p * page + r < k_lens[b]; ++r) fill_row(int64_t{id} * page + r, n, gen);
        }
    } else {
      for (int l : k_lens) kv_rows += l;
      kv_rows += 3;  // NaN tail
      k.assign(static_cast<size_t>(kv_rows) * hkv * dd, kNaN);
      v.assign(static_cast<size_t>(kv_rows) * hkv * ddv, kNaN);
      for (int64_t r = 0; r < kv_rows - 3; ++r) fill_row(r, n, gen);
    }
  }

  template <class N, class G>
  void fill_row(int64_t r, N& n, G& gen) {
    for (size_t e = 0; e < static_cast<size_t>(h_kv) * d; ++e) k[static_cast<size_t>(r) * h_kv * d + e] = n(gen);
    for (size_t e = 0; e < static_cast<size_t>(h_kv) * dv; ++e) v[static_cast<size_t>(r) * h_kv * dv + e] = n(gen);
  }

  test::MhaProblem problem(double scale = 0.3) const {
    test::MhaProblem p;
    p.batch = static_cast<int>(q_lens.size());
    p.h_q = h_q;
    p.h_kv = h_kv;
    p.d = d;
    p.dv = dv;
    p.q_lens = q_lens;
    p.k_lens = k_lens;
    p.q_starts = test::mha_ragged_starts(q_lens);
    p.total_q = total_q;
    p.q = q;
    p.paged = form == Form::kPaged;
    if (p.paged) {
      p.page_size = page;
      p.max_pages = max_pages;
      p.block_table = table;
    } else {
      p.k_starts = test::mha_ragged_starts(k_lens);
    }
    p.kv_rows = kv_rows;
    p.k = k;
    p.v = v;
    p.softmax_scale = scale;
    return p;
  }

  // Key j of sequence b (for hand computations).
  const float* key(int b, int j, int hk) const { return k.data() + row(b, j) * h_kv * d + hk * d; }
  const float* val(int b, int j, int hk) const { return v.data() + row(b, j) * h_kv * dv + hk * dv; }
  const float* query(int b, int i, int h) const {
    int64_t start = 0;
    for (int s = 0; s < b; ++s) start += q_lens[static_cast<size_t>(s)];
    return q.data() + (static_cast<size_t>(start + i) * h_q + h) * d;
  }
  size_t row(int b, int j) const {
    if (form == Form::kPaged)
      return static_cast<size_t>(table[static_cast<size_t>(b) * max_pages + j / page]) * page + j % page;
    int64_t start = 0;
    for (int s = 0; s < b; ++s) start += k_lens[static_cast<size_t>(s)];
    return static_cast<size_t>(start + j);
  }
};

double dot(const float* a, const float* b, int n) {
  double s = 0;
  for (int e = 0; e < n; ++e) s += double(a[e]) * double(b[e]);
  return s;
}

// Index of row (b, i, h) in a full reference of a problem with these q lengths.
size_t full_index(const std::vector<int>& q_lens, int h_q, int b, int i, int h) {
  int64_t start = 0;
  for (int s = 0; s < b; ++s) start += q_lens[static_cast<size_t>(s)];
  return static_cast<size_t>((start + i) * h_q + h);
}

// Softmax over hand-given scores of keys `js` of (b, hk): out [dv] and lse.
std::pair<std::vector<double>, double> by_hand(const Tiny& t, int b, int hk, const std::vector<int>& js,
                                               const std::vector<double>& scores) {
  const double m = *std::max_element(scores.begin(), scores.end());
  double sum = 0;
  std::vector<double> out(static_cast<size_t>(t.dv), 0.0);
  for (size_t n = 0; n < js.size(); ++n) {
    const double w = std::exp(scores[n] - m);
    sum += w;
    for (int e = 0; e < t.dv; ++e) out[static_cast<size_t>(e)] += w * t.val(b, js[n], hk)[e];
  }
  for (double& x : out) x /= sum;
  return {out, m + std::log(sum)};
}

}  // namespace

TEST_CASE("mha reference: one key gives v, equal scores give the mean", "[reference][mha_fwd]") {
  const Tiny t(Form::kRagged, {1, 3}, {1, 5}, 2, 1, 8, 8, 1);
  test::MhaProblem p = t.problem(0.25);
  const test::MhaReference r = test::mha_reference(p);
  REQUIRE(r.rows.size() == 4 * 2);
  for (int h = 0; h < 2; ++h) {
    const size_t n = full_index(t.q_lens, 2, 0, 0, h);
    CHECK(r.visible[n] == 1);
    CHECK(r.lse[n] == Approx(0.25 * dot(t.query(0, 0, h), t.key(0, 0, 0), 8)).epsilon(1e-12));
    for (int e = 0; e < 8; ++e) CHECK(r.out[n * 8 + e] == Approx(t.val(0, 0, 0)[e]).epsilon(1e-12));
  }
  // A zero query scores every key 0: out = the mean of the visible V rows, lse = log(count).
  Tiny z = t;
  std::fill(z.q.begin(), z.q.end(), 0.0f);
  const test::MhaReference rz = test::mha_reference(z.problem(0.25));
  for (int i = 0; i < 3; ++i) {
    const size_t n = full_index(z.q_lens, 2, 1, i, 1);
    CHECK(rz.visible[n] == 5);
    CHECK(rz.lse[n] == Approx(std::log(5.0)).epsilon(1e-12));
    for (int e = 0; e < 8; ++e) {
      double mean = 0;
      for (int j = 0; j < 5; ++j) mean += z.val(1, j, 0)[e] / 5.0;
      CHECK(rz.out[n * 8 + e] == Approx(mean).epsilon(1e-12));
    }
  }
}

TEST_CASE("mha reference: causal is aligned bottom-right both ways", "[reference][mha_fwd]") {
  // s_q 5 > s_k 3: i' = i − 2, so queries 0 and 1 see nothing, query 2 sees key 0, query 4
  // keys 0..2. s_q 2 < s_k 5: i' = i + 3, query 0 sees keys 0..3, query 1 all 5.
  Tiny t(Form::kPadded, {5, 2}, {3, 5}, 1, 1, 4, 4, 2);
  test::MhaProblem p = t.problem();
  p.mask = MaskKind::kCausal;
  const test::MhaReference r = test::mha_reference(p);
  const std::vector<int64_t> want = {0, 0, 1, 2, 3, 4, 5};
  REQUIRE(r.visible == want);
  for (int i : {0, 1}) {
    CHECK(r.lse[static_cast<size_t>(i)] == -kInf);
    for (int e = 0; e < 4; ++e) CHECK(r.out[static_cast<size_t>(i) * 4 + e] == 0.0);
  }
  for (int e = 0; e < 4; ++e) CHECK(r.out[2 * 4 + e] == Approx(t.val(0, 0, 0)[e]).epsilon(1e-12));
  // Query 3 of sequence 0 by hand: keys 0 and 1.
  const double scale = p.softmax_scale;
  const auto [o, l] = by_hand(t, 0, 0, {0, 1},
                              {scale * dot(t.query(0, 3, 0), t.key(0, 0, 0), 4),
                               scale * dot(t.query(0, 3, 0), t.key(0, 1, 0), 4)});
  CHECK(r.lse[3] == Approx(l).epsilon(1e-12));
  for (int e = 0; e < 4; ++e) CHECK(r.out[3 * 4 + e] == Approx(o[static_cast<size_t>(e)]).epsilon(1e-12));
}

TEST_CASE("mha reference: every mask's interval agrees with the rule written literally",
          "[reference][mha_fwd]") {
  std::mt19937_64 gen(17);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); };
  int64_t checked = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const MaskKind mask = kAllMasks[pick(0, 4)];
    const int s_q = pick(0, 40), s_k = pick(0, 40);
    const int left = pick(-1, 12), right = pick(-1, 12), chunk = pick(1, 9);
    for (int i = 0; i < s_q; ++i) {
      const test::MhaKeyRange r = test::mha_key_range(mask, left, right, chunk, i, s_q, s_k);
      int64_t count = 0;
      for (int j = -3; j < s_k + 3; ++j) {
        const bool vis = test::mha_key_visible(mask, left, right, chunk, i, s_q, s_k, j);
        count += vis;
        if (vis != (j >= r.lo && j <= r.hi)) {
          INFO("mask " << int(mask) << " s_q " << s_q << " s_k " << s_k << " left " << left
                       << " right " << right << " chunk " << chunk << " i " << i << " j " << j);
          REQUIRE(vis == (j >= r.lo && j <= r.hi));
        }
      }
      REQUIRE(count == r.count());
      ++checked;
    }
  }
  CHECK(checked > 10000);
  // Hand-checked points (s_q = s_k = 10 unless said, so i' = i).
  using test::mha_key_visible;
  CHECK(mha_key_visible(MaskKind::kWindow, 2, 1, 0, 5, 10, 10, 3));
  CHECK(mha_key_visible(MaskKind::kWindow, 2, 1, 0, 5, 10, 10, 6));
  CHECK(!mha_key_visible(MaskKind::kWindow, 2, 1, 0, 5, 10, 10, 2));
  CHECK(!mha_key_visible(MaskKind::kWindow, 2, 1, 0, 5, 10, 10, 7));
  CHECK(mha_key_visible(MaskKind::kWindow, -1, 1, 0, 5, 10, 10, 0));   // left unbounded
  CHECK(mha_key_visible(MaskKind::kWindow, 2, -1, 0, 5, 10, 10, 9));   // right unbounded
  CHECK(!mha_key_visible(MaskKind::kCausalWindow, 2, 7, 0, 5, 10, 10, 6));  // right is 0
  CHECK(mha_key_visible(MaskKind::kCausalWindow, 2, 7, 0, 5, 10, 10, 3));
  CHECK(test::mha_key_range(MaskKind::kChunked, -1, -1, 4, 5, 10, 10).lo == 4);  // ⌊5/4⌋ = 1
  CHECK(test::mha_key_range(MaskKind::kChunked, -1, -1, 4, 5, 10, 10).hi == 5);
  CHECK(test::mha_key_range(MaskKind::kChunked, -1, -1, 4, 8, 10, 10).count() == 1);
  CHECK(test::mha_key_range(MaskKind::kChunked, -1, -1, 4, 3, 10, 10).count() == 4);
  // s_q 10 > s_k 4: i' = i − 6; a window reaching right can still see keys from i' < 0.
  CHECK(test::mha_key_range(MaskKind::kWindow, 1, 7, 0, 0, 10, 4).count() == 2);  // keys 0, 1
  CHECK(test::mha_key_range(MaskKind::kChunked, -1, -1, 4, 0, 10, 4).count() == 0);
  CHECK(test::mha_key_range(MaskKind::kCausal, -1, -1, 0, 5, 10, 4).count() == 0);
  CHECK(test::mha_key_range(MaskKind::kNone, -1, -1, 0, 0, 1, 0).count() == 0);  // no keys
}

TEST_CASE("mha reference: window and chunked rows by hand", "[reference][mha_fwd]") {
  const Tiny t(Form::kPadded, {10}, {10}, 1, 1, 4, 4, 3);
  test::MhaProblem p = t.problem(0.5);
  const double s = p.softmax_scale;
  auto score = [&](int i, int j) { return s * dot(t.query(0, i, 0), t.key(0, j, 0), 4); };
  p.mask = MaskKind::kWindow;
  p.window_left = 2;
  p.window_right = 1;
  const test::MhaReference w = test::mha_reference(p);
  {
    const auto [o, l] = by_hand(t, 0, 0, {3, 4, 5, 6}, {score(5, 3), score(5, 4), score(5, 5), score(5, 6)});
    CHECK(w.visible[5] == 4);
    CHECK(w.lse[5] == Approx(l).epsilon(1e-12));
    for (int e = 0; e < 4; ++e) CHECK(w.out[5 * 4 + e] == Approx(o[static_cast<size_t>(e)]).epsilon(1e-12));
  }
  p.mask = MaskKind::kChunked;
  p.chunk = 4;
  const test::MhaReference c = test::mha_reference(p);
  const std::vector<int64_t> want = {1, 2, 3, 4, 1, 2, 3, 4, 1, 2};
  CHECK(c.visible == want);
  {
    const auto [o, l] = by_hand(t, 0, 0, {4, 5, 6}, {score(6, 4), score(6, 5), score(6, 6)});
    CHECK(c.lse[6] == Approx(l).epsilon(1e-12));
    for (int e = 0; e < 4; ++e) CHECK(c.out[6 * 4 + e] == Approx(o[static_cast<size_t>(e)]).epsilon(1e-12));
  }
}

TEST_CASE("mha reference: softcap, ALiBi and sinks follow the formulas", "[reference][mha_fwd]") {
  // Sequence 0: 3 queries over 4 keys (i' = i + 1), causal; sequence 1: 2 queries, 0 keys.
  Tiny t(Form::kRagged, {3, 2}, {4, 0}, 4, 2, 8, 8, 4);
  test::MhaProblem p = t.problem(0.9);  // large scale: the cap matters
  p.mask = MaskKind::kCausal;
  const double s = p.softmax_scale;
  auto raw = [&](int i, int h, int j) { return s * dot(t.query(0, i, h), t.key(0, j, h / 2), 8); };
  const int i = 1, h = 3;  // i' = 2: keys 0..2, KV head 1
  const size_t n = full_index(t.q_lens, 4, 0, i, h);

  SECTION("softcap") {
    p.score_mod = ScoreMod::kSoftcap;
    p.softcap = 1.5;
    const test::MhaReference r = test::mha_reference(p);
    std::vector<double> sc;
    for (int j = 0; j < 3; ++j) sc.push_back(1.5 * std::tanh(raw(i, h, j) / 1.5));
    const auto [o, l] = by_hand(t, 0, 1, {0, 1, 2}, sc);
    CHECK(r.lse[n] == Approx(l).epsilon(1e-12));
    for (int e = 0; e < 8; ++e) CHECK(r.out[n * 8 + e] == Approx(o[static_cast<size_t>(e)]).epsilon(1e-12));
    CHECK(r.lse[n] <= 1.5 + std::log(3.0));  // capped scores bound the lse
  }
  SECTION("alibi") {
    const std::vector<float> slopes = {0.5f, 0.25f, 0.125f, 0.75f};
    p.score_mod = ScoreMod::kAlibi;
    p.alibi_slopes = slopes;
    const test::MhaReference r = test::mha_reference(p);
    std::vector<double> sc;
    for (int j = 0; j < 3; ++j) sc.push_back(raw(i, h, j) - 0.75 * (2 - j));  // −slope·(i' − j)
    const auto [o, l] = by_hand(t, 0, 1, {0, 1, 2}, sc);
    CHECK(r.lse[n] == Approx(l).epsilon(1e-12));
    for (int e = 0; e < 8; ++e) CHECK(r.out[n * 8 + e] == Approx(o[static_cast<size_t>(e)]).epsilon(1e-12));
  }
  SECTION("sinks") {
    const test::MhaReference plain = test::mha_reference(p);
    const std::vector<float> sinks = {0.7f, std::numeric_limits<float>::infinity(),
                                      -std::numeric_limits<float>::infinity(), 2.0f};
    p.sink = sinks;
    const test::MhaReference r = test::mha_reference(p);
    CHECK(r.lse == plain.lse);  // lse excludes the sink
    for (int b = 0; b < 2; ++b)
      for (int qi = 0; qi < t.q_lens[static_cast<size_t>(b)]; ++qi)
        for (int hh = 0; hh < 4; ++hh) {
          const size_t m = full_index(t.q_lens, 4, b, qi, hh);
          INFO("b " << b << " i " << qi << " h " << hh);
          if (b == 1) {  // no key: 0 and −inf whatever the sink
            CHECK(r.lse[m] == -kInf);
            for (int e = 0; e < 8; ++e) CHECK(r.out[m * 8 + e] == 0.0);
            continue;
          }
          const double keep =
              hh == 1 ? 0.0
                      : (hh == 2 ? 1.0
                                 : std::exp(plain.lse[m]) / (std::exp(plain.lse[m]) + std::exp(double(sinks[static_cast<size_t>(hh)]))));
          for (int e = 0; e < 8; ++e) {
            if (hh == 1)
              CHECK(r.out[m * 8 + e] == 0.0);  // +inf: exactly 0
            else
              CHECK(r.out[m * 8 + e] == Approx(plain.out[m * 8 + e] * keep).epsilon(1e-12));
          }
        }
  }
}

TEST_CASE("mha reference: GQA reads KV head h / (h_q / h_kv)", "[reference][mha_fwd]") {
  // h_q 6 over h_kv 2 against the same problem with K/V expanded to 6 heads (MHA).
  const Tiny g(Form::kRagged, {3, 2}, {5, 4}, 6, 2, 8, 4, 5);
  Tiny e = g;
  e.h_kv = 6;
  const int64_t rows = g.kv_rows;
  e.k.assign(static_cast<size_t>(rows) * 6 * 8, 0.0f);
  e.v.assign(static_cast<size_t>(rows) * 6 * 4, 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int h = 0; h < 6; ++h) {
      std::copy_n(g.k.begin() + (r * 2 + h / 3) * 8, 8, e.k.begin() + (r * 6 + h) * 8);
      std::copy_n(g.v.begin() + (r * 2 + h / 3) * 4, 4, e.v.begin() + (r * 6 + h) * 4);
    }
  const test::MhaReference a = test::mha_reference(g.problem());
  const test::MhaReference b = test::mha_reference(e.problem());
  CHECK(a.out == b.out);
  CHECK(a.lse == b.lse);
}

TEST_CASE("mha reference: paged, ragged and padded forms agree; sampling and bad tables",
          "[reference][mha_fwd]") {
  // The same sequences as padded (equal lengths), ragged and paged (reversed pages, NaN in
  // unused rows and pages, -1 past the used pages): the same answer to the last bit.
  const std::vector<int> ql = {7, 7, 7}, kl = {9, 9, 9};
  const Tiny rag(Form::kRagged, ql, kl, 4, 2, 8, 8, 6);
  Tiny pag(Form::kPaged, ql, kl, 4, 2, 8, 8, 6, 4);
  pag.q = rag.q;
  for (int b = 0; b < 3; ++b)
    for (int j = 0; j < 9; ++j)
      for (int hk = 0; hk < 2; ++hk) {
        std::copy_n(rag.key(b, j, hk), 8, pag.k.begin() + static_cast<ptrdiff_t>(pag.row(b, j) * 16 + hk * 8));
        std::copy_n(rag.val(b, j, hk), 8, pag.v.begin() + static_cast<ptrdiff_t>(pag.row(b, j) * 16 + hk * 8));
      }
  for (MaskKind mask : kAllMasks) {
    INFO("mask " << int(mask));
    test::MhaProblem pr = rag.problem(), pp = pag.problem();
    test::MhaProblem pd = pr;
    pd.q_starts = test::mha_padded_starts(3, 7);
    pd.k_starts = test::mha_padded_starts(3, 9);
    for (test::MhaProblem* x : {&pr, &pp, &pd}) {
      x->mask = mask;
      x->window_left = 3;
      x->window_right = 1;
      x->chunk = 3;
    }
    const test::MhaReference a = test::mha_reference(pr);
    const test::MhaReference b = test::mha_reference(pp);
    const test::MhaReference c = test::mha_reference(pd);
    for (double x : b.out) REQUIRE(std::isfinite(x));  // no NaN row was read
    CHECK(a.out == b.out);
    CHECK(a.lse == b.lse);
    CHECK(a.out == c.out);
    // Sampled rows give the same numbers and include every edge row.
    std::mt19937_64 gen(3);
    const auto rows = test::mha_sample_rows(pp, 5, gen);
    for (int s = 0; s < 3; ++s)
      for (int i : {0, 6})
        for (int h : {0, 3}) CHECK(std::find(rows.begin(), rows.end(), test::MhaRow{s, i, h}) != rows.end());
    const test::MhaReference d = test::mha_reference(pp, rows);
    for (size_t n = 0; n < rows.size(); ++n) {
      const size_t full = full_index(ql, 4, rows[n].b, rows[n].i, rows[n].h);
      CHECK(d.lse[n] == b.lse[full]);
      CHECK(d.visible[n] == b.visible[full]);
      for (int e = 0; e < 8; ++e) CHECK(d.out[n * 8 + e] == b.out[full * 8 + e]);
    }
  }
  // A table entry outside the pool for a visible key is a broken test, not silence.
  Tiny bad(Form::kPaged, {1}, {6}, 1, 1, 4, 4, 7, 4);
  bad.table[1] = 1000;  // keys 4, 5 live on logical page 1
  CHECK_THROWS_AS(test::mha_reference(bad.problem()), std::invalid_argument);
  test::MhaProblem p = bad.problem();
  p.mask = MaskKind::kWindow;  // the single query sees keys 0..3 only: page 1 never followed
  p.window_left = 5;
  p.window_right = -1;
  p.k_lens = {4};
  CHECK_NOTHROW(test::mha_reference(p));
}

TEST_CASE("mha_compare catches poison, non-zero empty rows and wrong lse", "[reference][mha_fwd]") {
  // Sequence 1 has no keys; head 1 has a +inf sink: both must be exactly 0.
  Tiny t(Form::kRagged, {3, 2}, {5, 0}, 2, 1, 8, 8, 9);
  t.sink = {0.5f, std::numeric_limits<float>::infinity()};
  test::MhaProblem p = t.problem();
  p.sink = t.sink;
  const test::MhaReference ref = test::mha_reference(p);
  std::vector<float> out(5 * 2 * 8), lse(2 * 5);
  for (size_t n = 0; n < ref.rows.size(); ++n) {
    const auto& r = ref.rows[n];
    const size_t q_row = static_cast<size_t>(p.q_starts[static_cast<size_t>(r.b)] + r.i);
    for (int e = 0; e < 8; ++e) out[(q_row * 2 + r.h) * 8 + e] = float(ref.out[n * 8 + e]);
    lse[static_cast<size_t>(r.h) * 5 + q_row] = float(ref.lse[n]);  // [h_q, total_q]
  }
  CHECK(test::mha_compare(p, ref, out, lse).passed);
  CHECK(test::mha_compare(p, ref, out, {}).passed);  // lse not requested

  auto o = out;
  o[7] = kNaN;  // an element left poisoned
  auto c = test::mha_compare(p, ref, o, lse);
  CHECK(!c.passed);
  CHECK(c.nonfinite_out == 1);
  o = out;
  o[(3 * 2 + 0) * 8 + 3] = 1e-30f;  // q row 3 = (b 1, i 0) sees no key: must be 0
  c = test::mha_compare(p, ref, o, lse);
  CHECK(!c.passed);
  CHECK(c.empty_rows_not_zero == 1);
  o = out;
  o[(1 * 2 + 1) * 8 + 0] = 1e-30f;  // (b 0, i 1, h 1): +inf sink, must be 0
  c = test::mha_compare(p, ref, o, lse);
  CHECK(!c.passed);
  CHECK(c.empty_rows_not_zero == 1);
  o = out;
  for (int e = 0; e < 8; ++e) o[(2 * 2 + 0) * 8 + e] *= 1.1f;  // one row 10% off
  c = test::mha_compare(p, ref, o, lse);
  CHECK(!c.passed);
  CHECK(c.worst_row == test::MhaRow{0, 2, 0});
  CHECK(c.worst_row_err > 0.05);
  auto l = lse;
  l[0 * 5 + 4] = -100.0f;  // (b 1, i 1) sees no key: should be −inf
  c = test::mha_compare(p, ref, out, l);
  CHECK(c.lse_wrong_inf == 1);
  l = lse;
  l[1 * 5 + 0] = -std::numeric_limits<float>::infinity();  // sees keys: must not be −inf
  c = test::mha_compare(p, ref, out, l);
  CHECK(c.lse_wrong_inf == 1);
  l = lse;
  l[1 * 5 + 2] = kNaN;
  c = test::mha_compare(p, ref, out, l);
  CHECK(c.lse_nonfinite == 1);
  l = lse;
  l[1 * 5 + 1] += 0.01f;  // lse is judged on +inf-sink heads too (it excludes the sink)
  c = test::mha_compare(p, ref, out, l);
  CHECK(!c.passed);
  CHECK(c.lse_max_abs_err > 1e-3);
}
