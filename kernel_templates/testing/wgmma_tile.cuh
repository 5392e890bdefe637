#pragma once
// Test family for common/wgmma.cuh: one warpgroup computes C = A · Bᵀ on a single tile,
//   A [64 × K] (K contiguous), B [N × K] (K contiguous) or, when b_mn_major, B [K × N]
//   (N contiguous), C [64 × N] f32 row-major,
// with A and B brought in by TMA in exactly the layouts wgmma.cuh documents, and K/16
// (bf16/f16) or K/32 (fp8) wgmma steps, SS or RS. tests/gpu/test_wgmma.cpp drives it; the
// host must encode its tensor maps with the boxes listed at WgmmaTilePlan.
#include "common/arch.cuh"
#include "common/mbarrier.cuh"
#include "common/tensor_map.cuh"
#include "common/tma.cuh"
#include "common/types.cuh"
#include "common/warpgroup.cuh"
#include "common/wgmma.cuh"

namespace attnjit::testing {

// int fields (no bools) so that the host twin has no padding bytes.
struct WgmmaTileParams {
  DType dtype;           // bf16, f16, e4m3, e5m2 (both operands)
  int n;                 // 8..256, multiple of 8
  int k;                 // multiple of one instruction's K and of the swizzle span; <= 256
  Swizzle swizzle;       // of both operands' TMA boxes and descriptors
  int a_from_registers;  // 1: RS form, A fragments loaded from shared memory by each thread
  int b_mn_major;        // 1: B is [K × N] N-major (16-bit types only)
};

ATTNJIT_HOST_DEVICE constexpr u32 round_up(u32 x, u32 to) { return (x + to - 1) / to * to; }

// Shared-memory plan and TMA boxes (outermost first, elements):
//   A       : box {64, span/elem}, K/(span/elem) boxes at coordinates {j·span/elem, 0}
//   B K-major: box {N,  span/elem}, K/(span/elem) boxes at {j·span/elem, 0}
//   B MN-major: box {K, span/elem}, N/(span/elem) boxes at {j·span/elem, 0}
// span = swizzle bytes, or 16 without swizzle. The host test mirrors kDynamicSmemBytes.
template <WgmmaTileParams P>
struct WgmmaTilePlan {
  static constexpr u32 kElem = static_cast<u32>(dtype_bytes(P.dtype));
  static constexpr int kStepK = 32 / static_cast<int>(kElem);  // K elements per instruction
  static constexpr int kSteps = P.k / kStepK;
  static constexpr u32 kSpan = wgmma_span_bytes(P.swizzle);
  static constexpr u32 kBoxInner = kSpan / kElem;  // elements per TMA box row

  using ATile = WgmmaKMajorTile<P.swizzle, 64>;      // A [64 × K]
  using BKTile = WgmmaKMajorTile<P.swizzle, P.n>;    // B [N × K], used when !b_mn_major
  using BMNTile = WgmmaMNMajorTile<P.swizzle, P.k>;  // B [K × N], used when b_mn_major

  static constexpr u32 kABytes = 64u * P.k * kElem;
  static constexpr u32 kBBytes = static_cast<u32>(P.n) * P.k * kElem;
  static constexpr u32 kABoxes = P.k * kElem / kSpan;
  static constexpr u32 kBBoxes = P.b_mn_major ? P.n * kElem / kSpan : kABoxes;
  static constexpr u32 kBChunkBytes = P.b_mn_major ? BMNTile::kChunkBytes : BKTile::kChunkBytes;

  static constexpr u32 kAOffset = 0;                        // 1024-aligned
  static constexpr u32 kBOffset = round_up(kABytes, 1024);  // 1024-aligned
  static constexpr u32 kBarOffset = kBOffset + round_up(kBBytes, 1024);
  static constexpr u32 kUsedBytes = kBarOffset + 16;
  // 1024 bytes of slack let the kernel move its tiles to the next 1024-byte boundary (the
  // 128B swizzle pattern repeats every 1024 bytes of shared-memory address).
  static constexpr u32 kDynamicSmemBytes = kUsedBytes + 1024;
};

template <WgmmaTileParams P>
__global__ void __launch_bounds__(kWarpgroupThreads, 1)
    wgmma_tile_kernel(const __grid_constant__ TmaDesc a_map,  // A [64, K]
                      const __grid_constant__ TmaDesc b_map,  // B [N, K] or [K, N]
                      float* c) {                             // C [64, N] f32
  using Plan = WgmmaTilePlan<P>;
  using ATile = typename Plan::ATile;
  using BKTile = typename Plan::BKTile;
  using BMNTile = typename Plan::BMNTile;
  constexpr bool kFp8 = P.dtype == DType::kE4M3 || P.dtype == DType::kE5M2;
  static_assert(P.dtype == DType::kBF16 || P.dtype == DType::kF16 || kFp8,
                "wgmma takes bf16, f16, e4m3 or e5m2");
  static_assert(P.n % 8 == 0 && P.n >= 8 && P.n <= 256, "N: multiple of 8 in [8, 256]");
  static_assert(P.k > 0 && P.k <= 256 && P.k % Plan::kStepK == 0,
                "K: whole instructions, at most 256 (one TMA box of K rows when MN-major)");
  static_assert(P.k * Plan::kElem % Plan::kSpan == 0, "K: whole swizzle spans");
  static_assert(P.a_from_registers == 0 || P.a_from_registers == 1, "a_from_registers: 0 or 1");
  static_assert(P.b_mn_major == 0 || P.b_mn_major == 1, "b_mn_major: 0 or 1");
  static_assert(!(kFp8 && P.b_mn_major), "fp8 wgmma takes K-major operands only");
  static_assert(!P.b_mn_major || P.n * Plan::kElem % Plan::kSpan == 0,
                "MN-major B: N must be whole swizzle spans");
  static_assert(Plan::kDynamicSmemBytes <= kMaxSmemPerBlock, "over the 227 KiB opt-in shared memory");
  constexpr WgmmaMajor kMajorB = P.b_mn_major ? WgmmaMajor::kMN : WgmmaMajor::kK;

  // The dynamic window is only 16-byte aligned by contract: realign (the plan has slack).
  extern __shared__ u8 smem_raw[];
  u8* smem = smem_raw + (1024u - smem_u32(smem_raw) % 1024u) % 1024u;
  u8* a_tile = smem + Plan::kAOffset;  // A: kABoxes chunks of [64][span]
  u8* b_tile = smem + Plan::kBOffset;  // B: kBBoxes chunks of [N or K][span]
  MBarrier* full = reinterpret_cast<MBarrier*>(smem + Plan::kBarOffset);

  // A launch with less shared memory than the plan would write past the window: stop loudly.
  u32 dynamic_bytes;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_bytes));
  if (dynamic_bytes < Plan::kDynamicSmemBytes) __trap();

  if (threadIdx.x == 0) {
    mbarrier_init(full, 1);
    fence_mbarrier_init();
  }
  __syncthreads();

  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(full, Plan::kABytes + Plan::kBBytes);
#pragma unroll 1
    for (u32 j = 0; j < Plan::kABoxes; ++j) {
      tma_load_2d(a_map, full, a_tile + j * ATile::kChunkBytes,
                  static_cast<int>(j * Plan::kBoxInner), 0);
    }
#pragma unroll 1
    for (u32 j = 0; j < Plan::kBBoxes; ++j) {
      tma_load_2d(b_map, full, b_tile + j * Plan::kBChunkBytes,
                  static_cast<int>(j * Plan::kBoxInner), 0);
    }
  }
  mbarrier_wait(full, 0);

  const u32 a_addr = smem_u32(a_tile);
  const u32 b_addr = smem_u32(b_tile);
  auto b_desc = [&](int s) -> u64 {  // k-step s: K rows [16s, 16s+16) or K bytes [32s, 32s+32)
    if constexpr (P.b_mn_major) {
      return BMNTile::desc(b_addr, static_cast<u32>(s * Plan::kStepK));
    } else {
      return BKTile::desc(b_addr, static_cast<u32>(s) * 32u);
    }
  };

  float acc[P.n / 2];  // D [64 × N]: thread t holds wgmma_acc_coord(t, i), i < N/2
#pragma unroll
  for (int i = 0; i < P.n / 2; ++i) acc[i] = 0.f;

  if constexpr (P.a_from_registers) {
    u32 a_frag[Plan::kSteps][4];  // per k-step: A [64 × 32 bytes], wgmma_a_frag_coord layout
#pragma unroll
    for (int s = 0; s < Plan::kSteps; ++s) {
      wgmma_load_a_fragment<ATile>(a_frag[s], a_tile, static_cast<u32>(s) * 32u);
      wgmma_fence_operands(a_frag[s]);  // loads stay above wgmma_fence
    }
    wgmma_fence_operands(acc);
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < Plan::kSteps; ++s) {
      wgmma_rs<P.dtype, P.n, kMajorB>(acc, a_frag[s], b_desc(s), s > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    // The wgmma read a_frag asynchronously: keep those registers untouched until the wait.
#pragma unroll
    for (int s = 0; s < Plan::kSteps; ++s) wgmma_fence_operands(a_frag[s]);
  } else {
    wgmma_fence_operands(acc);
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < Plan::kSteps; ++s) {
      wgmma_ss<P.dtype, P.n, WgmmaMajor::kK, kMajorB>(
          acc, ATile::desc(a_addr, static_cast<u32>(s) * 32u), b_desc(s), s > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
  }
  wgmma_fence_operands(acc);

  // C [64 × N]: floats (i, i+1), i even, are adjacent columns of one row.
  const int t = thread_in_warpgroup();
#pragma unroll
  for (int i = 0; i < P.n / 2; i += 2) {
    const WgmmaCoord rc = wgmma_acc_coord(t, i);
    *reinterpret_cast<float2*>(c + rc.row * P.n + rc.col) = make_float2(acc[i], acc[i + 1]);
  }
}

}  // namespace attnjit::testing
