// tma_copy as a problem: a [rows, cols] tensor of random bits copied into another, judged
// bit for bit. Its case is the op's tuning vocabulary (rows, cols, dtype).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>

#include "attnjit/ops/tma_copy.hpp"
#include "harness/device.hpp"
#include "harness/problem.hpp"
#include "ops/registry.hpp"

namespace attnjit::harness {
namespace {

using nlohmann::json;

class TmaCopyProblem final : public Problem {
 public:
  TmaCopyProblem(const json& shape, uint64_t seed, size_t l2_bytes)
      : case_(ops::find_op("tma_copy").tuning.canonical_shape(shape)),
        rows_(case_.at("rows").get<int64_t>()),
        cols_(case_.at("cols").get<int64_t>()),
        dtype_(*parse_dtype(case_.at("dtype").get<std::string>())),
        bytes_(static_cast<size_t>(rows_ * cols_ * dtype_bytes(dtype_))) {
    const int copies = l2_bytes > 0 ? copies_out_of_l2(2 * bytes_, l2_bytes, 64) : 1;
    std::mt19937_64 gen(seed);
    std::vector<uint64_t> host((bytes_ + 7) / 8);
    for (int i = 0; i < copies; ++i) {
      for (auto& w : host) w = gen();
      src_.emplace_back(std::max<size_t>(1, bytes_)).upload(host.data(), bytes_);
      dst_.emplace_back(std::max<size_t>(1, bytes_));
    }
  }

  nlohmann::ordered_json case_json() const override {
    return {{"rows", rows_}, {"cols", cols_}, {"dtype", std::string(to_string(dtype_))}};
  }
  std::string describe() const override { return fmt::format("{}x{} {}", rows_, cols_, to_string(dtype_)); }
  int copies() const override { return static_cast<int>(src_.size()); }

  Prepared prepare(const json* overrides) override {
    const json heuristic = json::parse(tma_copy_default_config(dtype_).to_json());
    TmaCopyConfig given;
    if (overrides) {
      json runtime;
      given = TmaCopyConfig::from_json(
          merge_config(heuristic, *overrides, ops::find_op("tma_copy").tuning.runtime_fields, runtime).dump());
    }
    return prepared_run<TmaCopyPlan, TmaCopyArgs>(
        tma_copy_plan(tma_copy_shape(args(0)), overrides ? &given : nullptr), overrides, heuristic,
        [this](int i) { return args(i); }, tma_copy_schedule, tma_copy);
  }

  void poison_output() override { dst_[0].fill_byte(0xA5); }
  std::vector<uint8_t> output_bytes() const override {
    synchronize();
    return dst_[0].download_as<uint8_t>(bytes_);
  }
  Verdict check(int) const override {
    synchronize();
    const std::vector<uint8_t> want = src_[0].download_as<uint8_t>(bytes_);
    const std::string why = compare(want, output_bytes());
    const bool ok = why.empty();
    return {ok, ok ? "bit-exact" : why, {{"passed", ok}, {"bit_exact", ok}}};
  }
  std::string compare(const std::vector<uint8_t>& ref, const std::vector<uint8_t>& got) const override {
    size_t first = ref.size(), count = 0;
    for (size_t i = 0; i < ref.size(); ++i)
      if (i >= got.size() || ref[i] != got[i]) {
        first = std::min(first, i);
        ++count;
      }
    if (count == 0) return {};
    return fmt::format("{} of {} bytes differ from the source (first at byte {})", count, ref.size(), first);
  }

  double bytes() const override { return 2.0 * static_cast<double>(bytes_); }  // read + write
  double flops() const override { return 0; }

 private:
  TmaCopyArgs args(int i) const {
    const size_t k = static_cast<size_t>(i) % src_.size();
    return {TensorView::contiguous(dst_[k].data(), dtype_, {rows_, cols_}),
            TensorView::contiguous(src_[k].data(), dtype_, {rows_, cols_})};
  }

  json case_;
  int64_t rows_, cols_;
  DType dtype_;
  size_t bytes_;
  std::vector<DeviceBuffer> src_, dst_;
};

}  // namespace

ProblemKind tma_copy_problem() {
  ProblemKind k;
  k.op = "tma_copy";
  k.bench_cases = [] {
    const auto& shapes = ops::find_op("tma_copy").tuning.bench_shapes;
    return std::vector<json>(shapes.begin(), shapes.end());
  };
  // Off the tile in both dimensions, and a 1-byte type.
  k.test_cases = [] {
    return std::vector<json>{{{"rows", 1000}, {"cols", 1000}, {"dtype", "bf16"}},
                             {{"rows", 777}, {"cols", 2064}, {"dtype", "e4m3"}}};
  };
  k.make = [](const json& shape, uint64_t seed, size_t l2_bytes) -> std::unique_ptr<Problem> {
    return std::make_unique<TmaCopyProblem>(shape, seed, l2_bytes);
  };
  return k;
}

}  // namespace attnjit::harness
