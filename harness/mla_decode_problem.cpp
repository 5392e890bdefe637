#include "harness/mla_decode_problem.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <random>

#include "attnjit/error.hpp"
#include "driver/driver.hpp"
#include "ops/registry.hpp"

namespace attnjit::harness {

using nlohmann::json;

nlohmann::ordered_json MlaDecodeCase::to_json() const {
  return {{"b", b},
          {"q_len", q_len},
          {"h", h},
          {"s_k", s_k},
          {"page", page},
          {"dtype", std::string(to_string(dtype))},
          {"varlen", varlen ? 1 : 0},
          {"short", short_len},
          {"long", long_count},
          {"equal_work", equal_work ? 1 : 0},
          {"lse", lse ? 1 : 0},
          {"splits", splits}};
}

std::string MlaDecodeCase::describe() const {
  const std::string mix = short_len > 0 ? fmt::format(" {}×{}+{}×{}", long_count, s_k, b - long_count, short_len)
                                         : std::string(varlen ? " varlen" : "");
  return fmt::format("b={} q_len={} h={} s_k={}{}{} page={} {}{}", b, q_len, h, s_k, mix,
                     equal_work ? " equal-work" : "", page, to_string(dtype), lse ? " +lse" : "");
}

MlaDecodeCase mla_decode_case(const json& shape) {
  if (!shape.is_object()) fail_arg("mla_decode shape", fmt::format("must be a JSON object, got {}", shape.dump()));
  // The harness-only keys; the rest is the tuning vocabulary, checked by the op itself.
  json tuning_keys = shape;
  MlaDecodeCase c;
  auto take_bool = [&](const char* key, bool& out) {
    const auto it = tuning_keys.find(key);
    if (it == tuning_keys.end()) return;
    if (it->is_boolean())
      out = it->get<bool>();
    else if (it->is_number_integer() && (*it == 0 || *it == 1))
      out = *it == 1;
    else
      fail_arg(fmt::format("mla_decode shape key '{}'", key), fmt::format("must be true or false, got {}", it->dump()));
    tuning_keys.erase(key);
  };
  take_bool("varlen", c.varlen);
  take_bool("equal_work", c.equal_work);
  take_bool("lse", c.lse);
  auto take_int = [&](const char* key, int lo, int hi, int& out) {
    const auto it = tuning_keys.find(key);
    if (it == tuning_keys.end()) return;
    if (!it->is_number_integer() || *it < lo || *it > hi)
      fail_arg(fmt::format("mla_decode shape key '{}'", key),
               fmt::format("must be an integer in {}..{}, got {}", lo, hi, it->dump()));
    out = it->get<int>();
    tuning_keys.erase(key);
  };
  take_int("short", 0, 1 << 30, c.short_len);
  take_int("long", 0, 1 << 30, c.long_count);
  if (const auto it = tuning_keys.find("splits"); it != tuning_keys.end()) {
    if (!it->is_number_integer() || *it < 0 || *it > 128)
      fail_arg("mla_decode shape key 'splits'", fmt::format("must be an integer in 0..128, got {}", it->dump()));
    c.splits = it->get<int>();
    tuning_keys.erase("splits");
  }
  const json s = ops::find_op("mla_decode").tuning.canonical_shape(tuning_keys);
  c.b = s.at("b").get<int>();
  c.q_len = s.at("q_len").get<int>();
  c.h = s.at("h").get<int>();
  c.s_k = s.at("s_k").get<int>();
  c.page = s.at("page").get<int>();
  c.dtype = *parse_dtype(s.at("dtype").get<std::string>());
  if (c.short_len > 0 && c.varlen)
    fail_arg("mla_decode shape key 'short'", "a long tail or heavy half is not also varlen");
  if (c.short_len > c.s_k)
    fail_arg("mla_decode shape key 'short'", fmt::format("must be at most s_k = {}, got {}", c.s_k, c.short_len));
  if (c.short_len > 0 && c.long_count > c.b)
    fail_arg("mla_decode shape key 'long'", fmt::format("must be at most b = {}, got {}", c.b, c.long_count));
  return c;
}

std::vector<MlaDecodeCase> mla_decode_bench_cases() {
  std::vector<MlaDecodeCase> v;
  for (const json& s : ops::find_op("mla_decode").tuning.bench_shapes) v.push_back(mla_decode_case(s));
  MlaDecodeCase varlen;  // b = 128, h = 128, lengths uniform in [2048, 8192]
  varlen.s_k = 8192;
  varlen.varlen = true;
  v.push_back(varlen);
  // A tensor-parallel rank's 8 heads (a 64-head model at TP 8, 128 heads at TP 16): as
  // memory-bound as h = 16, decode and MTP.
  for (int q_len : {1, 4}) {
    MlaDecodeCase tp;
    tp.h = 8;
    tp.q_len = q_len;
    tp.s_k = 8192;
    v.push_back(tp);
  }
  // Mixed lengths, each followed by the uniform row of the same b, h, q_len and Σ lengths.
  auto with_equal_work = [&v](MlaDecodeCase mixed) {
    v.push_back(mixed);
    mixed.equal_work = true;
    v.push_back(mixed);
  };
  for (int h : {16, 64, 128})
    for (int q_len : {1, 2}) with_equal_work({.b = 128, .q_len = q_len, .h = h, .s_k = 8192, .varlen = true});
  for (int h : {16, 128}) {
    with_equal_work({.b = 64, .h = h, .s_k = 65536, .short_len = 1024, .long_count = 1});  // long tail
    with_equal_work({.b = 32, .h = h, .s_k = 32768, .short_len = 512, .long_count = 16});  // heavy half
  }
  return v;
}

namespace {

constexpr size_t kElem = 2;  // bf16 / f16

std::vector<uint16_t> draw(size_t n, DType dtype, std::mt19937_64& gen, std::vector<float>& vals) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> bits(n);
  vals.resize(n);
  for (size_t i = 0; i < n; ++i) {
    bits[i] = to_bits(normal(gen), dtype);
    vals[i] = from_bits(bits[i], dtype);
  }
  return bits;
}

}  // namespace

MlaDecodeProblem::MlaDecodeProblem(const MlaDecodeCase& c, uint64_t seed, size_t l2_bytes) : c_(c) {
  if (kChunkRows % c.page != 0) fail_arg("mla_decode shape key 'page'", fmt::format("must divide {}", kChunkRows));
  std::mt19937_64 gen(seed);
  // Each length includes the q_len new tokens; a length below q_len would leave queries
  // without keys, which is legal but not a benchmark case (the tests draw those).
  lens_.assign(static_cast<size_t>(c.b), c.s_k);
  if (c.varlen) {
    std::uniform_int_distribution<int> d(std::max(c.s_k / 4, c.q_len), c.s_k);
    for (auto& l : lens_) l = d(gen);
  } else if (c.short_len > 0) {
    for (size_t i = static_cast<size_t>(c.long_count); i < lens_.size(); ++i) lens_[i] = c.short_len;
  }
  if (c.equal_work && c.b > 0) {  // the same Σ, spread evenly (the first Σ mod b get one more)
    int64_t total = 0;
    for (int l : lens_) total += l;
    for (size_t i = 0; i < lens_.size(); ++i)
      lens_[i] = static_cast<int>(total / c.b + (static_cast<int64_t>(i) < total % c.b ? 1 : 0));
  }
  const MlaPageTable pt = mla_random_page_table(lens_, c.s_k, c.page, kChunkRows / c.page, gen);
  max_pages_ = pt.max_pages;
  num_pages_ = pt.num_pages;
  table_ = pt.table;
  ref_table_ = pt.ref_table;

  const size_t q_elems = static_cast<size_t>(c.b) * c.q_len * c.h * kMlaQkDim;
  const std::vector<uint16_t> q_bits = draw(q_elems, c.dtype, gen, q_vals_);
  const std::vector<uint16_t> chunk_bits = draw(size_t{kChunkRows} * kMlaQkDim, c.dtype, gen, chunk_vals_);
  const size_t pool_rows = static_cast<size_t>(num_pages_) * c.page;
  const size_t set_bytes = (pool_rows * kMlaQkDim + q_elems) * kElem;
  const int copies = l2_bytes > 0 ? copies_out_of_l2(set_bytes, l2_bytes, 16) : 1;
  for (int i = 0; i < copies; ++i) {
    q_.emplace_back(q_elems * kElem).upload(q_bits);
    cache_.emplace_back(std::max<size_t>(1, pool_rows) * kMlaQkDim * kElem);
    for (size_t r = 0; r < pool_rows; r += kChunkRows) {
      const size_t rows = std::min<size_t>(kChunkRows, pool_rows - r);
      ATTNJIT_CU(cuMemcpyHtoD, cache_.back().ptr() + r * kMlaQkDim * kElem, chunk_bits.data(),
                 rows * kMlaQkDim * kElem);
    }
  }
  table_d_ = DeviceBuffer(table_.size() * 4);
  table_d_.upload(table_);
  lens_d_ = DeviceBuffer(lens_.size() * 4);
  lens_d_.upload(lens_);
  out_d_ = DeviceBuffer(static_cast<size_t>(c.b) * c.q_len * c.h * kMlaVDim * kElem);
  lse_d_ = DeviceBuffer(static_cast<size_t>(c.b) * c.h * c.q_len * 4);
}

MlaDecodeArgs MlaDecodeProblem::args(int copy) const {
  const size_t k = static_cast<size_t>(copy) % q_.size();
  MlaDecodeArgs a;
  a.q = TensorView::contiguous(q_[k].data(), c_.dtype, {c_.b, c_.q_len, c_.h, kMlaQkDim});
  a.kv_cache = TensorView::contiguous(cache_[k].data(), c_.dtype, {num_pages_, c_.page, kMlaQkDim});
  a.block_table = TensorView::contiguous(table_d_.data(), DType::kI32, {c_.b, max_pages_});
  a.cache_lens = TensorView::contiguous(lens_d_.data(), DType::kI32, {c_.b});
  a.out = TensorView::contiguous(out_d_.data(), c_.dtype, {c_.b, c_.q_len, c_.h, kMlaVDim});
  if (c_.lse) a.lse = TensorView::contiguous(lse_d_.data(), DType::kF32, {c_.b, c_.h, c_.q_len});
  a.softmax_scale = kSoftmaxScale;
  return a;
}

MlaDecodeShape MlaDecodeProblem::shape() const {
  MlaDecodeShape s = mla_decode_shape(args(0));
  s.max_len = c_.s_k;
  s.num_splits = c_.splits;
  return s;
}

void MlaDecodeProblem::poison_output() {
  out_d_.fill_byte(0xFF);
  lse_d_.fill_byte(0xFF);
}

std::vector<uint8_t> MlaDecodeProblem::output_bytes() const {
  synchronize();
  return out_d_.download_as<uint8_t>(out_d_.bytes());
}

MlaProblem MlaDecodeProblem::host_problem() const {
  MlaProblem p;
  p.batch = c_.b;
  p.q_len = c_.q_len;
  p.num_heads = c_.h;
  p.page_size = c_.page;
  p.num_pages = kChunkRows / c_.page;
  p.max_pages = max_pages_;
  p.q = q_vals_;
  p.kv_cache = chunk_vals_;
  p.block_table = ref_table_;
  p.cache_lens = lens_;
  p.softmax_scale = static_cast<double>(kSoftmaxScale);
  return p;
}

Prepared MlaDecodeProblem::prepare(const json* overrides) {
  MlaDecodeShape shape = this->shape();
  const json heuristic = json::parse(mla_decode_default_config(c_.dtype, c_.h, c_.q_len, c_.page).to_json());
  MlaDecodeConfig given;
  if (overrides) {
    json runtime;
    const json merged = merge_config(heuristic, *overrides,
                                     ops::find_op("mla_decode").tuning.runtime_fields, runtime);
    given = MlaDecodeConfig::from_json(merged.dump());
    if (runtime.contains("num_splits")) shape.num_splits = runtime["num_splits"].get<int>();
  }
  return prepared_run<MlaDecodePlan, MlaDecodeArgs>(
      mla_decode_plan(shape, overrides ? &given : nullptr), overrides, heuristic,
      [this](int i) { return args(i); }, mla_decode_schedule, mla_decode);
}

Verdict MlaDecodeProblem::check(int sampled_rows) const { return verdict_of(judge(sampled_rows)); }

std::string MlaDecodeProblem::compare(const std::vector<uint8_t>& ref, const std::vector<uint8_t>& got) const {
  return compare_16bit(ref, got, c_.dtype == DType::kF16, 1e-2);
}

json MlaDecodeProblem::target() const {
  if (c_.h == 16) return {{"metric", "gbps"}, {"h100", 2700}};
  if (c_.h == 128 && c_.q_len == 2) return {{"metric", "tflops"}, {"h100", 600}};
  return nullptr;
}

MlaComparison MlaDecodeProblem::judge(int sampled_rows) const {
  synchronize();
  const std::vector<uint16_t> bits = out_d_.download_as<uint16_t>(out_d_.bytes() / kElem);
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = from_bits(bits[i], c_.dtype);
  std::vector<float> lse;
  if (c_.lse) lse = lse_d_.download_as<float>(lse_d_.bytes() / 4);
  const MlaProblem p = host_problem();
  std::mt19937_64 sample_gen(7);
  const std::vector<MlaRow> rows =
      sampled_rows > 0 ? mla_sample_rows(p, sampled_rows, sample_gen) : mla_all_rows(p);
  return mla_compare(p, mla_reference(p, rows), out, lse);
}

double MlaDecodeProblem::bytes() const {
  int64_t cache_rows = 0;
  for (int l : lens_) cache_rows += l;
  const double q_out = static_cast<double>(c_.b) * c_.q_len * c_.h * (kMlaQkDim + kMlaVDim);
  return (static_cast<double>(cache_rows) * kMlaQkDim + q_out) * kElem;
}

double MlaDecodeProblem::flops() const {
  int64_t pairs = 0;
  for (int l : lens_)
    for (int t = 0; t < c_.q_len; ++t) pairs += int64_t{c_.h} * mla_visible_keys(l, c_.q_len, t);
  return 2.0 * static_cast<double>(pairs) * (kMlaQkDim + kMlaVDim);
}

ProblemKind mla_decode_problem() {
  ProblemKind k;
  k.op = "mla_decode";
  k.bench_cases = [] {
    std::vector<json> v;
    for (const MlaDecodeCase& c : mla_decode_bench_cases()) v.push_back(c.to_json());
    return v;
  };
  k.test_cases = [] {
    std::vector<json> v;
    for (MlaDecodeCase c : mla_decode_bench_cases()) {
      c.b = std::min(c.b, 6);
      c.s_k = std::min(c.s_k, 1500);  // off the page and the tile
      if (c.short_len > 0) {          // the same mix, scaled down
        c.short_len = std::min(c.short_len, c.s_k / 16);
        c.long_count = std::min(c.long_count, c.b / 2);
      }
      for (bool lse : {false, true}) {
        c.lse = lse;
        v.push_back(c.to_json());
      }
    }
    return v;
  };
  k.make = [](const json& shape, uint64_t seed, size_t l2_bytes) -> std::unique_ptr<Problem> {
    return std::make_unique<MlaDecodeProblem>(mla_decode_case(shape), seed, l2_bytes);
  };
  return k;
}

}  // namespace attnjit::harness
