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

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/ops/mha_fwd.hpp"
#include "bench_util.hpp"
#include "cli.hpp"
#include "driver/driver.hpp"
#include "harness/mha_reference.hpp"

namespace attnjit::cli {

namespace {


struct MhaShape {
  int b = 8, s_q = 4096, s_k = 4096, h = 16, h_kv = 16, d = 128, dv = 128;
  bool causal = false;
  DType dtype = DType::kBF16;
  int splits = 0;  // 0: heuristic
  int group = 0;   // packed GQA (config.group)

  std::string describe() const {
    std::string s = fmt::format("b={} s_q={} s_k={} h={}", b, s_q, s_k, h);
    if (h_kv != h) s += fmt::format("/{}", h_kv);
    s += fmt::format(" d={}", d);
    if (dv != d) s += fmt::format("/{}", dv);
    return s + (causal ? " causal" : "") + " " + std::string(to_string(dtype));
  }
};

MhaShape parse_mha_shape(const std::string& text) {
  MhaShape s;
  bool dv_set = false, hkv_set = false;
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
    if (k == "b") s.b = value;
    else if (k == "s_q") s.s_q = value;
    else if (k == "s_k") s.s_k = value;
    else if (k == "seq") s.s_q = s.s_k = value;
    else if (k == "h") s.h = value;
    else if (k == "h_kv") { s.h_kv = value; hkv_set = true; }
    else if (k == "d") s.d = value;
    else if (k == "dv") { s.dv = value; dv_set = true; }
    else if (k == "causal") s.causal = value != 0;
    else if (k == "splits") s.splits = value;
    else if (k == "group") s.group = value;
    else
      fail_arg("--shape", fmt::format("unknown key '{}' for mha_fwd (b, seq, s_q, s_k, h, h_kv, d, "
                                      "dv, causal, dtype, splits, group)",
                                      k));
  }
  if (!dv_set) s.dv = s.d == 192 ? 128 : s.d;
  if (!hkv_set) s.h_kv = s.h;
  if (s.b < 1 || s.s_q < 1 || s.s_k < 1 || s.h < 1 || s.h_kv < 1 || s.splits < 0)
    fail_arg("--shape", fmt::format("sizes must be positive: {}", s.describe()));
  return s;
}

// The rows: batch·seq = 32k tokens, hidden 2048 (h = 2048 / dv), and the decode row.
std::vector<MhaShape> default_shapes() {
  std::vector<MhaShape> v;
  const std::pair<int, int> dims[] = {{64, 64}, {128, 128}, {256, 256}, {192, 128}};
  for (auto [d, dv] : dims)
    for (bool causal : {false, true})
      for (int seq : {1024, 4096, 8192, 16384}) {
        MhaShape s;
        s.b = 32768 / seq;
        s.s_q = s.s_k = seq;
        s.d = d;
        s.dv = dv;
        s.h = s.h_kv = 2048 / dv;
        s.causal = causal;
        v.push_back(s);
      }
  MhaShape dec;  // decode: one query per sequence, GQA 8 packed, 32k keys, batch 64
  dec.b = 64;
  dec.s_q = 1;
  dec.s_k = 32768;
  dec.h = 16;
  dec.h_kv = 2;
  dec.group = 8;
  dec.causal = true;
  v.push_back(dec);
  return v;
}

// A periodic random block: drawing 100M normals one by one would dominate the run, and a
// block whose length is prime never lines up with rows or heads.
void fill_periodic(std::vector<float>& vals, std::vector<uint16_t>& bits, size_t n, DType dtype,
                   std::mt19937_64& gen) {
  constexpr size_t kBlock = 1'000'003;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  vals.resize(n);
  bits.resize(n);
  const size_t first = std::min(n, kBlock);
  for (size_t i = 0; i < first; ++i) {
    bits[i] = to_bits(normal(gen), dtype);
    vals[i] = from_bits(bits[i], dtype);
  }
  for (size_t i = first; i < n; ++i) {
    bits[i] = bits[i - kBlock];
    vals[i] = vals[i - kBlock];
  }
}

bool bench_shape(const MhaShape& s, const BenchOptions& o, const driver::DeviceInfo& dev) {
  std::mt19937_64 gen(0x6D6861u + static_cast<uint64_t>(s.s_k) * 31 + static_cast<uint64_t>(s.d));
  const size_t esize = 2;
  const size_t q_elems = static_cast<size_t>(s.b) * s.s_q * s.h * s.d;
  const size_t k_elems = static_cast<size_t>(s.b) * s.s_k * s.h_kv * s.d;
  const size_t v_elems = static_cast<size_t>(s.b) * s.s_k * s.h_kv * s.dv;
  const size_t out_elems = static_cast<size_t>(s.b) * s.s_q * s.h * s.dv;
  std::vector<float> q_vals, k_vals, v_vals;
  std::vector<uint16_t> q_bits, k_bits, v_bits;
  fill_periodic(q_vals, q_bits, q_elems, s.dtype, gen);
  fill_periodic(k_vals, k_bits, k_elems, s.dtype, gen);
  fill_periodic(v_vals, v_bits, v_elems, s.dtype, gen);

  const size_t set_bytes = (q_elems + k_elems + v_elems) * esize;
  const int sets = static_cast<int>(std::clamp<size_t>(
      (4 * static_cast<size_t>(dev.l2_bytes) + set_bytes - 1) / set_bytes, 1, 8));
  std::vector<Buffer> q_d, k_d, v_d;
  for (int i = 0; i < sets; ++i) {
    q_d.emplace_back(q_elems * esize);
    k_d.emplace_back(k_elems * esize);
    v_d.emplace_back(v_elems * esize);
    ATTNJIT_CU(cuMemcpyHtoD, q_d.back().ptr(), q_bits.data(), q_elems * esize);
    ATTNJIT_CU(cuMemcpyHtoD, k_d.back().ptr(), k_bits.data(), k_elems * esize);
    ATTNJIT_CU(cuMemcpyHtoD, v_d.back().ptr(), v_bits.data(), v_elems * esize);
  }
  Buffer out_d(out_elems * esize), lse_d(static_cast<size_t>(s.h) * s.b * s.s_q * 4);

  const MaskKind mask = s.causal ? MaskKind::kCausal : MaskKind::kNone;
  MhaFwdConfig config = mha_fwd_default_config(
      {.dtype = s.dtype, .head_dim = s.d, .head_dim_v = s.dv, .mask = mask, .group = s.group});
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
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));

  auto args_for = [&](int set) {
    MhaFwdArgs a;
    a.q = TensorView::contiguous(q_d[static_cast<size_t>(set)].data(), s.dtype, {s.b, s.s_q, s.h, s.d});
    a.k = TensorView::contiguous(k_d[static_cast<size_t>(set)].data(), s.dtype, {s.b, s.s_k, s.h_kv, s.d});
    a.v = TensorView::contiguous(v_d[static_cast<size_t>(set)].data(), s.dtype, {s.b, s.s_k, s.h_kv, s.dv});
    a.out = TensorView::contiguous(out_d.data(), s.dtype, {s.b, s.s_q, s.h, s.dv});
    a.lse = TensorView::contiguous(lse_d.data(), DType::kF32, {s.h, int64_t{s.b} * s.s_q});
    a.softmax_scale = scale;
    return a;
  };
  // What an engine does: plan once for the batch shape (compiles or loads the kernels,
  // untimed), then time the per-layer run. Without --config the plan picks what the runtime
  // picks (the tuning database's tile for this bucket on this GPU, else the heuristic's), so
  // that is what gets measured.
  MhaFwdShape shape = mha_fwd_shape(args_for(0), mha_fwd_features(config));
  shape.num_splits = s.splits;
  const MhaFwdPlan plan = mha_fwd_plan(shape, o.config.empty() ? nullptr : &config);
  config = plan.config;
  const int splits = plan.num_splits;
  Buffer workspace(plan.workspace_bytes);
  const Workspace ws{plan.workspace_bytes ? workspace.data() : nullptr, plan.workspace_bytes};
  mha_fwd_schedule(plan, args_for(0), ws, nullptr);
  auto call = [&](int set) { mha_fwd(args_for(set), plan, ws, nullptr); };

  // Correctness first.
  ATTNJIT_CU(cuMemsetD8Async, out_d.ptr(), 0xFF, out_d.bytes(), nullptr);
  ATTNJIT_CU(cuMemsetD8Async, lse_d.ptr(), 0xFF, lse_d.bytes(), nullptr);
  call(0);
  ATTNJIT_CU(cuCtxSynchronize);
  std::vector<uint16_t> out_bits(out_elems);
  ATTNJIT_CU(cuMemcpyDtoH, out_bits.data(), out_d.ptr(), out_elems * esize);
  std::vector<float> out(out_elems), lse(lse_d.bytes() / 4);
  for (size_t i = 0; i < out_elems; ++i) out[i] = from_bits(out_bits[i], s.dtype);
  ATTNJIT_CU(cuMemcpyDtoH, lse.data(), lse_d.ptr(), lse_d.bytes());

  harness::MhaProblem p;
  p.batch = s.b;
  p.h_q = s.h;
  p.h_kv = s.h_kv;
  p.d = s.d;
  p.dv = s.dv;
  p.q_lens.assign(static_cast<size_t>(s.b), s.s_q);
  p.k_lens.assign(static_cast<size_t>(s.b), s.s_k);
  p.q_starts = harness::mha_padded_starts(s.b, s.s_q);
  p.total_q = int64_t{s.b} * s.s_q;
  p.q = q_vals;
  p.k_starts = harness::mha_padded_starts(s.b, s.s_k);
  p.kv_rows = int64_t{s.b} * s.s_k;
  p.k = k_vals;
  p.v = v_vals;
  p.mask = mask;
  p.softmax_scale = static_cast<double>(scale);
  std::mt19937_64 sample_gen(7);
  const auto rows = harness::mha_sample_rows(p, 16, sample_gen);
  const harness::MhaComparison check = harness::mha_compare(p, harness::mha_reference(p, rows), out, lse);

  const double pairs = static_cast<double>(harness::mha_visible_pairs(p));
  const double flops = 2.0 * pairs * (s.d + s.dv);
  const double bytes = static_cast<double>(k_elems + v_elems + q_elems + out_elems) * esize;

  nlohmann::ordered_json j;
  j["op"] = "mha_fwd";
  j["gpu"] = dev.name;
  j["commit"] = commit();
  j["shape"] = {{"b", s.b},       {"s_q", s.s_q},        {"s_k", s.s_k}, {"h", s.h},
                {"h_kv", s.h_kv}, {"d", s.d},            {"dv", s.dv},   {"causal", s.causal ? 1 : 0},
                {"dtype", std::string(to_string(s.dtype))}, {"group", s.group}};
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

  const double ms = median_ms(o.warmup, o.iters, [&](int i) { call(i % sets); });
  const double us = ms * 1e3;
  const double tflops = flops / (ms * 1e-3) / 1e12;
  const double gbps = bytes / (ms * 1e-3) / 1e9;
  if (o.json) {
    j["median_us"] = us;
    j["flops"] = flops;
    j["tflops"] = tflops;
    j["bytes"] = bytes;
    j["gbps"] = gbps;
    j["input_sets"] = sets;
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("  {:<46} splits {:>3}  {:9.1f} us  {:6.1f} TFLOP/s  {:7.1f} GB/s  check rel_l2 {:.1e}\n",
               s.describe(), splits, us, tflops, gbps, check.rel_l2);
  }
  return true;
}

}  // namespace

int bench_mha_fwd(const BenchOptions& o) {
  const std::vector<MhaShape> shapes =
      o.shape.empty() ? default_shapes() : std::vector<MhaShape>{parse_mha_shape(o.shape)};
  driver::use_device(0);
  const driver::DeviceInfo& dev = driver::cached_device_info(0);
  if (!o.json) fmt::print("mha_fwd on {} (commit {})\n", dev.name, commit());
  bool all_ok = true;
  for (const MhaShape& s : shapes) all_ok = bench_shape(s, o, dev) && all_ok;
  return all_ok ? 0 : 1;
}

}  // namespace attnjit::cli
