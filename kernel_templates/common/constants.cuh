#pragma once
// Numbers of the machine and of the math, named once; compiled by the host (the runtime's
// launch plans and config rules) and by NVRTC (the kernels).
// Functions of plain numbers both compilers evaluate (launch plans, config rules).
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define ATTNJIT_PLAN __host__ __device__ constexpr
#else
#define ATTNJIT_PLAN constexpr
#endif

// A member's byte offset in a static_assert on a layout. NVRTC's front end has no
// __builtin_offsetof, so there the layout headers pin sizes only; the host build pins the
// offsets of the same declarations.
#if defined(__CUDACC_RTC__)
#define ATTNJIT_OFFSET_IS(type, member, bytes) true
#else
#define ATTNJIT_OFFSET_IS(type, member, bytes) (__builtin_offsetof(type, member) == (bytes))
#endif

namespace attnjit {

inline constexpr int kWarpSize = 32;
inline constexpr int kWarpgroupThreads = 128;  // 4 consecutive warps issue one wgmma
inline constexpr int kWgmmaM = 64;             // rows of one wgmma tile (one warpgroup)

// Opt-in dynamic shared memory per block on sm_90 / sm_100 (227 KiB). The runtime checks a
// launch against the device's own attribute when a device is present; this is the limit
// config rules use without one.
inline constexpr int kMaxSmemPerBlock = 232448;

// e4m3's largest finite value and the activations' per-group amax bound (the MLA branch's
// seed: σ_A = min(amax, 1200) / 448; common/act_quant.cuh, harness mla_branch_act_scale).
inline constexpr float kActE4M3Max = 448.0f;
inline constexpr float kActAmaxCap = 1200.0f;

inline constexpr float kLog2e = 1.4426950408889634f;  // scores go to exp2 in log2 units
inline constexpr float kLn2 = 0.69314718055994531f;   // and lse comes back in natural log

}  // namespace attnjit
