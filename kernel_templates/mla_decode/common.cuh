#pragma once
// Pieces shared by the mla_decode kernels (main and combine).
#include "common/arch.cuh"
#include "common/types.cuh"

namespace attnjit::mla_decode {

inline constexpr int kHeadDim = 576;   // latent 512 + rope 64
inline constexpr int kValueDim = 512;  // V = the first 512 dims of a cache row

// -inf: the lse of an empty sum, and the score of a masked key (NVRTC has no constexpr
// infinity builtin, hence a function).
ATTNJIT_DEVICE float neg_inf() { return __int_as_float(0xff800000u); }

// Two floats → two 16-bit values in one u32, `lo` in the low half (lower address).
template <DType kType>
ATTNJIT_DEVICE u32 pack2(float lo, float hi) {
  u32 r;
  if constexpr (kType == DType::kBF16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

}  // namespace attnjit::mla_decode
