// mla_decode_fp8 on the GPU against float64: inputs from the shipped quantizer (checked bit
// for bit against its host reference), outputs poisoned first, NaN codes / NaN rope / NaN σ
// in every cache row no sequence reads, garbage table entries past the used pages. Judged
// per row (mla_decode's comparison): empty rows exactly 0, no NaN, every element written.
//
// Tolerance from each kernel's error model (harness/mla_fp8_reference.hpp): the widening
// kernels (schedule 0, the seesaw) keep S exact in f32, V exact (e4m3 → bf16) and round
// P′ = p·σ_KV to bf16 only: mla_decode's limits. The fp8 wgmma kernels (the default narrow
// kernel, fp8_mma 1) round P′ to e4m3: limits from that rounding.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <memory>
#include <cmath>
#include <vector>

#include "driver/driver.hpp"
#include "harness/problem.hpp"
#include "gpu/mla_decode_fp8_data.hpp"
#include "support/catch.hpp"
#include "support/gpu.hpp"

using namespace attnjit;
using namespace attnjit::test::mla_fp8;

namespace {

// The kernel that ran and its score chain: their error model judges the output.
struct Model {
  harness::Fp8Kernel kernel;
  int score_chain;
};
harness::MlaCompareLimits limits_of(const harness::MlaReference& ref, const Model& m) {
  return harness::mla_fp8_limits(ref, m.kernel, m.score_chain);
}

struct Run {
  std::vector<float> out, lse;
  std::vector<uint8_t> bytes;
  Model model;
};

// The kernels under test: 0 the default (the narrow kernel), 1 the fp8 wgmma kernel
// (schedule 0, fp8_mma 1), 2 the seesaw (schedule 1), 3 the narrow kernel (schedule 2),
// named so its tests stay when the default moves, 4 the widening kernel (schedule 0), 5 the
// narrow kernel with Q·Kᵀ promoted to f32 every k32 step (score_chain 1; the default
// chains 2).
MlaDecodeFp8Config kernel_config(const MlaDecodeFp8Shape& shape, int kernel) {
  MlaDecodeFp8Config config = mla_decode_fp8_default_config(shape.num_heads, shape.q_len, shape.page_size);
  if (kernel == 0) return config;
  if (kernel == 3 || kernel == 5) {  // narrow: the smallest wgmma N that holds q_len·h rows, else 32
    const int rows = config.max_q_len * config.num_heads;
    config.schedule = 2;
    config.block_m = rows <= 8 ? 8 : rows <= 16 ? 16 : 32;
    config.block_n = 64;
    config.stages = 4;
    config.score_chain = kernel == 5 ? 1 : 2;
    return config;
  }
  config.schedule = kernel == 2 ? 1 : 0;
  config.block_m = 64;
  config.block_n = kernel == 2 ? 64 : 32;
  config.stages = kernel == 1 ? 6 : kernel == 2 ? 2 : 3;
  config.fp8_mma = kernel == 1 ? 1 : 0;
  return config;
}
Model model_of(const MlaDecodeFp8Config& c) { return {harness::fp8_kernel_of(c.schedule, c.fp8_mma), c.score_chain}; }
const char* kernel_label(int kernel) {
  static constexpr const char* kLabels[] = {"", "fp8_mma ", "seesaw ", "narrow ", "widening ", "narrow chain 1 "};
  return kLabels[kernel];
}

Run run(Fp8Data& d, bool three, int num_splits, int kernel = 0) {
  const MlaDecodeFp8Args a = d.args(three);
  MlaDecodeFp8Shape shape = mla_decode_fp8_shape(a);
  shape.num_splits = num_splits;
  const MlaDecodeFp8Config config = kernel_config(shape, kernel);
  const MlaDecodeFp8Plan plan = mla_decode_fp8_plan(shape, &config);
  CHECK(plan.balanced == (num_splits == 0));
  test::DeviceBuffer ws(std::max<size_t>(1, plan.workspace_bytes));
  ws.fill_byte(0xFF);
  const Workspace w{plan.workspace_bytes ? ws.data() : nullptr, plan.workspace_bytes};
  d.poison_outputs();
  mla_decode_fp8_schedule(plan, a, w, nullptr);
  mla_decode_fp8(a, plan, w, nullptr);
  test::synchronize();
  return {d.out(), d.lse(), d.out_bytes(), model_of(config)};
}

void judge_problem(const harness::MlaProblem& p, const std::vector<float>& out, const std::vector<float>& lse,
                   const std::string& line_head, const Model& model) {
  const harness::MlaReference ref = harness::mla_reference(p);
  const harness::MlaCompareLimits limits = limits_of(ref, model);
  const harness::MlaComparison c = harness::mla_compare(p, ref, out, lse, limits);
  const std::string line = fmt::format("{}: {}", line_head, c.summary());
  fmt::print("{}\n", line);
  INFO(line);
  CHECK(c.nonfinite_out == 0);
  CHECK(c.empty_rows_not_zero == 0);
  CHECK(c.rel_l2 <= limits.rel_l2);
  CHECK(c.worst_row_err <= limits.row_max_err);
  CHECK(c.lse_nonfinite == 0);
  CHECK(c.lse_wrong_inf == 0);
  CHECK(c.lse_max_abs_err <= limits.lse_abs);
  CHECK(c.passed);
}

void judge(const Fp8Data& d, const Run& r, const std::string& label) {
  judge_problem(d.problem(), r.out, r.lse, fmt::format("mla_decode_fp8 [{}] {}", label, d.spec().describe()),
                r.model);
}

}  // namespace

TEST_CASE("mla_decode_fp8 matches float64 (640-byte rows, per-token scales)", "[gpu][mla_decode_fp8]") {
  if (!test::gpu_or_skip()) return;
  const std::vector<Fp8Case> cases = {
      {.q_len = 1, .heads = 16, .lens = {0, 1, 63, 64, 65, 200}},
      {.q_len = 1, .heads = 128, .lens = {1000, 33, 0}},
      {.q_len = 2, .heads = 16, .lens = {1, 2, 129, 700}},               // L < q_len: empty rows
      {.q_len = 4, .heads = 8, .page_size = 128, .lens = {3, 300, 511}},  // off the page
      {.q_len = 2, .heads = 128, .lens = {257, 1500}, .magnitude = 30.0f, .per_head_q = true},
      {.q_len = 1, .heads = 64, .page_size = 256, .lens = {5000}, .magnitude = 0.01f},
      {.q_len = 1, .heads = 32, .lens = {70, 1}, .magnitude = 1e-3f},  // σ ~ 1e-5
  };
  for (const Fp8Case& c : cases) {
    Fp8Data d(c);
    for (int kernel : {0, 2, 4})  // the default (narrow) kernel, the seesaw, the widening kernel
      for (int splits : {1, 3, 0})
        judge(d, run(d, false, splits, kernel), fmt::format("640B {}splits {}", kernel_label(kernel), splits));
  }
}

TEST_CASE("mla_decode_fp8 matches float64 in the per-tensor form (576-byte e4m3 rows)", "[gpu][mla_decode_fp8]") {
  if (!test::gpu_or_skip()) return;
  const std::vector<Fp8Case> cases = {
      {.q_len = 1, .heads = 16, .lens = {0, 1, 65, 900}, .per_tensor = true},
      {.q_len = 2, .heads = 128, .page_size = 128, .lens = {1, 300, 1100}, .magnitude = 20.0f, .per_tensor = true},
  };
  for (const Fp8Case& c : cases) {
    Fp8Data d(c);
    for (int kernel : {0, 2, 4})
      for (int splits : {1, 0})
        judge(d, run(d, false, splits, kernel), fmt::format("576B {}splits {}", kernel_label(kernel), splits));
  }
}

TEST_CASE("mla_decode_fp8's three-tensor form equals the 640-byte form bit for bit", "[gpu][mla_decode_fp8]") {
  if (!test::gpu_or_skip()) return;
  Fp8Data d({.q_len = 2, .heads = 64, .lens = {0, 77, 640, 1025}, .magnitude = 3.0f});
  for (int kernel : {0, 4}) {
    const Run a = run(d, false, 0, kernel), b = run(d, true, 0, kernel);
    judge(d, b, fmt::format("three-tensor {}", kernel_label(kernel)));
    CHECK(a.bytes == b.bytes);
  }
}

TEST_CASE("mla_decode_fp8 replays from a CUDA graph with new lengths and values", "[gpu][mla_decode_fp8][graph]") {
  if (!test::gpu_or_skip()) return;
  const driver::Api& api = driver::api();
  Fp8Data d({.q_len = 2, .heads = 16, .lens = {2000, 2000, 2000}, .spare_pages = 6});
  const MlaDecodeFp8Args a = d.args(false);
  const MlaDecodeFp8Plan plan = mla_decode_fp8_plan(mla_decode_fp8_shape(a));
  test::DeviceBuffer workspace(std::max<size_t>(1, plan.workspace_bytes));
  const Workspace ws{plan.workspace_bytes ? workspace.data() : nullptr, plan.workspace_bytes};
  CUstream stream;
  ATTNJIT_CU(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
  ATTNJIT_CU(cuStreamBeginCapture, stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
  mla_decode_fp8_schedule(plan, a, ws, stream);
  mla_decode_fp8(a, plan, ws, stream);
  CUgraph graph;
  ATTNJIT_CU(cuStreamEndCapture, stream, &graph);
  CUgraphExec exec;
  ATTNJIT_CU(cuGraphInstantiate, &exec, graph, 0);
  for (const std::vector<int>& lens : {std::vector<int>{2000, 0, 1}, {64, 1999, 3}, {700, 700, 2000}}) {
    d.refill(lens);
    d.poison_outputs();
    workspace.fill_byte(0xFF);
    ATTNJIT_CU(cuGraphLaunch, exec, stream);
    ATTNJIT_CU(cuStreamSynchronize, stream);
    judge(d, {d.out(), d.lse(), {}, model_of(plan.config)}, fmt::format("graph replay [{}]", fmt::join(lens, ",")));
  }
  api.cuGraphExecDestroy(exec);
  api.cuGraphDestroy(graph);
  api.cuStreamDestroy(stream);
}

TEST_CASE("mla_fp8_quantize matches its host reference bit for bit (every grouping and form)",
          "[gpu][mla_decode_fp8][quantize]") {
  if (!test::gpu_or_skip()) return;
  constexpr int64_t kRows = 300, kHeads = 4;  // 75 tokens of 4 heads
  test::FastNormal normal(test::rng()());
  std::vector<uint16_t> in(static_cast<size_t>(kRows) * 576);
  for (size_t i = 0; i < in.size(); ++i)  // magnitudes from 1e-3 to 1e2 across rows
    in[i] = harness::float_to_bf16(normal() * std::pow(10.0f, static_cast<float>(i / 576 % 6) - 3.0f));
  in[5] = harness::float_to_bf16(0.0f);
  std::fill_n(in.begin() + 576 * 7, 576, uint16_t{0});  // an all-zero row: σ = ε / 448
  test::DeviceBuffer d_in(in.size() * 2), d_out(kRows * 640), d_content(kRows * 512), d_rope(kRows * 128),
      d_scale(kRows * 4);
  d_in.upload(in);
  struct Form {
    MlaFp8Group group;
    int64_t rows_per_group;
    bool three;
    int row_bytes = 640;
  };
  for (const Form f : {Form{MlaFp8Group::kRow, 1, false}, Form{MlaFp8Group::kToken, kHeads, false},
                       Form{MlaFp8Group::kTensor, kRows, false}, Form{MlaFp8Group::kRow, 1, true},
                       Form{MlaFp8Group::kTensor, kRows, false, 576}}) {
    const int64_t groups = f.group == MlaFp8Group::kTensor ? 1 : kRows / f.rows_per_group;
    MlaFp8QuantizeArgs a;
    a.in = TensorView::contiguous(d_in.data(), DType::kBF16, {kRows, 576});
    a.group = f.group;
    a.rows_per_group = static_cast<int>(f.rows_per_group);
    a.out = f.three ? TensorView::contiguous(d_content.data(), DType::kU8, {kRows, 512})
                    : TensorView::contiguous(d_out.data(), DType::kU8, {kRows, f.row_bytes});
    if (f.three) a.out_rope = TensorView::contiguous(d_rope.data(), DType::kBF16, {kRows, 64});
    a.scale = TensorView::contiguous(d_scale.data(), DType::kF32, {groups});
    mla_fp8_quantize(a, nullptr);
    test::synchronize();
    std::vector<uint8_t> want(static_cast<size_t>(kRows * f.row_bytes));
    std::vector<float> want_scale(static_cast<size_t>(groups));
    mla_fp8_quantize_host(in.data(), kRows, f.rows_per_group, want.data(), want_scale.data(), f.row_bytes);
    std::vector<uint8_t> got = d_out.download_as<uint8_t>(want.size());
    if (f.three) {
      const auto c = d_content.download_as<uint8_t>(kRows * 512), r = d_rope.download_as<uint8_t>(kRows * 128);
      for (int64_t i = 0; i < kRows; ++i) {
        std::copy_n(&c[static_cast<size_t>(i) * 512], 512, &got[static_cast<size_t>(i) * 640]);
        std::copy_n(&r[static_cast<size_t>(i) * 128], 128, &got[static_cast<size_t>(i) * 640 + 512]);
      }
    }
    INFO("group " << static_cast<int>(f.group) << " three " << f.three << " row bytes " << f.row_bytes);
    CHECK(got == want);
    CHECK(d_scale.download_as<float>(static_cast<size_t>(groups)) == want_scale);
  }
}

TEST_CASE("mla_decode_fp8 with ragged q: per-sequence q_len, [total_q, h] rows, [h, total_q] lse",
          "[gpu][mla_decode_fp8][ragged]") {
  if (!test::gpu_or_skip()) return;
  // 5 sequences over the 20 tokens of a padded [5, 4] q: sequence i owns tokens
  // [offsets[i], offsets[i+1]); tokens 10..19 belong to none and must stay poisoned.
  Fp8Data d({.q_len = 4, .heads = 16, .lens = {300, 2, 0, 129, 700}});
  const std::vector<int> q_lens = {4, 1, 2, 0, 3};
  std::vector<int32_t> offsets(q_lens.size() + 1, 0);
  for (size_t i = 0; i < q_lens.size(); ++i) offsets[i + 1] = offsets[i] + q_lens[i];
  test::DeviceBuffer off_d(offsets.size() * 4);
  off_d.upload(offsets);
  const int64_t total_q = 20, h = 16;
  for (int kernel : {0, 2, 4})  // the default (narrow) kernel, the seesaw, the widening kernel
  for (int splits : {1, 3, 0}) {
    MlaDecodeFp8Args a = d.args(false);
    a.q = TensorView::contiguous(a.q.data, DType::kU8, {total_q, h, 640});
    a.q_offsets = TensorView::contiguous(off_d.data(), DType::kI32, {static_cast<int64_t>(offsets.size())});
    a.max_q_len = 4;
    a.out = TensorView::contiguous(a.out.data, DType::kBF16, {total_q, h, 512});
    a.lse = TensorView::contiguous(a.lse.data, DType::kF32, {h, total_q});
    MlaDecodeFp8Shape shape = mla_decode_fp8_shape(a);
    shape.num_splits = splits;
    const MlaDecodeFp8Config config = kernel_config(shape, kernel);
    const MlaDecodeFp8Plan plan = mla_decode_fp8_plan(shape, &config);
    test::DeviceBuffer ws(std::max<size_t>(1, plan.workspace_bytes));
    ws.fill_byte(0xFF);
    const Workspace w{plan.workspace_bytes ? ws.data() : nullptr, plan.workspace_bytes};
    d.poison_outputs();
    mla_decode_fp8_schedule(plan, a, w, nullptr);
    mla_decode_fp8(a, plan, w, nullptr);
    test::synchronize();
    const std::vector<float> out = d.out(), lse_all = d.lse();
    const harness::MlaProblem all = d.problem();
    for (size_t i = 0; i < q_lens.size(); ++i) {
      const int ql = q_lens[i];
      if (ql == 0) continue;
      harness::MlaProblem p = all;  // sequence i alone, its own q_len
      p.batch = 1;
      p.q_len = ql;
      p.q = all.q.subspan(static_cast<size_t>(offsets[i] * h * 576), static_cast<size_t>(ql * h * 576));
      p.block_table = all.block_table.subspan(i * static_cast<size_t>(all.max_pages), static_cast<size_t>(all.max_pages));
      p.cache_lens = all.cache_lens.subspan(i, 1);
      const std::vector<float> o(out.begin() + offsets[i] * h * 512, out.begin() + (offsets[i] + ql) * h * 512);
      std::vector<float> l(static_cast<size_t>(h * ql));  // [1, h, q_len] from [h, total_q]
      for (int64_t hh = 0; hh < h; ++hh)
        for (int t = 0; t < ql; ++t) l[static_cast<size_t>(hh * ql + t)] = lse_all[static_cast<size_t>(hh * total_q + offsets[i] + t)];
      judge_problem(p, o, l, fmt::format("mla_decode_fp8 [ragged {}splits {}] seq {} q_len {} L {}",
                                         kernel_label(kernel), splits, i, ql, p.cache_lens[0]),
                    model_of(config));
    }
    const auto bits = d.out_bytes();
    int64_t touched = 0;
    for (size_t k = static_cast<size_t>(offsets.back() * h * 1024); k < static_cast<size_t>(total_q * h * 1024); ++k)
      touched += bits[k] != 0xFF;
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t t = offsets.back(); t < total_q; ++t) touched += !std::isnan(lse_all[static_cast<size_t>(hh * total_q + t)]);
    CHECK(touched == 0);
  }
}

TEST_CASE("mla_decode_fp8's bench problem passes its check at test scale", "[gpu][mla_decode_fp8][harness]") {
  if (!test::gpu_or_skip()) return;
  const harness::ProblemKind& kind = harness::find_problem("mla_decode_fp8");
  for (const nlohmann::json& c : kind.test_cases()) {
    INFO(c.dump());
    const std::unique_ptr<harness::Problem> p = kind.make(c, test::rng()(), 0);
    const harness::Prepared prepared = p->prepare(nullptr);
    p->poison_output();
    prepared.run(0);
    const harness::Verdict v = p->check(0);
    fmt::print("mla_decode_fp8 problem {}: {}\n", p->describe(), v.summary);
    CHECK(v.passed);
    p->poison_output();
    CHECK_FALSE(p->check(0).passed);
  }
}

// Each kernel by name (the fp8 wgmma kernel, the seesaw, the narrow kernel, the widening
// kernel) on the same cases, each against its own error model (harness::mla_fp8_limits);
// tools/gpu_sanitize.sh runs each case.
namespace {
void check_kernel_cases(int kernel) {
  const std::vector<Fp8Case> cases = {
      {.q_len = 1, .heads = 16, .lens = {0, 1, 63, 64, 65, 200}},
      {.q_len = 2, .heads = 128, .lens = {257, 1500}, .magnitude = 30.0f, .per_head_q = true},
      {.q_len = 4, .heads = 8, .page_size = 128, .lens = {3, 300, 511}},
  };
  for (const Fp8Case& c : cases) {
    Fp8Data d(c);
    for (int splits : {1, 3, 0}) {
      for (bool three : {false, true}) {
        const Run r = run(d, three, splits, kernel);
        const harness::MlaProblem p = d.problem();
        const harness::MlaReference ref = harness::mla_reference(p);
        const harness::MlaCompareLimits limits = limits_of(ref, r.model);
        const harness::MlaComparison cmp = harness::mla_compare(p, ref, r.out, r.lse, limits);
        const std::string line =
            fmt::format("mla_decode_fp8 [{}splits {}{}] {}: {} (limits: rel_l2 {:.1e}, row {:.2f}, lse {:.3e})",
                        kernel_label(kernel), splits, three ? " three" : "", c.describe(), cmp.summary(),
                        limits.rel_l2, limits.row_max_err, limits.lse_abs);
        fmt::print("{}\n", line);
        INFO(line);
        CHECK(cmp.passed);
        CHECK(cmp.nonfinite_out == 0);
        CHECK(cmp.empty_rows_not_zero == 0);
      }
    }
  }
}
}  // namespace

TEST_CASE("mla_decode_fp8's fp8 wgmma kernel matches float64", "[gpu][mla_decode_fp8][fp8_mma]") {
  if (!test::gpu_or_skip()) return;
  check_kernel_cases(1);
}

TEST_CASE("mla_decode_fp8's seesaw kernel matches float64", "[gpu][mla_decode_fp8][seesaw]") {
  if (!test::gpu_or_skip()) return;
  check_kernel_cases(2);
}

TEST_CASE("mla_decode_fp8's narrow kernel matches float64", "[gpu][mla_decode_fp8][narrow]") {
  if (!test::gpu_or_skip()) return;
  check_kernel_cases(3);
}

TEST_CASE("mla_decode_fp8's widening kernel matches float64", "[gpu][mla_decode_fp8][widening]") {
  if (!test::gpu_or_skip()) return;
  check_kernel_cases(4);
}

TEST_CASE("mla_decode_fp8's narrow kernel with f32 promotion every k32 step matches float64",
          "[gpu][mla_decode_fp8][narrow]") {
  if (!test::gpu_or_skip()) return;
  check_kernel_cases(5);
}
