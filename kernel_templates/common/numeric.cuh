#pragma once
// Small numeric helpers shared by the attention kernels: -inf, exp2 and 16-bit packing.
#include "common/arch.cuh"
#include "common/types.cuh"

namespace attnjit {

// -inf: the lse of an empty sum, and the score of a masked key (NVRTC has no constexpr
// infinity builtin, hence a function).
ATTNJIT_DEVICE float neg_inf() { return __int_as_float(0xff800000u); }

// 2^x in one MUFU.EX2, results below 2^-126 flushed to 0 (softmax weights that small do
// not matter next to the row max's weight of 1). exp2f adds three instructions per call
// for denormal results — a tenth of the softmax's ALU work. exp2_ftz(-inf) = 0.
ATTNJIT_DEVICE float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Two floats → two 16-bit values in one u32, `lo` in the low half (lower address).
template <DType kType>
ATTNJIT_DEVICE u32 pack2(float lo, float hi) {
  static_assert(kType == DType::kBF16 || kType == DType::kF16, "16-bit outputs only");
  u32 r;
  if constexpr (kType == DType::kBF16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

}  // namespace attnjit
