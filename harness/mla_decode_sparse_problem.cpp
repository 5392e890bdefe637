// mla_decode_sparse as a problem: `attnjit bench mla_decode_sparse`'s rows (issue 20's
// table, both cache layouts) and their test-scale twins, which carry every hostile input
// of the correctness list.
//
// A case's inputs: q ~ N(0, 1) bf16; cache rows ~ N(0, 1) bf16 (hostile: some rows × 1e-3
// or × 1e3, so block scales span the range), quantized by the host reference quantizer
// (bit-exact with the device's, which test_mla_decode_sparse.cpp checks) for the fp8
// layout. A pool of at most kPeriod rows is held whole, and in hostile cases every row no
// index references is NaN; a larger (bench) pool repeats one period of rows. Indices are
// uniform over the pool's rows (pages in random order); hostile cases add -1 padding,
// other negatives, values past the pool and duplicates, a token stride above topk, and
// lengths from -2 to topk + 5.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>

#include "attnjit/error.hpp"
#include "attnjit/ops/mla_decode_sparse.hpp"
#include "driver/driver.hpp"
#include "harness/device.hpp"
#include "harness/mla_decode_sparse_problem.hpp"
#include "harness/mla_sparse_reference.hpp"
#include "harness/problem.hpp"
#include "ops/registry.hpp"

namespace attnjit::harness {
namespace {

using nlohmann::json;

constexpr float kScale = 0.07216878f;  // 1/sqrt(192)
constexpr int64_t kPeriod = 1 << 16;   // rows drawn; a larger pool repeats them

struct SparseCase {
  int b = 128, q_len = 1, h = 128, topk = 2048, topk_extra = 0;
  bool fp8 = true;
  int rows = 32768;           // pool rows per sequence
  std::string sink = "none";  // none, finite, -inf, +inf
  std::string lens = "none";  // none, seq, token
  bool ragged = false, hostile = false;
  int splits = 0;
  nlohmann::ordered_json to_json() const {
    return {{"b", b},         {"q_len", q_len},           {"h", h},
            {"topk", topk},   {"topk_extra", topk_extra}, {"layout", fp8 ? "fp8" : "bf16"},
            {"rows", rows},   {"sink", sink},             {"lens", lens},
            {"ragged", ragged ? 1 : 0}, {"hostile", hostile ? 1 : 0}, {"splits", splits}};
  }
};

SparseCase read_case(const json& s) {
  if (!s.is_object()) fail_arg("mla_decode_sparse shape", "must be a JSON object");
  SparseCase c;
  for (const auto& item : s.items()) {  // no structured binding: clang 14 cannot capture one
    const std::string& key = item.key();
    const json& v = item.value();
    const std::string where = fmt::format("mla_decode_sparse shape key '{}'", key);
    auto int_in = [&](int lo, int hi) {
      if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
        fail_arg(where, fmt::format("must be an integer in {}..{}, got {}", lo, hi, v.dump()));
      return v.get<int>();
    };
    auto word = [&](std::initializer_list<const char*> allowed) {
      for (const char* a : allowed)
        if (v == a) return std::string(a);
      fail_arg(where, fmt::format("is not an allowed word, got {}", v.dump()));
    };
    if (key == "b") c.b = int_in(1, 65535);
    else if (key == "q_len") c.q_len = int_in(1, 8);
    else if (key == "h") c.h = int_in(8, 128);
    else if (key == "topk") c.topk = int_in(1, 1 << 20);
    else if (key == "topk_extra") c.topk_extra = int_in(0, 1 << 20);
    else if (key == "rows") c.rows = int_in(1, 1 << 24);
    else if (key == "layout") c.fp8 = word({"fp8", "bf16"}) == "fp8";
    else if (key == "sink") c.sink = word({"none", "finite", "-inf", "+inf"});
    else if (key == "lens") c.lens = word({"none", "seq", "token"});
    else if (key == "ragged") c.ragged = int_in(0, 1) == 1;
    else if (key == "hostile") c.hostile = int_in(0, 1) == 1;
    else if (key == "splits") c.splits = int_in(0, 256);
    else
      fail_arg(where, "is not one of b, q_len, h, topk, topk_extra, layout, rows, sink, lens, "
                      "ragged, hostile, splits");
  }
  if (c.ragged && c.lens == "seq") fail_arg("mla_decode_sparse shape key 'lens'", "ragged lengths are per token");
  return c;
}

// bf16 row → the cache's row bytes (656 fp8, or the 1152 bf16 bytes).
void encode_row(const std::vector<uint16_t>& bf, bool fp8, uint8_t* dst) {
  if (fp8)
    mla_sparse_quantize_row_host(bf.data(), dst);
  else
    std::memcpy(dst, bf.data(), 1152);
}

// One key source's host and device copies.
struct Source {
  int64_t rows = 0, stride = 0;
  int topk = 0;
  std::vector<uint8_t> held;   // [min(rows, kPeriod), row bytes]: what the reference reads
  std::vector<int32_t> indices, ref_indices, lens;
  DeviceBuffer pool_d, indices_d, lens_d;
};

class SparseProblem final : public Problem, public MlaSparseHooks {
 public:
  SparseProblem(const SparseCase& c, uint64_t seed) : c_(c) {
    // A plan made outside prepare() (the graph test's) runs the default config.
    exact_products_ = mla_decode_sparse_default_config(c.fp8 ? MlaSparseLayout::kFp8 : MlaSparseLayout::kBF16, c.h)
                          .schedule == MlaSparseSchedule::kNarrow;
    std::mt19937_64 gen(seed);
    // Query tokens: padded b·q_len, or ragged per-sequence lengths 0..q_len (two uncovered
    // rows at the end, which the kernel must leave alone).
    if (c.ragged) {
      std::uniform_int_distribution<int> ql(0, c.q_len);
      offsets_.push_back(0);
      for (int b = 0; b < c.b; ++b) offsets_.push_back(offsets_.back() + (b == 0 ? c.q_len : ql(gen)));
      total_q_ = offsets_.back() + 2;
    } else {
      total_q_ = c.b * c.q_len;
    }
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<uint16_t> qb(static_cast<size_t>(total_q_) * c.h * 576);
    for (auto& x : qb) x = float_to_bf16(normal(gen));
    q_host_.resize(qb.size());
    for (size_t i = 0; i < qb.size(); ++i) q_host_[i] = bf16_to_float(qb[i]);
    q_d_ = DeviceBuffer(qb.size() * 2);
    q_d_.upload(qb);
    make_source(main_, int64_t{c.b} * c.rows, c.topk, gen);
    if (c.topk_extra > 0) make_source(extra_, std::max(64, c.rows / 8), c.topk_extra, gen);
    if (c.sink != "none") {
      std::uniform_real_distribution<float> u(-2.0f, 4.0f);
      sink_.resize(static_cast<size_t>(c.h));
      for (auto& s : sink_)
        s = c.sink == "finite" ? u(gen) : (c.sink == "-inf" ? -INFINITY : INFINITY);
      sink_d_ = DeviceBuffer(sink_.size() * 4);
      sink_d_.upload(sink_);
    }
    if (c.ragged) {
      offsets_d_ = DeviceBuffer(offsets_.size() * 4);
      offsets_d_.upload(offsets_);
    }
    out_d_ = DeviceBuffer(static_cast<size_t>(total_q_) * c.h * 1024);
    lse_d_ = DeviceBuffer(static_cast<size_t>(total_q_) * c.h * 4);
  }

  nlohmann::ordered_json case_json() const override { return c_.to_json(); }
  std::string describe() const override {
    return fmt::format("b={} q_len={} h={} topk={}{} {} sink={} lens={}{}{}", c_.b, c_.q_len, c_.h,
                       c_.topk, c_.topk_extra ? fmt::format("+{}", c_.topk_extra) : "",
                       c_.fp8 ? "fp8" : "bf16", c_.sink, c_.lens, c_.ragged ? " ragged" : "",
                       c_.hostile ? " hostile" : "");
  }
  int copies() const override { return 1; }

  TensorView pool_view(const Source& s) const {
    return c_.fp8 ? TensorView::contiguous(s.pool_d.data(), DType::kU8, {s.rows, 656})
                  : TensorView::contiguous(s.pool_d.data(), DType::kBF16, {s.rows, 576});
  }
  TensorView index_view(const Source& s) const {
    if (c_.ragged)
      return TensorView::strided(s.indices_d.data(), DType::kI32, {total_q_, s.topk}, {s.stride, 1});
    return TensorView::strided(s.indices_d.data(), DType::kI32, {c_.b, c_.q_len, s.topk},
                               {c_.q_len * s.stride, s.stride, 1});
  }
  TensorView lens_view(const Source& s) const {
    if (c_.lens == "none") return {};
    if (c_.lens == "seq") return TensorView::contiguous(s.lens_d.data(), DType::kI32, {c_.b});
    if (c_.ragged) return TensorView::contiguous(s.lens_d.data(), DType::kI32, {total_q_});
    return TensorView::contiguous(s.lens_d.data(), DType::kI32, {c_.b, c_.q_len});
  }

  MlaDecodeSparseArgs args() const override {
    MlaDecodeSparseArgs a;
    if (c_.ragged) {
      a.q = TensorView::contiguous(q_d_.data(), DType::kBF16, {total_q_, c_.h, 576});
      a.q_offsets = TensorView::contiguous(offsets_d_.data(), DType::kI32, {c_.b + 1});
      a.max_q_len = c_.q_len;
      a.out = TensorView::contiguous(out_d_.data(), DType::kBF16, {total_q_, c_.h, 512});
      a.lse = TensorView::contiguous(lse_d_.data(), DType::kF32, {c_.h, total_q_});
    } else {
      a.q = TensorView::contiguous(q_d_.data(), DType::kBF16, {c_.b, c_.q_len, c_.h, 576});
      a.out = TensorView::contiguous(out_d_.data(), DType::kBF16, {c_.b, c_.q_len, c_.h, 512});
      a.lse = TensorView::contiguous(lse_d_.data(), DType::kF32, {c_.b, c_.h, c_.q_len});
    }
    a.kv_cache = pool_view(main_);
    a.indices = index_view(main_);
    a.topk_lengths = lens_view(main_);
    if (c_.topk_extra > 0) {
      a.extra_kv_cache = pool_view(extra_);
      a.extra_indices = index_view(extra_);
      a.extra_topk_lengths = lens_view(extra_);
    }
    if (!sink_.empty()) a.attn_sink = TensorView::contiguous(sink_d_.data(), DType::kF32, {c_.h});
    a.softmax_scale = kScale;
    return a;
  }

  Prepared prepare(const json* overrides) override {
    MlaDecodeSparseShape shape = mla_decode_sparse_shape(args());
    shape.num_splits = c_.splits;
    const json heuristic = json::parse(
        mla_decode_sparse_default_config(c_.fp8 ? MlaSparseLayout::kFp8 : MlaSparseLayout::kBF16, c_.h)
            .to_json());
    MlaDecodeSparseConfig given;
    if (overrides) {
      json runtime;
      given = MlaDecodeSparseConfig::from_json(merge_config(heuristic, *overrides, {"num_splits"}, runtime).dump());
      if (runtime.contains("num_splits")) shape.num_splits = runtime["num_splits"].get<int>();
    }
    MlaDecodeSparsePlan plan = mla_decode_sparse_plan(shape, overrides ? &given : nullptr);
    exact_products_ = plan.config.schedule == MlaSparseSchedule::kNarrow;
    return prepared_run<MlaDecodeSparsePlan, MlaDecodeSparseArgs>(
        std::move(plan), overrides, heuristic,
        [this](int) { return args(); }, mla_decode_sparse_schedule, mla_decode_sparse);
  }

  void poison_output() override {
    out_d_.fill_byte(0xFF);
    lse_d_.fill_byte(0xFF);
  }
  std::vector<uint8_t> output_bytes() const override {
    synchronize();
    return out_d_.download_as<uint8_t>(out_d_.bytes());
  }

  void redraw_indices(uint64_t seed) override {
    std::mt19937_64 gen(seed);
    std::vector<int32_t> used;
    for (int32_t e : main_.ref_indices)
      if (e >= 0) used.push_back(e);
    std::uniform_int_distribution<size_t> pick(0, used.empty() ? 0 : used.size() - 1);
    std::uniform_int_distribution<int> pct(0, 99);
    const int64_t held = static_cast<int64_t>(main_.held.size() / (c_.fp8 ? 656 : 1152));
    for (int64_t g = 0; g < total_q_; ++g)
      for (int j = 0; j < main_.topk; ++j) {
        const size_t at = static_cast<size_t>(g * main_.stride + j);
        const int roll = pct(gen);
        // A held row r is also pool row r (the pool repeats the held rows from row 0).
        main_.indices[at] = used.empty() || roll < 10 ? -1
                            : roll < 13             ? static_cast<int32_t>(main_.rows + roll)
                                                    : used[pick(gen)];
        main_.ref_indices[at] = main_.indices[at] >= 0 && main_.indices[at] < main_.rows
                                    ? static_cast<int32_t>(main_.indices[at] % held)
                                    : -1;
      }
    main_.indices_d.upload(main_.indices);
  }

  MlaSparseSource ref_source(const Source& s) const {
    MlaSparseSource r;
    r.pool = s.held;
    r.rows = static_cast<int64_t>(s.held.size() / (c_.fp8 ? 656 : 1152));
    r.indices = s.ref_indices;
    r.stride = s.stride;
    r.topk = s.topk;
    r.lens = s.lens;
    r.lens_per_token = c_.lens == "token";
    return r;
  }

  // sampled_rows > 0: about that many (token, head) rows, as whole tokens (every head of
  // a token comes from one CTA pair), the first and last token always among them.
  Verdict check(int sampled_rows) const override {
    synchronize();
    const auto bits = out_d_.download_as<uint16_t>(out_d_.bytes() / 2);
    std::vector<float> out(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_float(bits[i]);
    const std::vector<float> lse = lse_d_.download_as<float>(lse_d_.bytes() / 4);
    MlaSparseProblem p;
    p.batch = c_.b;
    p.q_len = c_.q_len;
    p.num_heads = c_.h;
    p.fp8 = c_.fp8;
    p.q_offsets = offsets_;
    p.total_q = static_cast<int>(total_q_);
    p.q = q_host_;
    p.main = ref_source(main_);
    p.has_extra = c_.topk_extra > 0;
    if (p.has_extra) p.extra = ref_source(extra_);
    p.sink = sink_;
    p.softmax_scale = static_cast<double>(kScale);
    // The widening kernels' bf16 wgmma takes bf16(e4m3 · scale); the narrow kernel keeps
    // e4m3 exact in f16 and applies the scale in f32.
    p.fp8_products_in_bf16 = !exact_products_;
    std::vector<char> only;
    if (sampled_rows > 0) {
      only.assign(static_cast<size_t>(total_q_), 0);
      only.front() = only.back() = 1;
      std::mt19937_64 gen(7);
      std::uniform_int_distribution<int64_t> token(0, total_q_ - 1);
      for (int i = 0; i < std::max(1, sampled_rows / c_.h); ++i) only[static_cast<size_t>(token(gen))] = 1;
    }
    const MlaSparseReference ref = mla_sparse_reference(p, only.empty() ? nullptr : &only);
    MlaCompareLimits limits;  // mla_decode's: bf16 wgmma on bf16 rows, as here
    limits.lse_abs = mla_lse_limit(ref.lse, 4e-6);  // hostile rows × 1e3 give |lse| in the thousands
    return verdict_of(mla_sparse_compare(p, ref, out, lse, limits));
  }

  std::string compare(const std::vector<uint8_t>& ref, const std::vector<uint8_t>& got) const override {
    return compare_16bit(ref, got, false, 1e-2);
  }

  // Rows gathered (every valid index, duplicates included) + q + out.
  double bytes() const override {
    const double row = c_.fp8 ? 656 : 1152;
    return static_cast<double>(valid_keys_) * row + static_cast<double>(total_q_) * c_.h * (1152 + 1024);
  }
  double flops() const override { return 2.0 * static_cast<double>(valid_keys_) * c_.h * (576 + 512); }
  json target() const override {  // issue 20's H100 targets
    if (c_.h == 128 && c_.q_len == 2 && c_.topk == 2048 && c_.fp8)
      return {{"metric", "tflops"}, {"h100", 380}};
    if (c_.h <= 16) return {{"metric", "gbps"}, {"h100", 2400}};  // 80 % of the copy rate
    return nullptr;
  }

 private:
  void make_source(Source& s, int64_t rows, int topk, std::mt19937_64& gen) {
    const int row_bytes = c_.fp8 ? 656 : 1152;
    s.rows = rows;
    s.topk = topk;
    s.stride = c_.hostile ? topk + 3 : topk;  // hostile: rows not back to back
    s.indices.assign(static_cast<size_t>(total_q_ * s.stride), -7);
    std::uniform_int_distribution<int64_t> any(0, rows - 1);
    std::uniform_int_distribution<int> pct(0, 99);
    for (int64_t g = 0; g < total_q_; ++g)
      for (int j = 0; j < topk; ++j) {
        int32_t& e = s.indices[static_cast<size_t>(g * s.stride + j)];
        const int roll = c_.hostile ? pct(gen) : 99;
        if (roll < 10) e = -1;
        else if (roll < 13) e = roll == 10 ? std::numeric_limits<int32_t>::min() : -2 - roll;
        else if (roll < 16) e = static_cast<int32_t>(rows + (roll - 13) * 1000);
        else if (roll < 26 && j > 0) e = s.indices[static_cast<size_t>(g * s.stride + j / 2)];
        else e = static_cast<int32_t>(any(gen));
      }
    if (c_.lens != "none") {
      const int64_t n = c_.lens == "seq" ? c_.b : total_q_;
      std::uniform_int_distribution<int> l(-2, topk + 5);
      s.lens.resize(static_cast<size_t>(n));
      for (auto& x : s.lens) x = l(gen);
      s.lens[0] = 0;                                // a token (or sequence) that reads nothing
      if (n > 1) s.lens.back() = topk + 3;         // one past topk, which the op clamps
      s.lens_d = DeviceBuffer(s.lens.size() * 4);
      s.lens_d.upload(s.lens);
    }
    // The rows held and referenced: the whole pool when it fits one period (unreferenced
    // rows NaN when hostile), else one period repeated (the reference reads idx % period).
    const int64_t held = std::min(rows, kPeriod);
    std::vector<char> referenced(static_cast<size_t>(held), c_.hostile ? 0 : 1);
    s.ref_indices = s.indices;
    for (auto& e : s.ref_indices) {
      if (e < 0 || e >= rows) e = -1;
      else e = static_cast<int32_t>(e % held);
      if (e >= 0) referenced[static_cast<size_t>(e)] = 1;
    }
    for (size_t i = 0; i < s.indices.size(); ++i)
      if (s.indices[i] >= 0 && s.indices[i] < rows) ++valid_keys_;
    s.held.assign(static_cast<size_t>(held) * row_bytes, 0);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> pct100(0, 99);
    std::vector<uint16_t> bf(576);
    for (int64_t r = 0; r < held; ++r) {
      const float mag = !c_.hostile ? 1.0f : (pct100(gen) < 5 ? 1e-3f : (pct100(gen) < 5 ? 1e3f : 1.0f));
      const bool nan = !referenced[static_cast<size_t>(r)];
      for (auto& x : bf) x = float_to_bf16(nan ? NAN : normal(gen) * mag);
      encode_row(bf, c_.fp8, &s.held[static_cast<size_t>(r) * row_bytes]);
    }
    s.pool_d = DeviceBuffer(static_cast<size_t>(rows) * row_bytes);
    for (int64_t r = 0; r < rows; r += held) {
      const int64_t n = std::min(held, rows - r);
      ATTNJIT_CU(cuMemcpyHtoD, s.pool_d.ptr() + r * row_bytes, s.held.data(), n * row_bytes);
    }
    s.indices_d = DeviceBuffer(s.indices.size() * 4);
    s.indices_d.upload(s.indices);
  }

  SparseCase c_;
  int64_t total_q_ = 0, valid_keys_ = 0;
  std::vector<int32_t> offsets_;
  std::vector<float> q_host_, sink_;
  Source main_, extra_;
  DeviceBuffer q_d_, offsets_d_, sink_d_, out_d_, lse_d_;
  bool exact_products_ = false;  // the run's kernel is the narrow one (prepare)
};

// The registry's bench rows (issue 20's table, both layouts; 32k rows per sequence, no
// hostile values).
std::vector<SparseCase> bench_cases() {
  std::vector<SparseCase> v;
  for (const json& s : ops::find_op("mla_decode_sparse").tuning.bench_shapes) v.push_back(read_case(s));
  return v;
}

}  // namespace

ProblemKind mla_decode_sparse_problem() {
  ProblemKind k;
  k.op = "mla_decode_sparse";
  k.bench_cases = [] {
    std::vector<json> v;
    for (const SparseCase& c : bench_cases()) v.push_back(c.to_json());
    return v;
  };
  k.test_cases = [] {  // the bench rows' features at test scale, hostile values on
    std::vector<json> v;
    for (SparseCase c : bench_cases()) {
      c.b = std::min(c.b, 3);
      c.topk = c.topk == 2048 ? 300 : 700;  // not a multiple of 64
      c.rows = 1024;
      c.hostile = true;
      v.push_back(c.to_json());
    }
    return v;
  };
  k.make = [](const json& shape, uint64_t seed, size_t) -> std::unique_ptr<Problem> {
    return std::make_unique<SparseProblem>(read_case(shape), seed);
  };
  return k;
}

}  // namespace attnjit::harness
