// `attnjit bench mla_decode`: median µs, GB/s and TFLOP/s of mla_decode (combine
// included) on the shapes, with the device-to-device copy rate measured in the
// same run. Each shape is first checked against the float64 reference on sampled rows
// (plus a whole-output scan for poison and empty rows): a wrong kernel's speed is never
// printed.
//
// Conventions (DESIGN.md): bytes = cache rows read once (Σ_b L_b · 576 · 2) + q + out;
// FLOPs = 2 · pairs · (576 + 512), pairs = Σ over rows of the keys each row sees (causal for
// q_len > 1). Timing: warm-up, CUDA events per call, median; the working set is rotated
// over several copies when one copy would fit in a few L2s.
#include <fmt/format.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/ops/mla_decode.hpp"
#include "bench_util.hpp"
#include "cli.hpp"
#include "driver/driver.hpp"
#include "harness/mla_problem.hpp"

namespace attnjit::cli {

namespace {

using harness::MlaDecodeCase;
using harness::MlaDecodeProblem;

// DESIGN.md's targets on the H100: h = 16 memory-bound, h = 128 with q_len = 2 compute-bound.
nlohmann::ordered_json target_of(const MlaDecodeCase& s) {
  if (s.h == 16) return {{"metric", "gbps"}, {"h100", 2700}};
  if (s.h == 128 && s.q_len == 2) return {{"metric", "tflops"}, {"h100", 600}};
  return nullptr;
}

double copy_ceiling_gbps(int warmup, int iters) {
  const size_t bytes = size_t{1} << 30;
  Buffer a(bytes), b(bytes);
  ATTNJIT_CU(cuMemsetD8Async, a.ptr(), 1, bytes, nullptr);
  const double ms = median_ms(
      warmup, iters, [&](int) { ATTNJIT_CU(cuMemcpyDtoDAsync, b.ptr(), a.ptr(), bytes, nullptr); });
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;  // read + write
}

bool bench_shape(const MlaDecodeCase& s, const BenchOptions& o, const driver::DeviceInfo& dev,
                 double copy_gbps) {
  // Enough input copies that consecutive calls never find theirs in L2.
  MlaDecodeProblem problem(s, 0x6D6C61u + static_cast<uint64_t>(s.b) * 31 + static_cast<uint64_t>(s.s_k),
                                 dev.l2_bytes);
  const MlaDecodeConfig default_config = mla_decode_default_config(s.dtype, s.h, s.q_len, s.page);
  // --config overrides fields of the shape's default config (e.g. {"block_n":32,"stages":4}),
  // so one override applies to every shape of the list.
  MlaDecodeConfig given = default_config;
  if (!o.config.empty()) {
    nlohmann::json merged = nlohmann::json::parse(default_config.to_json());
    try {
      merged.update(nlohmann::json::parse(o.config));
    } catch (const nlohmann::json::exception& e) {
      fail_arg("--config", fmt::format("not a JSON object: {}", e.what()));
    }
    given = MlaDecodeConfig::from_json(merged.dump());
  }
  // No --config: pass nullptr, i.e. measure what a caller gets from the runtime.
  const MlaDecodeConfig* config = o.config.empty() ? nullptr : &given;

  // What an engine does: plan once for the batch shape (compiles or loads the kernels,
  // untimed), then time the per-layer run with a workspace it owns.
  const MlaDecodePlan plan = mla_decode_plan(problem.shape(), config);
  const int splits = plan.num_splits;
  Buffer workspace(plan.workspace_bytes);
  const Workspace ws{plan.workspace_bytes ? workspace.data() : nullptr, plan.workspace_bytes};
  mla_decode_schedule(plan, problem.args(0), ws, nullptr);
  auto call = [&](int set) { mla_decode(problem.args(set), plan, ws, nullptr); };

  // Correctness first: sampled rows against float64, the whole output's structure.
  problem.poison_output();
  call(0);
  const harness::MlaComparison check = problem.check(16);
  const double bytes = problem.bytes();
  const double flops = problem.flops();

  nlohmann::ordered_json j;
  j["op"] = "mla_decode";
  j["gpu"] = dev.name;
  j["commit"] = commit();
  j["shape"] = s.to_json();
  j["config"] = nlohmann::json::parse(given.to_json());
  j["config_source"] = o.config.empty() ? "runtime (default shown)" : "--config";
  j["num_splits"] = splits;
  j["check"] = {{"passed", check.passed},
                {"rel_l2", check.rel_l2},
                {"worst_row_err", check.worst_row_err},
                {"rows_checked", check.checked_rows}};
  if (!check.passed) {
    // Never time (or print a speed for) a kernel that computes the wrong thing.
    if (o.json) {
      j["error"] = check.summary();
      fmt::print("{}\n", j.dump());
    } else {
      fmt::print("mla_decode {}: WRONG RESULT, not timed: {}\n", s.describe(), check.summary());
    }
    return false;
  }

  const double ms = median_ms(o.warmup, o.iters, [&](int i) { call(i % problem.copies()); });
  const double us = ms * 1e3;
  const double gbps = bytes / (ms * 1e-3) / 1e9;
  const double tflops = flops / (ms * 1e-3) / 1e12;
  if (o.json) {
    j["median_us"] = us;
    j["bytes"] = bytes;
    j["flops"] = flops;
    j["gbps"] = gbps;
    j["tflops"] = tflops;
    j["copy_gbps"] = copy_gbps;
    j["ratio_to_copy"] = gbps / copy_gbps;
    j["target"] = target_of(s);
    j["input_sets"] = problem.copies();
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print(
        "  {:<44} splits {:>3}  {:9.1f} us  {:7.1f} GB/s ({:4.0f}% of copy)  {:6.1f} TFLOP/s"
        "  check rel_l2 {:.1e}\n",
        s.describe(), splits, us, gbps, 100.0 * gbps / copy_gbps, tflops, check.rel_l2);
  }
  return true;
}

}  // namespace

int bench_mla_decode(const BenchOptions& o) {
  const std::vector<MlaDecodeCase> shapes =
      o.shape.empty() ? harness::mla_decode_bench_cases()
                      : std::vector<MlaDecodeCase>{harness::mla_decode_case(parse_shape_json(o.shape))};
  driver::use_device(0);
  const driver::DeviceInfo& dev = driver::cached_device_info(0);
  const double copy_gbps = copy_ceiling_gbps(o.warmup, o.iters);
  if (o.json) {
    nlohmann::ordered_json j;
    j["op"] = "ceiling";
    j["kind"] = "copy";
    j["gpu"] = dev.name;
    j["commit"] = commit();
    j["gbps"] = copy_gbps;
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("mla_decode on {} (commit {}); device-to-device copy {:.1f} GB/s\n", dev.name,
               commit(), copy_gbps);
  }
  bool all_ok = true;
  for (const MlaDecodeCase& s : shapes) all_ok = bench_shape(s, o, dev, copy_gbps) && all_ok;
  return all_ok ? 0 : 1;
}

}  // namespace attnjit::cli
