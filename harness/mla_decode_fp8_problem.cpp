// mla_decode_fp8 as a problem: `attnjit bench mla_decode_fp8`'s rows (issue 19's table, each
// in the 640-byte and the three-tensor cache form) and their test-scale twins.
//
// A case's inputs: q and one period of kChunkRows cache rows drawn from N(0, mag²) as bf16,
// quantized on the GPU by the shipped quantizer (mla_fp8_quantize: σ per cache row, σ_Q per
// query token), the period repeated through the page pool (as mla_decode's problem does, so
// a multi-GB cache need not be drawn value by value), pages shuffled. The reference is
// mla_decode's float64 one on the dequantized rows (harness/mla_fp8_reference.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <random>

#include "attnjit/error.hpp"
#include "attnjit/ops/mla_decode_fp8.hpp"
#include "driver/driver.hpp"
#include "harness/device.hpp"
#include "harness/mla_fp8_reference.hpp"
#include "harness/mla_reference.hpp"
#include "harness/problem.hpp"
#include "ops/registry.hpp"

namespace attnjit::harness {
namespace {

using nlohmann::json;

constexpr float kScale = 0.07216878f;  // 1/sqrt(192)
constexpr int kChunkRows = 4096;       // the pool's period (every page size divides it)

struct Fp8Case {
  int b = 128, q_len = 1, h = 16, s_k = 4096, page = 64;
  bool three = false;   // the three-tensor cache form
  bool varlen = false;  // lengths uniform in [max(s_k/4, q_len), s_k]
  int splits = 0;
  nlohmann::ordered_json to_json() const {
    return {{"b", b}, {"q_len", q_len}, {"h", h}, {"s_k", s_k}, {"page", page},
            {"form", three ? "three" : "640"}, {"varlen", varlen ? 1 : 0}, {"splits", splits}};
  }
};

Fp8Case read_case(const json& s) {
  if (!s.is_object()) fail_arg("mla_decode_fp8 shape", "must be a JSON object");
  Fp8Case c;
  for (const auto& item : s.items()) {
    // Named references, not a structured binding: clang 14 (the fuzz build) cannot capture
    // one in a lambda.
    const std::string& key = item.key();
    const json& v = item.value();
    auto int_in = [&](int lo, int hi) {
      if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
        fail_arg(fmt::format("mla_decode_fp8 shape key '{}'", key),
                 fmt::format("must be an integer in {}..{}, got {}", lo, hi, v.dump()));
      return v.get<int>();
    };
    if (key == "b") c.b = int_in(1, 32768);
    else if (key == "q_len") c.q_len = int_in(1, 8);
    else if (key == "h") c.h = int_in(1, 128);
    else if (key == "s_k") c.s_k = int_in(1, 1 << 20);
    else if (key == "page") c.page = int_in(64, 256);
    else if (key == "varlen") c.varlen = int_in(0, 1) == 1;
    else if (key == "splits") c.splits = int_in(0, 256);
    else if (key == "form") {
      if (v != "640" && v != "three")
        fail_arg("mla_decode_fp8 shape key 'form'", fmt::format("must be \"640\" or \"three\", got {}", v.dump()));
      c.three = v == "three";
    } else {
      fail_arg(fmt::format("mla_decode_fp8 shape key '{}'", key),
               "is not one of b, q_len, h, s_k, page, form, varlen, splits");
    }
  }
  if (kChunkRows % c.page != 0) fail_arg("mla_decode_fp8 shape key 'page'", "must be 64, 128 or 256");
  return c;
}

class Fp8Problem final : public Problem {
 public:
  Fp8Problem(const Fp8Case& c, uint64_t seed) : c_(c) {
    std::mt19937_64 gen(seed);
    lens_.assign(static_cast<size_t>(c.b), c.s_k);
    if (c.varlen) {
      std::uniform_int_distribution<int> d(std::max(c.s_k / 4, c.q_len), c.s_k);
      for (auto& l : lens_) l = d(gen);
    }
    const MlaPageTable pt = mla_random_page_table(lens_, c.s_k, c.page, kChunkRows / c.page, gen);
    max_pages_ = pt.max_pages;
    num_pages_ = pt.num_pages;
    table_ = pt.table;
    ref_table_ = pt.ref_table;

    // bf16 draws, quantized on the GPU: q per token, one period of cache rows per row.
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t qrows = int64_t{c.b} * c.q_len * c.h, tokens = int64_t{c.b} * c.q_len;
    std::vector<uint16_t> qb(static_cast<size_t>(qrows) * 576), kb(size_t{kChunkRows} * 576);
    for (auto& x : qb) x = float_to_bf16(normal(gen));
    for (auto& x : kb) x = float_to_bf16(normal(gen));
    DeviceBuffer q_in(qb.size() * 2), k_in(kb.size() * 2), k_chunk(size_t{kChunkRows} * 640),
        ks_chunk(size_t{kChunkRows} * 4);
    q_in.upload(qb);
    k_in.upload(kb);
    q_ = DeviceBuffer(static_cast<size_t>(qrows) * 640);
    qs_ = DeviceBuffer(static_cast<size_t>(tokens) * 4);
    MlaFp8QuantizeArgs qa;
    qa.in = TensorView::contiguous(q_in.data(), DType::kBF16, {qrows, 576});
    qa.group = MlaFp8Group::kToken;
    qa.rows_per_group = c.h;
    qa.out = TensorView::contiguous(q_.data(), DType::kU8, {qrows, 640});
    qa.scale = TensorView::contiguous(qs_.data(), DType::kF32, {tokens});
    mla_fp8_quantize(qa, nullptr);
    MlaFp8QuantizeArgs ka;
    ka.in = TensorView::contiguous(k_in.data(), DType::kBF16, {kChunkRows, 576});
    ka.out = TensorView::contiguous(k_chunk.data(), DType::kU8, {kChunkRows, 640});
    ka.scale = TensorView::contiguous(ks_chunk.data(), DType::kF32, {kChunkRows});
    mla_fp8_quantize(ka, nullptr);
    synchronize();
    q_host_ = q_.download_as<uint8_t>(q_.bytes());
    qs_host_ = qs_.download_as<float>(static_cast<size_t>(tokens));
    chunk_ = k_chunk.download_as<uint8_t>(k_chunk.bytes());
    chunk_scale_ = ks_chunk.download_as<float>(size_t{kChunkRows});

    // The pool: the period repeated, in the form the case asks for.
    const size_t rows = std::max<size_t>(1, static_cast<size_t>(num_pages_) * c.page);
    std::vector<uint8_t> content(size_t{kChunkRows} * 512), rope(size_t{kChunkRows} * 128);
    for (size_t r = 0; r < kChunkRows; ++r) {
      std::copy_n(&chunk_[r * 640], 512, &content[r * 512]);
      std::copy_n(&chunk_[r * 640 + 512], 128, &rope[r * 128]);
    }
    kv_ = DeviceBuffer(rows * (c.three ? 512 : 640));
    if (c.three) rope_ = DeviceBuffer(rows * 128);
    ks_ = DeviceBuffer(rows * 4);
    for (size_t r = 0; r < rows; r += kChunkRows) {
      const size_t n = std::min<size_t>(kChunkRows, rows - r);
      if (c.three) {
        ATTNJIT_CU(cuMemcpyHtoD, kv_.ptr() + r * 512, content.data(), n * 512);
        ATTNJIT_CU(cuMemcpyHtoD, rope_.ptr() + r * 128, rope.data(), n * 128);
      } else {
        ATTNJIT_CU(cuMemcpyHtoD, kv_.ptr() + r * 640, chunk_.data(), n * 640);
      }
      ATTNJIT_CU(cuMemcpyHtoD, ks_.ptr() + r * 4, chunk_scale_.data(), n * 4);
    }
    table_d_ = DeviceBuffer(table_.size() * 4);
    table_d_.upload(table_);
    lens_d_ = DeviceBuffer(lens_.size() * 4);
    lens_d_.upload(lens_);
    out_d_ = DeviceBuffer(static_cast<size_t>(qrows) * 1024);
    lse_d_ = DeviceBuffer(static_cast<size_t>(qrows) * 4);
  }

  nlohmann::ordered_json case_json() const override { return c_.to_json(); }
  std::string describe() const override {
    return fmt::format("b={} q_len={} h={} s_k={}{} page={} fp8 {}", c_.b, c_.q_len, c_.h, c_.s_k,
                       c_.varlen ? " varlen" : "", c_.page, c_.three ? "three-tensor" : "640B");
  }
  int copies() const override { return 1; }

  MlaDecodeFp8Args args() const {
    MlaDecodeFp8Args a;
    a.q = TensorView::contiguous(q_.data(), DType::kU8, {c_.b, c_.q_len, c_.h, 640});
    a.q_scale = TensorView::contiguous(qs_.data(), DType::kF32, {int64_t{c_.b} * c_.q_len});
    a.kv_cache = TensorView::contiguous(kv_.data(), DType::kU8, {num_pages_, c_.page, c_.three ? 512 : 640});
    if (c_.three) a.kv_rope = TensorView::contiguous(rope_.data(), DType::kBF16, {num_pages_, c_.page, 64});
    a.kv_scale = TensorView::contiguous(ks_.data(), DType::kF32, {num_pages_, c_.page});
    a.block_table = TensorView::contiguous(table_d_.data(), DType::kI32, {c_.b, max_pages_});
    a.cache_lens = TensorView::contiguous(lens_d_.data(), DType::kI32, {c_.b});
    a.out = TensorView::contiguous(out_d_.data(), DType::kBF16, {c_.b, c_.q_len, c_.h, 512});
    a.lse = TensorView::contiguous(lse_d_.data(), DType::kF32, {c_.b, c_.h, c_.q_len});
    a.softmax_scale = kScale;
    return a;
  }

  Prepared prepare(const json* overrides) override {
    MlaDecodeFp8Shape shape = mla_decode_fp8_shape(args());
    shape.max_len = c_.s_k;
    shape.num_splits = c_.splits;
    const json heuristic = json::parse(mla_decode_fp8_default_config(c_.h, c_.q_len, c_.page).to_json());
    MlaDecodeFp8Config given;
    if (overrides) {
      json runtime;
      given = MlaDecodeFp8Config::from_json(merge_config(heuristic, *overrides, {"num_splits"}, runtime).dump());
      if (runtime.contains("num_splits")) shape.num_splits = runtime["num_splits"].get<int>();
    }
    const MlaDecodeFp8Plan plan = mla_decode_fp8_plan(shape, overrides ? &given : nullptr);
    // check() judges by that kernel's error model
    kernel_ = harness::fp8_kernel_of(plan.config.schedule, plan.config.fp8_mma);
    score_chain_ = plan.config.score_chain;
    return prepared_run<MlaDecodeFp8Plan, MlaDecodeFp8Args>(
        plan, overrides, heuristic,
        [this](int) { return args(); }, mla_decode_fp8_schedule, mla_decode_fp8);
  }

  void poison_output() override {
    out_d_.fill_byte(0xFF);
    lse_d_.fill_byte(0xFF);
  }
  std::vector<uint8_t> output_bytes() const override {
    synchronize();
    return out_d_.download_as<uint8_t>(out_d_.bytes());
  }

  Verdict check(int sampled_rows) const override {
    synchronize();
    const auto bits = out_d_.download_as<uint16_t>(out_d_.bytes() / 2);
    std::vector<float> out(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_float(bits[i]);
    const std::vector<float> lse = lse_d_.download_as<float>(lse_d_.bytes() / 4);
    const std::vector<float> qd = mla_fp8_dequantize(q_host_, qs_host_, c_.h);
    const std::vector<float> kd = mla_fp8_dequantize(chunk_, chunk_scale_, 1);
    MlaProblem p;
    p.batch = c_.b;
    p.q_len = c_.q_len;
    p.num_heads = c_.h;
    p.page_size = c_.page;
    p.num_pages = kChunkRows / c_.page;
    p.max_pages = max_pages_;
    p.q = qd;
    p.kv_cache = kd;
    p.block_table = ref_table_;
    p.cache_lens = lens_;
    p.softmax_scale = static_cast<double>(kScale);
    std::mt19937_64 sample_gen(7);
    const std::vector<MlaRow> rows = sampled_rows > 0 ? mla_sample_rows(p, sampled_rows, sample_gen) : mla_all_rows(p);
    const MlaReference ref = mla_reference(p, rows);
    return verdict_of(mla_compare(p, ref, out, lse, mla_fp8_limits(ref, kernel_, score_chain_)));
  }

  std::string compare(const std::vector<uint8_t>& ref, const std::vector<uint8_t>& got) const override {
    return compare_16bit(ref, got, false, 1e-2);
  }

  // Cache rows read once (640 B, or 512 + 128 in three tensors: the same bytes) + 4 B of σ,
  // q rows (640 B) and σ_Q, out (bf16).
  double bytes() const override {
    int64_t cache_rows = 0;
    for (int l : lens_) cache_rows += l;
    const double rows = static_cast<double>(c_.b) * c_.q_len * c_.h;
    return static_cast<double>(cache_rows) * (640 + 4) + rows * (640 + 1024) + 4.0 * c_.b * c_.q_len;
  }
  double flops() const override {
    int64_t pairs = 0;
    for (int l : lens_)
      for (int t = 0; t < c_.q_len; ++t) pairs += int64_t{c_.h} * mla_visible_keys(l, c_.q_len, t);
    return 2.0 * static_cast<double>(pairs) * (576 + 512);
  }
  json target() const override {  // issue 19's H100 targets
    if (c_.h <= 16) return {{"metric", "gbps"}, {"h100", 2700}};
    if (c_.h == 128 && c_.q_len == 2) return {{"metric", "tflops"}, {"h100", 700}};
    return nullptr;
  }

 private:
  Fp8Case c_;
  std::vector<int> lens_;
  std::vector<int32_t> table_, ref_table_;
  int max_pages_ = 0, num_pages_ = 0;
  harness::Fp8Kernel kernel_ = harness::Fp8Kernel::kWidening;  // the prepared config's kernel
  int score_chain_ = 1;                                          // and its score chain
  std::vector<uint8_t> q_host_, chunk_;
  std::vector<float> qs_host_, chunk_scale_;
  DeviceBuffer q_, qs_, kv_, rope_, ks_, table_d_, lens_d_, out_d_, lse_d_;
};

// The registry's bench shapes (issue 19's rows) in each cache form, then the mixed-length
// row (b 128, h 16, lengths uniform in [2048, 8192]) in each form.
std::vector<Fp8Case> bench_cases() {
  std::vector<Fp8Case> v;
  for (bool three : {false, true}) {
    for (const json& s : ops::find_op("mla_decode_fp8").tuning.bench_shapes) {
      Fp8Case c = read_case(s);
      c.three = three;
      v.push_back(c);
    }
    Fp8Case mixed{128, 1, 16, 8192};
    mixed.varlen = true;
    mixed.three = three;
    v.push_back(mixed);
  }
  return v;
}

}  // namespace

ProblemKind mla_decode_fp8_problem() {
  ProblemKind k;
  k.op = "mla_decode_fp8";
  k.bench_cases = [] {
    std::vector<json> v;
    for (const Fp8Case& c : bench_cases()) v.push_back(c.to_json());
    return v;
  };
  k.test_cases = [] {  // the bench rows' features at test scale
    std::vector<json> v;
    for (Fp8Case c : bench_cases()) {
      c.b = std::min(c.b, 5);
      c.s_k = std::min(c.s_k, 1300);
      v.push_back(c.to_json());
    }
    return v;
  };
  k.make = [](const json& shape, uint64_t seed, size_t) -> std::unique_ptr<Problem> {
    return std::make_unique<Fp8Problem>(read_case(shape), seed);
  };
  return k;
}

}  // namespace attnjit::harness
