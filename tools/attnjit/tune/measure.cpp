// Benches of the registry's tunable ops (measure.hpp).
#include "measure.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "attnjit/error.hpp"
#include "attnjit/ops/mha_fwd.hpp"
#include "attnjit/ops/mla_decode.hpp"
#include "attnjit/ops/tma_copy.hpp"
#include "bench_util.hpp"
#include "harness/mha_problem.hpp"
#include "harness/mla_problem.hpp"
#include "space.hpp"

namespace attnjit::tune {
namespace {

using nlohmann::json;
using cli::Buffer;
using cli::from_bits;
using cli::to_bits;

std::vector<uint8_t> download(const Buffer& b) {
  ATTNJIT_CU(cuCtxSynchronize);
  std::vector<uint8_t> host(b.bytes());
  ATTNJIT_CU(cuMemcpyDtoH, host.data(), b.ptr(), b.bytes());
  return host;
}

// ---- tma_copy: bit-exact -------------------------------------------------------------
class TmaCopyBench final : public Bench {
 public:
  TmaCopyBench(const json& shape, const driver::DeviceInfo& dev)
      : rows_(shape.at("rows").get<int64_t>()),
        cols_(shape.at("cols").get<int64_t>()),
        dtype_(*parse_dtype(shape.at("dtype").get<std::string>())) {
    bytes_ = static_cast<size_t>(rows_ * cols_ * dtype_bytes(dtype_));
    const int copies = harness::copies_out_of_l2(2 * bytes_, dev.l2_bytes, 64);
    std::mt19937_64 gen(0x7475u);
    std::vector<uint64_t> host((bytes_ + 7) / 8);
    for (int i = 0; i < copies; ++i) {
      src_.emplace_back(bytes_);
      dst_.emplace_back(bytes_);
      for (auto& w : host) w = gen();
      ATTNJIT_CU(cuMemcpyHtoD, src_.back().ptr(), host.data(), bytes_);
    }
  }

  std::function<void(int)> prepare(const json& candidate) override {
    const TmaCopyConfig config = TmaCopyConfig::from_json(candidate.dump());
    const TmaCopyPlan plan = tma_copy_plan(tma_copy_shape({view(dst_[0]), view(src_[0])}), &config);
    return [this, plan](int i) {
      const size_t k = static_cast<size_t>(i) % src_.size();
      tma_copy({view(dst_[k]), view(src_[k])}, plan, {}, nullptr);
    };
  }
  void poison_output() override {
    ATTNJIT_CU(cuMemsetD8Async, dst_[0].ptr(), 0xA5, bytes_, nullptr);
  }
  std::vector<uint8_t> output() override { return download(dst_[0]); }
  std::string compare(const std::vector<uint8_t>& ref, const std::vector<uint8_t>& got) const override {
    size_t first = ref.size(), count = 0;
    for (size_t i = 0; i < ref.size(); ++i)
      if (ref[i] != got[i]) {
        first = std::min(first, i);
        ++count;
      }
    if (count == 0) return {};
    return fmt::format("{} of {} bytes differ from the reference copy (first at byte {})", count,
                       ref.size(), first);
  }

 private:
  TensorView view(const Buffer& b) const {
    return TensorView::contiguous(b.data(), dtype_, {rows_, cols_});
  }
  int64_t rows_, cols_;
  DType dtype_;
  size_t bytes_ = 0;
  std::vector<Buffer> src_, dst_;
};

// ---- mla_decode: within rounding of the reference's output ---------------------------

// Split count and tile size change the summation order, so outputs differ by rounding
// (bf16: ~2^-9 relative per element); a wrong kernel is off by O(1).
constexpr double kMlaMaxRelL2 = 1e-2;

class MlaDecodeBench final : public Bench {
 public:
  MlaDecodeBench(const json& shape, const driver::DeviceInfo& dev)
      : problem_(harness::mla_decode_case(shape), 0x6D6C61u, dev.l2_bytes) {}

  std::function<void(int)> prepare(const json& candidate) override {
    json config = candidate;
    const int wanted = config.value("num_splits", 0);
    config.erase("num_splits");
    const MlaDecodeConfig c = MlaDecodeConfig::from_json(config.dump());
    MlaDecodeShape shape = problem_.shape();
    shape.num_splits = wanted;  // 0 → the heuristic's (the worker has no DB)
    const MlaDecodePlan plan = mla_decode_plan(shape, &c);
    if (plan.workspace_bytes > 0 && (!workspace_ || workspace_->bytes() < plan.workspace_bytes)) {
      workspace_.reset();
      workspace_ = std::make_unique<Buffer>(plan.workspace_bytes);
    }
    const Workspace ws{plan.workspace_bytes > 0 ? workspace_->data() : nullptr,
                       plan.workspace_bytes};
    return [this, plan, ws](int i) { mla_decode(problem_.args(i), plan, ws, nullptr); };
  }
  void poison_output() override { problem_.poison_output(); }
  std::vector<uint8_t> output() override { return problem_.output_bytes(); }
  std::string compare(const std::vector<uint8_t>& ref, const std::vector<uint8_t>& got) const override {
    const size_t n = ref.size() / 2;
    double diff2 = 0, ref2 = 0;
    size_t nonfinite = 0;
    for (size_t i = 0; i < n; ++i) {
      uint16_t rb, gb;
      std::memcpy(&rb, ref.data() + 2 * i, 2);
      std::memcpy(&gb, got.data() + 2 * i, 2);
      const double r = from_bits(rb, problem_.spec().dtype), g = from_bits(gb, problem_.spec().dtype);
      if (std::isfinite(r) != std::isfinite(g)) {
        ++nonfinite;
        continue;
      }
      if (!std::isfinite(r)) continue;
      diff2 += (g - r) * (g - r);
      ref2 += r * r;
    }
    const double rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
    if (nonfinite == 0 && rel <= kMlaMaxRelL2) return {};
    return fmt::format("output differs from the reference's: relative L2 error {:.3g} (limit {}), "
                       "{} elements finite in one and not the other",
                       rel, kMlaMaxRelL2, nonfinite);
  }

 private:
  harness::MlaDecodeProblem problem_;
  std::unique_ptr<Buffer> workspace_;
};

// ---- mha_fwd: within rounding of the reference's output -----------------------------
// Tile width, ring depth and split count change the summation order of the softmax and
// P·V sums only: bf16 outputs of two correct tilings differ by rounding (~2^-8 relative per
// element); a wrong tile is off by O(1).
constexpr double kMhaMaxRelL2 = 1e-2;

class MhaFwdBench final : public Bench {
 public:
  MhaFwdBench(const json& shape, const driver::DeviceInfo& dev)
      : problem_(harness::mha_fwd_case(shape), 0x6D6861u, dev.l2_bytes) {}

  std::function<void(int)> prepare(const json& candidate) override {
    json config = candidate;
    const int wanted = config.value("num_splits", 0);
    config.erase("num_splits");
    const MhaFwdConfig c = MhaFwdConfig::from_json(config.dump());
    MhaFwdShape shape = problem_.shape(c);
    shape.num_splits = wanted;  // 0 → the heuristic's (the worker has no DB)
    const MhaFwdPlan plan = mha_fwd_plan(shape, &c);
    if (plan.workspace_bytes > 0 && (!workspace_ || workspace_->bytes() < plan.workspace_bytes)) {
      workspace_.reset();
      workspace_ = std::make_unique<Buffer>(plan.workspace_bytes);
    }
    const Workspace ws{plan.workspace_bytes > 0 ? workspace_->data() : nullptr,
                       plan.workspace_bytes};
    return [this, plan, ws](int i) { mha_fwd(problem_.args(i), plan, ws, nullptr); };
  }
  void poison_output() override { problem_.poison_output(); }
  std::vector<uint8_t> output() override { return problem_.output_bytes(); }
  std::string compare(const std::vector<uint8_t>& ref, const std::vector<uint8_t>& got) const override {
    const size_t n = ref.size() / 2;
    double diff2 = 0, ref2 = 0;
    size_t nonfinite = 0;
    for (size_t i = 0; i < n; ++i) {
      uint16_t rb, gb;
      std::memcpy(&rb, ref.data() + 2 * i, 2);
      std::memcpy(&gb, got.data() + 2 * i, 2);
      const double r = from_bits(rb, problem_.spec().dtype), g = from_bits(gb, problem_.spec().dtype);
      if (!std::isfinite(r) || !std::isfinite(g)) {  // softmax rows of finite inputs are finite
        ++nonfinite;
        continue;
      }
      diff2 += (g - r) * (g - r);
      ref2 += r * r;
    }
    const double rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
    if (nonfinite == 0 && rel <= kMhaMaxRelL2) return {};
    return fmt::format("output differs from the reference's: relative L2 error {:.3g} (limit {}), "
                       "{} elements not finite",
                       rel, kMhaMaxRelL2, nonfinite);
  }

 private:
  harness::MhaFwdProblem problem_;
  std::unique_ptr<Buffer> workspace_;
};

}  // namespace

std::vector<Tunable> builtin_tunables() {
  return {
      {"tma_copy", [](const json& s, const driver::DeviceInfo& d) -> std::unique_ptr<Bench> {
         return std::make_unique<TmaCopyBench>(s, d);
       }},
      {"mla_decode", [](const json& s, const driver::DeviceInfo& d) -> std::unique_ptr<Bench> {
         return std::make_unique<MlaDecodeBench>(s, d);
       }},
      {"mha_fwd", [](const json& s, const driver::DeviceInfo& d) -> std::unique_ptr<Bench> {
         return std::make_unique<MhaFwdBench>(s, d);
       }},
  };
}

}  // namespace attnjit::tune
