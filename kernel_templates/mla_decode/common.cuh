#pragma once
// Pieces shared by the mla_decode kernels (main and combine).
#include "common/arch.cuh"
#include "common/numeric.cuh"
#include "common/types.cuh"

namespace attnjit::mla_decode {

inline constexpr int kHeadDim = 576;   // latent 512 + rope 64
inline constexpr int kValueDim = 512;  // V = the first 512 dims of a cache row

}  // namespace attnjit::mla_decode
