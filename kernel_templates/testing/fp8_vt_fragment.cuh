#pragma once
// Test family for the fp8 P·V planned for mla_decode_fp8 (config fp8_mma 1):
// fp8 wgmma takes K-major operands only, and V [keys][dims] is MN-major for O = P·V, so
// the kernel computes the transpose
//
//   Oᵀ [128 dims × 64 rows] (f32) = Vᵀ [128 dims × 32 keys] · P′ᵀ,  P′ [64 rows × 32 keys]
//
// with Vᵀ as the register A operand, built straight from V as TMA lands it (key-major
// [32 keys][128 B], 128B-swizzled or dense): per warp and 64-dim block, one
// ldmatrix.x4.trans.b16 over V[32 keys][16 dims] gives, in each of its 4 registers
// (matrix j = keys 8j..8j+7), the bytes {V[2t][2g], V[2t][2g+1], V[2t+1][2g], V[2t+1][2g+1]}
// (g = lane/4, t = lane%4); two PRMTs per register pair (0x6420, 0x7531) split them into
// dim 2g and dim 2g+1, keys {2t, 2t+1, 8+2t, 9+2t}. That is an e4m3 A fragment (row g,
// k 4t..4t+3 and row g+8) under two permutations: A row g ↔ dim 2g, row g+8 ↔ dim 2g+1,
// and A's k position 4t+j ↔ key {2t, 2t+1, 8+2t, 9+2t}[j] (+16 for registers 2, 3). P′ is
// stored with its keys in that k order (kernel: by the softmax's packing; here by the
// host) and the epilogue undoes the row permutation. No Vᵀ buffer, no stmatrix pass.
#include "common/arch.cuh"
#include "common/fence.cuh"
#include "common/types.cuh"
#include "common/warpgroup.cuh"
#include "common/wgmma.cuh"
#include "mla_decode_fp8/vt_fragment.cuh"

namespace attnjit::testing {

using attnjit::mla_decode_fp8::Fp8PTile;
using attnjit::mla_decode_fp8::fp8_vt_fragment;
using attnjit::mla_decode_fp8::fp8_vt_key_of;

struct Fp8VtParams {
  int v_swizzled;  // 1: V [32][128 B] 128B-swizzled (as the TMA ring holds it); 0: dense
};

// v: [32 keys][128 dims] e4m3, dense; p: [64 rows][32 keys] e4m3 in the natural key order;
// out: Oᵀ [128 dims][64 rows] f32. One warpgroup.
template <Fp8VtParams P>
__global__ void __launch_bounds__(128, 1) fp8_vt_kernel(const u8* v, const u8* p, float* out) {
  __shared__ alignas(1024) u8 v_s[32 * 128];
  __shared__ alignas(128) u8 p_s[64 * 32];
  const int tid = static_cast<int>(threadIdx.x);
  for (int i = tid; i < 32 * 128; i += 128)
    v_s[P.v_swizzled ? swizzle_byte_offset<Swizzle::k128B>(static_cast<u32>(i)) : i] = v[i];
  for (int i = tid; i < 64 * 32; i += 128) {  // P′[row][k position] = P[row][key_of(k)]
    const int row = i / 32, k = i % 32;
    p_s[Fp8PTile::byte_offset(static_cast<u32>(row), static_cast<u32>(k))] = p[row * 32 + fp8_vt_key_of(k)];
  }
  fence_proxy_async_smem();
  __syncthreads();
  for (int block = 0; block < 2; ++block) {
    u32 a[4];
    fp8_vt_fragment(a, smem_u32(v_s), 64 * block, P.v_swizzled != 0);
    float acc[32];  // Oᵀ block [64 dims × 64 rows]
    wgmma_fence();
    wgmma_rs<DType::kE4M3, 64>(acc, a, Fp8PTile::desc(smem_u32(p_s), 0), false);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(acc);
    for (int i = 0; i < 32; ++i) {
      const WgmmaCoord c = wgmma_acc_coord(tid % 128, i);
      const int local = c.row % 16;  // A row within the warp's 16: g or g + 8
      const int dim = 64 * block + 16 * (c.row / 16) + 2 * (local % 8) + local / 8;
      out[dim * 64 + c.col] = acc[i];
    }
  }
}

}  // namespace attnjit::testing
