#pragma once
// mla_decode_branch_fp8's fp8 block-scale projection (layout.cuh: the math, ProjArgs, the
// grid, the shared-memory plan): out[t, h, n0 .. n0 + block_n) for m_steps blocks of block_m
// tokens of head h, activations quantized to e4m3 on the fly (σ_A per token and 128-column
// group), W e4m3 with 128 × 128 scales σ_W. The product runs transposed on fp8 wgmma — W's
// rows on M, the tokens on N — so a decode step's 16 tokens cost 16 columns, not a padded
// 64-row tile.
//   1. every W tile of the CTA is requested at once (one TMA box a tile, landing in the
//      128B-swizzled wgmma layout on the tile's own mbarrier, each warpgroup its own tiles in
//      the order it uses them): the weights are the bytes that matter, nothing waits before
//      asking for them, and the LSU is left to the activations' loads;
//   2. both warpgroups quantize the activations into A8 and σ_A while W streams;
//   3. each warpgroup, per 64-row block of W: per k group four m64nBk32 wgmmas into a fresh
//      accumulator, scaled by σ_W · σ_A[t] into the block's sum; then the block's outᵀ goes
//      through shared memory (stmatrix.trans) to 16-byte stores of the out rows.
// Steps 2–3 repeat for each of the CTA's token blocks with W kept; a block's activations are
// loaded once the previous block is quantized, in flight during its products and stores.
// With a_e4m3 (the output projection behind mla_decode's e4m3 output) step 2 is gone: the
// codes come by TMA straight into the wgmma tiles (two slots, the next block's in flight)
// and σ_A from the caller — half the activation bytes and no quantization here.
#include "common/act_quant.cuh"
#include "common/arch.cuh"
#include "common/fence.cuh"
#include "common/mbarrier.cuh"
#include "common/named_barrier.cuh"
#include "common/numeric.cuh"
#include "common/smem.cuh"
#include "common/tensor_map.cuh"
#include "common/tma.cuh"
#include "common/types.cuh"
#include "common/warpgroup.cuh"
#include "common/wgmma.cuh"
#include "mla_decode_branch_fp8/layout.cuh"

namespace attnjit::mla_decode_branch_fp8 {

using namespace attnjit::layout::mla_decode_branch_fp8;

// One W tile: 64 rows × one 128-column k group (8 KiB), wgmma's A; A8's k group g is the
// block_m × 128 B tile wgmma reads as B. 128-byte rows, so a 16-byte unit u of row r sits at
// u ^ (r % 8) (the 128B swizzle, tiles on 1024-byte boundaries).
using WTile = WgmmaKMajorTile<Swizzle::k128B, kProjRowBlock>;
inline constexpr u32 kWTileBytes = WTile::kChunkBytes;
static_assert(kWTileBytes == kProjRowBlock * kScaleBlock, "one swizzle span = one k group");
ATTNJIT_DEVICE u32 swizzled_128(int row, int unit) {
  return static_cast<u32>(row * 128 + ((unit ^ (row & 7)) << 4));
}

// Barrier 0 is __syncthreads(); each warpgroup waits for its own staging buffer.
enum class ProjBar : u32 { kSyncThreads = 0, kWarpgroup0, kWarpgroup1, kCount };
static_assert(static_cast<int>(ProjBar::kCount) <= kNamedBarrierCount);

// Thread i takes the 32-byte chunks (16 bf16) c = j·256 + i of the row-major [block_m][K]
// tile: 8 consecutive lanes hold one (token, k group), a warp reads 1 KiB of a row (K = 512)
// or four 256-byte rows (K = 128). All loads go out at once (≤ 8 chunks: 64 registers).
template <auto P>
struct ActTile {
  static constexpr int kRowChunks = P.k_dim / 16;
  static constexpr int kAll = P.block_m * kRowChunks;
  static constexpr int kChunks = (kAll + kProjThreads - 1) / kProjThreads;  // 1 .. 8
  static_assert(kChunks <= kProjMaxActChunks, "block_m · K <= 32768 (layout.cuh)");
  static_assert(kAll % kWarpSize == 0, "a warp's lanes all hold chunks, or none do");
  uint4 v[kChunks][2];

  ATTNJIT_DEVICE static bool owned(int c) { return kAll % kProjThreads == 0 || c < kAll; }

  // Zeros for rows past `tokens` (amax 0: σ_A = 0, codes 0).
  ATTNJIT_DEVICE void load(const ProjArgs& a, int m0) {
    const unsigned short* a_head = a.a + static_cast<i64>(blockIdx.y) * a.a_head_stride;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int c = i * kProjThreads + static_cast<int>(threadIdx.x);
      const int t = m0 + c / kRowChunks;
      v[i][0] = v[i][1] = make_uint4(0u, 0u, 0u, 0u);
      if (!owned(c) || t >= a.tokens) continue;
      const auto* src =
          reinterpret_cast<const uint4*>(a_head + t * a.a_token_stride + (c % kRowChunks) * 16);
      v[i][0] = __ldg(src);
      v[i][1] = __ldg(src + 1);
    }
  }

  // The A8 codes (one 16-byte unit of k group g's tile per lane) and σ_A (the group's first
  // lane), at the plan's offsets from the aligned base s.
  ATTNJIT_DEVICE void quantize(u32 s) const {
    constexpr ProjPlan L = proj_plan(P.k_dim, P.block_m, P.block_n, P.m_steps, false);
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int c = i * kProjThreads + static_cast<int>(threadIdx.x);
      if (!owned(c)) continue;  // warp-uniform
      const int row = c / kRowChunks, g = c % kRowChunks / 8, unit = c % 8;
      const u32 w[8] = {v[i][0].x, v[i][0].y, v[i][0].z, v[i][0].w,
                        v[i][1].x, v[i][1].y, v[i][1].z, v[i][1].w};
      u32 code[4];
      const float sigma = act_quantize16(w, code);
      st_shared_16(s + L.a8 + g * P.block_m * 128 + swizzled_128(row, unit),
                   make_uint4(code[0], code[1], code[2], code[3]));
      if (unit == 0) st_shared_f32(s + L.sigma + (g * P.block_m + row) * 4, sigma);
    }
  }
};

// ---- the kernel ------------------------------------------------------------------------
// σ_A of token block m0 (a_e4m3: the caller's, [tokens, h, K / 128] f32) into a σ slot of
// the plan, 0 past the tokens (their codes arrive as TMA's zero fill).
template <auto P>
ATTNJIT_DEVICE void load_act_scales(const ProjArgs& a, u32 sigma, int m0) {
  constexpr int kGroups = P.k_dim / kScaleBlock;
  for (int c = static_cast<int>(threadIdx.x); c < P.block_m * kGroups; c += kProjThreads) {
    const int row = c / kGroups, g = c % kGroups, t = m0 + row;
    const float v = t < a.tokens ? __ldg(a.a_scale + (static_cast<i64>(t) * a.heads + blockIdx.y) * kGroups + g) : 0.0f;
    st_shared_f32(sigma + (g * P.block_m + row) * 4, v);
  }
}

template <auto P>
__global__ void __launch_bounds__(kProjThreads)
    project_kernel(const __grid_constant__ TmaDesc w_map,   // e4m3 [h·N, K], box [64, 128], 128B
                   const __grid_constant__ TmaDesc a8_map,  // a_e4m3: codes [tokens, h, K], box [block_m, 1, 128], 128B
                   const ProjArgs a) {
  static_assert((P.k_dim == 128 && P.n_dim == 512) || (P.k_dim == 512 && P.n_dim == 128),
                "the two MLA projections: K = 128, N = 512 or K = 512, N = 128");
  static_assert(P.block_m == 8 || P.block_m == 16 || P.block_m == 32 || P.block_m == 64 ||
                    P.block_m == 128,
                "block_m: wgmma N, 8 … 128 tokens");
  static_assert(P.block_n % (kProjWarpgroups * kProjRowBlock) == 0 && P.n_dim % P.block_n == 0,
                "block_n: whole 64-row blocks for both warpgroups, dividing N");
  constexpr ProjPlan L = proj_plan(P.k_dim, P.block_m, P.block_n, P.m_steps, P.a_e4m3);
  constexpr int K = P.k_dim, kGroups = K / kScaleBlock, kN = P.block_m;
  constexpr int kBlocks = P.block_n / kProjRowBlock / kProjWarpgroups;  // row blocks per warpgroup
  constexpr int kTiles = kBlocks * kGroups;                             // W tiles per warpgroup
  static_assert(kTiles <= 4, "the plan holds 4 tile barriers a warpgroup");
  using ATile = WgmmaKMajorTile<Swizzle::k128B, kN>;  // A8's k group: wgmma's B
  extern __shared__ unsigned char smem_raw[];
  // The plan's offsets are from a 1024-byte boundary (the 128B swizzle atom).
  const u32 s0 = (smem_u32(smem_raw) + kProjSmemAlign - 1) & ~(kProjSmemAlign - 1);
  const int h = blockIdx.y, n0 = blockIdx.x * P.block_n, m_first = blockIdx.z * P.m_steps * P.block_m;
  if (m_first >= a.tokens) return;  // uniform: a grid larger than the tokens need
  // The CTA's token blocks (m_steps 1: one, known to the compiler, which keeps no loop state).
  const int steps = P.m_steps == 1 ? 1 : min(P.m_steps, ceil_div(a.tokens - m_first, P.block_m));
  const int wg = warpgroup_id_uniform(), t = thread_in_warpgroup();
  const ProjBar bar = wg == 0 ? ProjBar::kWarpgroup0 : ProjBar::kWarpgroup1;
  unsigned char* const base = smem_raw + (s0 - smem_u32(smem_raw));  // the plan's, generic
  MBarrier* const w_full = reinterpret_cast<MBarrier*>(base + L.bars) + wg * kTiles;  // [kTiles]
  // a_e4m3: A8 slot k's codes have landed ([kProjA8Slots], after every W tile's).
  MBarrier* const a8_full = reinterpret_cast<MBarrier*>(base + L.bars) + kProjWarpgroups * kTiles;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kProjWarpgroups * kTiles + (P.a_e4m3 ? kProjA8Slots : 0); ++i)
      mbarrier_init(reinterpret_cast<MBarrier*>(base + L.bars) + i, 1);
    fence_mbarrier_init();
  }
  __syncthreads();
  // a_e4m3: token block m0's codes into A8 slot k, one box a k group (the wgmma tile as it lies).
  const auto request_codes = [&](int k, int m0) {
    mbarrier_arrive_expect_tx(&a8_full[k], static_cast<u32>(kN * K));
#pragma unroll
    for (int g = 0; g < kGroups; ++g)
      tma_load_3d(a8_map, &a8_full[k], base + L.a8 + k * kN * K + g * kN * 128, g * kScaleBlock, h, m0);
  };

  // Activations the previous kernel does not write (a_ready) go out first: behind the CTA's
  // weight requests they would arrive last and their quantization would not overlap W.
  ActTile<P> act;
  if (!P.a_e4m3 && a.a_ready) act.load(a, m_first);

  // 1. This warpgroup's W tiles: row block b = wg + 2j, k group g, tile i = j·kGroups + g,
  // in the order it multiplies them, one box each.
  if (t == 0) {
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      const int b = wg + kProjWarpgroups * (i / kGroups), g = i % kGroups;
      mbarrier_arrive_expect_tx(&w_full[i], kWTileBytes);
      tma_load_2d(w_map, &w_full[i], base + L.w + (b * kGroups + g) * kWTileBytes, g * kScaleBlock,
                  h * P.n_dim + n0 + b * kProjRowBlock);
    }
  }
  // The previous kernel's writes are visible past this point, and it has finished: a kernel
  // launched after this one in the stream may rely on both (layout.cuh, ProjArgs).
  pdl_wait_prior_grids();
  if constexpr (P.a_e4m3) {
    if (threadIdx.x == 0) request_codes(0, m_first);
    load_act_scales<P>(a, s0 + L.sigma, m_first);
  } else if (!a.a_ready) {
    act.load(a, m_first);
  }
  // σ_W[h, (n0 + 64 b) / 128, g] of this warpgroup's blocks, requested after the activations:
  // ptxas keeps them in uniform registers and waits for them where they are loaded, which
  // ahead of the activation loads put a DRAM latency in front of those (ncu, 128 tokens).
  float sigma_w[kBlocks][kGroups];
#pragma unroll
  for (int j = 0; j < kBlocks; ++j)
#pragma unroll
    for (int g = 0; g < kGroups; ++g)
      sigma_w[j][g] = __ldg(a.w_scale + (static_cast<i64>(h) * (P.n_dim / kScaleBlock) +
                                         (n0 + (wg + kProjWarpgroups * j) * kProjRowBlock) / kScaleBlock) *
                                            kGroups +
                            g);

  const int lane = lane_id(), warp = t / kWarpSize;
  unsigned short* out_head = a.out + static_cast<i64>(h) * a.out_head_stride + n0;
#pragma unroll 1
  for (int step = 0; step < steps; ++step) {
    const int m0 = m_first + step * P.block_m;
    const int slot = P.a_e4m3 ? step % kProjA8Slots : 0;  // A8 and σ_A slot of this step
    const u32 a8_at = s0 + L.a8 + slot * kN * K, sigma_at = s0 + L.sigma + slot * kGroups * kN * 4;
    if constexpr (P.a_e4m3) {
      // 2. The codes came by TMA. Past this barrier the previous step's wgmmas and scales
      // are done with the other slot and this step's σ_A is in place: the next step's codes
      // and σ_A go out into the other slot, in flight while this one multiplies and stores.
      __syncthreads();
      if (step + 1 < steps) {
        if (threadIdx.x == 0) request_codes(slot ^ 1, m0 + P.block_m);
        load_act_scales<P>(a, s0 + L.sigma + (slot ^ 1) * kGroups * kN * 4, m0 + P.block_m);
      }
      mbarrier_wait(&a8_full[slot], (step / kProjA8Slots) & 1);
    } else {
      // The previous step's wgmmas have read A8 and σ_A, and its stores the stage.
      if (step > 0) __syncthreads();
      // 2. A8 and σ_A (the first step's while W streams in); published to wgmma (the async
      // proxy) by the fence. Then the next step's activations go out, in flight while this
      // step multiplies and stores: W stays, so only they cross from memory again.
      act.quantize(s0);
      fence_proxy_async_smem();
      __syncthreads();
      if (step + 1 < steps) act.load(a, m0 + P.block_m);
    }

    // 3. Per row block: outᵀ[64 n × kN t] in the accumulator layout (common/wgmma.cuh): float i
    // of thread (warp w, lane l) is row n = 16w + l/4 + 8·((i/2) % 2), token 8·(i/4) + 2·(l%4) + i%2.
#pragma unroll
    for (int j = 0; j < kBlocks; ++j) {
      const int b = wg + kProjWarpgroups * j;
      float acc[kN / 2];
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        const int i = j * kGroups + g;
        if (step == 0) mbarrier_wait(&w_full[i], 0);  // tile i has landed (its one phase)
        const u32 tile = s0 + L.w + (b * kGroups + g) * kWTileBytes;
        const u32 a8 = a8_at + g * kN * 128;
        float part[kN / 2];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kScaleBlock / 32; ++kk)
          wgmma_ss<DType::kE4M3, kN>(part, WTile::desc(tile, 32 * kk), ATile::desc(a8, 32 * kk), kk > 0);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_operands(part);
        // The group's scale: σ_W of the block times σ_A of each column (token).
#pragma unroll
        for (int c = 0; c < kN / 8; ++c) {
          const u32 sa = sigma_at + (g * kN + 8 * c + 2 * (lane % 4)) * 4;
          const float s_lo = ld_shared_f32(sa) * sigma_w[j][g], s_hi = ld_shared_f32(sa + 4) * sigma_w[j][g];
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int q = 4 * c + r;
            const float s = r % 2 ? s_hi : s_lo;
            acc[q] = g == 0 ? part[q] * s : fmaf(part[q], s, acc[q]);
          }
        }
      }

      // 4. outᵀ → bf16 [kN tokens][64 n] in the warpgroup's stage (128-byte rows, swizzled): over
      // the block's own W tiles once every warp's wgmmas have read them, else its own region
      // once every warp has stored the previous block's rows from it.
      const u32 stage = L.stage_over_w ? s0 + L.w + b * kGroups * kWTileBytes
                                       : s0 + L.stage + wg * kN * kProjRowBlock * 2;
      if (L.stage_over_w || j > 0) named_barrier_sync(bar, kWarpgroupThreads);
      // The 8 × 8 matrix (token block c, row half hf) is register pack(acc[4c + 2hf], +1); stored
      // transposed, its row (token 8c + r) takes the 8 n values 16w + 8hf .. as one unit.
      const int r = lane % 8, mq = lane / 8;  // the row this lane addresses, of matrix mq
      if constexpr (kN % 16 == 0) {
#pragma unroll
        for (int c = 0; c < kN / 8; c += 2) {
          const int tok = 8 * (c + mq / 2) + r, unit = 2 * warp + mq % 2;
          stmatrix_x4_trans(stage + swizzled_128(tok, unit), pack2<DType::kBF16>(acc[4 * c], acc[4 * c + 1]),
                            pack2<DType::kBF16>(acc[4 * c + 2], acc[4 * c + 3]),
                            pack2<DType::kBF16>(acc[4 * c + 4], acc[4 * c + 5]),
                            pack2<DType::kBF16>(acc[4 * c + 6], acc[4 * c + 7]));
        }
      } else {  // kN = 8: lanes 0..15 address the two matrices
        stmatrix_x2_trans(stage + swizzled_128(r, 2 * warp + mq % 2), pack2<DType::kBF16>(acc[0], acc[1]),
                          pack2<DType::kBF16>(acc[2], acc[3]));
      }
      named_barrier_sync(bar, kWarpgroupThreads);
      // Rows of 128 bytes by 16-byte stores (the host checks out's rows are 16-byte aligned).
#pragma unroll
      for (int k = 0; k < (kN * 8 + kWarpgroupThreads - 1) / kWarpgroupThreads; ++k) {
        const int c = k * kWarpgroupThreads + t, row = c / 8, unit = c % 8, tok = m0 + row;
        if (row < kN && tok < a.tokens)
          *reinterpret_cast<uint4*>(out_head + tok * a.out_token_stride + b * kProjRowBlock + unit * 8) =
              ld_shared_16(stage + swizzled_128(row, unit));
      }
    }
  }
}

}  // namespace attnjit::mla_decode_branch_fp8
