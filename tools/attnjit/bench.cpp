// `attnjit bench` and `attnjit demo`. Timing rules (METHOD): warm up first, time each
// launch with CUDA events, report the median, keep the working set out of L2 by
// rotating buffers, and measure the machine's own ceiling (cuMemcpyDtoD) in the same run.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/ops/tma_copy.hpp"
#include "attnjit/tma.hpp"
#include "bench_util.hpp"
#include "cli.hpp"
#include "driver/driver.hpp"
#include "jit/kernel_table.hpp"
#include "ops/registry.hpp"

#ifndef ATTNJIT_GIT_COMMIT
#define ATTNJIT_GIT_COMMIT "unknown"
#endif

namespace attnjit::cli {

std::map<std::string, std::string> parse_shape(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      fail_arg("--shape", fmt::format("'{}' is not key=value", item));
    out[item.substr(0, eq)] = item.substr(eq + 1);
    pos = end + 1;
  }
  return out;
}

nlohmann::json parse_shape_json(const std::string& text) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : parse_shape(text)) {
    if (k == "dtype") {
      j[k] = v;
      continue;
    }
    try {
      size_t used = 0;
      const long long value = std::stoll(v, &used);
      if (used != v.size()) throw std::invalid_argument(v);
      j[k] = value;
    } catch (const std::logic_error&) {
      fail_arg("--shape", fmt::format("{}={} is not an integer", k, v));
    }
  }
  return j;
}

std::string commit() {
  if (const char* c = std::getenv("ATTNJIT_COMMIT"); c && *c) return c;
  return ATTNJIT_GIT_COMMIT;
}

namespace {

void fill_random(const Buffer& b, size_t bytes, uint64_t seed) {
  std::vector<uint64_t> host((bytes + 7) / 8);
  std::mt19937_64 gen(seed);
  for (auto& w : host) w = gen();
  ATTNJIT_CU(cuMemcpyHtoD, b.ptr(), host.data(), bytes);
}

int64_t shape_int(const std::map<std::string, std::string>& s, const char* key, int64_t fallback) {
  auto it = s.find(key);
  if (it == s.end()) return fallback;
  try {
    return std::stoll(it->second);
  } catch (...) {
    fail_arg("--shape", fmt::format("{}={} is not an integer", key, it->second));
  }
}

struct Context {
  driver::DeviceInfo info;
};
Context init_gpu() {
  driver::use_device(0);
  return Context{driver::cached_device_info(0)};
}

int bench_tma_copy(const BenchOptions& o) {
  const auto shape = parse_shape(o.shape);
  for (const auto& [k, v] : shape)
    if (k != "rows" && k != "cols" && k != "dtype")
      fail_arg("--shape", fmt::format("unknown key '{}' for tma_copy (rows, cols, dtype)", k));
  const int64_t rows = shape_int(shape, "rows", 16384);
  const int64_t cols = shape_int(shape, "cols", 8192);
  DType dtype = DType::kBF16;
  if (auto it = shape.find("dtype"); it != shape.end()) {
    auto d = parse_dtype(it->second);
    if (!d) fail_arg("--shape", fmt::format("unknown dtype '{}'", it->second));
    dtype = *d;
  }
  const TmaCopyConfig config =
      o.config.empty() ? tma_copy_default_config(dtype) : TmaCopyConfig::from_json(o.config);
  const Context ctx = init_gpu();
  const size_t bytes = static_cast<size_t>(rows * cols * dtype_bytes(dtype));
  // Enough buffer pairs that consecutive iterations never find their data in L2.
  const int sets = static_cast<int>(std::max<size_t>(1, (4 * static_cast<size_t>(ctx.info.l2_bytes)) / bytes + 1));
  std::vector<Buffer> src, dst;
  for (int i = 0; i < sets; ++i) {
    src.emplace_back(bytes);
    dst.emplace_back(bytes);
    fill_random(src.back(), bytes, 1234u + static_cast<uint64_t>(i));
  }
  auto view = [&](const Buffer& b) {
    return TensorView::contiguous(reinterpret_cast<void*>(b.ptr()), dtype, {rows, cols});
  };
  auto args = [&](int i) {
    return TmaCopyArgs{view(dst[static_cast<size_t>(i % sets)]), view(src[static_cast<size_t>(i % sets)])};
  };
  const TmaCopyPlan plan = tma_copy_plan(tma_copy_shape(args(0)), &config);
  const double copy_ms =
      median_ms(o.warmup, o.iters, [&](int i) { tma_copy(args(i), plan, {}, nullptr); });
  const double memcpy_ms = median_ms(o.warmup, o.iters, [&](int i) {
    ATTNJIT_CU(cuMemcpyDtoDAsync, dst[static_cast<size_t>(i % sets)].ptr(),
               src[static_cast<size_t>(i % sets)].ptr(), bytes, nullptr);
  });
  // Bit-exact check of the last copy (the bench never reports a wrong kernel's speed).
  tma_copy(args(0), plan, {}, nullptr);
  ATTNJIT_CU(cuCtxSynchronize);
  std::vector<char> a(bytes), b(bytes);
  ATTNJIT_CU(cuMemcpyDtoH, a.data(), src[0].ptr(), bytes);
  ATTNJIT_CU(cuMemcpyDtoH, b.data(), dst[0].ptr(), bytes);
  const bool exact = std::memcmp(a.data(), b.data(), bytes) == 0;

  const double gbps = 2.0 * static_cast<double>(bytes) / (copy_ms * 1e-3) / 1e9;
  const double memcpy_gbps = 2.0 * static_cast<double>(bytes) / (memcpy_ms * 1e-3) / 1e9;
  if (o.json) {
    nlohmann::ordered_json j;
    j["op"] = "tma_copy";
    j["gpu"] = ctx.info.name;
    j["commit"] = commit();
    j["shape"] = {{"rows", rows}, {"cols", cols}, {"dtype", std::string(to_string(dtype))}};
    j["config"] = nlohmann::json::parse(config.to_json());
    j["bytes_moved"] = 2 * bytes;
    j["median_us"] = copy_ms * 1e3;
    j["gbps"] = gbps;
    j["memcpy_median_us"] = memcpy_ms * 1e3;
    j["memcpy_gbps"] = memcpy_gbps;
    j["ratio_to_memcpy"] = gbps / memcpy_gbps;
    j["bit_exact"] = exact;
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("tma_copy {}x{} {} [{}] on {} (commit {})\n  tma_copy   {:9.1f} us  {:7.1f} GB/s\n"
               "  memcpyDtoD {:9.1f} us  {:7.1f} GB/s\n  ratio {:.3f}, bit-exact: {}\n",
               rows, cols, to_string(dtype), config.describe(), ctx.info.name, commit(),
               copy_ms * 1e3, gbps, memcpy_ms * 1e3, memcpy_gbps, gbps / memcpy_gbps,
               exact ? "yes" : "NO");
  }
  return exact ? 0 : 1;
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
  if (o.op == "tma_copy") return bench_tma_copy(o);
  if (o.op == "dispatch") return bench_dispatch(o);
  if (o.op == "mla_decode") return bench_mla_decode(o);
  if (o.op == "mha_fwd") return bench_mha_fwd(o);
  ops::find_op(o.op);  // unknown op → error listing the known ones
  fmt::print(stderr, "attnjit bench: no benchmark for op '{}' yet\n", o.op);
  return 2;
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
  return bench_tma_copy(o);
}

}  // namespace attnjit::cli
