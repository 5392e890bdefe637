// The tune_probe test family's host side (tune_probe.hpp).
#include "support/tune_probe.hpp"

#include <fmt/format.h>

#include <cstring>
#include <random>
#include <type_traits>

#include "attnjit/error.hpp"
#include "driver/driver.hpp"
#include "harness/device.hpp"
#include "jit/kernel_table.hpp"
#include "ops/field_table.hpp"
#include "ops/registry.hpp"

namespace attnjit::test {
namespace {

using nlohmann::json;

struct Params {  // the kernel's P (testing/tune_probe.cuh)
  int mode = 0;
  int threads = 256;
  void validate() const;
};

template <class T>
using F = ops::Field<Params, T>;
const auto& table() {
  static const ops::ConfigTable t{
      "tune_probe",
      F<int>{"mode", &Params::mode, ops::FieldKind::kTemplate, ops::int_range(0, 4),
             "0 copy, 1 wrong, 2 illegal address, 3 trap, 4 hang", "mode{}", true},
      F<int>{"threads", &Params::threads, ops::FieldKind::kTemplate, ops::int_range(32, 1024, 32),
             "block size", "t{}", true},
  };
  return t;
}
void Params::validate() const { table().check_rules(*this); }

Params parse(const json& j) {
  Params p = table().from_json(j);
  p.validate();
  return p;
}
json to_json(const Params& p) { return json::parse(table().to_json(p).dump()); }

jit::KernelRecipe recipe_of(const Params& p, Arch arch) {
  return ops::table_recipe(table(), p,
                           {"tune_probe", "testing/tune_probe.cuh", "attnjit::testing::tune_probe_kernel"},
                           arch, 0);
}

class ProbeProblem final : public harness::Problem {
 public:
  explicit ProbeProblem(const json& shape)
      : n_(shape.at("n").get<int>()), src_(static_cast<size_t>(n_) * 4), dst_(static_cast<size_t>(n_) * 4) {
    const driver::DeviceInfo& dev = driver::cached_device_info(driver::current_device());
    arch_ = Arch{dev.cc_major, dev.cc_minor, true};
    std::vector<uint32_t> host(static_cast<size_t>(n_));
    std::mt19937 gen(12345);
    for (auto& w : host) w = gen();
    src_.upload(host);
  }
  nlohmann::ordered_json case_json() const override { return {{"n", n_}}; }
  std::string describe() const override { return fmt::format("n={}", n_); }
  int copies() const override { return 1; }
  harness::Prepared prepare(const json* overrides) override {
    const Params p = parse(overrides ? *overrides : to_json(Params{}));
    const jit::Kernel& k = jit::get_kernel(table().key(kTuneProbeOpId, arch_, p),
                                           [&] { return recipe_of(p, arch_); });
    k.prepare_current_device();
    harness::Prepared out;
    out.config = to_json(p);
    out.config_source = overrides ? "given" : "heuristic";
    out.enqueue = [this, &k, p](int, CUstream stream) {
      jit::LaunchShape shape;
      shape.grid[0] = static_cast<unsigned>(std::min(1024, (n_ + p.threads - 1) / p.threads));
      shape.block[0] = static_cast<unsigned>(p.threads);
      void* src = src_.data();
      void* dst = dst_.data();
      int n = n_;
      void* args[] = {&src, &dst, &n};
      k.launch(shape, stream, args);
    };
    return out;
  }
  void poison_output() override { dst_.fill_byte(0xA5); }
  std::vector<uint8_t> output_bytes() const override {
    harness::synchronize();
    return dst_.download_as<uint8_t>(dst_.bytes());
  }
  harness::Verdict check(int) const override {
    const std::string why = compare(src_.download_as<uint8_t>(src_.bytes()), output_bytes());
    return {why.empty(), why.empty() ? "bit-exact" : why, {{"passed", why.empty()}}};
  }
  std::string compare(const std::vector<uint8_t>& ref, const std::vector<uint8_t>& got) const override {
    return ref == got ? "" : "output differs from the reference copy";
  }
  double bytes() const override { return 8.0 * n_; }
  double flops() const override { return 0; }

 private:
  int n_;
  Arch arch_;
  harness::DeviceBuffer src_, dst_;
};

ops::OpSpec make_spec() {
  ops::OpSpec op;
  op.name = "tune_probe";
  op.id = kTuneProbeOpId;
  op.summary = "test-only: a copy that is correct, wrong, faults, traps or hangs by its mode";
  op.archs = {kSm90a, kSm100a};
  op.default_set = [] { return std::vector<json>{to_json(Params{0, 256})}; };
  ops::bind_config<Params>(op, table(), recipe_of);
  ops::TuningSpec& t = op.tuning;
  t.shape_keys = "n";
  t.canonical_shape = [](const json& s) {
    if (!s.is_object() || s.size() != 1 || !s.contains("n") || !s["n"].is_number_integer() ||
        s["n"].get<int64_t>() < 1 || s["n"].get<int64_t>() > (1 << 28))
      fail_arg("tune_probe shape", fmt::format("must be {{\"n\": 1..2^28}}, got {}", s.dump()));
    return s;
  };
  t.bucket = [](const json& s) { return fmt::format("n={}", s["n"].get<int64_t>()); };
  t.default_candidate = [](const json&) { return to_json(Params{0, 256}); };
  t.search_space = [](const json&) {
    std::vector<json> out;
    for (int mode = 0; mode <= 4; ++mode)
      for (int threads : {128, 256}) out.push_back(to_json(Params{mode, threads}));
    return out;
  };
  t.variants = [](const json& config) {
    return std::vector<ops::KernelVariant>{{&tune_probe_op(), config}};
  };
  return op;
}

}  // namespace

const ops::OpSpec& tune_probe_op() {
  static const ops::OpSpec op = make_spec();
  return op;
}

harness::ProblemKind tune_probe_problem() {
  harness::ProblemKind k;
  k.op = "tune_probe";
  k.bench_cases = [] { return std::vector<json>{{{"n", 1 << 20}}}; };
  k.test_cases = k.bench_cases;
  k.make = [](const json& shape, uint64_t, size_t) -> std::unique_ptr<harness::Problem> {
    return std::make_unique<ProbeProblem>(shape);
  };
  return k;
}

}  // namespace attnjit::test
