#pragma once
// e4m3 conversions of mla_decode_fp8's kernels: the exact widening to bf16 (every e4m3
// value is a bf16; the path through f16 rounds nothing). The rounding to e4m3 is
// common/numeric.cuh's e4m3x2.
#include "common/numeric.cuh"
#include "common/types.cuh"

namespace attnjit::mla_decode_fp8 {

// Two e4m3 codes (bits 0..15, low byte first) → two bf16 in one u32.
ATTNJIT_DEVICE u32 e4m3x2_to_bf16x2(u32 two_codes) {
  u32 h;
  asm("{ .reg .b16 c; cvt.u16.u32 c, %1; cvt.rn.f16x2.e4m3x2 %0, c; }" : "=r"(h) : "r"(two_codes));
  float lo, hi;
  asm("{ .reg .b16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h; }"
      : "=f"(lo), "=f"(hi)
      : "r"(h));
  return pack2<DType::kBF16>(lo, hi);
}

// Eight e4m3 codes → eight bf16 (one 16-byte unit of a bf16 tile).
ATTNJIT_DEVICE uint4 widen8(uint2 c) {
  return make_uint4(e4m3x2_to_bf16x2(c.x), e4m3x2_to_bf16x2(c.x >> 16), e4m3x2_to_bf16x2(c.y),
                    e4m3x2_to_bf16x2(c.y >> 16));
}

}  // namespace attnjit::mla_decode_fp8
