#pragma once
// mla_fp8_quantize: bf16 rows of 576 (512 content + 64 rope) → the fp8 rows mla_decode_fp8
// reads. Per group of rows (one cache row, one query token's h rows, or one row of the
// per-tensor form): σ = max(amax of the group's content values, ε) / 448, content →
// e4m3(x / σ) (RN, saturating), rope → bf16(x / σ). x / σ is IEEE-rounded (__fdiv_rn)
// so that the host reference (mla_fp8_quantize_host) gives the same bits. 576-byte rows
// (the per-tensor form's) hold the rope in e4m3 as well.
#include "common/arch.cuh"
#include "common/numeric.cuh"
#include "common/types.cuh"
#include "mla_decode_fp8/layout.cuh"

namespace attnjit::mla_decode_fp8 {

using namespace attnjit::layout::mla_decode_fp8;

inline constexpr float kQuantEpsilon = 1e-8f;  // attnjit::kMlaFp8Epsilon
inline constexpr float kE4M3Max = 448.0f;

// Eight bf16 (16 bytes) → floats.
ATTNJIT_DEVICE void unpack8(const uint4& v, float (&x)[8]) {
  const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    x[2 * i] = __uint_as_float(w[i] << 16);
    x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

ATTNJIT_DEVICE u32 bf16x2(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// The largest |value| of rows [row0, row0 + rows) that becomes e4m3 (the 512 content
// values; all 576 in 576-byte rows, whose rope is e4m3 too), reduced over the CTA.
template <auto P>
ATTNJIT_DEVICE float group_amax(const QuantArgs& a, i64 row0, int rows) {
  __shared__ float warp_max[P.threads / kWarpSize];
  const int units = a.out_stride == kContentBytes + 64 ? 576 / 8 : kContentBytes / 8;
  float m = 0.0f;
  for (int i = threadIdx.x; i < rows * units; i += P.threads) {
    const i64 row = row0 + i / units;
    const int k = i % units;
    float x[8];
    unpack8(*reinterpret_cast<const uint4*>(a.in + row * 576 + k * 8), x);
#pragma unroll
    for (int j = 0; j < 8; ++j) m = fmaxf(m, fabsf(x[j]));
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (threadIdx.x % kWarpSize == 0) warp_max[threadIdx.x / kWarpSize] = m;
  __syncthreads();
  m = 0.0f;
#pragma unroll
  for (int w = 0; w < P.threads / kWarpSize; ++w) m = fmaxf(m, warp_max[w]);
  return m;
}

// Grid: one CTA per group (kQuantGroups) or per row (kQuantAmax, kQuantTensor); one thread
// for the per-tensor form's last step (kQuantFinish).
template <auto P>
__global__ void __launch_bounds__(P.threads) quantize_kernel(const QuantArgs a) {
  if (a.mode == kQuantFinish) {  // scale[0] held the amax while the rows were quantized
    if (threadIdx.x != 0) return;
    a.scale[0] = fmaxf(a.scale[0], kQuantEpsilon) / kE4M3Max;
    return;
  }
  const int rows = a.mode == kQuantGroups ? a.rows_per_group : 1;
  const i64 row0 = static_cast<i64>(blockIdx.x) * rows;
  float sigma;
  if (a.mode == kQuantTensor) {
    sigma = fmaxf(a.scale[0], kQuantEpsilon) / kE4M3Max;
  } else {
    const float amax = group_amax<P>(a, row0, rows);
    if (a.mode == kQuantAmax) {  // non-negative floats order as their bits
      if (threadIdx.x == 0) atomicMax(reinterpret_cast<int*>(a.scale), __float_as_int(amax));
      return;
    }
    sigma = fmaxf(amax, kQuantEpsilon) / kE4M3Max;
    if (threadIdx.x == 0) a.scale[blockIdx.x] = sigma;
  }
  constexpr int kUnits = kContentBytes / 8 + kRopeBytes / 16;  // 64 content + 8 rope
  for (int i = threadIdx.x; i < rows * kUnits; i += P.threads) {
    const i64 row = row0 + i / kUnits;
    const int k = i % kUnits;
    float x[8];
    unpack8(*reinterpret_cast<const uint4*>(a.in + row * 576 + k * 8), x);
#pragma unroll
    for (int j = 0; j < 8; ++j) x[j] = __fdiv_rn(x[j], sigma);
    const uint2 codes = make_uint2(e4m3x2(x[0], x[1]) | e4m3x2(x[2], x[3]) << 16,
                                   e4m3x2(x[4], x[5]) | e4m3x2(x[6], x[7]) << 16);
    if (k < kContentBytes / 8 || a.out_stride == kContentBytes + 64) {  // 576: rope in e4m3 too
      *reinterpret_cast<uint2*>(a.out + row * a.out_stride + k * 8) = codes;
    } else {
      const uint4 v = make_uint4(bf16x2(x[0], x[1]), bf16x2(x[2], x[3]), bf16x2(x[4], x[5]),
                                 bf16x2(x[6], x[7]));
      const int j = k - kContentBytes / 8;
      if (a.out_rope != nullptr)
        *reinterpret_cast<uint4*>(a.out_rope + row * 64 + j * 8) = v;
      else
        *reinterpret_cast<uint4*>(a.out + row * a.out_stride + kContentBytes + j * 16) = v;
    }
  }
}

}  // namespace attnjit::mla_decode_fp8
