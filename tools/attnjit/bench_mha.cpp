// `attnjit bench mha_fwd`: median µs and TFLOP/s of mha_fwd on the rows (seq 1k,
// 4k, 8k, 16k with batch·seq = 32k tokens, hidden 2048 so h = 2048/dv, d 64/128/256 and
// (192, 128), causal and not; plus a GQA-8 decode row). Each row is first checked against
// the float64 reference on sampled rows plus a whole-output scan for poison: a wrong
// kernel's speed is never printed. The PyTorch peers (cuDNN and flash SDPA) run in the
// same GPU-script call (tools/bench_mha_torch.py).
//
// FLOPs (DESIGN.md): 2 · Σ over (row, head) of the keys it sees · (d + dv); bytes (decode
// row) = K and V read once + q + out. Timing: warm-up, CUDA events per call, median;
// inputs are rotated over copies when one copy would fit in a few L2s.
#include <fmt/format.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/ops/mha_fwd.hpp"
#include "bench_util.hpp"
#include "cli.hpp"
#include "driver/driver.hpp"
#include "harness/mha_problem.hpp"

namespace attnjit::cli {

namespace {

using harness::MhaFwdCase;
using harness::MhaFwdProblem;

bool bench_shape(const MhaFwdCase& s, const BenchOptions& o, const driver::DeviceInfo& dev) {
  // Enough input copies that consecutive calls never find theirs in L2.
  MhaFwdProblem problem(s, 0x6D6861u + static_cast<uint64_t>(s.s_k) * 31 + static_cast<uint64_t>(s.d),
                        dev.l2_bytes);
  MhaFwdConfig config = mha_fwd_default_config(s.features());
  const MhaFwdConfig heuristic = config;
  // --config overrides fields of the row's default config (e.g. {"block_n":176,"stages":3}).
  if (!o.config.empty()) {
    nlohmann::json merged = nlohmann::json::parse(config.to_json());
    try {
      merged.update(nlohmann::json::parse(o.config));
    } catch (const nlohmann::json::exception& e) {
      fail_arg("--config", fmt::format("not a JSON object: {}", e.what()));
    }
    config = MhaFwdConfig::from_json(merged.dump());
  }
  // What an engine does: plan once for the batch shape (compiles or loads the kernels,
  // untimed), then time the per-layer run. Without --config the plan picks what the runtime
  // picks (the tuning database's tile for this bucket on this GPU, else the heuristic's), so
  // that is what gets measured.
  const MhaFwdShape shape = problem.shape(config);
  const MhaFwdPlan plan = mha_fwd_plan(shape, o.config.empty() ? nullptr : &config);
  config = plan.config;
  const int splits = plan.num_splits;
  Buffer workspace(plan.workspace_bytes);
  const Workspace ws{plan.workspace_bytes ? workspace.data() : nullptr, plan.workspace_bytes};
  mha_fwd_schedule(plan, problem.args(0), ws, nullptr);
  auto call = [&](int set) { mha_fwd(problem.args(set), plan, ws, nullptr); };

  // Correctness first: sampled rows against float64, the whole output's structure.
  problem.poison_output();
  call(0);
  const harness::MhaComparison check = problem.check(16);
  const double flops = problem.flops();
  const double bytes = problem.bytes();

  nlohmann::ordered_json j;
  j["op"] = "mha_fwd";
  j["gpu"] = dev.name;
  j["commit"] = commit();
  nlohmann::ordered_json shape_json = s.to_json();
  shape_json.erase("splits");  // the bench row's key (tools/ab_table.py pairs rows by it)
  j["shape"] = shape_json;
  j["config"] = nlohmann::json::parse(config.to_json());
  j["config_source"] = !o.config.empty() ? "--config" : (config == heuristic ? "heuristic" : "tuning_db");
  j["num_splits"] = splits;
  j["check"] = {{"passed", check.passed},
                {"rel_l2", check.rel_l2},
                {"worst_row_err", check.worst_row_err},
                {"rows_checked", check.checked_rows}};
  if (!check.passed) {
    if (o.json) {
      j["error"] = check.summary();
      fmt::print("{}\n", j.dump());
    } else {
      fmt::print("mha_fwd {}: WRONG RESULT, not timed: {}\n", s.describe(), check.summary());
    }
    return false;
  }

  const double ms = median_ms(o.warmup, o.iters, [&](int i) { call(i % problem.copies()); });
  const double us = ms * 1e3;
  const double tflops = flops / (ms * 1e-3) / 1e12;
  const double gbps = bytes / (ms * 1e-3) / 1e9;
  if (o.json) {
    j["median_us"] = us;
    j["flops"] = flops;
    j["tflops"] = tflops;
    j["bytes"] = bytes;
    j["gbps"] = gbps;
    j["input_sets"] = problem.copies();
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("  {:<46} splits {:>3}  {:9.1f} us  {:6.1f} TFLOP/s  {:7.1f} GB/s  check rel_l2 {:.1e}\n",
               s.describe(), splits, us, tflops, gbps, check.rel_l2);
  }
  return true;
}

}  // namespace

int bench_mha_fwd(const BenchOptions& o) {
  const std::vector<MhaFwdCase> shapes =
      o.shape.empty() ? harness::mha_fwd_bench_cases()
                      : std::vector<MhaFwdCase>{harness::mha_fwd_case(parse_shape_json(o.shape))};
  driver::use_device(0);
  const driver::DeviceInfo& dev = driver::cached_device_info(0);
  if (!o.json) fmt::print("mha_fwd on {} (commit {})\n", dev.name, commit());
  bool all_ok = true;
  for (const MhaFwdCase& s : shapes) all_ok = bench_shape(s, o, dev) && all_ok;
  return all_ok ? 0 : 1;
}

}  // namespace attnjit::cli
