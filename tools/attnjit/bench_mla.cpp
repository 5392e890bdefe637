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

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/ops/mla_decode.hpp"
#include "bench_util.hpp"
#include "cli.hpp"
#include "driver/driver.hpp"
#include "harness/mla_reference.hpp"

namespace attnjit::cli {

namespace {


struct MlaShape {
  int b = 128, q_len = 1, h = 128, s_k = 4096, page = 64;
  DType dtype = DType::kBF16;
  int splits = 0;  // 0: heuristic
  bool varlen = false;
  bool lse = false;

  std::string describe() const {
    return fmt::format("b={} q_len={} h={} s_k={}{} page={} {}{}", b, q_len, h, s_k,
                       varlen ? " varlen" : "", page, to_string(dtype), lse ? " +lse" : "");
  }
};

MlaShape parse_mla_shape(const std::string& text) {
  MlaShape s;
  for (const auto& [k, v] : parse_shape(text)) {
    if (k == "dtype") {
      auto d = parse_dtype(v);
      if (!d || (*d != DType::kBF16 && *d != DType::kF16))
        fail_arg("--shape", fmt::format("dtype={} (bf16 or f16)", v));
      s.dtype = *d;
      continue;
    }
    int value = 0;
    try {
      size_t used = 0;
      value = std::stoi(v, &used);
      if (used != v.size()) throw std::invalid_argument(v);
    } catch (...) {
      fail_arg("--shape", fmt::format("{}={} is not an integer", k, v));
    }
    if (k == "b")
      s.b = value;
    else if (k == "q_len")
      s.q_len = value;
    else if (k == "h")
      s.h = value;
    else if (k == "s_k")
      s.s_k = value;
    else if (k == "page")
      s.page = value;
    else if (k == "splits")
      s.splits = value;
    else if (k == "varlen")
      s.varlen = value != 0;
    else if (k == "lse")
      s.lse = value != 0;
    else
      fail_arg("--shape", fmt::format("unknown key '{}' for mla_decode (b, q_len, h, s_k, page, "
                                      "dtype, splits, varlen, lse)",
                                      k));
  }
  if (s.b < 1 || s.q_len < 1 || s.h < 1 || s.s_k < 1 || s.page < 1 || s.splits < 0)
    fail_arg("--shape", fmt::format("sizes must be positive: {}", s.describe()));
  return s;
}

// The benchmark list.
std::vector<MlaShape> default_shapes() {
  std::vector<MlaShape> v;
  for (auto [b, q_len, h, s_k] : std::vector<std::array<int, 4>>{{128, 1, 16, 4096},
                                                                 {128, 2, 16, 8192},
                                                                 {128, 1, 64, 8192},
                                                                 {128, 1, 128, 4096},
                                                                 {128, 2, 128, 4096},
                                                                 {8, 1, 128, 32768}}) {
    MlaShape s;
    s.b = b;
    s.q_len = q_len;
    s.h = h;
    s.s_k = s_k;
    v.push_back(s);
  }
  MlaShape varlen;
  varlen.b = 128;
  varlen.q_len = 1;
  varlen.h = 128;
  varlen.s_k = 8192;
  varlen.varlen = true;
  v.push_back(varlen);
  return v;
}

// DESIGN.md's targets on the H100: h = 16 memory-bound, h = 128 with q_len = 2 compute-bound.
nlohmann::ordered_json target_of(const MlaShape& s) {
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

// Rows of host data repeated over the page pool: a 1 GB cache need not be drawn value by
// value, and the reference can read it through a pool of kChunkRows rows.
constexpr int kChunkRows = 4096;  // a multiple of every page size

bool bench_shape(const MlaShape& s, const BenchOptions& o, const driver::DeviceInfo& dev,
                 double copy_gbps) {
  std::mt19937_64 gen(0x6D6C61u + static_cast<uint64_t>(s.b) * 31 + static_cast<uint64_t>(s.s_k));
  // Lengths: s_k each, or uniform in [s_k/4, s_k] (varlen). Each includes the q_len new
  // tokens; a length below q_len would leave queries without keys, which is legal but
  // not a benchmark case.
  std::vector<int32_t> lens(static_cast<size_t>(s.b), s.s_k);
  if (s.varlen) {
    std::uniform_int_distribution<int> d(std::max(s.s_k / 4, s.q_len), s.s_k);
    for (auto& l : lens) l = d(gen);
  }
  const int max_pages = (s.s_k + s.page - 1) / s.page;
  int num_pages = 0;
  for (int l : lens) num_pages += (l + s.page - 1) / s.page;
  // Pages in random order, as a serving engine's allocator leaves them.
  std::vector<int32_t> pool(static_cast<size_t>(num_pages));
  for (int i = 0; i < num_pages; ++i) pool[static_cast<size_t>(i)] = i;
  std::shuffle(pool.begin(), pool.end(), gen);
  std::vector<int32_t> table(static_cast<size_t>(s.b) * max_pages, 0);
  size_t next = 0;
  for (int b = 0; b < s.b; ++b)
    for (int p = 0; p * s.page < lens[static_cast<size_t>(b)]; ++p)
      table[static_cast<size_t>(b) * max_pages + p] = pool[next++];

  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto draw = [&](size_t n, std::vector<float>& vals, std::vector<uint16_t>& bits) {
    vals.resize(n);
    bits.resize(n);
    for (size_t i = 0; i < n; ++i) {
      bits[i] = to_bits(normal(gen), s.dtype);
      vals[i] = from_bits(bits[i], s.dtype);
    }
  };
  const size_t esize = 2;
  const size_t q_elems = static_cast<size_t>(s.b) * s.q_len * s.h * harness::kMlaQkDim;
  const size_t out_elems = static_cast<size_t>(s.b) * s.q_len * s.h * harness::kMlaVDim;
  const size_t pool_rows = static_cast<size_t>(num_pages) * s.page;
  std::vector<float> q_vals, chunk_vals;
  std::vector<uint16_t> q_bits, chunk_bits;
  draw(q_elems, q_vals, q_bits);
  draw(size_t{kChunkRows} * harness::kMlaQkDim, chunk_vals, chunk_bits);

  // Enough copies of the inputs that consecutive calls never find theirs in L2.
  const size_t set_bytes = (pool_rows * harness::kMlaQkDim + q_elems) * esize;
  const int sets = static_cast<int>(std::clamp<size_t>(
      (4 * static_cast<size_t>(dev.l2_bytes) + set_bytes - 1) / set_bytes, 1, 16));
  std::vector<Buffer> q_d, cache_d;
  for (int i = 0; i < sets; ++i) {
    q_d.emplace_back(q_elems * esize);
    cache_d.emplace_back(pool_rows * harness::kMlaQkDim * esize);
    ATTNJIT_CU(cuMemcpyHtoD, q_d.back().ptr(), q_bits.data(), q_elems * esize);
    for (size_t r = 0; r < pool_rows; r += kChunkRows) {
      const size_t rows = std::min<size_t>(kChunkRows, pool_rows - r);
      ATTNJIT_CU(cuMemcpyHtoD, cache_d.back().ptr() + r * harness::kMlaQkDim * esize, chunk_bits.data(),
                 rows * harness::kMlaQkDim * esize);
    }
  }
  Buffer table_d(table.size() * 4), lens_d(lens.size() * 4), out_d(out_elems * esize),
      lse_d(static_cast<size_t>(s.b) * s.h * s.q_len * 4);
  ATTNJIT_CU(cuMemcpyHtoD, table_d.ptr(), table.data(), table.size() * 4);
  ATTNJIT_CU(cuMemcpyHtoD, lens_d.ptr(), lens.data(), lens.size() * 4);

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

  auto args_for = [&](int set) {
    MlaDecodeArgs a;
    a.q = TensorView::contiguous(q_d[static_cast<size_t>(set)].data(), s.dtype,
                                 {s.b, s.q_len, s.h, harness::kMlaQkDim});
    a.kv_cache = TensorView::contiguous(cache_d[static_cast<size_t>(set)].data(), s.dtype,
                                        {num_pages, s.page, harness::kMlaQkDim});
    a.block_table = TensorView::contiguous(table_d.data(), DType::kI32, {s.b, max_pages});
    a.cache_lens = TensorView::contiguous(lens_d.data(), DType::kI32, {s.b});
    a.out = TensorView::contiguous(out_d.data(), s.dtype, {s.b, s.q_len, s.h, harness::kMlaVDim});
    if (s.lse) a.lse = TensorView::contiguous(lse_d.data(), DType::kF32, {s.b, s.h, s.q_len});
    a.softmax_scale = 0.07216878f;  // 1/sqrt(192)
    return a;
  };
  // What an engine does: plan once for the batch shape (compiles or loads the kernels,
  // untimed), then time the per-layer run with a workspace it owns.
  MlaDecodeShape shape = mla_decode_shape(args_for(0));
  shape.max_len = s.s_k;
  shape.num_splits = s.splits;
  const MlaDecodePlan plan = mla_decode_plan(shape, config);
  const int splits = plan.num_splits;
  Buffer workspace(plan.workspace_bytes);
  const Workspace ws{plan.workspace_bytes ? workspace.data() : nullptr, plan.workspace_bytes};
  mla_decode_schedule(plan, args_for(0), ws, nullptr);
  auto call = [&](int set) { mla_decode(args_for(set), plan, ws, nullptr); };

  // Correctness first.
  ATTNJIT_CU(cuMemsetD8Async, out_d.ptr(), 0xFF, out_d.bytes(), nullptr);
  ATTNJIT_CU(cuMemsetD8Async, lse_d.ptr(), 0xFF, lse_d.bytes(), nullptr);
  call(0);
  ATTNJIT_CU(cuCtxSynchronize);
  std::vector<uint16_t> out_bits(out_elems);
  ATTNJIT_CU(cuMemcpyDtoH, out_bits.data(), out_d.ptr(), out_elems * esize);
  std::vector<float> out(out_elems), lse;
  for (size_t i = 0; i < out_elems; ++i) out[i] = from_bits(out_bits[i], s.dtype);
  if (s.lse) {
    lse.resize(lse_d.bytes() / 4);
    ATTNJIT_CU(cuMemcpyDtoH, lse.data(), lse_d.ptr(), lse_d.bytes());
  }
  // The reference reads the pool through its kChunkRows-row period: page p holds chunk
  // page p % chunk_pages.
  const int chunk_pages = kChunkRows / s.page;
  std::vector<int32_t> ref_table = table;
  for (auto& e : ref_table) e %= chunk_pages;
  harness::MlaProblem p;
  p.batch = s.b;
  p.q_len = s.q_len;
  p.num_heads = s.h;
  p.page_size = s.page;
  p.num_pages = chunk_pages;
  p.max_pages = max_pages;
  p.q = q_vals;
  p.kv_cache = chunk_vals;
  p.block_table = ref_table;
  p.cache_lens = lens;
  p.softmax_scale = static_cast<double>(0.07216878f);
  std::mt19937_64 sample_gen(7);
  const auto rows = harness::mla_sample_rows(p, 16, sample_gen);
  const harness::MlaComparison check = harness::mla_compare(p, harness::mla_reference(p, rows), out, lse);

  int64_t pairs = 0, cache_rows = 0;
  for (int l : lens) {
    cache_rows += l;
    for (int t = 0; t < s.q_len; ++t) pairs += int64_t{s.h} * harness::mla_visible_keys(l, s.q_len, t);
  }
  const double bytes = static_cast<double>(cache_rows) * harness::kMlaQkDim * esize +
                       static_cast<double>(q_elems + out_elems) * esize;
  const double flops = 2.0 * static_cast<double>(pairs) * (harness::kMlaQkDim + harness::kMlaVDim);

  nlohmann::ordered_json j;
  j["op"] = "mla_decode";
  j["gpu"] = dev.name;
  j["commit"] = commit();
  j["shape"] = {{"b", s.b},
                {"q_len", s.q_len},
                {"h", s.h},
                {"s_k", s.s_k},
                {"page", s.page},
                {"dtype", std::string(to_string(s.dtype))},
                {"splits", s.splits},
                {"varlen", s.varlen ? 1 : 0},
                {"lse", s.lse ? 1 : 0}};
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

  const double ms = median_ms(o.warmup, o.iters, [&](int i) { call(i % sets); });
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
    j["input_sets"] = sets;
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
  const std::vector<MlaShape> shapes =
      o.shape.empty() ? default_shapes() : std::vector<MlaShape>{parse_mla_shape(o.shape)};
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
  for (const MlaShape& s : shapes) all_ok = bench_shape(s, o, dev, copy_gbps) && all_ok;
  return all_ok ? 0 : 1;
}

}  // namespace attnjit::cli
