// mla_decode_sparse's (and mla_prefill_sparse's) float64 reference, its comparisons (out and
// lse; the prefill's max logit), and the helpers' host references (the 656-byte quantizer,
// the index remap), checked on hand-made cases without a GPU.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "attnjit/ops/mla_decode_sparse.hpp"
#include "harness/device.hpp"
#include "harness/mla_sparse_reference.hpp"
#include "support/catch.hpp"

using namespace attnjit;
using namespace attnjit::harness;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A bf16 pool of `rows` rows: row r holds value v_r(d) = (r + 1) / 8 · (d % 3 - 1), exact in
// bf16; row `nan_row` (if any) is NaN everywhere — referencing it would poison the output.
std::vector<uint8_t> bf16_pool(int rows, int nan_row = -1) {
  std::vector<uint8_t> pool(static_cast<size_t>(rows) * 1152);
  for (int r = 0; r < rows; ++r)
    for (int d = 0; d < 576; ++d) {
      const float v = r == nan_row ? NAN : static_cast<float>(r + 1) / 8.0f * static_cast<float>(d % 3 - 1);
      const uint16_t b = float_to_bf16(v);
      std::memcpy(&pool[(static_cast<size_t>(r) * 576 + d) * 2], &b, 2);
    }
  return pool;
}

double value(int r, int d) { return (r + 1) / 8.0 * (d % 3 - 1); }

// One token, two heads: head 0's q is 0.01·(d % 3 - 1), head 1's is zero (uniform weights).
struct Case {
  std::vector<float> q = std::vector<float>(2 * 576, 0.0f);
  std::vector<uint8_t> pool = bf16_pool(6, 5);
  std::vector<int32_t> idx;
  std::vector<int32_t> lens;
  std::vector<float> sink;
  MlaSparseProblem p;
  Case(std::vector<int32_t> indices) : idx(std::move(indices)) {
    for (int d = 0; d < 576; ++d) q[static_cast<size_t>(d)] = 0.01f * static_cast<float>(d % 3 - 1);
    p.batch = 1, p.q_len = 1, p.num_heads = 2, p.fp8 = false, p.total_q = 1;
    p.softmax_scale = 0.5;
    p.main.rows = 5;  // row 5 (NaN) lies past the pool the op sees
  }
  MlaSparseReference run() {
    p.q = q;
    p.main.pool = pool;
    p.main.indices = idx;
    p.main.stride = static_cast<int64_t>(idx.size());
    p.main.topk = static_cast<int>(idx.size());
    p.main.lens = lens;
    p.sink = sink;
    return mla_sparse_reference(p);
  }
};

// Softmax over scores of head 0 for the given rows (duplicates included).
double score(int r) {
  double s = 0.0;
  for (int d = 0; d < 576; ++d) s += static_cast<double>(0.01f * static_cast<float>(d % 3 - 1)) * value(r, d);
  return s * 0.5;
}

}  // namespace

TEST_CASE("sparse reference: one key gives its V row and its score", "[mla_decode_sparse][reference]") {
  Case c({3});
  const MlaSparseReference r = c.run();
  REQUIRE(r.keys[0] == 1);
  for (int d = 0; d < 512; ++d) CHECK(r.out[static_cast<size_t>(d)] == value(3, d));
  CHECK(r.lse[0] == Approx(score(3)).epsilon(1e-12));
}

TEST_CASE("sparse reference: skipped indices, duplicates and lengths", "[mla_decode_sparse][reference]") {
  // -1, other negatives and rows past the pool (5 holds NaN, 7 does not exist) are skipped;
  // row 2 counts twice.
  Case c({2, -1, 2, std::numeric_limits<int32_t>::min(), 4, 5, 7, -3});
  const MlaSparseReference r = c.run();
  REQUIRE(r.keys[0] == 3);
  const double w2 = std::exp(score(2)), w4 = std::exp(score(4));
  for (int d = 0; d < 512; ++d) {
    const double want = (2 * w2 * value(2, d) + w4 * value(4, d)) / (2 * w2 + w4);
    CHECK(r.out[static_cast<size_t>(d)] == Approx(want).epsilon(1e-12).margin(1e-15));
    // Head 1 has zero scores: the plain mean over the three keys.
    CHECK(r.out[512 + static_cast<size_t>(d)] ==
          Approx((2 * value(2, d) + value(4, d)) / 3).epsilon(1e-12).margin(1e-15));
  }
  CHECK(r.lse[0] == Approx(std::log(2 * w2 + w4)).epsilon(1e-12));
  CHECK(r.lse[1] == Approx(std::log(3.0)).epsilon(1e-12));

  Case longer({2, 4, 1});
  longer.lens = {9};  // > topk: clamped to 3
  CHECK(longer.run().keys[0] == 3);
  Case shorter({2, 4, 1});
  shorter.lens = {1};
  CHECK(shorter.run().keys[0] == 1);
  for (int n : {0, -4}) {  // no key: out 0, lse -inf
    Case none({2, 4, 1});
    none.lens = {n};
    const MlaSparseReference e = none.run();
    CHECK(e.keys[0] == 0);
    CHECK(e.lse[0] == -kInf);
    for (double x : e.out) CHECK(x == 0.0);
  }
  Case all_skipped({-1, -1, 6});
  CHECK(all_skipped.run().keys[0] == 0);
}

TEST_CASE("sparse reference: the sink joins the denominator only", "[mla_decode_sparse][reference]") {
  Case plain({1, 3});
  const MlaSparseReference base = plain.run();
  Case neg({1, 3});
  neg.sink = {-INFINITY, -INFINITY};
  const MlaSparseReference n = neg.run();
  for (size_t i = 0; i < base.out.size(); ++i) CHECK(n.out[i] == base.out[i]);
  Case pos({1, 3});
  pos.sink = {INFINITY, 0.25f};
  const MlaSparseReference p = pos.run();
  for (int d = 0; d < 512; ++d) CHECK(p.out[static_cast<size_t>(d)] == 0.0);
  CHECK(p.lse[0] == base.lse[0]);  // lse excludes the sink
  const double sum1 = std::exp(base.lse[1]);
  for (int d = 0; d < 512; ++d)
    CHECK(p.out[512 + static_cast<size_t>(d)] ==
          Approx(base.out[512 + static_cast<size_t>(d)] * sum1 / (sum1 + std::exp(0.25))).margin(1e-15));
}

TEST_CASE("sparse reference: the extra cache is the same softmax", "[mla_decode_sparse][reference]") {
  Case both({1, 3, 4});
  const MlaSparseReference want = both.run();
  Case split({1});
  split.p.has_extra = true;
  const std::vector<int32_t> extra_idx = {-1, 1, 2};  // rows 1, 2 of the extra pool = 3, 4
  const std::vector<uint8_t> extra_pool(split.pool.begin() + 2 * 1152, split.pool.begin() + 5 * 1152);
  split.p.extra.pool = extra_pool;
  split.p.extra.rows = 3;
  split.p.extra.indices = extra_idx;
  split.p.extra.stride = 3;
  split.p.extra.topk = 3;
  const MlaSparseReference got = split.run();
  CHECK(got.keys[0] == 3);
  for (size_t i = 0; i < want.out.size(); ++i) CHECK(got.out[i] == Approx(want.out[i]).epsilon(1e-12).margin(1e-15));
}

TEST_CASE("sparse reference: ragged tokens outside every sequence are not judged", "[mla_decode_sparse][reference]") {
  Case c({1, 2, 1, 2, 1, 2});  // three tokens of 2 indices
  c.p.q_offsets = {0, 1};      // one sequence of one token; tokens 1 and 2 uncovered
  c.p.total_q = 3;
  c.p.q_len = 2;
  c.q.resize(3 * 2 * 576, 0.0f);
  const MlaSparseReference r = [&] {
    c.p.q = c.q;
    c.p.main.pool = c.pool;
    c.p.main.indices = c.idx;
    c.p.main.stride = 2;
    c.p.main.topk = 2;
    return mla_sparse_reference(c.p);
  }();
  CHECK(r.keys == std::vector<int>{2, -1, -1});
  // The comparison: exact output passes; a nonzero empty row or a NaN fails.
  std::vector<float> out(r.out.size(), 12345.0f);  // uncovered rows hold anything
  for (size_t i = 0; i < 2 * 512; ++i) out[i] = static_cast<float>(r.out[i]);
  std::vector<float> lse = {static_cast<float>(r.lse[0]), 9.0f, 9.0f, static_cast<float>(r.lse[1]), 9.0f, 9.0f};
  CHECK(mla_sparse_compare(c.p, r, out, lse).passed);
  out[7] = NAN;
  CHECK_FALSE(mla_sparse_compare(c.p, r, out, lse).passed);
}

TEST_CASE("sparse reference: the max logit over the valid keys", "[mla_prefill_sparse][reference]") {
  // Head 0's terms q_d·k_d = 0.01f · (r + 1)/8 · (d % 3 - 1)² are all ≥ 0, so the largest
  // score is the largest valid row's (4; 5 holds NaN past the pool, 7 does not exist) and
  // equals its magnitude: 0.5 · 384 · 0.01f · 5/8 = 120 · 0.01f, exact in double.
  Case c({2, -1, 2, 4, 5, 7, -3});
  const MlaSparseReference r = c.run();
  REQUIRE(r.max_logit.size() == 2);
  CHECK(r.max_logit[0] == 120.0 * static_cast<double>(0.01f));
  CHECK(r.max_logit[0] == score(4));
  CHECK(r.score_magnitude[0] == r.max_logit[0]);
  CHECK(r.max_logit[1] == 0.0);  // head 1: q = 0, every score 0
  CHECK(r.score_magnitude[1] == 0.0);
  // A length that stops before row 4: row 2's score.
  Case shorter({2, 4});
  shorter.lens = {1};
  CHECK(shorter.run().max_logit[0] == score(2));
  // The sink is not a key: the max logit stays where lse moves (+inf zeroes out).
  Case sunk({2, 4});
  sunk.sink = {INFINITY, 3.0f};
  const MlaSparseReference s = sunk.run();
  CHECK(s.max_logit[0] == score(4));
  CHECK(s.max_logit[1] == 0.0);
  // No valid key (length 0, or every index skipped): -inf, magnitude 0.
  for (Case none : {Case({2, 4}), Case({-1, 5, 9})}) {
    if (none.idx[0] == 2) none.lens = {0};
    const MlaSparseReference e = none.run();
    CHECK(e.keys[0] == 0);
    CHECK(e.max_logit[0] == -kInf);
    CHECK(e.max_logit[1] == -kInf);
    CHECK(e.score_magnitude[0] == 0.0);
  }
}

TEST_CASE("sparse reference: the max-logit comparison and its tolerance", "[mla_prefill_sparse][reference]") {
  Case c({1, 4, 2});  // token 0 of two: keys; token 1: none
  c.idx = {1, 4, 2, -1, -1, -1};
  c.q.resize(2 * 2 * 576, 0.0f);
  c.p.total_q = 2;
  c.p.batch = 2;  // prefill's form: one-token sequences, max logit laid out [tokens, h]
  c.p.q = c.q;
  c.p.main.pool = c.pool;
  c.p.main.indices = c.idx;
  c.p.main.stride = 3;
  c.p.main.topk = 3;
  const MlaSparseReference r = mla_sparse_reference(c.p);
  REQUIRE(r.keys == std::vector<int>{3, 0});
  const float m0 = static_cast<float>(r.max_logit[0]);
  std::vector<float> got = {m0, 0.0f, -INFINITY, -INFINITY};
  const MlaMaxLogitComparison ok = mla_sparse_compare_max_logit(c.p, r, got);
  CHECK(ok.passed);
  CHECK(ok.checked_rows == 2);
  // Tolerance of head 0: 1e-3 · (1 + m) + 2^-8 · m (magnitude = m here); head 1: 1e-3.
  const double tol0 = 1e-3 * (1 + r.max_logit[0]) + std::ldexp(r.max_logit[0], -8);
  got[0] = static_cast<float>(r.max_logit[0] + 0.9 * tol0);
  CHECK(mla_sparse_compare_max_logit(c.p, r, got).passed);
  got[0] = static_cast<float>(r.max_logit[0] + 1.2 * tol0);
  const MlaMaxLogitComparison over = mla_sparse_compare_max_logit(c.p, r, got);
  CHECK_FALSE(over.passed);
  CHECK(over.over_limit == 1);
  CHECK(over.worst_row.t == 0);
  got[0] = static_cast<float>(r.max_logit[0] / std::log(2.0));  // log2 units
  CHECK_FALSE(mla_sparse_compare_max_logit(c.p, r, got).passed);
  got[0] = m0;
  got[1] = 2e-3f;  // head 1: the 1e-3 floor
  CHECK(mla_sparse_compare_max_logit(c.p, r, got).over_limit == 1);
  got[1] = 0.0f;
  got[2] = 0.0f;  // an empty token must be -inf
  CHECK(mla_sparse_compare_max_logit(c.p, r, got).wrong_inf == 1);
  got[2] = -INFINITY;
  for (float poison : {NAN, -INFINITY, INFINITY}) {  // a token with keys: finite
    got[1] = poison;
    const MlaMaxLogitComparison bad = mla_sparse_compare_max_logit(c.p, r, got);
    CHECK(bad.nonfinite == 1);
    CHECK_FALSE(bad.passed);
  }
  got[1] = NAN;  // a token the reference skipped is not judged
  const std::vector<char> only = {0, 1};
  CHECK(mla_sparse_compare_max_logit(c.p, mla_sparse_reference(c.p, &only), got).passed);
}

TEST_CASE("sparse reference: threads change nothing, a subset is the same tokens' values",
          "[mla_prefill_sparse][reference]") {
  // 61 tokens (threads take chunks), 3 heads, 9 random indices each over 40 rows of random
  // values, with -1s and rows past the pool; compared bit for bit.
  constexpr int kTokens = 61, kH = 3, kTopk = 9, kRows = 40;
  std::mt19937_64 gen(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> idx(-2, kRows + 2);
  std::vector<float> q(size_t{kTokens} * kH * 576);
  for (auto& x : q) x = bf16_to_float(float_to_bf16(normal(gen)));
  std::vector<uint8_t> pool(size_t{kRows} * 1152);
  for (size_t i = 0; i < pool.size(); i += 2) {
    const uint16_t b = float_to_bf16(normal(gen));
    std::memcpy(&pool[i], &b, 2);
  }
  std::vector<int32_t> indices(size_t{kTokens} * kTopk);
  for (auto& x : indices) x = idx(gen);
  MlaSparseProblem p;
  p.batch = kTokens, p.num_heads = kH, p.fp8 = false, p.total_q = kTokens, p.softmax_scale = 0.07;
  p.q = q;
  p.main.pool = pool;
  p.main.rows = kRows;
  p.main.indices = indices;
  p.main.stride = kTopk;
  p.main.topk = kTopk;
  const MlaSparseReference a = mla_sparse_reference(p), b = mla_sparse_reference(p);
  CHECK(a.out == b.out);
  CHECK(a.lse == b.lse);
  CHECK(a.max_logit == b.max_logit);
  std::vector<char> only(kTokens, 0);
  for (int g = 0; g < kTokens; g += 7) only[static_cast<size_t>(g)] = 1;
  const MlaSparseReference s = mla_sparse_reference(p, &only);
  for (int g = 0; g < kTokens; ++g) {
    INFO("token " << g);
    if (!only[static_cast<size_t>(g)]) {
      CHECK(s.keys[static_cast<size_t>(g)] == -1);
      continue;
    }
    CHECK(s.keys[static_cast<size_t>(g)] == a.keys[static_cast<size_t>(g)]);
    for (int h = 0; h < kH; ++h) {
      const size_t row = static_cast<size_t>(g) * kH + h;
      CHECK(s.max_logit[row] == a.max_logit[row]);
      CHECK(s.lse[row] == a.lse[row]);
      CHECK(std::equal(s.out.begin() + row * 512, s.out.begin() + (row + 1) * 512, a.out.begin() + row * 512));
    }
  }
}

TEST_CASE("656-byte quantizer: block scales, saturation, rope as stored", "[mla_decode_sparse][reference]") {
  std::vector<uint16_t> src(576);
  for (int d = 0; d < 576; ++d) {
    const int block = d / 128;
    const float v = block == 1 ? 0.0f : (block == 2 ? 1e4f : 1.0f) * std::sin(0.37f * d);
    src[static_cast<size_t>(d)] = float_to_bf16(d >= 512 ? 0.5f + d : v);
  }
  src[5] = float_to_bf16(-3.0f);  // block 0's amax
  uint8_t row[656];
  mla_sparse_quantize_row_host(src.data(), row);
  float scales[4];
  std::memcpy(scales, row + 512, 16);
  CHECK(scales[0] == 3.0f / 448.0f);
  CHECK(scales[1] == 1.0f);  // an all-zero block keeps scale 1
  CHECK(row[5] == 0xfe);     // -448: the amax lands on the largest code
  for (int d = 128; d < 256; ++d) CHECK(row[d] == 0);
  CHECK(std::memcmp(row + 528, src.data() + 512, 128) == 0);
  double deq[576];
  mla_sparse_dequantize(row, true, deq);
  for (int d = 0; d < 512; ++d) {
    const double x = bf16_to_float(src[static_cast<size_t>(d)]);
    // e4m3 keeps 3 mantissa bits: within 2^-4 relative, or the subnormal step at the bottom.
    CHECK(std::abs(deq[d] - x) <= std::abs(x) / 16 + scales[d / 128] * std::ldexp(1.0, -10));
  }
  for (int d = 512; d < 576; ++d) CHECK(deq[d] == bf16_to_float(src[static_cast<size_t>(d)]));
  // The kernel's widening: each product rounded to bf16 (7 stored mantissa bits: half an
  // ulp is at most 2^-8 of the value).
  double widened[576];
  mla_sparse_dequantize(row, true, widened, true);
  for (int d = 0; d < 576; ++d) {
    CHECK(widened[d] == bf16_to_float(float_to_bf16(static_cast<float>(widened[d]))));
    CHECK(std::abs(widened[d] - deq[d]) <= std::abs(deq[d]) * std::ldexp(1.0, -8));
  }
  CHECK(mla_sparse_e4m3(0x7e) == 448.0);
  CHECK(mla_sparse_e4m3(0x08) == std::ldexp(1.0, -6));
  CHECK(mla_sparse_e4m3(0x01) == std::ldexp(1.0, -9));
  CHECK(std::isnan(mla_sparse_e4m3(0xff)));
}

TEST_CASE("logical → physical remap reference", "[mla_decode_sparse][reference]") {
  const int table[3] = {7, -1, 2};  // page size 16, 9 pages in the pool
  CHECK(mla_sparse_remap_host(0, table, 3, 16, 9) == 7 * 16);
  CHECK(mla_sparse_remap_host(15, table, 3, 16, 9) == 7 * 16 + 15);
  CHECK(mla_sparse_remap_host(17, table, 3, 16, 9) == -1);  // an unused slot
  CHECK(mla_sparse_remap_host(40, table, 3, 16, 9) == 2 * 16 + 8);
  CHECK(mla_sparse_remap_host(48, table, 3, 16, 9) == -1);  // past the table
  CHECK(mla_sparse_remap_host(-1, table, 3, 16, 9) == -1);
  CHECK(mla_sparse_remap_host(3, table, 3, 16, 5) == -1);   // page 7 is not in a 5-page pool
}
