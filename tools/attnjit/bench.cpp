// `attnjit bench` and `attnjit demo`. Timing rules (METHOD): warm up first, time each
// launch with CUDA events, report the median, keep the working set out of L2 by
// rotating buffers, and measure the machine's own ceiling (cuMemcpyDtoD) in the same run.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/ops/tma_copy.hpp"
#include "attnjit/tma.hpp"
#include "attnjit_commit.h"  // ATTNJIT_GIT_COMMIT, stamped at every build (cmake/write_commit.cmake)
#include "bench_util.hpp"
#include "cli.hpp"
#include "driver/driver.hpp"
#include "harness/problem.hpp"
#include "jit/embedded.hpp"
#include "jit/kernel_table.hpp"
#include "jit/key_record.hpp"
#include "ops/registry.hpp"

namespace attnjit::cli {

std::string commit() {
  if (const char* c = std::getenv("ATTNJIT_COMMIT"); c && *c) return c;
  return ATTNJIT_GIT_COMMIT;
}

std::string templates_digest() {
  static const std::string digest = jit::embedded_headers_hash(jit::embedded_templates()).substr(0, 12);
  return digest;
}

namespace {

struct Context {
  driver::DeviceInfo info;
};
Context init_gpu() {
  driver::use_device(0);
  return Context{driver::cached_device_info(0)};
}

// The machine's own ceiling: a 1 GiB device-to-device copy (read + write).
double copy_ceiling_gbps(int warmup, int iters) {
  const size_t bytes = size_t{1} << 30;
  Buffer a(bytes), b(bytes);
  ATTNJIT_CU(cuMemsetD8Async, a.ptr(), 1, bytes, nullptr);
  const double ms = median_ms(
      warmup, iters, [&](int) { ATTNJIT_CU(cuMemcpyDtoDAsync, b.ptr(), a.ptr(), bytes, nullptr); });
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
}

// A row's inputs follow from the row alone (64-bit FNV-1a of its case), not from its place
// in a list: one row benched alone or in a list, by either binary of an A/B, sees the same
// inputs.
uint64_t case_seed(const std::string& case_text) {
  uint64_t h = 14695981039346656037ull;
  for (char c : case_text) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

// One row: build the case (enough input copies that consecutive calls never find theirs in
// L2), plan as an engine would (untimed: compiles or loads the kernels), check the output
// against the reference, then time the per-layer run. A wrong kernel's speed is never
// printed.
bool bench_case(const harness::ProblemKind& kind, const nlohmann::json& shape, const BenchOptions& o,
                const driver::DeviceInfo& dev, double copy_gbps) {
  const std::unique_ptr<harness::Problem> problem =
      kind.make(shape, o.seed ? o.seed : case_seed(shape.dump()), static_cast<size_t>(dev.l2_bytes));
  nlohmann::json overrides;
  if (!o.config.empty()) {
    overrides = nlohmann::json::parse(o.config, nullptr, false);
    if (!overrides.is_object()) fail_arg("--config", fmt::format("not a JSON object: {}", o.config));
  }
  const harness::Prepared run = problem->prepare(o.config.empty() ? nullptr : &overrides);
  problem->poison_output();
  run.run(0);
  const harness::Verdict check = problem->check(16);

  nlohmann::ordered_json j;
  j["op"] = kind.op;
  j["gpu"] = dev.name;
  j["commit"] = commit();
  j["templates"] = templates_digest();
  j["shape"] = problem->case_json();
  j["config"] = run.config;
  j["config_source"] = run.config_source;
  j["num_splits"] = run.num_splits;
  j["check"] = check.numbers;
  if (!check.passed) {
    if (o.json) {
      j["error"] = check.summary;
      fmt::print("{}\n", j.dump());
    } else {
      fmt::print("  {}: WRONG RESULT, not timed: {}\n", problem->describe(), check.summary);
    }
    return false;
  }
  const double ms = median_ms(o.warmup, o.iters, [&](int i) { run.run(i); });
  // The same call inside a captured step: enough calls per graph that a replay runs ~2 ms
  // (2 … 32), the median replay divided by them.
  const int graph_calls = std::clamp(static_cast<int>(2.0 / ms), 2, 32);
  const double graph_ms = graph_median_ms(graph_calls, 2, o.iters, run.enqueue);
  // The per-step schedule on its own (a step pays it once, then one run per layer).
  const double schedule_ms = run.schedule ? median_ms(o.warmup, o.iters, [&](int) { run.schedule(); }) : 0.0;
  const double bytes = problem->bytes(), flops = problem->flops();
  const double gbps = bytes / (ms * 1e-3) / 1e9;
  const double tflops = flops / (ms * 1e-3) / 1e12;
  if (o.json) {
    j["median_us"] = ms * 1e3;  // one layer's call
    if (run.schedule) {
      j["schedule_us"] = schedule_ms * 1e3;
      // A DeepSeek-V3 step: the schedule once, then 61 layers' calls.
      j["step_us_61_layers"] = (schedule_ms + 61 * ms) * 1e3;
    }
    j["bytes"] = bytes;
    j["flops"] = flops;
    j["gbps"] = gbps;
    j["tflops"] = tflops;
    j["copy_gbps"] = copy_gbps;
    j["ratio_to_copy"] = gbps / copy_gbps;
    j["graph_us"] = graph_ms * 1e3;  // one call among graph_calls in a replayed CUDA graph
    j["graph_calls"] = graph_calls;
    j["graph_gbps"] = bytes / (graph_ms * 1e-3) / 1e9;
    j["graph_tflops"] = flops / (graph_ms * 1e-3) / 1e12;
    j["graph_ratio_to_copy"] = bytes / (graph_ms * 1e-3) / 1e9 / copy_gbps;
    j["target"] = problem->target();
    j["input_sets"] = problem->copies();
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("  {:<46} splits {:>3}  {:9.1f} us (graph {:.1f})  {:7.1f} GB/s ({:3.0f}% of copy)  {}{}  {}\n",
               problem->describe(), run.num_splits, ms * 1e3, graph_ms * 1e3, gbps, 100.0 * gbps / copy_gbps,
               flops > 0 ? fmt::format("{:6.1f} TFLOP/s", tflops) : std::string(14, ' '),
               run.schedule ? fmt::format("  schedule {:.1f} us/step", schedule_ms * 1e3) : "",
               check.summary);
  }
  return true;
}

// Host cost of an op call over a raw cuLaunchKernelEx of the same kernel. Launches go
// in batches small enough that the GPU queue never fills (a full queue would make the
// host wait for the GPU and hide the host overhead we want to see).
int bench_dispatch(const BenchOptions& o) {
  const Context ctx = init_gpu();
  const int64_t rows = 64, cols = 64;
  const DType dtype = DType::kBF16;
  const TmaCopyConfig config = tma_copy_default_config(dtype);
  Buffer src(rows * cols * 2), dst(rows * cols * 2);
  const TensorView s = TensorView::contiguous(reinterpret_cast<void*>(src.ptr()), dtype, {rows, cols});
  const TensorView d = TensorView::contiguous(reinterpret_cast<void*>(dst.ptr()), dtype, {rows, cols});
  const TmaCopyArgs call{d, s};
  const TmaCopyPlan plan = tma_copy_plan(tma_copy_shape(call), &config);  // compile + load
  tma_copy(call, plan, {}, nullptr);
  ATTNJIT_CU(cuCtxSynchronize);

  // The same kernel, launched raw: maps and args built once, outside the timed loop.
  const ops::OpSpec& op = ops::find_op("tma_copy");
  const Arch arch{ctx.info.cc_major, ctx.info.cc_minor, true};
  const jit::KernelRecipe recipe = op.recipe(nlohmann::json::parse(config.to_json()), arch);
  jit::Kernel raw(jit::compile_recipe(recipe), recipe.dynamic_smem_bytes);
  raw.prepare_current_device();
  TmaMapSpec spec;
  spec.tensor = s;
  // The op's box: one swizzle span wide, or the whole tile row when unswizzled.
  const int box_inner = config.swizzle == Swizzle::kNone
                            ? config.block_n
                            : swizzle_bytes(config.swizzle) / dtype_bytes(dtype);
  spec.box = {static_cast<uint32_t>(config.block_m), static_cast<uint32_t>(box_inner)};
  spec.swizzle = config.swizzle;
  TmaDescriptor sm = encode_tma(spec, "src");
  spec.tensor = d;
  TmaDescriptor dm = encode_tma(spec, "dst");
  int r32 = static_cast<int>(rows), c32 = static_cast<int>(cols);
  void* args[] = {&sm, &dm, &r32, &c32};
  CUlaunchConfig cfg{};
  cfg.gridDimX = 1;
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 32;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.sharedMemBytes = recipe.dynamic_smem_bytes;
  const driver::Api& api = driver::api();

  constexpr int kBatch = 64;
  const int batches = std::max(20, o.iters);
  auto per_call_us = [&](auto&& call) {
    std::vector<double> us;
    for (int b = 0; b < batches + 3; ++b) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kBatch; ++i) call();
      const auto t1 = std::chrono::steady_clock::now();
      ATTNJIT_CU(cuCtxSynchronize);
      if (b >= 3) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / kBatch);
    }
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  };
  const double raw_us = per_call_us([&] {
    driver::check(api.cuLaunchKernelEx(&cfg, reinterpret_cast<CUfunction>(raw.handle()), args, nullptr),
                  "cuLaunchKernelEx");
  });
  // The per-layer run an engine makes with its plan (the one-call form adds the plan).
  const double op_us = per_call_us([&] { tma_copy(call, plan, {}, nullptr); });
  if (o.json) {
    nlohmann::ordered_json j;
    j["op"] = "dispatch";
    j["gpu"] = ctx.info.name;
    j["commit"] = commit();
    j["templates"] = templates_digest();
    j["raw_launch_us"] = raw_us;
    j["op_call_us"] = op_us;
    j["overhead_us"] = op_us - raw_us;
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("dispatch on {}: raw cuLaunchKernelEx {:.3f} us, tma_copy() {:.3f} us, overhead "
               "{:.3f} us per call\n",
               ctx.info.name, raw_us, op_us, op_us - raw_us);
  }
  return 0;
}

}  // namespace

int run_bench(const BenchOptions& o) {
  if (o.op == "dispatch") return bench_dispatch(o);
  const harness::ProblemKind& kind = harness::find_problem(o.op);
  const std::vector<nlohmann::json> cases =
      o.shape.empty() ? kind.bench_cases() : std::vector<nlohmann::json>{parse_shape_json(o.shape)};
  const Context ctx = init_gpu();
  const double copy_gbps = copy_ceiling_gbps(o.warmup, o.iters);
  if (o.json) {
    nlohmann::ordered_json j;
    j["op"] = "ceiling";
    j["kind"] = "copy";
    j["gpu"] = ctx.info.name;
    j["commit"] = commit();
    j["templates"] = templates_digest();
    j["gbps"] = copy_gbps;
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("{} on {} (commit {}, kernel templates {}); device-to-device copy {:.1f} GB/s\n", o.op,
               ctx.info.name, commit(), templates_digest(), copy_gbps);
  }
  bool all_ok = true;
  for (const nlohmann::json& c : cases) all_ok = bench_case(kind, c, o, ctx.info, copy_gbps) && all_ok;
  return all_ok ? 0 : 1;
}

int run_demo() {
  if (!driver::available()) {
    fmt::print("No GPU here ({}).\nCompiling every op's default set instead:\n",
               driver::unavailable_reason());
    int n = 0;
    for (const ops::OpSpec& op : ops::registry())
      for (const Arch& arch : op.archs)
        for (const auto& config : op.default_set()) {
          const jit::CompiledKernel k = jit::compile_recipe(op.recipe(config, arch));
          fmt::print("  {:<9} {:<8} {:<70} {:6.0f} ms  {:3} regs  {} B spills\n", op.name,
                     arch.name(), config.dump(), k.compile_ms, k.ptxas.registers,
                     k.ptxas.spill_store_bytes + k.ptxas.spill_load_bytes);
          ++n;
        }
    fmt::print("Compiled {} variants without a GPU. Run this on a GPU machine to launch them.\n", n);
    return 0;
  }
  BenchOptions o;
  o.op = "tma_copy";
  o.shape = "rows=8192,cols=8192,dtype=bf16";
  o.iters = 20;
  fmt::print("GPU found: copying an 8192x8192 bf16 tensor with tma_copy and checking it bit for "
             "bit.\n");
  return run_bench(o);
}

}  // namespace attnjit::cli
