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
