#pragma once
// Test family for wgmma_acc_to_a_fragment (common/wgmma.cuh): the P·V step of attention,
// where the f32 accumulators of one wgmma become, rounded to 16 bits, the register A
// operand of the next (RS) wgmma without a trip through shared memory.
//
//   S  [64 × N1] (f32) = A [64 × K1] · B [N1 × K1]ᵀ              (SS wgmma, like Q·Kᵀ)
//   P  [64 × N1] (bf16 or f16) = round-to-nearest-even(S)        (wgmma_acc_to_a_fragment)
//   C2 [64 × N2] (f32) = P · V,  V [N1 × N2]                     (RS wgmma, K = N1)
//
// V is stored either [N1 × N2] with N2 contiguous (FA3's V: an MN-major B operand) or
// transposed, Vᵀ [N2 × N1] with N1 contiguous (K-major). All tiles are 128B-swizzled TMA
// boxes, one warpgroup, one CTA. The kernel also writes S itself, so the host can tell a
// first-GEMM error from a conversion error.
#include "common/arch.cuh"
#include "common/mbarrier.cuh"
#include "common/tensor_map.cuh"
#include "common/tma.cuh"
#include "common/types.cuh"
#include "common/warpgroup.cuh"
#include "common/wgmma.cuh"
#include "testing/wait_or_trap.cuh"

namespace attnjit::testing {

// int fields only: the host twin is the kernel-table key and must have no padding.
struct PvFragmentParams {
  int k1;          // reduction of the first GEMM (head dim), multiple of 64
  int n1;          // S columns = K of the second GEMM (keys), multiple of 64, <= 256
  int n2;          // C2 columns, multiple of 64, <= 256
  int v_mn_major;  // 1: V [N1 × N2] N2-contiguous; 0: Vᵀ [N2 × N1] N1-contiguous
  int f16;         // 1: f16 operands and P; 0: bf16
};

template <PvFragmentParams P>
struct PvFragmentTraits {
  static constexpr DType kType = P.f16 ? DType::kF16 : DType::kBF16;
  static constexpr u32 kSpanElems = 64;  // 128-byte swizzle span of 16-bit elements
  using ATile = WgmmaKMajorTile<Swizzle::k128B, 64>;      // A [64 × K1]
  using BTile = WgmmaKMajorTile<Swizzle::k128B, P.n1>;    // B [N1 × K1]
  using VMnTile = WgmmaMNMajorTile<Swizzle::k128B, P.n1>;  // V [N1 × N2], K = N1 rows
  using VKTile = WgmmaKMajorTile<Swizzle::k128B, P.n2>;    // Vᵀ [N2 × N1]
  static constexpr u32 kABytes = 64u * P.k1 * 2;
  static constexpr u32 kBBytes = static_cast<u32>(P.n1) * P.k1 * 2;
  static constexpr u32 kVBytes = static_cast<u32>(P.n1) * P.n2 * 2;
  static constexpr int kSteps1 = P.k1 / 16;  // k16 steps of S = A·Bᵀ
  static constexpr int kSteps2 = P.n1 / 16;  // k16 steps of C2 = P·V
  // TMA boxes ({outer, inner} elements), each [outer][128 B] in shared memory:
  static constexpr u32 kABoxes = P.k1 / kSpanElems;                          // {64, 64}
  static constexpr u32 kBBoxes = P.k1 / kSpanElems;                          // {N1, 64}
  static constexpr u32 kVBoxes = (P.v_mn_major ? P.n2 : P.n1) / kSpanElems;  // {N1 | N2, 64}
  static constexpr u32 kVChunkBytes = P.v_mn_major ? VMnTile::kChunkBytes : VKTile::kChunkBytes;
};

// The shared-memory plan.
template <PvFragmentParams P>
struct PvFragmentShared {
  alignas(1024) u8 a[PvFragmentTraits<P>::kABytes];  // A: kABoxes chunks [64][128 B]
  alignas(1024) u8 b[PvFragmentTraits<P>::kBBytes];  // B: kBBoxes chunks [N1][128 B]
  alignas(1024) u8 v[PvFragmentTraits<P>::kVBytes];  // V: kVBoxes chunks [N1 | N2][128 B]
  MBarrier full;                                      // all three operands landed
};

template <PvFragmentParams P>
inline constexpr u32 kPvFragmentSmemBytes = sizeof(PvFragmentShared<P>) + 1024;

template <PvFragmentParams P>
__global__ void __launch_bounds__(kWarpgroupThreads, 1)
    pv_fragment_kernel(const __grid_constant__ TmaDesc a_map,  // A [64, K1]
                       const __grid_constant__ TmaDesc b_map,  // B [N1, K1]
                       const __grid_constant__ TmaDesc v_map,  // V [N1, N2] or Vᵀ [N2, N1]
                       float* s_out,                           // S [64, N1] f32
                       float* c_out) {                         // C2 [64, N2] f32
  using T = PvFragmentTraits<P>;
  static_assert(P.k1 % 64 == 0 && P.k1 >= 64 && P.k1 <= 256, "k1: 64, 128, 192 or 256");
  static_assert(P.n1 % 64 == 0 && P.n1 >= 64 && P.n1 <= 256, "n1: 64, 128, 192 or 256");
  static_assert(P.n2 % 64 == 0 && P.n2 >= 64 && P.n2 <= 256, "n2: 64, 128, 192 or 256");
  static_assert(P.v_mn_major == 0 || P.v_mn_major == 1, "v_mn_major: 0 or 1");
  static_assert(P.f16 == 0 || P.f16 == 1, "f16: 0 or 1");
  static_assert(kPvFragmentSmemBytes<P> <= kMaxSmemPerBlock, "over the 227 KiB opt-in shared memory");
  constexpr WgmmaMajor kVMajor = P.v_mn_major ? WgmmaMajor::kMN : WgmmaMajor::kK;

  extern __shared__ u8 smem_raw[];
  auto& sm = *reinterpret_cast<PvFragmentShared<P>*>(
      smem_raw + (1024u - smem_u32(smem_raw) % 1024u) % 1024u);

  u32 dynamic_bytes;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_bytes));
  if (dynamic_bytes < kPvFragmentSmemBytes<P>) __trap();

  if (threadIdx.x == 0) {
    mbarrier_init(&sm.full, 1);
    fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(&sm.full, T::kABytes + T::kBBytes + T::kVBytes);
    const int box = static_cast<int>(T::kSpanElems);
#pragma unroll 1
    for (u32 j = 0; j < T::kABoxes; ++j)
      tma_load_2d(a_map, &sm.full, sm.a + j * T::ATile::kChunkBytes, static_cast<int>(j) * box, 0);
#pragma unroll 1
    for (u32 j = 0; j < T::kBBoxes; ++j)
      tma_load_2d(b_map, &sm.full, sm.b + j * T::BTile::kChunkBytes, static_cast<int>(j) * box, 0);
#pragma unroll 1
    for (u32 j = 0; j < T::kVBoxes; ++j)
      tma_load_2d(v_map, &sm.full, sm.v + j * T::kVChunkBytes, static_cast<int>(j) * box, 0);
  }
  mbarrier_wait_or_trap(&sm.full, 0);

  const u32 a_addr = smem_u32(sm.a), b_addr = smem_u32(sm.b), v_addr = smem_u32(sm.v);
  const int t = thread_in_warpgroup();

  // ---- S = A · Bᵀ ----------------------------------------------------------------------
  float s_acc[P.n1 / 2];  // S [64 × N1]: wgmma_acc_coord layout
  wgmma_fence_operands(s_acc);
  wgmma_fence();
#pragma unroll
  for (int s = 0; s < T::kSteps1; ++s) {
    wgmma_ss<T::kType, P.n1>(s_acc, T::ATile::desc(a_addr, 32u * s),
                             T::BTile::desc(b_addr, 32u * s), s > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operands(s_acc);  // the conversions below must not float above the wait

#pragma unroll
  for (int i = 0; i < P.n1 / 2; i += 2) {
    const WgmmaCoord rc = wgmma_acc_coord(t, i);
    *reinterpret_cast<float2*>(s_out + rc.row * P.n1 + rc.col) =
        make_float2(s_acc[i], s_acc[i + 1]);
  }

  // ---- P = 16-bit(S) as RS A fragments, C2 = P · V ---------------------------------------
  u32 p_frag[T::kSteps2][4];  // k16 step s: P [64 × 16] columns [16s, 16s + 16)
#pragma unroll
  for (int s = 0; s < T::kSteps2; ++s) {
    wgmma_acc_to_a_fragment<T::kType>(s_acc, s, p_frag[s]);
    wgmma_fence_operands(p_frag[s]);  // conversions stay above wgmma_fence
  }
  float c_acc[P.n2 / 2];  // C2 [64 × N2]: wgmma_acc_coord layout
  wgmma_fence_operands(c_acc);
  wgmma_fence();  // the fragments were written by ordinary instructions
#pragma unroll
  for (int s = 0; s < T::kSteps2; ++s) {
    u64 v_desc;
    if constexpr (P.v_mn_major) {
      v_desc = T::VMnTile::desc(v_addr, 16u * s);  // K rows (keys) [16s, 16s + 16)
    } else {
      v_desc = T::VKTile::desc(v_addr, 32u * s);  // K bytes [32s, 32s + 32)
    }
    wgmma_rs<T::kType, P.n2, kVMajor>(c_acc, p_frag[s], v_desc, s > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
#pragma unroll
  for (int s = 0; s < T::kSteps2; ++s) wgmma_fence_operands(p_frag[s]);  // read async
  wgmma_fence_operands(c_acc);

#pragma unroll
  for (int i = 0; i < P.n2 / 2; i += 2) {
    const WgmmaCoord rc = wgmma_acc_coord(t, i);
    *reinterpret_cast<float2*>(c_out + rc.row * P.n2 + rc.col) =
        make_float2(c_acc[i], c_acc[i + 1]);
  }
}

}  // namespace attnjit::testing
