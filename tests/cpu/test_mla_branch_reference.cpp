// The whole-branch reference's quantized twin (harness/mla_branch_reference.hpp) against
// the projection reference, written apart: with one key the softmax is 1, so the twin's
// output must be the output projection of that key's latent, rounded to bf16 and quantized
// as mla_branch_project_reference quantizes, and the ideal output the same unquantized.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "harness/device.hpp"
#include "harness/mla_branch_reference.hpp"

using namespace attnjit;
using namespace attnjit::harness;

namespace {

float bf16_of(float x) { return bf16_to_float(float_to_bf16(x)); }

}  // namespace

TEST_CASE("mla_branch_reference: the quantized twin is the kernels' quantization of the ideal chain",
          "[mla_decode_branch_fp8][reference]") {
  std::mt19937_64 gen(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(192), kv(576), freqs(64), gamma(512, 1.0f);
  for (auto& x : q) x = bf16_of(normal(gen));
  for (auto& x : kv) x = bf16_of(normal(gen) * 3.0f);
  for (int j = 0; j < 32; ++j) freqs[2 * j] = 1.0f, freqs[2 * j + 1] = 0.0f;
  std::vector<float> w_uk(512 * 128), w_uv(128 * 512);
  for (auto& x : w_uk) x = normal(gen) * 0.05f;
  for (auto& x : w_uv) x = normal(gen) * 0.05f;
  const MlaBranchWeightFp8 uk = mla_branch_quantize_weight(w_uk, 1, 512, 128);
  const MlaBranchWeightFp8 uv = mla_branch_quantize_weight(w_uv, 1, 128, 512);
  const std::vector<double> uk_d = mla_branch_dequantize_weight(uk), uv_d = mla_branch_dequantize_weight(uv);
  const std::vector<int32_t> offsets{0, 1}, before{0};

  MlaBranchProblem p;
  p.tokens = 1, p.heads = 1, p.batch = 1, p.max_pos = 1;
  p.q = q, p.kv_input = kv, p.freqs_cis = freqs, p.gamma = gamma;
  p.w_uk = uk_d, p.w_uv = uv_d;
  p.input_row_offsets = offsets, p.cache_lens_before = before;
  p.softmax_scale = 0.07;
  const MlaBranchReference r = mla_branch_reference(p);
  REQUIRE(r.rows.size() == 1);

  // The one key's latent: RMSNorm · gamma (= 1).
  double ms = 0.0;
  for (int d = 0; d < 512; ++d) ms += double(kv[d]) * kv[d];
  const double inv = 1.0 / std::sqrt(ms / 512 + p.epsilon);
  std::vector<float> latent_bf16(512);
  std::vector<double> latent(512);
  for (int d = 0; d < 512; ++d) {
    latent[d] = kv[d] * inv;
    latent_bf16[d] = bf16_of(static_cast<float>(latent[d]));
  }
  const MlaBranchProjection proj = mla_branch_project_reference(latent_bf16, uv.codes, uv.scale, 1, 1, 512, 128);
  double twin_vs_ideal = 0.0, norm = 0.0;
  for (int n = 0; n < 128; ++n) {
    double ideal = 0.0;
    for (int k = 0; k < 512; ++k) ideal += latent[k] * uv_d[size_t(n) * 512 + k];
    CHECK(r.out[n] == Approx(ideal).epsilon(1e-12).margin(1e-14));
    CHECK(r.twin[n] == Approx(proj.out[n]).epsilon(1e-12).margin(1e-14));
    twin_vs_ideal += (r.twin[n] - r.out[n]) * (r.twin[n] - r.out[n]);
    norm += r.out[n] * r.out[n];
  }
  // e4m3 moves each value by up to 2^-4 of itself: the twin differs, by a few %.
  const double rel = std::sqrt(twin_vs_ideal / norm);
  CHECK(rel > 1e-3);
  CHECK(rel < 0.1);
  CHECK(mla_branch_twin_rel_l2(r) == Approx(rel).epsilon(1e-12));
}

// The projection kernels take ρ = RN(448 / d) without a guarded division (project.cuh):
// q0 = 448·r, then one correction by the exact residual, from r = rcp.approx + one Newton
// step, within an ulp of 1/d. d is a group's min(amax, 1200) — a bf16 value or 1200 —
// times 2^64 when under 2^-60, so it has one of 128 mantissas; the steps are replayed here
// in IEEE float with r at RN(1/d) and at either neighbour, and must give the host's
// division every time, at the exponents' ends too.
TEST_CASE("mla_branch_act_scale: the kernels' unguarded 448 / d is the IEEE quotient for every group",
          "[mla_decode_branch_fp8][reference]") {
  int checked = 0;
  for (int mantissa = 128; mantissa < 256; ++mantissa)
    for (int e : {-69, -60, -30, -1, 0, 3, 10}) {
      const float d = std::ldexp(static_cast<float>(mantissa) / 128.0f, e);
      if (d > 1200.0f) continue;
      const float want = 448.0f / d, rn = 1.0f / d;
      for (float r : {std::nextafter(rn, 0.0f), rn, std::nextafter(rn, 1e30f)}) {
        const float q0 = 448.0f * r;
        CHECK(std::fma(r, std::fma(-d, q0, 448.0f), q0) == want);
        ++checked;
      }
    }
  CHECK(checked > 128 * 3 * 6);
  // The scale's cases: the cap, a zero group, a tiny group (prescaled, the same product).
  CHECK(mla_branch_act_scale(3000.0f).sigma == 1200.0f / 448.0f);
  CHECK(mla_branch_act_scale(3000.0f).scaled(3000.0f) == 3000.0f * (448.0f / 1200.0f));
  CHECK(mla_branch_act_scale(0.0f).zero);
  CHECK(mla_branch_act_scale(0.0f).scaled(0.0f) == 0.0f);
  const MlaBranchActScale tiny = mla_branch_act_scale(0x1p-100f);
  CHECK(tiny.pre == 0x1p64f);
  CHECK(tiny.scaled(0x1p-100f) == 448.0f);
  CHECK(tiny.scaled(-0x1p-101f) == -224.0f);
}
