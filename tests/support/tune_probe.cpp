// The tune_probe test family's host side (tune_probe.hpp).
#include "support/tune_probe.hpp"

#include <fmt/format.h>

#include <cstring>
#include <random>
#include <type_traits>

#include "attnjit/error.hpp"
#include "bench_util.hpp"
#include "jit/kernel_table.hpp"
#include "ops/config_json.hpp"

namespace attnjit::test {
namespace {

using nlohmann::json;

struct Params {  // host twin of attnjit::testing::TuneProbeParams
  int32_t mode, threads;
};
static_assert(std::has_unique_object_representations_v<Params>);

Params parse(const json& j) {
  ops::ConfigReader r(j, "tune_probe");
  Params p{r.get_int("mode", 0), r.get_int("threads", 256)};
  r.finish();
  if (p.mode < 0 || p.mode > 4)
    fail_config("tune_probe config field 'mode'", fmt::format("must be 0..4, got {}", p.mode));
  if (p.threads < 32 || p.threads > 1024 || p.threads % 32 != 0)
    fail_config("tune_probe config field 'threads'",
                fmt::format("must be a multiple of 32 in 32..1024, got {}", p.threads));
  return p;
}
json to_json(const Params& p) { return {{"mode", p.mode}, {"threads", p.threads}}; }

jit::KernelRecipe recipe_of(const Params& p, Arch arch) {
  jit::KernelRecipe r;
  r.source.op = "tune_probe";
  r.source.header = "testing/tune_probe.cuh";
  r.source.kernel = "attnjit::testing::tune_probe_kernel";
  r.source.params_type = "attnjit::testing::TuneProbeParams";
  r.source.args = {{"mode", std::to_string(p.mode)}, {"threads", std::to_string(p.threads)}};
  r.source.config_json = to_json(p).dump();
  r.options.arch = arch;
  return r;
}

class ProbeBench final : public tune::Bench {
 public:
  ProbeBench(const json& shape, const driver::DeviceInfo& dev)
      : n_(shape.at("n").get<int>()),
        arch_{dev.cc_major, dev.cc_minor, true},
        src_(static_cast<size_t>(n_) * 4),
        dst_(static_cast<size_t>(n_) * 4) {
    std::vector<uint32_t> host(static_cast<size_t>(n_));
    std::mt19937 gen(12345);
    for (auto& w : host) w = gen();
    ATTNJIT_CU(cuMemcpyHtoD, src_.ptr, host.data(), src_.bytes);
  }
  std::function<void(int)> prepare(const json& candidate) override {
    const Params p = parse(candidate);
    const jit::Kernel& k = jit::get_kernel(jit::make_key(kTuneProbeOpId, arch_, p),
                                           [&] { return recipe_of(p, arch_); });
    k.prepare_current_device();
    return [this, &k, p](int) {
      jit::LaunchShape shape;
      shape.grid[0] = static_cast<unsigned>(std::min(1024, (n_ + p.threads - 1) / p.threads));
      shape.block[0] = static_cast<unsigned>(p.threads);
      void* src = src_.data();
      void* dst = dst_.data();
      int n = n_;
      void* args[] = {&src, &dst, &n};
      k.launch(shape, nullptr, args);
    };
  }
  void poison_output() override { ATTNJIT_CU(cuMemsetD8Async, dst_.ptr, 0xA5, dst_.bytes, nullptr); }
  std::vector<uint8_t> output() override {
    ATTNJIT_CU(cuCtxSynchronize);
    std::vector<uint8_t> out(dst_.bytes);
    ATTNJIT_CU(cuMemcpyDtoH, out.data(), dst_.ptr, dst_.bytes);
    return out;
  }
  std::string compare(const std::vector<uint8_t>& ref, const std::vector<uint8_t>& got) const override {
    return ref == got ? "" : "output differs from the reference copy";
  }

 private:
  int n_;
  Arch arch_;
  cli::Buffer src_, dst_;
};

ops::OpSpec make_spec() {
  ops::OpSpec op;
  op.name = "tune_probe";
  op.id = kTuneProbeOpId;
  op.summary = "test-only: a copy that is correct, wrong, faults, traps or hangs by its mode";
  op.fields = {{"mode", "0..4", "0", "0 copy, 1 wrong, 2 illegal address, 3 trap, 4 hang"},
               {"threads", "32..1024, multiple of 32", "256", "block size"}};
  op.archs = {kSm90a, kSm100a};
  op.default_set = [] { return std::vector<json>{to_json(Params{0, 256})}; };
  op.canonicalize = [](const json& j) { return to_json(parse(j)); };
  op.recipe = [](const json& j, Arch arch) { return recipe_of(parse(j), arch); };
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

tune::Tunable tune_probe_tunable() {
  return {"tune_probe", [](const json& shape, const driver::DeviceInfo& dev) -> std::unique_ptr<tune::Bench> {
            return std::make_unique<ProbeBench>(shape, dev);
          }};
}

}  // namespace attnjit::test
