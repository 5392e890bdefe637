// merge_states as a problem: two random attention states [tokens, heads, d] with their lse,
// merged and judged against float64 on every row. The states carry the edge rows an engine
// meets: one side empty (lse −inf, its values NaN: they must not leak), both empty (out 0
// exactly, lse −inf), and one side's weight underflowing next to the other's. lse_a is read
// head-major ([heads, tokens], as mha_fwd writes it) and lse_b token-major, so both stride
// orders run in every case.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>

#include "attnjit/ops/merge_states.hpp"
#include "harness/device.hpp"
#include "harness/problem.hpp"
#include "ops/registry.hpp"

namespace attnjit::harness {
namespace {

using nlohmann::json;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Which side of row r is empty (lse −inf): a, b, both or neither, by fixed residues so every
// case of a few hundred rows has all four; and every 23rd row has its sides 120 apart in
// the lse (exp of the gap underflows in f32).
bool a_empty(int64_t r) { return r % 17 == 3 || r % 97 == 7; }
bool b_empty(int64_t r) { return r % 19 == 5 || r % 97 == 7; }
bool far_apart(int64_t r) { return r % 23 == 11; }

class MergeStatesProblem final : public Problem {
 public:
  MergeStatesProblem(const json& shape, uint64_t seed, size_t l2_bytes)
      : case_(ops::find_op("merge_states").tuning.canonical_shape(shape)),
        tokens_(case_.at("tokens").get<int64_t>()),
        heads_(case_.at("heads").get<int64_t>()),
        d_(case_.at("head_dim").get<int64_t>()),
        dtype_(*parse_dtype(case_.at("dtype").get<std::string>())),
        log2_(case_.at("lse_log2").get<int64_t>() != 0),
        eb_(dtype_bytes(dtype_)),
        rows_(tokens_ * heads_) {
    const size_t v_bytes = static_cast<size_t>(rows_ * d_ * eb_), lse_bytes = static_cast<size_t>(rows_ * 4);
    const int copies = l2_bytes > 0 ? copies_out_of_l2(3 * v_bytes + 3 * lse_bytes, l2_bytes, 64) : 1;
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f), lse(-8.0f, 8.0f);
    std::vector<uint8_t> va(v_bytes), vb(v_bytes);
    std::vector<float> la(static_cast<size_t>(rows_)), lb(static_cast<size_t>(rows_));
    for (int i = 0; i < copies; ++i) {
      for (int64_t r = 0; r < rows_; ++r) {
        float a = lse(gen), b = lse(gen);
        if (far_apart(r)) b = a + (r % 2 ? 120.0f : -120.0f);
        if (a_empty(r)) a = -std::numeric_limits<float>::infinity();
        if (b_empty(r)) b = -std::numeric_limits<float>::infinity();
        // lse_a head-major: element (token t, head h) at h · tokens + t.
        la[static_cast<size_t>((r % heads_) * tokens_ + r / heads_)] = a;
        lb[static_cast<size_t>(r)] = b;
        for (int64_t k = 0; k < d_; ++k) {
          put(va, r * d_ + k, a_empty(r) ? std::nanf("") : value(gen));
          put(vb, r * d_ + k, b_empty(r) ? std::nanf("") : value(gen));
        }
      }
      if (i == 0) ref_ = reference(va, la, vb, lb);
      v_a_.emplace_back(std::max<size_t>(1, v_bytes)).upload(va.data(), v_bytes);
      v_b_.emplace_back(std::max<size_t>(1, v_bytes)).upload(vb.data(), v_bytes);
      lse_a_.emplace_back(std::max<size_t>(1, lse_bytes)).upload(la.data(), lse_bytes);
      lse_b_.emplace_back(std::max<size_t>(1, lse_bytes)).upload(lb.data(), lse_bytes);
      v_out_.emplace_back(std::max<size_t>(1, v_bytes));
      lse_out_.emplace_back(std::max<size_t>(1, lse_bytes));
    }
  }

  nlohmann::ordered_json case_json() const override {
    return {{"tokens", tokens_}, {"heads", heads_}, {"head_dim", d_},
            {"dtype", std::string(to_string(dtype_))}, {"lse_log2", log2_ ? 1 : 0}};
  }
  std::string describe() const override {
    return fmt::format("{} tokens x {} heads x d{} {}{}", tokens_, heads_, d_, to_string(dtype_),
                       log2_ ? " log2" : "");
  }
  int copies() const override { return static_cast<int>(v_a_.size()); }

  Prepared prepare(const json* overrides) override {
    MergeStatesConfig base = merge_states_default_config(dtype_, static_cast<int>(d_));
    base.lse_log2 = log2_;  // the case's lse base is part of the problem, not a choice
    const json heuristic = json::parse(base.to_json());
    MergeStatesConfig given = base;
    if (overrides) {
      json runtime;
      given = MergeStatesConfig::from_json(
          merge_config(heuristic, *overrides, ops::find_op("merge_states").tuning.runtime_fields, runtime).dump());
    }
    return prepared_run<MergeStatesPlan, MergeStatesArgs>(
        merge_states_plan(merge_states_shape(args(0)), &given), overrides, heuristic,
        [this](int i) { return args(i); }, merge_states_schedule, merge_states);
  }

  void poison_output() override {
    v_out_[0].fill_byte(0xFF);  // NaN in every float type
    lse_out_[0].fill_byte(0xFF);
  }
  std::vector<uint8_t> output_bytes() const override {
    synchronize();
    std::vector<uint8_t> out = v_out_[0].download_as<uint8_t>(static_cast<size_t>(rows_ * d_ * eb_));
    const std::vector<uint8_t> lse = lse_out_[0].download_as<uint8_t>(static_cast<size_t>(rows_ * 4));
    out.insert(out.end(), lse.begin(), lse.end());
    return out;
  }

  // Every row: relative L2 of the values, each row's largest error against its own scale,
  // empty rows exactly 0 with lse −inf, no NaN (the poison), the lse within 1e-5 + 1e-6·|lse|.
  Verdict check(int) const override {
    const std::vector<uint8_t> got = output_bytes();
    double diff2 = 0, ref2 = 0, worst_row = 0, worst_lse = 0;
    int64_t not_finite = 0, empty_wrong = 0;
    for (int64_t r = 0; r < rows_; ++r) {
      double row_diff = 0, row_ref = 0;
      for (int64_t k = 0; k < d_; ++k) {
        const double g = get(got, r * d_ + k), want = ref_.v[static_cast<size_t>(r * d_ + k)];
        if (!std::isfinite(g)) ++not_finite;
        diff2 += (g - want) * (g - want), ref2 += want * want;
        row_diff = std::max(row_diff, std::abs(g - want)), row_ref = std::max(row_ref, std::abs(want));
      }
      float lse;
      std::memcpy(&lse, got.data() + rows_ * d_ * eb_ + r * 4, 4);
      const double want_lse = ref_.lse[static_cast<size_t>(r)];
      if (a_empty(r) && b_empty(r)) {
        empty_wrong += row_diff != 0 || lse != -std::numeric_limits<float>::infinity();
        continue;
      }
      if (!std::isfinite(lse)) ++not_finite;
      worst_lse = std::max(worst_lse, std::abs(lse - want_lse) / (1e-5 + 1e-6 * std::abs(want_lse)));
      worst_row = std::max(worst_row, row_diff / std::max(row_ref, 1e-30));
    }
    const double rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : 0;
    const double limit = dtype_ == DType::kF32 ? 1e-6 : dtype_ == DType::kF16 ? 1e-3 : 4e-3;
    const bool ok = not_finite == 0 && empty_wrong == 0 && rel <= limit && worst_row <= 4 * limit &&
                    worst_lse <= 1.0;
    return {ok,
            fmt::format("rel_l2 {:.3g} (limit {}), worst row {:.3g}, lse error {:.3g} of its bound, {} "
                        "not finite, {} empty rows not 0 / -inf, {} rows",
                        rel, limit, worst_row, worst_lse, not_finite, empty_wrong, rows_),
            {{"passed", ok}, {"rel_l2", rel}, {"worst_row_err", worst_row}, {"rows_checked", rows_}}};
  }
  std::string compare(const std::vector<uint8_t>& ref, const std::vector<uint8_t>& got) const override {
    if (ref == got) return {};
    const size_t v_bytes = static_cast<size_t>(rows_ * d_ * eb_);
    if (dtype_ != DType::kF32 && ref.size() == got.size())
      return compare_16bit({ref.begin(), ref.begin() + v_bytes}, {got.begin(), got.begin() + v_bytes},
                           dtype_ == DType::kF16, 4e-3);
    return "outputs differ";
  }

  // Both states read and the merge written, values and lse.
  double bytes() const override { return 3.0 * static_cast<double>(rows_ * (d_ * eb_ + 4)); }
  double flops() const override { return 0; }

 private:
  struct Reference {
    std::vector<double> v, lse;
  };

  void put(std::vector<uint8_t>& buf, int64_t i, float x) const {
    if (dtype_ == DType::kF32) {
      std::memcpy(buf.data() + i * 4, &x, 4);
      return;
    }
    const uint16_t h = dtype_ == DType::kBF16 ? float_to_bf16(x) : float_to_f16(x);
    std::memcpy(buf.data() + i * 2, &h, 2);
  }
  double get(const std::vector<uint8_t>& buf, int64_t i) const {
    if (dtype_ == DType::kF32) {
      float x;
      std::memcpy(&x, buf.data() + i * 4, 4);
      return x;
    }
    uint16_t h;
    std::memcpy(&h, buf.data() + i * 2, 2);
    return dtype_ == DType::kBF16 ? bf16_to_float(h) : f16_to_float(h);
  }

  // float64 merge of the values as the GPU reads them.
  Reference reference(const std::vector<uint8_t>& va, const std::vector<float>& la,
                      const std::vector<uint8_t>& vb, const std::vector<float>& lb) const {
    Reference ref{std::vector<double>(static_cast<size_t>(rows_ * d_)), std::vector<double>(static_cast<size_t>(rows_))};
    const double base = log2_ ? 2.0 : std::exp(1.0);
    for (int64_t r = 0; r < rows_; ++r) {
      const double a = la[static_cast<size_t>((r % heads_) * tokens_ + r / heads_)];
      const double b = lb[static_cast<size_t>(r)];
      const double m = std::max(a, b);
      const double wa = a == -kInf ? 0 : std::pow(base, a - m), wb = b == -kInf ? 0 : std::pow(base, b - m);
      const double sum = wa + wb;
      ref.lse[static_cast<size_t>(r)] = sum > 0 ? m + std::log(sum) / std::log(base) : -kInf;
      for (int64_t k = 0; k < d_; ++k) {
        double x = 0;
        if (wa > 0) x += wa * get(va, r * d_ + k);
        if (wb > 0) x += wb * get(vb, r * d_ + k);
        ref.v[static_cast<size_t>(r * d_ + k)] = sum > 0 ? x / sum : 0;
      }
    }
    return ref;
  }

  MergeStatesArgs args(int i) const {
    const size_t k = static_cast<size_t>(i) % v_a_.size();
    return {TensorView::contiguous(v_a_[k].data(), dtype_, {tokens_, heads_, d_}),
            TensorView::strided(lse_a_[k].data(), DType::kF32, {tokens_, heads_}, {1, tokens_}),
            TensorView::contiguous(v_b_[k].data(), dtype_, {tokens_, heads_, d_}),
            TensorView::contiguous(lse_b_[k].data(), DType::kF32, {tokens_, heads_}),
            TensorView::contiguous(v_out_[k].data(), dtype_, {tokens_, heads_, d_}),
            TensorView::contiguous(lse_out_[k].data(), DType::kF32, {tokens_, heads_})};
  }

  json case_;
  int64_t tokens_, heads_, d_;
  DType dtype_;
  bool log2_;
  int64_t eb_, rows_;
  Reference ref_;
  std::vector<DeviceBuffer> v_a_, v_b_, lse_a_, lse_b_, v_out_, lse_out_;
};

}  // namespace

ProblemKind merge_states_problem() {
  ProblemKind k;
  k.op = "merge_states";
  k.bench_cases = [] {
    const auto& shapes = ops::find_op("merge_states").tuning.bench_shapes;
    return std::vector<json>(shapes.begin(), shapes.end());
  };
  // Every dtype, natural and log2 lse, head dims on and off a warp's 32 lanes per row
  // (192 bf16: 24 vectors, 8 lanes a row; 576: the MLA cache row), odd token counts.
  k.test_cases = [] {
    return std::vector<json>{
        {{"tokens", 777}, {"heads", 8}, {"head_dim", 128}, {"dtype", "bf16"}},
        {{"tokens", 129}, {"heads", 16}, {"head_dim", 512}, {"dtype", "bf16"}, {"lse_log2", 1}},
        {{"tokens", 300}, {"heads", 5}, {"head_dim", 192}, {"dtype", "f16"}},
        {{"tokens", 65}, {"heads", 12}, {"head_dim", 576}, {"dtype", "bf16"}},
        {{"tokens", 211}, {"heads", 4}, {"head_dim", 64}, {"dtype", "f32"}, {"lse_log2", 1}},
        {{"tokens", 1}, {"heads", 1}, {"head_dim", 8}, {"dtype", "bf16"}}};
  };
  k.make = [](const json& shape, uint64_t seed, size_t l2_bytes) -> std::unique_ptr<Problem> {
    return std::make_unique<MergeStatesProblem>(shape, seed, l2_bytes);
  };
  return k;
}

}  // namespace attnjit::harness
