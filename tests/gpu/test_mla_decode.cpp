// mla_decode on the GPU against the float64 reference (harness/mla_reference.hpp).
// Every case uses fresh random inputs (never zeros), poisons out/lse/workspace with 0xFF
// (NaN) before each run, fills cache rows past each length and the pool's unused pages
// with NaN, and hands the kernel a permuted block table whose entries past the used pages
// are garbage (-1, INT32_MAX, the pool size, ...). A kernel that reads a row it must not
// read, leaves an element unwritten or merges splits wrongly shows NaN or O(1) errors;
// bf16 rounding alone gives a relative L2 error of about 3e-3.
//
// Cost: the reference is the slow part, so shapes with more than ~4M (query, key) pairs
// check a random sample of rows plus every edge row. Variants are compiled up front on
// several threads (each compile is single-threaded NVRTC).
//
// Ragged q: test_mla_decode_ragged.cpp.
#include <vector>

#include "attnjit/ops/mla_decode_fp8.hpp"
#include "gpu/mla_decode_cases.hpp"
#include "harness/mla_branch_reference.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/gpu.hpp"

using namespace attnjit;
using namespace attnjit::test::mla_gpu;
using test::DeviceBuffer;
using test::MlaComparison;
using test::MlaProblem;
using test::MlaReference;

TEST_CASE("mla_decode matches float64 for every head count and q_len, with edge lengths",
          "[gpu][mla_decode]") {
  if (!test::gpu_or_skip()) return;
  std::vector<MlaCase> cases;
  // 8, 12, 24: a rank's heads under tensor parallelism (q_len·h rows packed into 64-row
  // tiles, a token's heads straddling two tiles); 1 and 5: any count, off every power of 2.
  for (int h : {1, 5, 8, 12, 16, 24, 32, 64, 128})
    for (int q_len : {1, 2, 4, 8}) {
      MlaCase c;
      c.heads = h;
      c.q_len = q_len;
      // 0 (no key at all), 1, L < q_len (leading queries see nothing), one whole page,
      // a partial last page, and a few pages of random length.
      c.lens = {0, 1, q_len > 1 ? q_len - 1 : 2, 64, 130, rand_in(300, 1000)};
      cases.push_back(c);
    }
  std::vector<MlaDecodeConfig> configs;
  for (const auto& c : cases) configs.push_back(config_for(c));
  prepare_all(configs);
  for (const auto& c : cases) check_case(c);
}

TEST_CASE("mla_decode with a few thousand keys and large batches", "[gpu][mla_decode]") {
  if (!test::gpu_or_skip()) return;
  MlaCase a;  // the compute-bound family: many heads
  a.heads = 128;
  a.q_len = 2;
  a.lens = random_lens(32, 1500, 5000);
  a.lens[3] = 4096;  // exactly whole pages
  check_case(a);
  MlaCase b;  // the memory-bound family: few heads, bigger batch
  b.heads = 16;
  b.q_len = 1;
  b.lens = random_lens(96, 2000, 6000);
  b.lens[0] = 0;
  b.lens[1] = 6000;
  check_case(b, 0, 6000);  // with a tight length hint (the table holds 6144 rows)
}

TEST_CASE("mla_decode on a 128k-long sequence (sampled rows)", "[gpu][mla_decode]") {
  if (!test::gpu_or_skip()) return;
  MlaCase c;
  c.heads = 128;
  c.q_len = 1;
  c.lens = {131069, 20011};  // neither a multiple of the page
  check_case(c);             // heuristic split count from the table's capacity
  MlaCase m;
  m.heads = 64;
  m.q_len = 2;
  m.lens = {65536 + 37, 1, 40000};
  check_case(m, 0, 65600);  // a hint between the longest length and the table's capacity
}

TEST_CASE("mla_decode supports page sizes 16, 32, 64, 128 and 256", "[gpu][mla_decode]") {
  if (!test::gpu_or_skip()) return;
  std::vector<MlaCase> cases;
  for (int page : {16, 32, 64, 128, 256}) {
    MlaCase c;
    c.page_size = page;
    c.heads = 64;
    c.q_len = 2;
    c.lens = {0, 1, page - 1, page + 1, 3 * page + 5, rand_in(1000, 2500)};
    cases.push_back(c);
  }
  std::vector<MlaDecodeConfig> configs;
  for (const auto& c : cases) configs.push_back(config_for(c));  // unsupported: FAIL
  prepare_all(configs);
  for (const auto& c : cases) {
    check_case(c);
    check_case(c, 3);  // a forced split: partition edges need not fall on page edges
  }
}

TEST_CASE("mla_decode in f16", "[gpu][mla_decode]") {
  if (!test::gpu_or_skip()) return;
  std::vector<MlaCase> cases;
  for (int h : {16, 128})
    for (int q_len : {1, 2}) {
      MlaCase c;
      c.dtype = DType::kF16;
      c.heads = h;
      c.q_len = q_len;
      c.lens = {0, 1, 129, rand_in(500, 3000), rand_in(2000, 4000)};
      cases.push_back(c);
    }
  std::vector<MlaDecodeConfig> configs;
  for (const auto& c : cases) configs.push_back(config_for(c));
  prepare_all(configs);
  for (const auto& c : cases) check_case(c);
}

TEST_CASE("mla_decode gives the same answer for every split count", "[gpu][mla_decode]") {
  if (!test::gpu_or_skip()) return;
  for (double scale : {kDeepSeekScale, 0.35}) {  // 0.35: very peaked softmax across splits
    MlaCase c;
    c.heads = 64;
    c.q_len = 2;
    c.lens = {0, 1, 777, 3000};
    c.scale = scale;
    INFO(c.describe());
    const MlaDecodeConfig cfg = config_for(c);
    MlaData d(c);
    const MlaReference ref = test::mla_reference(d.problem());
    const int tiles = ceil_div(d.max_pages() * c.page_size, 64);  // KV tiles of the capacity
    for (int splits : {1, 2, 3, 7, 64, tiles + 9, 0}) {
      RunOptions o;
      o.config = &cfg;
      o.num_splits = splits;
      judge(d, ref, run_mla(d, o),
            fmt::format("{} num_splits {}", c.describe(),
                        splits == 0 ? "balanced" : std::to_string(splits)));
    }
  }
}

TEST_CASE("mla_decode heuristic split count and the runtime's own config", "[gpu][mla_decode]") {
  if (!test::gpu_or_skip()) return;
  struct Shape {
    int heads, q_len;
    std::vector<int> lens;
    int hint, max_pages;
  };
  const std::vector<Shape> shapes = {
      {128, 1, {20000}, 0, 0},                     // one long sequence: must split to fill the GPU
      {128, 2, {7000, 0, 3}, 8192, 128},           // small batch, hint above the lengths
      {16, 1, random_lens(200, 100, 1200), 0, 0},  // many short sequences
  };
  for (const Shape& s : shapes) {
    MlaCase c;
    c.heads = s.heads;
    c.q_len = s.q_len;
    c.lens = s.lens;
    c.max_pages = s.max_pages;
    INFO(c.describe());
    MlaData d(c);
    const MlaReference ref = reference_for(d);
    // The plan is a function of host-visible shapes only: planned twice, same answer. With
    // no forced count it is the balanced schedule, which cuts a lone long sequence on the GPU.
    RunOptions probe;
    probe.max_len_hint = s.hint;
    const MlaDecodePlan p1 = plan_mla(d.args(true), probe), p2 = plan_mla(d.args(true), probe);
    CHECK(p1.balanced);
    CHECK(p1.sm_slots >= 1);
    CHECK((p2.balanced == p1.balanced && p2.sm_slots == p1.sm_slots &&
           p2.workspace_bytes == p1.workspace_bytes));
    RunOptions o;  // config = nullptr: whatever the runtime picks
    o.max_len_hint = s.hint;
    const RunResult r = run_mla(d, o);
    judge(d, ref, r, c.describe() + " heuristic, auto config");
  }
}

TEST_CASE("mla_decode lse is optional and does not change out", "[gpu][mla_decode]") {
  if (!test::gpu_or_skip()) return;
  MlaCase c;
  c.heads = 32;
  c.q_len = 4;
  c.lens = {0, 2, 1500, 64};
  const MlaDecodeConfig cfg = config_for(c);
  MlaData d(c);
  const MlaReference ref = test::mla_reference(d.problem());
  for (int splits : {1, 5}) {
    RunOptions o;
    o.config = &cfg;
    o.num_splits = splits;
    const RunResult with = run_mla(d, o);
    o.want_lse = false;
    const RunResult without = run_mla(d, o);
    judge(d, ref, with, c.describe() + " with lse");
    judge(d, ref, without, c.describe() + " without lse");
    CHECK(std::memcmp(with.out.data(), without.out.data(), with.out.size() * sizeof(float)) == 0);
    // Not requested: the poisoned lse buffer must be left exactly as it was.
    const std::vector<float> lse_after = d.download_lse();
    const std::vector<uint8_t> poison(lse_after.size() * sizeof(float), 0xFF);
    CHECK(std::memcmp(lse_after.data(), poison.data(), poison.size()) == 0);
  }
}

TEST_CASE("mla_decode runs q_len below the config's max_q_len", "[gpu][mla_decode]") {
  if (!test::gpu_or_skip()) return;
  for (int q_len : {1, 3, 5}) {
    MlaCase c;
    c.heads = 32;
    c.q_len = q_len;
    c.lens = {0, 2, 4, 700};
    INFO(c.describe());
    MlaDecodeConfig cfg = mla_decode_default_config(c.dtype, c.heads, 8, c.page_size);
    cfg.max_q_len = 8;  // one variant compiled for MTP up to 8 serves every shorter q_len
    MlaData d(c);
    const MlaReference ref = test::mla_reference(d.problem());
    RunOptions o;
    o.config = &cfg;
    judge(d, ref, run_mla(d, o), c.describe() + " on a max_q_len 8 variant");
  }
}

TEST_CASE("mla_decode replays from a CUDA graph with new lengths and values",
          "[gpu][mla_decode][graph]") {
  if (!test::gpu_or_skip()) return;
  const driver::Api& api = driver::api();
  MlaCase c;
  c.heads = 64;
  c.q_len = 2;
  c.lens = {2500, 2500, 2500, 2500};  // capacity; every replay draws lengths within it
  c.spare_pages = 8;
  const MlaDecodeConfig cfg = config_for(c);
  MlaData d(c);
  const MlaDecodeArgs a = d.args(true);
  // Planned before the capture (nothing may compile, load or allocate inside it); the
  // heuristic reads the capacity, so the grid is fixed whatever lengths a replay brings.
  const MlaDecodePlan plan = mla_decode_plan(mla_decode_shape(a), &cfg);
  const int splits = plan.num_splits;
  DeviceBuffer workspace(plan.workspace_bytes);
  const Workspace ws{plan.workspace_bytes ? workspace.data() : nullptr, plan.workspace_bytes};

  CUstream stream;
  ATTNJIT_CU(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
  ATTNJIT_CU(cuStreamBeginCapture, stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
  mla_decode_schedule(plan, a, ws, stream);
  mla_decode(a, plan, ws, stream);
  CUgraph graph;
  ATTNJIT_CU(cuStreamEndCapture, stream, &graph);
  CUgraphExec exec;
  ATTNJIT_CU(cuGraphInstantiate, &exec, graph, 0);

  const std::vector<std::vector<int>> rounds = {
      {2500, 0, 1, 1999},
      {64, 2437, 3, 1000},
      {rand_in(0, 2500), rand_in(0, 2500), rand_in(0, 2500), 2500},
  };
  for (size_t round = 0; round < rounds.size(); ++round) {
    // New lengths, table and values in the same device buffers: the graph holds pointers.
    d.refill(rounds[round]);
    d.poison_outputs();
    workspace.fill_byte(0xFF);
    ATTNJIT_CU(cuGraphLaunch, exec, stream);
    ATTNJIT_CU(cuStreamSynchronize, stream);
    RunResult r;
    r.out = d.download_out();
    r.lse = d.download_lse();
    r.splits = splits;
    judge(d, test::mla_reference(d.problem()), r,
          fmt::format("graph replay {} lens [{}]", round, fmt::join(rounds[round], ",")));
  }
  // Only the lengths change on the device before this replay (values and table stay,
  // every new length within the old one so its pages are all in the table): the graph
  // must follow the new lengths, not remember the old ones.
  const std::vector<int>& last = rounds.back();
  const std::vector<int32_t> shorter = {last[0] / 3, last[1], 0, std::min(7, last[3])};
  ATTNJIT_CU(cuMemcpyHtoD, d.lens_buffer().ptr(), shorter.data(), shorter.size() * 4);
  d.poison_outputs();
  ATTNJIT_CU(cuGraphLaunch, exec, stream);
  ATTNJIT_CU(cuStreamSynchronize, stream);
  {
    MlaProblem p = d.problem();
    // The rows past the new lengths hold values, not NaN: that is fine, they must simply
    // not count. The reference reads only the new visible rows.
    p.cache_lens = shorter;
    RunResult r;
    r.out = d.download_out();
    r.lse = d.download_lse();
    r.splits = splits;
    const MlaReference ref = test::mla_reference(p);
    const MlaComparison cmp = test::mla_compare(p, ref, r.out, r.lse);
    fmt::print("mla_decode [graph replay, lengths changed on the device]: {}\n", cmp.summary());
    INFO(cmp.summary());
    CHECK(cmp.passed);
  }
  api.cuGraphExecDestroy(exec);
  api.cuGraphDestroy(graph);
  api.cuStreamDestroy(stream);
}

TEST_CASE("mla_decode with the softmax-warpgroup schedule", "[gpu][mla_decode]") {
  if (!test::gpu_or_skip()) return;
  // The other schedule (one softmax warpgroup feeding two P·V warpgroups) over the edges of
  // the default test: every head count and q_len, empty, L < q_len, partial pages, splits.
  std::vector<MlaCase> cases;
  std::vector<MlaDecodeConfig> configs;
  for (int h : {8, 12, 16, 32, 64, 128})
    for (int q_len : {1, 2, 8}) {
      MlaCase c;
      c.heads = h;
      c.q_len = q_len;
      c.lens = {0, 1, q_len > 1 ? q_len - 1 : 2, 64, 130, rand_in(300, 1000)};
      cases.push_back(c);
      MlaDecodeConfig cfg = config_for(c);
      cfg.schedule = MlaSchedule::kSoftmaxWarpgroup;
      configs.push_back(cfg);
    }
  prepare_all(configs);
  for (size_t i = 0; i < cases.size(); ++i) {
    check_case(cases[i], 0, 0, &configs[i]);
    check_case(cases[i], 3, 0, &configs[i]);
  }
}

TEST_CASE("mla_decode with 32-key tiles and a 4-stage ring", "[gpu][mla_decode]") {
  if (!test::gpu_or_skip()) return;
  // The other tile shape the config space allows (softmax_wg schedule): half the keys per
  // tile, twice the stages in the same shared memory. Same edges: empty, L < q_len,
  // partial tiles and pages.
  for (int h : {16, 128})
    for (int q_len : {1, 2, 8})
      for (int page : {16, 64}) {
        MlaCase c;
        c.heads = h;
        c.q_len = q_len;
        c.page_size = page;
        c.lens = {0, 1, q_len > 1 ? q_len - 1 : 2, 31, 33, 64, rand_in(300, 2000)};
        MlaDecodeConfig cfg = config_for(c);
        cfg.schedule = MlaSchedule::kSoftmaxWarpgroup;
        cfg.block_n = 32;
        cfg.stages = 4;
        check_case(c, 0, 0, &cfg);
        check_case(c, 3, 0, &cfg);  // split edges off the tile grid
      }
}

// out_scale: the seesaw kernel's epilogue and the combine write e4m3 codes and σ per 128
// columns instead of bf16 — exactly what the branch's projection would make of the bf16
// output (common/act_quant.cuh), so both are checked against the host quantization of the
// bf16 run, code for code and σ bit for bit: unsplit, static splits and balanced, empty
// sequences (σ 0, codes 0) and the poison of codes and scales overwritten everywhere.
TEST_CASE("mla_decode's e4m3 output is the per-group quantization of its bf16 output", "[gpu][mla_decode]") {
  if (!test::gpu_or_skip()) return;
  MlaCase c;
  c.heads = 64;
  c.q_len = 2;
  c.lens = {0, 1, 777, 3000, 64};
  const MlaDecodeConfig cfg = config_for(c);
  REQUIRE(cfg.schedule == MlaSchedule::kSeesaw);
  MlaData d(c);
  const int64_t b = c.batch(), ql = c.q_len, h = c.heads, rows = b * ql * h;
  for (int splits : {1, 3, 0}) {
    INFO(fmt::format("{} num_splits {}", c.describe(), splits));
    RunOptions o;
    o.config = &cfg;
    o.num_splits = splits;
    const RunResult bf = run_mla(d, o);

    MlaDecodeArgs a = d.args(true);
    DeviceBuffer codes_d(static_cast<size_t>(rows) * test::kMlaVDim), scales_d(static_cast<size_t>(rows) * 4 * 4);
    codes_d.fill_byte(0x7F);  // e4m3 NaN, and a NaN σ
    scales_d.fill_byte(0xFF);
    a.out = TensorView::contiguous(codes_d.data(), DType::kE4M3, {b, ql, h, test::kMlaVDim});
    a.out_scale = TensorView::contiguous(scales_d.data(), DType::kF32, {b, ql, h, 4});
    const MlaDecodePlan plan = plan_mla(a, o);
    DeviceBuffer workspace(plan.workspace_bytes);
    workspace.fill_byte(0xFF);
    const Workspace w{plan.workspace_bytes ? workspace.data() : nullptr, plan.workspace_bytes};
    mla_decode_schedule(plan, a, w, nullptr);
    mla_decode(a, plan, w, nullptr);
    test::synchronize();
    const auto codes = codes_d.download_as<uint8_t>(codes_d.bytes());
    const auto scales = scales_d.download_as<float>(scales_d.bytes() / 4);

    const harness::MlaActCodesCheck k = harness::mla_branch_check_act_codes(bf.out, codes, scales, test::kMlaVDim);
    CHECK(k.bad_sigma == 0);
    CHECK(k.bad_codes == 0);
    // Rows that saw no key: the empty sequence's, and the first token of the 1-key one (its
    // causal limit is key -1): σ 0, codes 0.
    CHECK(k.zero_rows == (ql + 1) * h);
  }
  // The rules: out e4m3 with out_scale, the seesaw schedule only.
  MlaDecodeArgs a = d.args(false);
  DeviceBuffer scales_d(static_cast<size_t>(rows) * 16);
  a.out_scale = TensorView::contiguous(scales_d.data(), DType::kF32, {b, ql, h, 4});
  REQUIRE_ERROR(mla_decode(a, nullptr, &cfg), ErrorKind::kBadArgument, "out", "e4m3");  // out is bf16
  MlaDecodeConfig softmax_wg = cfg;
  softmax_wg.schedule = MlaSchedule::kSoftmaxWarpgroup;
  DeviceBuffer codes_d(static_cast<size_t>(rows) * test::kMlaVDim);
  a.out = TensorView::contiguous(codes_d.data(), DType::kE4M3, {b, ql, h, test::kMlaVDim});
  REQUIRE_ERROR(mla_decode(a, nullptr, &softmax_wg), ErrorKind::kBadArgument, "out_scale", "seesaw");
}
