#pragma once
// Per-group e4m3 quantization of bf16 activations, as the MLA branch's projections take
// them (DeepSeek's per-token cast): 128 values a group, σ_A = RN(m / 448) and codes
// e4m3(x · RN(448 / m)) with m = min(amax, 1200). Wherever a group is quantized — in the
// projection (mla_decode_branch_fp8/project.cuh) or where the activations are made (the
// attention's epilogue, mla_decode's e4m3 output) — the same functions give the same
// codes, and the host reference (harness mla_branch_act_scale) the same again.
#include "common/arch.cuh"
#include "common/constants.cuh"
#include "common/numeric.cuh"
#include "common/smem.cuh"
#include "common/types.cuh"

namespace attnjit {

// ---- the activations ---------------------------------------------------------------------
// A group's codes are e4m3(x · ρ) with ρ = RN(448 / a), a = min(amax, 1200) — one multiply a
// value, DeepGEMM's per-token cast — and σ_A = RN(a / 448) dequantizes them. Both must be
// bit-exact with the host reference's IEEE divisions. __fdiv_rn's fast path is guarded by
// FCHK and a slow-path call whose call sites make ptxas spill, so both quotients are taken
// unguarded and their failures steered around: a subnormal σ_A in integers; groups with
// a < 2^-60 scale a and x by 2^64 (x·2^64 · RN(448 / (a·2^64)) is the same product, and ρ
// stays finite). The quotient RN(448 / d) by div_by is exact for every a a group can have (a
// bf16 value, or 1200): tests/cpu/test_mla_branch_reference.cpp replays its steps in IEEE
// float for each of the 128 bf16 mantissas with r anywhere within an ulp of 1/d. Before the
// multiply (session 34) each value was divided by σ_A (4 instructions, not 1): on an H200 the
// 128-token output projection took 12.5 µs in a graph against 11.3 with it.

// RN(x / d) from r within an ulp of 1/d: the product, one correction by the exact residual,
// the sign of x kept for zeros (lost in the residual's sum).
ATTNJIT_DEVICE float div_by(float x, float d, float r) {
  const float q0 = x * r;
  return copysignf(fmaf(r, fmaf(-d, q0, x), q0), x);
}

// This lane's N values of a group (whatever the lanes a group) → their codes' arguments x · ρ,
// in place; returns σ_A. Groups with a ≥ 2^-60 — all but the degenerate — take the short path.
template <int N>
ATTNJIT_DEVICE float act_scaled(float amax, float (&x)[N]) {
  constexpr float kRcp448 = 1.0f / kActE4M3Max;  // RN(1/448)
  const float a = fminf(amax, kActAmaxCap);   // amax inf: 1200, and x = ±inf saturates
  float sigma;
  if (a >= __uint_as_float(0x05000000u)) {  // 2^-117: σ_A normal, one correction of a / 448
    const float q = a * kRcp448;
    sigma = fmaf(kRcp448, fmaf(-kActE4M3Max, q, a), q);
  } else {  // σ_A subnormal: RN(a·2^149 / 448) ulps of 2^-149, ties to even
    const u32 b = __float_as_uint(a), ex = b >> 23;
    const u64 n = ex ? static_cast<u64>((b & 0x7fffffu) | 0x800000u) << (ex - 1) : b;
    const u64 q = n / 448, rem = n % 448;
    sigma = __uint_as_float(static_cast<u32>(q + (rem > 224 || (rem == 224 && (q & 1)))));
  }
  const bool tiny = a < __uint_as_float(0x21800000u);            // 2^-60
  const float pre = tiny ? __uint_as_float(0x5f800000u) : 1.0f;  // 2^64
  const float d = a * pre;                                       // normal unless amax is 0
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
  r = fmaf(r, fmaf(-d, r, 1.0f), r);  // one Newton step: within an ulp of 1/d
  const float rho = div_by(kActE4M3Max, d, r);
  if (!tiny) {
#pragma unroll
    for (int j = 0; j < N; ++j) x[j] *= rho;
  } else {  // amax 0: σ_A = 0 and codes 0 (ρ is inf)
#pragma unroll
    for (int j = 0; j < N; ++j) x[j] = amax == 0.0f ? 0.0f : x[j] * pre * rho;
  }
  return sigma;
}

// 16 bf16 (w: 8 packed pairs, low half first) of one group whose 128 values lie on 8
// consecutive lanes → their four code words (16 e4m3, in order) and the group's σ_A. All 32
// lanes of the warp call it (the amax crosses the 8 lanes by shuffles).
ATTNJIT_DEVICE float act_quantize16(const u32 (&w)[8], u32 (&code)[4]) {
  float x[16], m = 0.0f;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    x[j] = __uint_as_float(j % 2 ? w[j / 2] & 0xffff0000u : w[j / 2] << 16);
    m = fmaxf(m, fabsf(x[j]));
  }
#pragma unroll
  for (int o = 4; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  const float sigma = act_scaled(m, x);
#pragma unroll
  for (int j = 0; j < 4; ++j)
    code[j] = e4m3x2(x[4 * j], x[4 * j + 1]) | e4m3x2(x[4 * j + 2], x[4 * j + 3]) << 16;
  return sigma;
}

// 4 bf16 (lo, hi: two packed pairs, low half first) of one group whose 128 values lie on the
// 32 lanes of a warp → their code word (4 e4m3, in order) and the group's σ_A. All 32 lanes
// call it. Where the activations are made (mla_decode's seesaw epilogue and combine), with
// few registers to spare: 16 values a lane spilled there.
ATTNJIT_DEVICE float act_quantize4(u32 lo, u32 hi, u32& code) {
  float x[4] = {__uint_as_float(lo << 16), __uint_as_float(lo & 0xffff0000u), __uint_as_float(hi << 16),
                __uint_as_float(hi & 0xffff0000u)};
  float amax = fmaxf(fmaxf(fabsf(x[0]), fabsf(x[1])), fmaxf(fabsf(x[2]), fabsf(x[3])));
#pragma unroll
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float sigma = act_scaled(amax, x);
  code = e4m3x2(x[0], x[1]) | e4m3x2(x[2], x[3]) << 16;
  return sigma;
}

// A warp's (row, group) of an output staged in shared memory as bf16: the group's 256 bytes
// at `src` → its 128 codes at `codes` (4 a lane: 8-byte reads, 4-byte stores, both
// contiguous over the warp) and σ_A at `sigma` (lane 0).
ATTNJIT_DEVICE void act_quantize_group(u32 src, u8* codes, float* sigma) {
  const u32 lane = static_cast<u32>(lane_id());
  u32 code;
  const float s = act_quantize4(ld_shared_u32(src + 8 * lane), ld_shared_u32(src + 8 * lane + 4), code);
  reinterpret_cast<u32*>(codes)[lane] = code;
  if (lane == 0) *sigma = s;
}

}  // namespace attnjit
