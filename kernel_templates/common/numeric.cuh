#pragma once
// Small numeric helpers shared by the attention kernels: -inf, exp2, 16-bit and e4m3 packing.
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

// The online softmax's rescale of a row's running sum and output when its max moves:
// exp2(m_old − m_new), 1 while a row has seen no key (never inf − inf).
ATTNJIT_DEVICE float rescale_factor(float m_old, float m_new) {
  return m_new == neg_inf() ? 1.0f : exp2_ftz(m_old - m_new);
}

// Two online-softmax states of the same row (running max m in log2 units, sum l) merged:
// the factors that bring each to the common max, and the merged m and l. A state that saw
// no key has m = -inf and l = 0; two such merge to m = -inf, l = 0.
struct SoftmaxMerge {
  float self, other;  // this state's factor, the other's
  float m, l;
};
ATTNJIT_DEVICE SoftmaxMerge merge_softmax(float m, float l, float m_other, float l_other) {
  SoftmaxMerge r;
  r.m = fmaxf(m, m_other);
  const float m_use = r.m == neg_inf() ? 0.0f : r.m;
  r.self = exp2f(m - m_use);
  r.other = exp2f(m_other - m_use);
  r.l = r.self * l + r.other * l_other;
  return r;
}

// 2^x on the FMA pipe instead of the MUFU, for softmax loops whose exponentials outrun the
// MUFU's 16 per clock per SM (FA4 moves a share of them the same way): x = j + f with
// j = round(x) and f in [-0.5, 0.5]; 2^f by a degree-3 polynomial (relative error 7.5e-5,
// far below bf16's 2^-9), j added to the exponent bits. Six FMA-pipe instructions and one
// integer add. Arguments below -126 give 2^-126, not 0: only for x known to be finite
// (tiles without masked keys).
ATTNJIT_DEVICE float exp2_poly(float x) {
  x = fmaxf(x, -126.0f);
  const float r = x + 12582912.0f;       // 1.5·2^23: round(x) lands in the low mantissa bits
  const float f = x - (r - 12582912.0f);  // in [-0.5, 0.5]
  float p = fmaf(0.0551716685f, f, 0.242611155f);
  p = fmaf(p, f, 0.693260968f);
  p = fmaf(p, f, 0.999928057f);
  // The low 9 bits of r's pattern are j (two's complement): shifted into the exponent.
  return __int_as_float(__float_as_int(p) + (__float_as_int(r) << 23));
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

// Two floats → two e4m3 codes in the low 16 bits, `lo` in the low byte: round to nearest
// even, saturating to ±448 (NaN stays NaN). cvt puts its first source in the upper byte.
ATTNJIT_DEVICE u32 e4m3x2(float lo, float hi) {
  u32 r;
  asm("{ .reg .b16 c; cvt.rn.satfinite.e4m3x2.f32 c, %1, %2; cvt.u32.u16 %0, c; }"
      : "=r"(r)
      : "f"(hi), "f"(lo));
  return r;
}

}  // namespace attnjit
