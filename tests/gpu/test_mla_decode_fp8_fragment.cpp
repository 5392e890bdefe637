// The fp8 P·V fragment planned for mla_decode_fp8 (kernel_templates/testing/fp8_vt_fragment.cuh):
// Oᵀ = Vᵀ·P′ᵀ with Vᵀ built in registers from key-major V by ldmatrix.trans + PRMT and P′'s
// keys in the fragment's k order. Small integers and binary fractions keep every product
// and sum exact, so the result must equal the float64 one bit for bit: a wrong byte,
// permutation or descriptor is an O(1) error somewhere. V dense and 128B-swizzled (as the
// TMA ring holds it).
#include <fmt/format.h>

#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "attnjit/ops/mla_decode_fp8.hpp"
#include "attnjit/types.hpp"
#include "jit/kernel_table.hpp"
#include "support/catch.hpp"
#include "support/gpu.hpp"

using namespace attnjit;

namespace {

constexpr uint32_t kFp8VtOpId = 1106;  // test-family ids: >= 1100

struct Fp8VtParams {
  int32_t v_swizzled;
};
static_assert(std::has_unique_object_representations_v<Fp8VtParams>);

const jit::Kernel& kernel_for(const Fp8VtParams& p) {
  return jit::get_kernel(jit::make_key(kFp8VtOpId, kSm90a, p), [&] {
    jit::KernelRecipe r;
    r.source.op = "test_fp8_vt_fragment";
    r.source.header = "testing/fp8_vt_fragment.cuh";
    r.source.kernel = "attnjit::testing::fp8_vt_kernel";
    r.source.params_type = "attnjit::testing::Fp8VtParams";
    r.source.args = {{"v_swizzled", std::to_string(p.v_swizzled)}};
    r.source.config_json = fmt::format(R"({{"v_swizzled":{}}})", p.v_swizzled);
    r.options.arch = kSm90a;
    return r;
  });
}

}  // namespace

TEST_CASE("fp8 Vt fragment: ldmatrix.trans + PRMT gives an exact RS e4m3 wgmma of Vt·Pt",
          "[gpu][mla_decode_fp8][fragment]") {
  if (!test::gpu_or_skip()) return;
  std::mt19937_64& gen = test::rng();
  std::uniform_int_distribution<int> small(-8, 8), pick(0, 3);
  const float p_values[] = {0.0f, 0.5f, 1.0f, 2.0f};
  std::vector<uint8_t> v(32 * 128), p(64 * 32);
  std::vector<double> vv(v.size()), pv(p.size());
  for (size_t i = 0; i < v.size(); ++i) {
    vv[i] = small(gen);
    v[i] = e4m3_from_float(static_cast<float>(vv[i]));
  }
  for (size_t i = 0; i < p.size(); ++i) {
    pv[i] = p_values[pick(gen)];
    p[i] = e4m3_from_float(static_cast<float>(pv[i]));
  }
  test::DeviceBuffer v_d(v.size()), p_d(p.size()), o_d(128 * 64 * 4);
  v_d.upload(v);
  p_d.upload(p);
  for (int swizzled : {0, 1}) {
    const Fp8VtParams params{swizzled};
    const jit::Kernel& k = kernel_for(params);
    CHECK(k.compiled().ptxas.spill_store_bytes == 0);
    o_d.fill_byte(0xFF);
    CUdeviceptr vp = v_d.ptr(), pp = p_d.ptr(), op = o_d.ptr();
    void* args[] = {&vp, &pp, &op};
    jit::LaunchShape shape;
    shape.block[0] = 128;
    k.launch(shape, nullptr, args);
    test::synchronize();
    const std::vector<float> o = o_d.download_as<float>(128 * 64);
    int64_t wrong = 0;
    std::string first;
    for (int dim = 0; dim < 128; ++dim)
      for (int row = 0; row < 64; ++row) {
        double want = 0;
        for (int key = 0; key < 32; ++key) want += vv[static_cast<size_t>(key * 128 + dim)] * pv[static_cast<size_t>(row * 32 + key)];
        const float got = o[static_cast<size_t>(dim * 64 + row)];
        if (static_cast<double>(got) != want) {
          if (wrong++ == 0) first = fmt::format("dim {} row {}: got {} want {}", dim, row, got, want);
        }
      }
    INFO("v_swizzled " << swizzled << ": " << wrong << " wrong of 8192; first " << first);
    CHECK(wrong == 0);
  }
}
