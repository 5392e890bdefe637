// mla_decode_branch_fp8 on the GPU: the projection alone against its quantization model
// (every config, token counts off every tile), the rope stage's q columns bit for bit with
// hostile positions that must write nothing, the whole branch against the unfused float64
// branch (bf16 and 640-byte caches; sparse attention on the bf16 and 656-byte caches; q_len
// 1, 2, 8; ragged batches with 0-token sequences; an empty step) through the harness
// problem, and a CUDA-graph replay.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/ops/mla_decode_branch_fp8.hpp"
#include "attnjit/ops/mla_decode_fp8.hpp"
#include "attnjit/runtime.hpp"
#include "driver/driver.hpp"
#include "harness/mla_branch_reference.hpp"
#include "harness/problem.hpp"
#include "support/catch.hpp"
#include "support/gpu.hpp"

using namespace attnjit;
using nlohmann::json;

namespace {

std::vector<uint16_t> bf16_draw(size_t n, float mean, float sd) {
  std::normal_distribution<float> d(mean, sd);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = harness::float_to_bf16(d(test::rng()));
  return v;
}

// The projection alone: a [tokens, h, K] read from a wider row (stride K + 64, as q's
// nope part is), out written into a wider row whose extra columns must keep their poison.
void check_projection(const MlaBranchProjConfig& c, int tokens, int heads) {
  INFO(fmt::format("config {} tokens {} h {}", c.describe(), tokens, heads));
  const int k = c.k_dim, n = c.n_dim, a_row = k + 64, out_row = n + 64;
  std::vector<uint16_t> a = bf16_draw(static_cast<size_t>(tokens) * heads * a_row, 0.0f, 1.0f);
  // Scale one token up past the 1200 amax cap and zero another token's first group; with
  // more tokens, scale one token's first head down to 2^-80 (the kernels' prescaled path)
  // and another's to bf16 subnormals.
  if (tokens > 2) {
    for (int i = 0; i < a_row; ++i) a[static_cast<size_t>(1) * heads * a_row + i] = harness::float_to_bf16(3000.0f * (i % 2 ? 1 : -1));
    for (int i = 0; i < 128; ++i) a[static_cast<size_t>(2) * heads * a_row + i] = 0;
  }
  if (tokens > 4)
    for (int t : {3, 4})
      for (int i = 0; i < a_row; ++i) {
        const size_t at = static_cast<size_t>(t) * heads * a_row + i;
        a[at] = harness::float_to_bf16(harness::bf16_to_float(a[at]) * (t == 3 ? 0x1p-80f : 0x1p-128f));
      }
  std::normal_distribution<float> d(0.0f, 1.0f / std::sqrt(static_cast<float>(k)));
  std::vector<float> w(static_cast<size_t>(heads) * n * k);
  for (auto& x : w) x = d(test::rng());
  const harness::MlaBranchWeightFp8 wq = harness::mla_branch_quantize_weight(w, heads, n, k);

  harness::DeviceBuffer a_d(a.size() * 2), w_d(wq.codes.size()), s_d(wq.scale.size() * 4),
      out_d(static_cast<size_t>(tokens) * heads * out_row * 2);
  a_d.upload(a);
  w_d.upload(wq.codes);
  s_d.upload(wq.scale);
  out_d.fill_byte(0xFF);
  const TensorView av = TensorView::strided(a_d.data(), DType::kBF16, {tokens, heads, k},
                                            {int64_t{heads} * a_row, a_row, 1});
  const TensorView ov = TensorView::strided(out_d.data(), DType::kBF16, {tokens, heads, n},
                                            {int64_t{heads} * out_row, out_row, 1});
  // a_e4m3: the same activations quantized on the host as the attention's e4m3 output does
  // (codes in a row as wide as a's, σ_A beside): the same model must hold.
  harness::DeviceBuffer a8_d(c.a_e4m3 ? a.size() : 0), sa_d(c.a_e4m3 ? static_cast<size_t>(tokens) * heads * (k / 128) * 4 : 0);
  TensorView a_in = av, a_scale;
  if (c.a_e4m3) {
    std::vector<uint8_t> codes(a.size(), 0x7F);
    std::vector<float> sigma(static_cast<size_t>(tokens) * heads * (k / 128));
    for (size_t r = 0; r < static_cast<size_t>(tokens) * heads; ++r)
      for (int g = 0; g < k / 128; ++g) {
        float amax = 0.0f;
        for (int i = g * 128; i < (g + 1) * 128; ++i) amax = std::fmax(amax, std::fabs(harness::bf16_to_float(a[r * a_row + i])));
        const harness::MlaBranchActScale sc = harness::mla_branch_act_scale(amax);
        sigma[r * (k / 128) + g] = sc.sigma;
        for (int i = g * 128; i < (g + 1) * 128; ++i)
          codes[r * a_row + i] = e4m3_from_float(sc.scaled(harness::bf16_to_float(a[r * a_row + i])));
      }
    a8_d.upload(codes);
    sa_d.upload(sigma);
    a_in = TensorView::strided(a8_d.data(), DType::kE4M3, {tokens, heads, k}, {int64_t{heads} * a_row, a_row, 1});
    a_scale = TensorView::contiguous(sa_d.data(), DType::kF32, {tokens, heads, k / 128});
  }
  mla_branch_project(a_in, TensorView::contiguous(w_d.data(), DType::kE4M3, {heads, n, k}),
                     TensorView::contiguous(s_d.data(), DType::kF32, {heads, n / 128, k / 128}), ov, c, nullptr,
                     a_scale);
  harness::synchronize();
  const auto got = out_d.download_as<uint16_t>(out_d.bytes() / 2);

  std::vector<float> a_dense(static_cast<size_t>(tokens) * heads * k);
  for (size_t r = 0; r < static_cast<size_t>(tokens) * heads; ++r)
    for (int i = 0; i < k; ++i) a_dense[r * k + i] = harness::bf16_to_float(a[r * a_row + i]);
  const harness::MlaBranchProjection ref =
      harness::mla_branch_project_reference(a_dense, wq.codes, wq.scale, tokens, heads, k, n);
  // The model's limit: the bf16 store (2^-8 relative) plus the fp8 wgmma's accumulation:
  // each k group's four k32 steps pass through the tensor core's adder, which keeps about 13
  // mantissa bits (DeepSeek-V3's report; seen here at 1.003 × 2^-13 of the terms' magnitude),
  // so 4 · 2^-13 of Σ|terms|; the groups are summed in f32 (DeepGEMM's promotion interval).
  double worst = 0.0;
  int64_t poison_lost = 0, nonfinite = 0;
  double err2 = 0.0, ref2 = 0.0;
  for (size_t r = 0; r < static_cast<size_t>(tokens) * heads; ++r) {
    for (int j = 0; j < n; ++j) {
      const double g = harness::bf16_to_float(got[r * out_row + j]);
      const double x = ref.out[r * n + j];
      nonfinite += std::isfinite(g) ? 0 : 1;
      const double limit = std::ldexp(std::fabs(x), -8) + std::ldexp(ref.magnitude[r * n + j], -11) + 1e-30;
      worst = std::max(worst, std::fabs(g - x) / limit);
      if (tokens > 2 && r == static_cast<size_t>(heads)) continue;  // the saturated row: far from ideal by design
      err2 += (g - ref.ideal[r * n + j]) * (g - ref.ideal[r * n + j]);
      ref2 += ref.ideal[r * n + j] * ref.ideal[r * n + j];
    }
    for (int j = n; j < out_row; ++j) poison_lost += got[r * out_row + j] != 0xFFFF;
  }
  CHECK(nonfinite == 0);
  CHECK(worst <= 1.0);
  CHECK(poison_lost == 0);
  // Against the unquantized product: e4m3 activations cost ~2^-4/√3 RMS.
  CHECK(std::sqrt(err2 / std::max(ref2, 1e-300)) < 0.05);
}

}  // namespace

// Every tile shape validate() accepts (block_m 8 … 128 tokens, block_n 128 … N rows), at one
// step a CTA and at two (W kept, the stage apart from it, the second step's loads behind
// the first's products).
std::vector<MlaBranchProjConfig> projection_configs() {
  std::vector<MlaBranchProjConfig> v;
  for (int k : {128, 512})
    for (int block_m : {8, 16, 32, 64, 128})
      for (int block_n : {128, 256, 512})
        for (int m_steps : {1, 2}) {
          MlaBranchProjConfig c;
          c.k_dim = k;
          c.n_dim = k == 128 ? 512 : 128;
          c.block_m = block_m;
          c.block_n = block_n;
          c.m_steps = m_steps;
          if (block_n > c.n_dim || block_m * k > 32768) continue;  // validate() refuses these
          v.push_back(c);
        }
  // The output projection on e4m3 activations (the attention's e4m3 output): every token
  // tile at one step and two (the next step's codes by TMA into the other slot), and four.
  for (int block_m : {8, 16, 32, 64})
    for (int m_steps : {1, 2, 4}) {
      MlaBranchProjConfig c;
      c.k_dim = 512;
      c.n_dim = 128;
      c.block_m = block_m;
      c.block_n = 128;
      c.m_steps = m_steps;
      c.a_e4m3 = true;
      v.push_back(c);
    }
  return v;
}

TEST_CASE("mla_decode_branch_fp8's projection matches its fp8 quantization model", "[gpu][mla_decode_branch_fp8]") {
  if (!test::gpu_or_skip()) return;
  const std::vector<MlaBranchProjConfig> configs = projection_configs();
  CHECK(configs.size() == 50);
  for (const MlaBranchProjConfig& c : configs)
    for (int tokens : {1, 17, 100}) check_projection(c, tokens, tokens == 100 ? 8 : 16);
  check_projection(mla_branch_proj_default_config(128, 2, 128), 2, 128);
  check_projection(mla_branch_proj_default_config(512, 2, 128), 2, 128);
}

// The sanitizers' case: one small call per tile shape, two token blocks each (the second
// partial), so every shape's copies, barriers and stores run under memcheck and racecheck.
TEST_CASE("mla_decode_branch_fp8's projection: one small call per tile shape", "[gpu][mla_decode_branch_fp8]") {
  if (!test::gpu_or_skip()) return;
  for (const MlaBranchProjConfig& c : projection_configs())
    check_projection(c, c.block_m * c.m_steps + 3, 2);  // a CTA's steps, then a partial block
}

TEST_CASE("mla_decode_branch_fp8 matches the unfused float64 branch", "[gpu][mla_decode_branch_fp8]") {
  if (!test::gpu_or_skip()) return;
  const harness::ProblemKind& kind = harness::find_problem("mla_decode_branch_fp8");
  std::vector<json> cases;
  for (const char* cache : {"bf16", "fp8"}) {
    cases.push_back({{"b", 1}, {"q_len", 1}, {"h", 128}, {"s_k", 1}, {"cache", cache}});      // first token
    cases.push_back({{"b", 4}, {"q_len", 2}, {"h", 128}, {"s_k", 129}, {"cache", cache}});    // off the tile
    cases.push_back({{"b", 9}, {"q_len", 8}, {"h", 16}, {"s_k", 70}, {"varq", 1}, {"cache", cache}});
    cases.push_back({{"b", 2}, {"q_len", 1}, {"h", 16}, {"s_k", 3000}, {"page", 128}, {"cache", cache}});
    cases.push_back({{"b", 3}, {"q_len", 2}, {"h", 64}, {"s_k", 257}, {"stage", "attention"}, {"cache", cache}});
  }
  // Sparse attention (hostile index lists, lengths 0 .. topk + 2, a sink) on its two caches,
  // with and without the extra cache.
  for (const char* cache : {"bf16", "fp8b"}) {
    cases.push_back({{"b", 1}, {"q_len", 1}, {"h", 128}, {"s_k", 1}, {"cache", cache}, {"topk", 5}});
    cases.push_back({{"b", 4}, {"q_len", 2}, {"h", 128}, {"s_k", 129}, {"cache", cache}, {"topk", 64}});
    cases.push_back({{"b", 9}, {"q_len", 8}, {"h", 16}, {"s_k", 70}, {"varq", 1}, {"cache", cache}, {"topk", 33}});
    cases.push_back({{"b", 3}, {"q_len", 1}, {"h", 64}, {"s_k", 3000}, {"page", 128}, {"cache", cache}, {"topk", 300}});
    // With the extra cache in the same softmax (its own hostile lists and lengths).
    cases.push_back({{"b", 4}, {"q_len", 2}, {"h", 128}, {"s_k", 129}, {"cache", cache}, {"topk", 64}, {"extra", 24}});
    cases.push_back({{"b", 9}, {"q_len", 8}, {"h", 16}, {"s_k", 70}, {"varq", 1}, {"cache", cache}, {"topk", 33}, {"extra", 70}});
  }
  for (const json& c : cases) {
    INFO(c.dump());
    auto p = kind.make(c, test::rng()(), 0);
    const harness::Prepared run = p->prepare(nullptr);
    p->poison_output();
    run.run(0);
    const harness::Verdict v = p->check(0);
    INFO(v.summary);
    CHECK(v.passed);
  }
}

TEST_CASE("mla_decode_branch_fp8 with every sequence at 0 new tokens writes nothing", "[gpu][mla_decode_branch_fp8]") {
  if (!test::gpu_or_skip()) return;
  // varq with q_len 1 draws 0 or 1 tokens per sequence; a seed loop finds an all-empty step
  // quickly for b 2 (one in four), and the problem's check covers the untouched pool.
  const harness::ProblemKind& kind = harness::find_problem("mla_decode_branch_fp8");
  int empty_steps = 0;
  for (uint64_t seed = 1; seed < 64 && empty_steps < 2; ++seed) {
    const json c = {{"b", 2}, {"q_len", 1}, {"h", 16}, {"s_k", 100}, {"varq", 1}, {"cache", seed % 2 ? "fp8" : "bf16"}};
    auto p = kind.make(c, seed, 0);
    const harness::Prepared run = p->prepare(nullptr);
    run.run(0);
    const harness::Verdict v = p->check(0);
    INFO(c.dump() << " seed " << seed << ": " << v.summary);
    CHECK(v.passed);
    if (v.numbers["rows_checked"] == 0) ++empty_steps;
  }
  CHECK(empty_steps >= 1);
}

namespace {

// A small step built on the public API: 3 sequences of 2, 0 and 3 new tokens, h 8, a bf16
// cache of 6 pages of 64 rows, freqs for 70 positions. `hostile`: sequence 0's length
// before the step is 69 (its second token at position 70, past freqs_cis) and sequence 2's
// last token lands on its second page, 99 (outside the pool): those tokens write nothing.
struct Step {
  static constexpr int kB = 3, kH = 8, kPage = 64, kPages = 6, kMaxPages = 2, kMaxPos = 70;
  std::vector<int32_t> offsets{0, 2, 2, 5}, before{5, 7, 60}, table{0, 1, 2, 3, 4, 5};
  int tokens = 5;
  std::vector<uint16_t> q, kv, gamma, pool;
  std::vector<float> freqs;
  harness::MlaBranchWeightFp8 w_uk, w_uv;
  harness::DeviceBuffer q_d, kv_d, gamma_d, freqs_d, offsets_d, before_d, table_d, pool_d, wuk_d, wuks_d,
      wuv_d, wuvs_d, out_d;

  explicit Step(bool hostile) {
    if (hostile) {
      before[0] = kMaxPos - 1;  // positions 69 (written) and 70 (past freqs_cis)
      before[2] = 62;           // positions 62, 63 (written) and 64, on page 99
      table[5] = 99;
    }
    q = bf16_draw(size_t{5} * kH * 192, 0.0f, 1.0f);
    kv = bf16_draw(size_t{5} * 576, 0.0f, 1.0f);
    gamma = bf16_draw(512, 1.0f, 0.1f);
    pool = bf16_draw(size_t{kPages} * kPage * 576, 0.0f, 1.0f);
    freqs.resize(size_t{kMaxPos} * 64);
    for (int p = 0; p < kMaxPos; ++p)
      for (int j = 0; j < 32; ++j) {
        freqs[size_t(p) * 64 + 2 * j] = static_cast<float>(std::cos(p * std::pow(10000.0, -j / 32.0)));
        freqs[size_t(p) * 64 + 2 * j + 1] = static_cast<float>(std::sin(p * std::pow(10000.0, -j / 32.0)));
      }
    std::normal_distribution<float> d(0.0f, 0.05f);
    std::vector<float> w(size_t{kH} * 512 * 128);
    for (auto& x : w) x = d(test::rng());
    w_uk = harness::mla_branch_quantize_weight(w, kH, 512, 128);
    for (auto& x : w) x = d(test::rng());
    w_uv = harness::mla_branch_quantize_weight(w, kH, 128, 512);
    auto up = [](harness::DeviceBuffer& b, const auto& v) {
      b = harness::DeviceBuffer(v.size() * sizeof(v[0]));
      b.upload(v);
    };
    up(q_d, q), up(kv_d, kv), up(gamma_d, gamma), up(freqs_d, freqs), up(offsets_d, offsets);
    up(before_d, before), up(table_d, table), up(pool_d, pool);
    up(wuk_d, w_uk.codes), up(wuks_d, w_uk.scale), up(wuv_d, w_uv.codes), up(wuvs_d, w_uv.scale);
    out_d = harness::DeviceBuffer(size_t{5} * kH * 128 * 2);
  }

  MlaDecodeBranchFp8Args args() const {
    MlaDecodeBranchFp8Args a;
    a.q = TensorView::contiguous(q_d.data(), DType::kBF16, {5, kH, 192});
    a.input_row_offsets = TensorView::contiguous(offsets_d.data(), DType::kI32, {kB + 1});
    a.cache_lens_before = TensorView::contiguous(before_d.data(), DType::kI32, {kB});
    a.kv_input = TensorView::contiguous(kv_d.data(), DType::kBF16, {5, 576});
    a.freqs_cis = TensorView::contiguous(freqs_d.data(), DType::kF32, {kMaxPos, 64});
    a.kv_norm_gamma = TensorView::contiguous(gamma_d.data(), DType::kBF16, {512});
    a.kv_cache = TensorView::contiguous(pool_d.data(), DType::kBF16, {kPages, kPage, 576});
    a.block_table = TensorView::contiguous(table_d.data(), DType::kI32, {kB, kMaxPages});
    a.w_uk = TensorView::contiguous(wuk_d.data(), DType::kE4M3, {kH, 512, 128});
    a.w_uk_scale = TensorView::contiguous(wuks_d.data(), DType::kF32, {kH, 4, 1});
    a.w_uv = TensorView::contiguous(wuv_d.data(), DType::kE4M3, {kH, 128, 512});
    a.w_uv_scale = TensorView::contiguous(wuvs_d.data(), DType::kF32, {kH, 1, 4});
    a.out = TensorView::contiguous(out_d.data(), DType::kBF16, {5, kH, 128});
    a.softmax_scale = 0.0722f;
    return a;
  }

  // Token t's sequence and position.
  std::pair<int, int> where(int t) const {
    int b = 0;
    while (offsets[b + 1] <= t) ++b;
    return {b, before[b] + t - offsets[b]};
  }
  bool writes(int t) const {
    const auto [b, pos] = where(t);
    const int page = table[size_t(b) * kMaxPages + pos / kPage];
    return pos < kMaxPos && page >= 0 && page < kPages;
  }
};

}  // namespace

TEST_CASE("mla_decode_branch_fp8's rope stage: q bit for bit, hostile positions write nothing",
          "[gpu][mla_decode_branch_fp8]") {
  if (!test::gpu_or_skip()) return;
  for (bool hostile : {false, true}) {
    INFO("hostile " << hostile);
    Step s(hostile);
    const MlaDecodeBranchFp8Args a = s.args();
    MlaDecodeBranchFp8Shape shape = mla_decode_branch_fp8_shape(a, 3);
    const MlaDecodeBranchFp8Plan plan = mla_decode_branch_fp8_plan(shape);
    harness::DeviceBuffer ws(plan.workspace_bytes);
    ws.fill_byte(0xFF);
    const Workspace w{ws.data(), plan.workspace_bytes};
    mla_decode_branch_fp8_schedule(plan, a, w, nullptr);
    mla_decode_branch_fp8_stage(a, plan, w, nullptr, MlaBranchStage::kRope);
    harness::synchronize();
    std::vector<uint16_t> qa(size_t{5} * Step::kH * 576);
    ATTNJIT_CU(cuMemcpyDtoH, qa.data(), reinterpret_cast<CUdeviceptr>(ws.data()) + plan.q_offset, qa.size() * 2);
    const auto pool = s.pool_d.download_as<uint16_t>(s.pool.size());
    int64_t q_bad = 0, poison_lost = 0, written_rows = 0;
    for (int t = 0; t < s.tokens; ++t) {
      const auto [b, pos] = s.where(t);
      for (int h = 0; h < Step::kH; ++h) {
        const uint16_t* got = &qa[(size_t(t) * Step::kH + h) * 576 + 512];
        if (!s.writes(t)) {
          for (int j = 0; j < 64; ++j) poison_lost += got[j] != 0xFFFF;
          continue;
        }
        uint16_t want[64];
        harness::mla_branch_rope_row(&s.q[(size_t(t) * Step::kH + h) * 192 + 128], &s.freqs[size_t(pos) * 64], want);
        for (int j = 0; j < 64; ++j) q_bad += got[j] != want[j];
      }
      if (s.writes(t)) {
        ++written_rows;
        const int64_t r = int64_t{s.table[size_t(b) * Step::kMaxPages + pos / Step::kPage]} * Step::kPage + pos % Step::kPage;
        const harness::MlaBranchCacheRowRef ref = harness::mla_branch_cache_row_reference(
            &s.kv[size_t(t) * 576], &s.freqs[size_t(pos) * 64], s.gamma.data(), 1e-6f);
        const harness::MlaBranchRowComparison cmp = harness::mla_branch_compare_cache_row(
            harness::MlaBranchCacheLayout::kBf16, reinterpret_cast<const uint8_t*>(&pool[size_t(r) * 576]), 0.0f, ref);
        INFO(cmp.summary());
        CHECK(cmp.passed);
      }
    }
    CHECK(q_bad == 0);
    CHECK(poison_lost == 0);
    CHECK(written_rows == (hostile ? 3 : 5));
    // Every row no token writes is as it was (hostile tokens' rows included).
    std::vector<bool> written(size_t{Step::kPages} * Step::kPage, false);
    for (int t = 0; t < s.tokens; ++t)
      if (s.writes(t)) {
        const auto [b, pos] = s.where(t);
        written[size_t(s.table[size_t(b) * Step::kMaxPages + pos / Step::kPage]) * Step::kPage + pos % Step::kPage] = true;
      }
    int64_t changed = 0;
    for (size_t r = 0; r < written.size(); ++r)
      if (!written[r]) changed += !std::equal(&pool[r * 576], &pool[r * 576] + 576, &s.pool[r * 576]);
    CHECK(changed == 0);
  }
}

namespace {

// Captures the step's schedule and branch on a fresh stream, then replays the graph twice,
// the second time after `refresh` changed inputs in place: each replay must write exactly
// what a direct call on the same inputs writes, and nothing non-finite. Returns both
// replays' outputs.
std::array<std::vector<uint16_t>, 2> replay_twice(Step& s, const MlaDecodeBranchFp8Args& a,
                                                  const std::function<void()>& refresh) {
  const driver::Api& api = driver::api();
  const MlaDecodeBranchFp8Plan plan = mla_decode_branch_fp8_plan(mla_decode_branch_fp8_shape(a, 3));
  harness::DeviceBuffer ws(plan.workspace_bytes);
  const Workspace w{ws.data(), plan.workspace_bytes};
  CUstream stream;
  ATTNJIT_CU(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
  auto enqueue = [&] {
    mla_decode_branch_fp8_schedule(plan, a, w, stream);
    mla_decode_branch_fp8(a, plan, w, stream);
  };
  auto output = [&] {
    ATTNJIT_CU(cuStreamSynchronize, stream);
    return s.out_d.download_as<uint16_t>(s.out_d.bytes() / 2);
  };
  ATTNJIT_CU(cuStreamBeginCapture, stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
  enqueue();
  CUgraph graph;
  ATTNJIT_CU(cuStreamEndCapture, stream, &graph);
  CUgraphExec exec;
  ATTNJIT_CU(cuGraphInstantiate, &exec, graph, 0);
  std::array<std::vector<uint16_t>, 2> got;
  for (int round = 0; round < 2; ++round) {
    if (round == 1) refresh();
    enqueue();
    const auto want = output();
    s.out_d.fill_byte(0xFF);
    ATTNJIT_CU(cuGraphLaunch, exec, stream);
    got[size_t(round)] = output();
    CHECK(got[size_t(round)] == want);
    CHECK(std::none_of(got[size_t(round)].begin(), got[size_t(round)].end(),
                       [](uint16_t x) { return (x & 0x7f80) == 0x7f80; }));
  }
  api.cuGraphExecDestroy(exec);
  api.cuGraphDestroy(graph);
  api.cuStreamDestroy(stream);
  return got;
}

}  // namespace

TEST_CASE("mla_decode_branch_fp8 replays from a CUDA graph with new activations", "[gpu][mla_decode_branch_fp8][graph]") {
  if (!test::gpu_or_skip()) return;
  Step s(false);
  replay_twice(s, s.args(), [&] { s.q_d.upload(bf16_draw(s.q.size(), 0.0f, 1.0f)); });
}

// Sparse attention inside the captured branch: new activations and new index lists between
// replays (the lists live on the GPU; the graph reads them where they are).
TEST_CASE("mla_decode_branch_fp8 (sparse) replays from a CUDA graph with new indices",
          "[gpu][mla_decode_branch_fp8][graph]") {
  if (!test::gpu_or_skip()) return;
  Step s(false);
  constexpr int kTopk = 40, kRows = Step::kPages * Step::kPage;
  auto draw_indices = [] {
    std::uniform_int_distribution<int> row(-2, kRows + 1);  // a few skipped values each
    std::vector<int32_t> v(size_t{5} * kTopk);
    for (auto& x : v) x = row(test::rng());
    return v;
  };
  harness::DeviceBuffer idx_d(size_t{5} * kTopk * 4), sink_d(size_t{Step::kH} * 4);
  idx_d.upload(draw_indices());
  std::vector<float> sink(Step::kH);
  for (int h = 0; h < Step::kH; ++h) sink[size_t(h)] = 0.25f * static_cast<float>(h) - 1.0f;
  sink_d.upload(sink);
  MlaDecodeBranchFp8Args a = s.args();
  a.indices = TensorView::contiguous(idx_d.data(), DType::kI32, {5, kTopk});
  a.attn_sink = TensorView::contiguous(sink_d.data(), DType::kF32, {Step::kH});
  REQUIRE(mla_decode_branch_fp8_shape(a, 3).topk == kTopk);
  const auto got = replay_twice(s, a, [&] {
    s.q_d.upload(bf16_draw(s.q.size(), 0.0f, 1.0f));
    idx_d.upload(draw_indices());
  });
  CHECK(got[1] != got[0]);  // the new lists and activations reached the replay
}
