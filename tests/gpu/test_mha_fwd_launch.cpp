// mha_fwd on the GPU, launch forms: three consumer warpgroups (block_m 192), the persistent
// launch, every split count, lse on and off, long sequences (sampled rows) and CUDA-graph
// replays. The cases, data and judgement are in mha_fwd_cases.hpp; numerics over head
// dims, masks and layouts in test_mha_fwd.cpp.
#include <functional>
#include <vector>

#include "gpu/mha_fwd_cases.hpp"
#include "support/catch.hpp"
#include "support/gpu.hpp"

using namespace attnjit;
using namespace attnjit::test::mha_gpu;
using test::DeviceBuffer;
using test::MhaComparison;
using test::MhaProblem;
using test::MhaReference;

// The cases a tile variant is checked on, `tile` (head dims, tile, launch) applied to each:
// every mask over ragged edge lengths, `padded()` under none and causal, then paged KV,
// packed GQA 8 (decode-like rows) and a 4099-key row (add_layout_cases: returns the packed
// case's index).
using TileSetter = std::function<void(MhaCase&)>;
void add_tile_cases(std::vector<MhaCase>& cases, const TileSetter& tile,
                      const std::function<MhaCase()>& padded) {
  auto add = [&](MhaCase c, MaskKind mask) {
    c.mask = mask;
    tile(c);
    cases.push_back(c);
  };
  const auto lens = edge_lens();
  for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausal}) {
    add(ragged_case(lens.first, lens.second), mask);
    add(padded(), mask);
  }
  MhaCase w = ragged_case(lens.first, lens.second);
  w.window_left = rand_in(20, 300);
  w.window_right = rand_in(0, 60);
  add(w, MaskKind::kWindow);
  MhaCase ch = ragged_case(lens.first, lens.second);
  ch.chunk = rand_in(50, 200);
  add(ch, MaskKind::kChunked);
}
size_t add_layout_cases(std::vector<MhaCase>& cases, const TileSetter& tile) {
  MhaCase paged = paged_case(true, 64, {1, 700, 0, 33}, {1, 900, 5, 2000});
  paged.mask = MaskKind::kCausal;
  MhaCase packed = padded_case(3, 37, 1500);  // 37 positions × 8 heads = 296 rows
  packed.h_q = 16;
  packed.h_kv = 2;
  packed.group = 8;
  packed.mask = MaskKind::kCausal;
  MhaCase long_row = padded_case(1, 4099, 4099);
  long_row.h_q = long_row.h_kv = 8;
  for (MhaCase* c : {&paged, &packed, &long_row}) {
    tile(*c);
    cases.push_back(*c);
  }
  return cases.size() - 2;
}

// block_m 192: three consumer warpgroups taking turns round-robin (the d64 tile). Every
// mask over ragged edge lengths, paged KV, packed GQA, splits and a long sequence.
TEST_CASE("mha_fwd with three consumer warpgroups (block_m 192)", "[gpu][mha_fwd][block_m]") {
  if (!test::gpu_or_skip()) return;
  std::vector<MhaCase> cases;
  for (auto [d, block_n] : {std::pair{64, 128}, {64, 64}, {128, 80}})
    add_tile_cases(
        cases,
        [d = d, block_n = block_n](MhaCase& c) {
          c.d = c.dv = d;
          c.block_m = 192;
          c.block_n = block_n;
        },
        [] { return padded_case(2, odd_in(300, 700), odd_in(300, 900)); });
  const size_t packed = add_layout_cases(cases, [](MhaCase& c) {
    c.d = c.dv = 64;
    c.block_m = 192;
    c.block_n = 128;
  });
  prepare_cases(cases);
  for (const auto& c : cases) check_case(c);
  RunOptions o;
  o.num_splits = 3;
  check_case(cases[packed], o);
  check_case(cases[0], o);
}

// Persistent launch: CTAs walk several units each (up to 132 CTAs over hundreds of row
// blocks), causal row blocks in (long, short) pairs with a lone middle one when the count is
// odd, Q double-buffered (d64, d128) or not (d192, d256), units without keys or rows.
TEST_CASE("mha_fwd persistent launch", "[gpu][mha_fwd][persistent]") {
  if (!test::gpu_or_skip()) return;
  std::vector<MhaCase> cases;
  for (auto [d, dv, block_n] : {std::tuple{64, 64, 192}, {128, 128, 128}, {256, 256, 80},
                                {192, 128, 128}})
    add_tile_cases(
        cases,
        [d = d, dv = dv, block_n = block_n](MhaCase& c) {
          c.d = d;
          c.dv = dv;
          c.block_n = block_n;
          c.persistent = true;
        },
        [] {
          // 4 sequences × 16 heads × 5 row blocks (odd: a lone middle block under causal):
          // 320 units, 192 causal items, more than one per CTA either way.
          MhaCase many = padded_case(4, 5 * 128 - odd_in(1, 60), odd_in(600, 900));
          many.h_q = 16;
          many.h_kv = 4;
          return many;
        });
  const size_t packed = add_layout_cases(cases, [](MhaCase& c) {
    c.block_n = 128;
    c.persistent = true;
  });
  prepare_cases(cases);
  for (const auto& c : cases) check_case(c);
  RunOptions o;
  o.num_splits = 3;
  check_case(cases[packed], o);
  check_case(cases[0], o);
  check_case(cases[1], o);
}

TEST_CASE("mha_fwd gives the same answer for every split count", "[gpu][mha_fwd]") {
  if (!test::gpu_or_skip()) return;
  std::vector<MhaCase> cases;
  for (double scale : {0.0, 0.35}) {  // 0.35: a very peaked softmax across splits
    MhaCase p = paged_case(false, 64, {2, 2, 2, 2}, {0, 1, 777, 3000});
    p.h_q = 16;
    p.h_kv = 2;
    p.mask = MaskKind::kCausal;
    p.scale = scale;
    cases.push_back(p);
    auto [ql, kl] = edge_lens();
    MhaCase r = ragged_case(ql, kl);
    r.mask = MaskKind::kCausalWindow;
    r.window_left = rand_in(100, 400);
    r.sink = SinkKind::kSpecial;
    r.scale = scale;
    cases.push_back(r);
    MhaCase s = padded_case(2, 5, 300);  // every sequence within 3 KV tiles
    s.mask = MaskKind::kChunked;
    s.chunk = 100;
    s.scale = scale;
    cases.push_back(s);
  }
  prepare_cases(cases);
  for (const auto& c : cases) {
    INFO(c.describe());
    const MhaFwdConfig cfg = config_for(c);
    MhaData d(c);
    const MhaReference ref = reference_for(d.problem());
    const int longest = *std::max_element(c.k_lens.begin(), c.k_lens.end());
    const int tiles = ceil_div(longest, cfg.block_n);
    for (int splits : {1, 2, 3, 7, tiles + 5, 0}) {  // tiles + 5: more splits than KV tiles
      RunOptions o;
      o.num_splits = splits;
      judge(d, ref, run_mha(d, cfg, o),
            fmt::format("{} num_splits {}", c.describe(), splits == 0 ? "heuristic" : std::to_string(splits)));
    }
  }
}

TEST_CASE("mha_fwd lse is optional and does not change out", "[gpu][mha_fwd]") {
  if (!test::gpu_or_skip()) return;
  auto [ql, kl] = edge_lens();
  MhaCase c = ragged_case(ql, kl);
  c.mask = MaskKind::kCausal;
  c.sink = SinkKind::kRandom;
  const MhaFwdConfig cfg = config_for(c);
  MhaData d(c);
  const MhaReference ref = reference_for(d.problem());
  for (int splits : {1, 4}) {
    RunOptions o;
    o.num_splits = splits;
    const RunResult with = run_mha(d, cfg, o);
    o.want_lse = false;
    const RunResult without = run_mha(d, cfg, o);
    judge(d, ref, with, c.describe() + " with lse");
    judge(d, ref, without, c.describe() + " without lse");
    CHECK(std::memcmp(with.out.data(), without.out.data(), with.out.size() * sizeof(float)) == 0);
    // Not requested: the poisoned lse buffer must be left exactly as it was.
    const std::vector<float> lse_after = d.download_lse();
    const std::vector<uint8_t> poison(lse_after.size() * sizeof(float), 0xFF);
    CHECK(std::memcmp(lse_after.data(), poison.data(), poison.size()) == 0);
  }
}

TEST_CASE("mha_fwd on long sequences (sampled rows)", "[gpu][mha_fwd]") {
  if (!test::gpu_or_skip()) return;
  std::vector<MhaCase> cases;
  MhaCase prefill = padded_case(1, 8192, 8192);  // hidden 2048 = 16 heads × 128
  prefill.h_q = 16;
  prefill.h_kv = 4;
  prefill.mask = MaskKind::kCausal;
  cases.push_back(prefill);
  MhaCase ragged = ragged_case({3001, 0, 513}, {9001, 5, 700});  // neither a tile multiple
  ragged.h_q = 8;
  ragged.h_kv = 8;
  ragged.mask = MaskKind::kWindow;
  ragged.window_left = 2000;
  ragged.window_right = 100;
  cases.push_back(ragged);
  MhaCase decode = paged_case(false, 64, {1, 1, 1, 1}, {20011, 0, 131, 16384});
  decode.h_q = 32;
  decode.h_kv = 4;
  decode.group = 8;
  decode.max_seqlen_k = 0;  // the table's capacity bounds the split heuristic
  cases.push_back(decode);
  MhaCase d256 = padded_case(1, 2048, 9000);  // d 256, s_q < s_k
  d256.d = d256.dv = 256;
  d256.h_q = 8;
  d256.h_kv = 1;
  d256.mask = MaskKind::kCausal;
  cases.push_back(d256);
  prepare_cases(cases);
  for (const auto& c : cases) check_case(c);  // heuristic split counts
}

TEST_CASE("mha_fwd replays from a CUDA graph with new kv_lens and values",
          "[gpu][mha_fwd][graph]") {
  if (!test::gpu_or_skip()) return;
  const driver::Api& api = driver::api();
  MhaCase c = paged_case(false, 64, {2, 2, 2, 2}, {2500, 2500, 2500, 2500});  // capacity
  c.h_q = 8;
  c.h_kv = 2;
  c.mask = MaskKind::kCausal;
  c.max_seqlen_k = 0;  // heuristic from the capacity: a fixed grid
  c.spare_pages = 8;
  const MhaFwdConfig cfg = config_for(c);
  MhaData d(c);
  const MhaFwdArgs a = d.args(true);
  // Planned before the capture: nothing may compile, load or allocate inside it.
  const MhaFwdPlan plan = plan_mha(a, cfg, 0);
  const int splits = plan.num_splits;
  DeviceBuffer workspace(plan.workspace_bytes);
  const Workspace ws{plan.workspace_bytes ? workspace.data() : nullptr, plan.workspace_bytes};

  CUstream stream;
  ATTNJIT_CU(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
  ATTNJIT_CU(cuStreamBeginCapture, stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
  mha_fwd_schedule(plan, a, ws, stream);
  mha_fwd(a, plan, ws, stream);
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
    judge(d, test::mha_reference(d.problem()), r,
          fmt::format("graph replay {} kv_lens [{}]", round, fmt::join(rounds[round], ",")));
  }
  // Only kv_lens change on the device before this replay (values and table stay, every new
  // length within the old one so its pages are all in the table): the graph must follow
  // the new lengths, not remember the old ones.
  const std::vector<int>& last = rounds.back();
  const std::vector<int32_t> shorter = {last[0] / 3, last[1], 0, std::min(7, last[3])};
  ATTNJIT_CU(cuMemcpyHtoD, d.kv_lens_buffer().ptr(), shorter.data(), shorter.size() * 4);
  d.poison_outputs();
  ATTNJIT_CU(cuGraphLaunch, exec, stream);
  ATTNJIT_CU(cuStreamSynchronize, stream);
  {
    MhaProblem p = d.problem();
    // The rows past the new lengths hold values, not NaN: that is fine, they must simply
    // not count. The reference reads only the new visible rows.
    p.k_lens = std::vector<int>(shorter.begin(), shorter.end());
    const MhaReference ref = test::mha_reference(p);
    const MhaComparison cmp = test::mha_compare(p, ref, d.download_out(), d.download_lse());
    fmt::print("mha_fwd [graph replay, kv_lens changed on the device]: {}\n", cmp.summary());
    INFO(cmp.summary());
    CHECK(cmp.passed);
  }
  api.cuGraphExecDestroy(exec);
  api.cuGraphDestroy(graph);
  api.cuStreamDestroy(stream);
}
