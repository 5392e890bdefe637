#include "harness/mha_fwd_problem.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

#include "attnjit/error.hpp"
#include "ops/registry.hpp"

namespace attnjit::harness {

using nlohmann::json;

nlohmann::ordered_json MhaFwdCase::to_json() const {
  return {{"b", b},
          {"s_q", s_q},
          {"s_k", s_k},
          {"h", h},
          {"h_kv", h_kv},
          {"d", d},
          {"dv", dv},
          {"causal", causal ? 1 : 0},
          {"dtype", std::string(to_string(dtype))},
          {"group", group},
          {"splits", splits}};
}

std::string MhaFwdCase::describe() const {
  std::string s = fmt::format("b={} s_q={} s_k={} h={}", b, s_q, s_k, h);
  if (h_kv != h) s += fmt::format("/{}", h_kv);
  s += fmt::format(" d={}", d);
  if (dv != d) s += fmt::format("/{}", dv);
  return s + (causal ? " causal" : "") + " " + std::string(to_string(dtype));
}

MhaFwdFeatures MhaFwdCase::features() const {
  return {.dtype = dtype,
          .head_dim = d,
          .head_dim_v = dv,
          .mask = causal ? MaskKind::kCausal : MaskKind::kNone,
          .group = group};
}

MhaFwdCase mha_fwd_case(const json& shape) {
  if (!shape.is_object()) fail_arg("mha_fwd shape", fmt::format("must be a JSON object, got {}", shape.dump()));
  json tuning_keys = shape;
  MhaFwdCase c;
  if (const auto it = tuning_keys.find("splits"); it != tuning_keys.end()) {
    if (!it->is_number_integer() || *it < 0 || *it > 1024)
      fail_arg("mha_fwd shape key 'splits'", fmt::format("must be an integer in 0..1024, got {}", it->dump()));
    c.splits = it->get<int>();
    tuning_keys.erase("splits");
  }
  if (const auto it = tuning_keys.find("seq"); it != tuning_keys.end()) {
    for (const char* key : {"s_q", "s_k"})
      if (!tuning_keys.contains(key)) tuning_keys[key] = *it;
    tuning_keys.erase("seq");
  }
  const json s = ops::find_op("mha_fwd").tuning.canonical_shape(tuning_keys);
  c.b = s.at("b").get<int>();
  c.s_q = s.at("s_q").get<int>();
  c.s_k = s.at("s_k").get<int>();
  c.h = s.at("h").get<int>();
  c.h_kv = s.at("h_kv").get<int>();
  c.d = s.at("d").get<int>();
  c.dv = s.at("dv").get<int>();
  c.causal = s.at("causal").get<int>() != 0;
  c.dtype = *parse_dtype(s.at("dtype").get<std::string>());
  c.group = s.at("group").get<int>();
  return c;
}

std::vector<MhaFwdCase> mha_fwd_bench_cases() {
  std::vector<MhaFwdCase> v;
  const std::pair<int, int> dims[] = {{64, 64}, {128, 128}, {256, 256}, {192, 128}};
  for (auto [d, dv] : dims)
    for (bool causal : {false, true})
      for (int seq : {1024, 4096, 8192, 16384}) {
        MhaFwdCase c;
        c.b = 32768 / seq;
        c.s_q = c.s_k = seq;
        c.d = d;
        c.dv = dv;
        c.h = c.h_kv = 2048 / dv;
        c.causal = causal;
        v.push_back(c);
      }
  MhaFwdCase dec;  // decode: one query per sequence, GQA 8 packed, 32k keys, batch 64
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

namespace {

constexpr size_t kElem = 2;  // bf16 / f16

// n values: a block of a prime number of N(0, 1) draws (rounded to dtype), repeated.
std::vector<uint16_t> draw_periodic(size_t n, DType dtype, std::mt19937_64& gen, std::vector<float>& vals) {
  constexpr size_t kBlock = 1'000'003;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> bits(n);
  vals.resize(n);
  const size_t first = std::min(n, kBlock);
  for (size_t i = 0; i < first; ++i) {
    bits[i] = to_bits(normal(gen), dtype);
    vals[i] = from_bits(bits[i], dtype);
  }
  for (size_t i = first; i < n; ++i) {
    bits[i] = bits[i - kBlock];
    vals[i] = vals[i - kBlock];
  }
  return bits;
}

}  // namespace

MhaFwdProblem::MhaFwdProblem(const MhaFwdCase& c, uint64_t seed, size_t l2_bytes) : c_(c) {
  std::mt19937_64 gen(seed);
  const size_t q_elems = static_cast<size_t>(c.b) * c.s_q * c.h * c.d;
  const size_t k_elems = static_cast<size_t>(c.b) * c.s_k * c.h_kv * c.d;
  const size_t v_elems = static_cast<size_t>(c.b) * c.s_k * c.h_kv * c.dv;
  const std::vector<uint16_t> q_bits = draw_periodic(q_elems, c.dtype, gen, q_vals_);
  const std::vector<uint16_t> k_bits = draw_periodic(k_elems, c.dtype, gen, k_vals_);
  const std::vector<uint16_t> v_bits = draw_periodic(v_elems, c.dtype, gen, v_vals_);
  const size_t set_bytes = (q_elems + k_elems + v_elems) * kElem;
  const int copies = l2_bytes > 0 ? copies_out_of_l2(set_bytes, l2_bytes, 8) : 1;
  for (int i = 0; i < copies; ++i) {
    q_.emplace_back(q_elems * kElem).upload(q_bits);
    k_.emplace_back(k_elems * kElem).upload(k_bits);
    v_.emplace_back(v_elems * kElem).upload(v_bits);
  }
  out_d_ = DeviceBuffer(static_cast<size_t>(c.b) * c.s_q * c.h * c.dv * kElem);
  lse_d_ = DeviceBuffer(static_cast<size_t>(c.h) * c.b * c.s_q * 4);
}

float MhaFwdProblem::softmax_scale() const { return 1.0f / std::sqrt(static_cast<float>(c_.d)); }

MhaFwdArgs MhaFwdProblem::args(int copy) const {
  const size_t k = static_cast<size_t>(copy) % q_.size();
  MhaFwdArgs a;
  a.q = TensorView::contiguous(q_[k].data(), c_.dtype, {c_.b, c_.s_q, c_.h, c_.d});
  a.k = TensorView::contiguous(k_[k].data(), c_.dtype, {c_.b, c_.s_k, c_.h_kv, c_.d});
  a.v = TensorView::contiguous(v_[k].data(), c_.dtype, {c_.b, c_.s_k, c_.h_kv, c_.dv});
  a.out = TensorView::contiguous(out_d_.data(), c_.dtype, {c_.b, c_.s_q, c_.h, c_.dv});
  a.lse = TensorView::contiguous(lse_d_.data(), DType::kF32, {c_.h, int64_t{c_.b} * c_.s_q});
  a.softmax_scale = softmax_scale();
  return a;
}

MhaFwdShape MhaFwdProblem::shape() const {
  MhaFwdShape s = mha_fwd_shape(args(0), c_.features());
  s.num_splits = c_.splits;
  return s;
}

MhaFwdShape MhaFwdProblem::shape(const MhaFwdConfig& config) const {
  MhaFwdShape s = mha_fwd_shape(args(0), mha_fwd_features(config));
  s.num_splits = c_.splits;
  return s;
}

void MhaFwdProblem::poison_output() {
  out_d_.fill_byte(0xFF);
  lse_d_.fill_byte(0xFF);
}

std::vector<uint8_t> MhaFwdProblem::output_bytes() const {
  synchronize();
  return out_d_.download_as<uint8_t>(out_d_.bytes());
}

MhaProblem MhaFwdProblem::host_problem() const {
  MhaProblem p;
  p.batch = c_.b;
  p.h_q = c_.h;
  p.h_kv = c_.h_kv;
  p.d = c_.d;
  p.dv = c_.dv;
  p.q_lens.assign(static_cast<size_t>(c_.b), c_.s_q);
  p.k_lens.assign(static_cast<size_t>(c_.b), c_.s_k);
  p.q_starts = mha_padded_starts(c_.b, c_.s_q);
  p.total_q = int64_t{c_.b} * c_.s_q;
  p.q = q_vals_;
  p.k_starts = mha_padded_starts(c_.b, c_.s_k);
  p.kv_rows = int64_t{c_.b} * c_.s_k;
  p.k = k_vals_;
  p.v = v_vals_;
  p.mask = c_.causal ? MaskKind::kCausal : MaskKind::kNone;
  p.softmax_scale = static_cast<double>(softmax_scale());
  return p;
}

Prepared MhaFwdProblem::prepare(const json* overrides) {
  const json heuristic = json::parse(mha_fwd_default_config(c_.features()).to_json());
  MhaFwdConfig given;
  MhaFwdShape shape = this->shape();
  if (overrides) {
    json runtime;
    const json merged =
        merge_config(heuristic, *overrides, ops::find_op("mha_fwd").tuning.runtime_fields, runtime);
    given = MhaFwdConfig::from_json(merged.dump());
    shape = this->shape(given);
    if (runtime.contains("num_splits")) shape.num_splits = runtime["num_splits"].get<int>();
  }
  return prepared_run<MhaFwdPlan, MhaFwdArgs>(mha_fwd_plan(shape, overrides ? &given : nullptr),
                                              overrides, heuristic, [this](int i) { return args(i); },
                                              mha_fwd_schedule, mha_fwd);
}

Verdict MhaFwdProblem::check(int sampled_rows) const { return verdict_of(judge(sampled_rows)); }

std::string MhaFwdProblem::compare(const std::vector<uint8_t>& ref, const std::vector<uint8_t>& got) const {
  return compare_16bit(ref, got, c_.dtype == DType::kF16, 1e-2);
}

MhaComparison MhaFwdProblem::judge(int sampled_rows) const {
  synchronize();
  const std::vector<uint16_t> bits = out_d_.download_as<uint16_t>(out_d_.bytes() / kElem);
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = from_bits(bits[i], c_.dtype);
  const std::vector<float> lse = lse_d_.download_as<float>(lse_d_.bytes() / 4);
  const MhaProblem p = host_problem();
  std::mt19937_64 sample_gen(7);
  const std::vector<MhaRow> rows =
      sampled_rows > 0 ? mha_sample_rows(p, sampled_rows, sample_gen) : mha_all_rows(p);
  return mha_compare(p, mha_reference(p, rows), out, lse);
}

double MhaFwdProblem::bytes() const {
  const double q = static_cast<double>(c_.b) * c_.s_q * c_.h * c_.d;
  const double kv = static_cast<double>(c_.b) * c_.s_k * c_.h_kv * (c_.d + c_.dv);
  const double out = static_cast<double>(c_.b) * c_.s_q * c_.h * c_.dv;
  return (q + kv + out) * kElem;
}

double MhaFwdProblem::flops() const {
  return 2.0 * static_cast<double>(mha_visible_pairs(host_problem())) * (c_.d + c_.dv);
}

ProblemKind mha_fwd_problem() {
  ProblemKind k;
  k.op = "mha_fwd";
  k.bench_cases = [] {
    std::vector<json> v;
    for (const MhaFwdCase& c : mha_fwd_bench_cases()) v.push_back(c.to_json());
    return v;
  };
  // One row of each (d, causal) and the decode row, off the tile.
  k.test_cases = [] {
    std::vector<json> v;
    for (MhaFwdCase c : mha_fwd_bench_cases()) {
      if (c.s_q != 1 && c.s_q != 1024) continue;
      c.b = 2;
      c.s_q = c.s_q == 1 ? 1 : 333;
      c.s_k = std::min(c.s_k, 777);
      v.push_back(c.to_json());
    }
    return v;
  };
  k.make = [](const json& shape, uint64_t seed, size_t l2_bytes) -> std::unique_ptr<Problem> {
    return std::make_unique<MhaFwdProblem>(mha_fwd_case(shape), seed, l2_bytes);
  };
  return k;
}

}  // namespace attnjit::harness
