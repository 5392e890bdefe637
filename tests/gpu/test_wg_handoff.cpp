// The cross-warpgroup hand-offs of mla_decode's seesaw kernel, in a test-only kernel with
// the same primitives and CTA shape (kernel_templates/testing/wg_handoff.cuh): a writer
// held back before its store must still be seen by the reader after the barrier, and a
// writer that stores after its arrive (the broken order) must be caught. compute-sanitizer
// racecheck reports the seesaw kernel's hand-offs of this form (docs/sanitizers.md); this
// is the test that fails if their order breaks.
#include <fmt/format.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "driver/driver.hpp"
#include "jit/kernel_table.hpp"
#include "support/catch.hpp"
#include "support/gpu.hpp"

using namespace attnjit;

namespace {

constexpr uint32_t kWgHandoffOpId = 1105;  // test-family ids: >= 1100 (test_device_library.cpp)
constexpr int kThreads = 256, kRounds = 64;  // testing/wg_handoff.cuh

struct WgHandoffParams {
  int32_t mode, delay_ns, broken;
};
static_assert(std::has_unique_object_representations_v<WgHandoffParams>);

struct Result {
  int wrong_reads = 0;  // the kernel's own count of reads that missed the round's value
  int wrong_sums = 0;   // rows whose sum differs from the host's
};

Result run(const WgHandoffParams& p) {
  const jit::Kernel& kernel = jit::get_kernel(jit::make_key(kWgHandoffOpId, kSm90a, p), [&] {
    jit::KernelRecipe r;
    r.source.op = "test_wg_handoff";
    r.source.header = "testing/wg_handoff.cuh";
    r.source.kernel = "attnjit::testing::wg_handoff_kernel";
    r.source.params_type = "attnjit::testing::WgHandoffParams";
    r.source.args = {{"mode", std::to_string(p.mode)},
                     {"delay_ns", std::to_string(p.delay_ns)},
                     {"broken", std::to_string(p.broken)}};
    r.source.config_json = fmt::format(R"({{"mode":{},"delay_ns":{},"broken":{}}})", p.mode, p.delay_ns, p.broken);
    r.options.arch = kSm90a;
    return r;
  });
  test::DeviceBuffer out(kThreads * 4), bad(4);
  out.fill_byte(0xFF);
  bad.fill_byte(0);
  CUdeviceptr out_ptr = out.ptr(), bad_ptr = bad.ptr();
  void* args[] = {&out_ptr, &bad_ptr};
  jit::LaunchShape shape;
  shape.block[0] = kThreads;
  kernel.launch(shape, nullptr, args);
  test::synchronize();
  const std::vector<float> sums = out.download_as<float>(kThreads);
  Result r{bad.download_as<int>(1)[0], 0};
  for (int t = 0; t < kThreads; ++t) {
    const int wg = t / 128, row = t % 128, src = 127 - row;
    // mode 0: only WG0 reads, 64 rounds; mode 1: both read the other's slot (+ the writer's
    // wg), 64 rounds; mode 2: each its own slot (+ its wg), WG0 64 rounds and WG1 32
    const int rounds = p.mode == 2 ? kRounds >> wg : (p.mode == 1 || wg == 0) ? kRounds : 0;
    const int plus = p.mode == 1 ? 1 - wg : p.mode == 2 ? wg : 0;
    double want = 0;
    for (int k = 0; k < rounds; ++k) want += k * 1000 + src + 1 + plus;
    want += 0.5 * (src + 1) + 100000.0 * (1 - wg);  // the epilogue's exchange
    r.wrong_sums += sums[static_cast<size_t>(t)] != static_cast<float>(want);
  }
  return r;
}

}  // namespace

TEST_CASE("seesaw hand-offs: a delayed writer is seen after the barrier", "[gpu][mla_decode][handoff]") {
  if (!test::gpu_or_skip()) return;
  for (int mode : {0, 1, 2})
    for (int delay : {0, 200, 5000}) {
      const Result r = run({mode, delay, 0});
      INFO(fmt::format("mode {} delay {} ns: {} wrong reads, {} wrong sums", mode, delay, r.wrong_reads,
                       r.wrong_sums));
      CHECK(r.wrong_reads == 0);
      CHECK(r.wrong_sums == 0);
    }
}

TEST_CASE("seesaw hand-offs: a store after the arrive is caught", "[gpu][mla_decode][handoff]") {
  if (!test::gpu_or_skip()) return;
  const Result r = run({0, 5000, 1});  // 5 µs after the arrive: the reader has long read
  INFO(fmt::format("broken order: {} wrong reads, {} wrong sums", r.wrong_reads, r.wrong_sums));
  CHECK(r.wrong_reads > 0);
  CHECK(r.wrong_sums > 0);
}
