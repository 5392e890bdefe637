// mla_decode_fp8's host pieces without a GPU: the e4m3 codec, the quantizer's host reference
// against hand-computed rows, and the float64 reference of the op's formulas (mla_decode's
// reference on the dequantized rows) against a hand-computed decode.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "attnjit/ops/mla_decode_fp8.hpp"
#include "harness/mla_fp8_reference.hpp"
#include "harness/mla_reference.hpp"
#include "mla_decode_fp8/layout.cuh"
#include "support/catch.hpp"

using namespace attnjit;

namespace {

uint16_t bf16_bits(float f) {  // exact for the values used here
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

void put_bf16(uint8_t* dst, float f) {
  const uint16_t b = bf16_bits(f);
  std::memcpy(dst, &b, 2);
}

}  // namespace

TEST_CASE("e4m3 codec: round to nearest even, saturation, NaN", "[mla_decode_fp8][quantize]") {
  CHECK(e4m3_from_float(0.0f) == 0x00);
  CHECK(e4m3_from_float(-0.0f) == 0x80);
  CHECK(e4m3_from_float(1.0f) == 0x38);
  CHECK(e4m3_from_float(2.0f) == 0x40);
  CHECK(e4m3_from_float(448.0f) == 0x7e);
  CHECK(e4m3_from_float(-448.0f) == 0xfe);
  CHECK(e4m3_from_float(500.0f) == 0x7e);  // satfinite
  CHECK(e4m3_from_float(1e30f) == 0x7e);
  CHECK(e4m3_from_float(std::numeric_limits<float>::infinity()) == 0x7e);
  CHECK(e4m3_from_float(-std::numeric_limits<float>::infinity()) == 0xfe);
  CHECK(e4m3_from_float(std::numeric_limits<float>::quiet_NaN()) == 0x7f);
  CHECK(e4m3_from_float(std::ldexp(1.0f, -9)) == 0x01);       // smallest subnormal
  CHECK(e4m3_from_float(std::ldexp(1.0f, -10)) == 0x00);      // tie: to even (0)
  CHECK(e4m3_from_float(3 * std::ldexp(1.0f, -10)) == 0x02);  // tie: to even (2 steps)
  CHECK(e4m3_from_float(17.0f) == 0x58);                      // tie between 16 and 18: 16
  CHECK(e4m3_from_float(19.0f) == 0x5a);                      // tie between 18 and 20: 20
  CHECK(e4m3_from_float(std::ldexp(1.0f, -6)) == 0x08);       // smallest normal
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) {
      CHECK(std::isnan(e4m3_to_float(static_cast<uint8_t>(c))));
      continue;
    }
    INFO("code " << c);
    CHECK(e4m3_from_float(e4m3_to_float(static_cast<uint8_t>(c))) == c);
  }
}

TEST_CASE("quantizer host reference: sigma per row and per token", "[mla_decode_fp8][quantize]") {
  // Row 0: content {1, -2, 0.5, 0...}, rope {1, 0...}: amax 2, σ = 2/448, so the values
  // become 224, -448, 112 and the rope 224. Row 1: all zero: σ = ε/448, codes 0.
  std::vector<uint16_t> in(2 * 576, 0);
  in[0] = bf16_bits(1.0f);
  in[1] = bf16_bits(-2.0f);
  in[2] = bf16_bits(0.5f);
  in[512] = bf16_bits(1.0f);
  std::vector<uint8_t> out(2 * 640, 0xAA);
  std::vector<float> scale(2);
  mla_fp8_quantize_host(in.data(), 2, 1, out.data(), scale.data());
  CHECK(scale[0] == 2.0f / 448.0f);
  CHECK(scale[1] == kMlaFp8Epsilon / 448.0f);
  CHECK(out[0] == 0x76);  // 224 = 1.75 · 2^7
  CHECK(out[1] == 0xfe);  // -448
  CHECK(out[2] == 0x6e);  // 112 = 1.75 · 2^6
  for (int k = 3; k < 512; ++k) CHECK(out[k] == 0);
  uint16_t rope0;
  std::memcpy(&rope0, &out[512], 2);
  CHECK(rope0 == 0x4360);  // 1 / σ ≈ 224 in f32, 224 after the bf16 rounding
  for (int k = 640; k < 1280; ++k) CHECK(out[k] == 0);

  // Per token (two rows = two heads of one token): one σ from both rows' amax.
  std::vector<float> one(1);
  mla_fp8_quantize_host(in.data(), 2, 2, out.data(), one.data());
  CHECK(one[0] == 2.0f / 448.0f);
  CHECK(out[1] == 0xfe);

  // 576-byte rows (the per-tensor form): the rope is e4m3 too and counts in the amax.
  in[513] = bf16_bits(-4.0f);
  std::vector<uint8_t> out576(2 * 576);
  mla_fp8_quantize_host(in.data(), 2, 2, out576.data(), one.data(), 576);
  CHECK(one[0] == 4.0f / 448.0f);
  CHECK(out576[1] == 0xf6);    // -2 / σ = -224
  CHECK(out576[513] == 0xfe);  // -4 / σ = -448
  CHECK(out576[512] == 0x6e);  // 1 / σ = 112
  in[513] = 0;

  // The dequantized row is within e4m3's half step of the input.
  const std::vector<float> deq = harness::mla_fp8_dequantize(out, scale, 1);
  CHECK(deq[0] == Approx(1.0f).epsilon(1e-6));
  CHECK(deq[1] == Approx(-2.0f).epsilon(1e-6));
  CHECK(deq[512] == Approx(1.0f).epsilon(1e-2));
}

TEST_CASE("mla_decode_fp8 float64 reference on a hand-computed decode", "[mla_decode_fp8][reference]") {
  // One query (σ_Q = 0.5): content dim 0 = 2, rope dim 0 = 1. Two keys:
  //   key 0 (σ 0.25): content dim 0 = 1, rope dim 0 = 2   → dot 4, score 4·0.5·0.25 = 0.5
  //   key 1 (σ 2):    content dims 0, 1 = 2, 1             → dot 4, score 4·0.5·2 = 4
  //   out = (p0·0.25·(1, 0) + p1·2·(2, 1)),  lse = log(e^0.5 + e^4)
  std::vector<uint8_t> q(640, 0), kv(64 * 640, 0x7f);  // rows past the length: NaN codes
  std::vector<float> qs{0.5f}, ks(64, std::numeric_limits<float>::quiet_NaN());
  q[0] = 0x40;
  put_bf16(&q[512], 1.0f);
  std::fill(kv.begin(), kv.begin() + 2 * 640, 0);
  kv[0] = 0x38;
  put_bf16(&kv[512], 2.0f);
  kv[640] = 0x40;
  kv[641] = 0x38;
  ks[0] = 0.25f;
  ks[1] = 2.0f;
  const std::vector<float> qd = harness::mla_fp8_dequantize(q, qs, 1);
  const std::vector<float> kd = harness::mla_fp8_dequantize(kv, ks, 1);
  const std::vector<int32_t> table{0}, lens{2};
  harness::MlaProblem p;
  p.batch = 1;
  p.num_heads = 1;
  p.page_size = 64;
  p.num_pages = 1;
  p.max_pages = 1;
  p.q = qd;
  p.kv_cache = kd;
  p.block_table = table;
  p.cache_lens = lens;
  p.softmax_scale = 1.0;
  const harness::MlaReference ref = harness::mla_reference(p);
  const double e0 = std::exp(0.5), e1 = std::exp(4.0), sum = e0 + e1;
  REQUIRE(ref.rows.size() == 1);
  CHECK(ref.out[0] == Approx((e0 * 0.25 + e1 * 4.0) / sum).epsilon(1e-12));
  CHECK(ref.out[1] == Approx(e1 * 2.0 / sum).epsilon(1e-12));
  for (int d = 2; d < 512; ++d) CHECK(ref.out[static_cast<size_t>(d)] == 0.0);
  CHECK(ref.lse[0] == Approx(std::log(sum)).epsilon(1e-12));
}

TEST_CASE("fp8 P.V operand order: P' bytes land where the Vt fragment expects their keys",
          "[mla_decode_fp8][fp8_mma]") {
  // The fp8 kernel's softmax packs S accumulators into P' words (fp8_p_slot); the Vt
  // fragment reads keys in fp8_vt_key_of order (GPU-checked by the fragment test family).
  // Here, on the host, every (thread, accumulator) of an m64n32 fragment — its row and key
  // from PTX's accumulator layout — must land at a k position holding that key, every
  // (row, k position) exactly once, and the 4 accumulators of a word on consecutive bytes.
  namespace fp8 = attnjit::layout::mla_decode_fp8;
  std::vector<int> hits(64 * 32, 0);
  for (int tid = 0; tid < 128; ++tid) {
    const int l = tid % 32;
    for (int i = 0; i < 16; ++i) {
      const int row = 16 * (tid / 32) + l / 4 + 8 * ((i / 2) % 2);  // PTX m64nNk accumulator layout
      const int key = 8 * (i / 4) + 2 * (l % 4) + i % 2;
      const fp8::P8Slot at = fp8::fp8_p_slot(tid, i);
      INFO("tid " << tid << " acc " << i);
      CHECK(at.row == row);
      CHECK(fp8::fp8_vt_key_of(at.kpos) == key);
      ++hits[static_cast<size_t>(at.row * 32 + at.kpos)];
    }
    for (int g = 0; g < 2; ++g)
      for (int r = 0; r < 2; ++r) {
        const int i0 = 8 * g + 2 * r, base = fp8::fp8_p_slot(tid, i0).kpos;
        CHECK(base % 4 == 0);
        CHECK(fp8::fp8_p_slot(tid, i0 + 1).kpos == base + 1);
        CHECK(fp8::fp8_p_slot(tid, i0 + 4).kpos == base + 2);
        CHECK(fp8::fp8_p_slot(tid, i0 + 5).kpos == base + 3);
      }
  }
  for (int h : hits) CHECK(h == 1);
  // fp8_vt_key_of is a permutation of each 16 keys.
  std::vector<int> seen(32, 0);
  for (int k = 0; k < 32; ++k) ++seen[static_cast<size_t>(fp8::fp8_vt_key_of(k))];
  for (int v : seen) CHECK(v == 1);
}
