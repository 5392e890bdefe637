#pragma once
// sm90_mla_decode_fp8_qgmma: the fp8 wgmma schedule of mla_decode_fp8 (config fp8_mma = 1).
// EXPERIMENTAL: 2.2× the widening schedule's speed on the H200 and within its own limits
// (e4m3 P′; Q·Kᵀ in fp8 wgmma, whose accumulator keeps ~13 mantissa bits: lse to 5e-4 of
// |score|), 10× the widening schedule's output error, which stays the default
// (docs/performance.md "mla_decode_fp8: first figures"). The design:
//
//   S  [64 × 32]  = Q_c·K_cᵀ (4 chunks × 4 SS e4m3 m64n32k32) + Q_r·K_rᵀ (4 SS bf16 k16),
//                   each k-step's fresh accumulator added in f32, K straight from the TMA
//                   ring (no widening);
//   x  = S·σ_Q·σ_KV·scale·log2e, online softmax on x as the widening schedule;
//   P′ [64 × 32]  = e4m3(p·σ_KV·256/s_run): s_run is the running max of σ_KV over the
//                   CTA's tiles (its growth folds into the row rescale), ×256 keeps p ≥ 2^-14
//                   out of e4m3's subnormals; stored in vt_fragment.cuh's key order;
//   Oᵀ [256 × 64] += Vᵀ·P′ᵀ per PV warpgroup: 4 dim blocks × RS e4m3 m64n64k32, Vᵀ built in
//                   registers from the ring by ldmatrix.trans + PRMT (vt_fragment.cuh);
//   out = Oᵀ·(s_run/256)/l, transposed back by the epilogue (dims 2g, 2g+1 of a column
//                   pair into one bf16x2 store).
// Rows past the length hold NaN codes in the ring: WG0 zeroes their content bytes before
// S and P·V read them (0·NaN is NaN inside the MMA). Roles, barriers, split and epilogue
// contract are the widening schedule's.
#include "mla_decode_fp8/sm90_mla_decode_fp8.cuh"  // Bar, fetch_sigma, OutParams-free helpers
#include "mla_decode_fp8/vt_fragment.cuh"

namespace attnjit::mla_decode_fp8::qgmma {

template <auto P>
struct Traits {
  static constexpr int kThreads = 3 * kWarpgroupThreads;
  static constexpr int kQChunkBytes = P.block_m * kBoxBytes;            // [64][128 B]
  static constexpr int kKChunkBytes = P.block_n * kBoxBytes;            // [32][128 B]
  static constexpr int kRingBytes = kRowBoxes * kKChunkBytes;           // 4 content + rope
  static constexpr int kHalfDims = kValueDim / 2;                       // dims per PV warpgroup
  static_assert(P.fp8_mma == 1, "this file is the fp8 wgmma schedule");
  static_assert(P.block_m == kWgmmaM && P.block_n == 32, "64 rows × 32-key tiles (one k32 of P·V)");
  static_assert(P.stages >= 2 && P.stages <= 8, "2..8 fp8 stages");
  static_assert(P.page_size >= 64 && (P.page_size & (P.page_size - 1)) == 0, "pages of 64..256");
};

template <auto P>
struct SharedStorage {
  using T = Traits<P>;
  alignas(1024) u8 q8[kContentBoxes * T::kQChunkBytes];  // Q content e4m3, 4 × [64][128 B] SW128
  alignas(1024) u8 q_rope[T::kQChunkBytes];              // Q rope bf16 [64][64] SW128
  alignas(1024) u8 ring[P.stages][T::kRingBytes];        // K/V e4m3 4 × [32][128 B] + rope bf16, SW128
  alignas(1024) u8 p8[P.block_m * P.block_n];            // P′ e4m3 [64][32], Fp8PTile, key order
  float sigma[P.stages][P.block_n];                      // σ_KV of the stage's keys (0 past L)
  float row_scale[P.block_m];
  float row_max[P.block_m];
  float row_sum[P.block_m];
  float s_run[4];                                        // [0]: the final running σ max
  MBarrier q_full;
  MBarrier kv_full[P.stages];
};

template <auto P>
inline constexpr unsigned kDynamicSmemBytes = sizeof(SharedStorage<P>) + 1024;
template <auto P>
inline constexpr bool kPlanMatches = kDynamicSmemBytes<P> == smem_bytes(P.block_m, P.block_n, P.stages, 1);

template <auto P>
using Q8Tile = WgmmaKMajorTile<Swizzle::k128B, P.block_m>;
template <auto P>
using K8Tile = WgmmaKMajorTile<Swizzle::k128B, P.block_n>;

// Zeroes the content bytes of key rows [first, 32) of a ring stage (whole 128-byte lines:
// the swizzle permutes 16-byte units within a line).
template <auto P>
ATTNJIT_DEVICE void zero_tail_rows(u8* stage, int first) {
  using T = Traits<P>;
  const int rows = P.block_n - first;
  for (int i = thread_in_warpgroup(); i < rows * kContentBoxes * 8; i += kWarpgroupThreads) {
    const int unit = i % 8, row = first + (i / 8) % rows, c = i / (8 * rows);
    *reinterpret_cast<uint4*>(stage + c * T::kKChunkBytes + row * 128 + unit * 16) = make_uint4(0, 0, 0, 0);
  }
}

// ---- roles ----------------------------------------------------------------------------------

// WG0: S (QGMMA + rope HGMMA), scaled online softmax, P′ = e4m3(p·σ·256/s_run) to smem.
template <auto P>
ATTNJIT_DEVICE void softmax_warpgroup(SharedStorage<P>& s, const TmaDesc& kv_map, const TmaDesc& rope_map,
                                      const Args& a, const md::Tile& t) {
  const int tid = thread_in_warpgroup();
  float sc[P.block_n / 2];  // S, then x, then P′ (pre-cast): [64 × 32] accumulator fragment
  md::RowState rs{{neg_inf(), neg_inf()}, {0.0f, 0.0f}};
  int limit[2];
  md::row_limits<P>(t, limit);
  float c_row[2];  // σ_Q · scale · log2(e) per row
  row_q_factors<P>(a, t, tid, c_row);
  float s_run = 0.0f;  // running max of σ_KV (uniform over the CTA)
  if (t.tile_begin < t.tile_end) mbarrier_wait(&s.q_full, 0);
  const u32 q8_addr = smem_u32(s.q8), qr_addr = smem_u32(s.q_rope);
  float sigma_next = t.tile_begin < t.tile_end ? fetch_sigma<P>(a, t.batch, t.tile_begin, t.len) : 0.0f;
  for (int tile = t.tile_begin, i = 0; tile < t.tile_end; ++tile, ++i) {
    const int st = i % P.stages;
    const int valid = t.len - tile * P.block_n;
    const float sigma = sigma_next;  // fetched a tile ahead: the loads' latency is hidden
    if (tile + 1 < t.tile_end) sigma_next = fetch_sigma<P>(a, t.batch, tile + 1, t.len);
    mbarrier_wait(&s.kv_full[st], static_cast<u32>(i / P.stages) & 1u);
    store_sigma<P>(s.sigma[st], sigma);
    if (valid < P.block_n) zero_tail_rows<P>(s.ring[st], valid);
    fence_proxy_async_smem();  // zeros are read by wgmma (S here, P·V in WG1/WG2)
    named_barrier_sync(Bar::kWidened, kWarpgroupThreads);
    const u32 k_addr = smem_u32(s.ring[st]);
    const u32 kr_addr = k_addr + kContentBoxes * Traits<P>::kKChunkBytes;

    // S in f32 registers, one fresh accumulator per k32 step: fp8 wgmma keeps only ~13
    // mantissa bits when it adds into a running accumulator, an error that grows with |S|
    // (3.7e-3 of the lse at unit magnitude, 6.3 at magnitude 30 when chained; 20× less
    // this way, for 14 % of the kernel's time). DeepGEMM promotes the same way. Two steps
    // in flight; the rope's 4 bf16 k16 steps are the 17th.
    constexpr int kSteps = kContentBoxes * 4 + 1;
    float part[2][P.block_n / 2];
#pragma unroll
    for (int i2 = 0; i2 < P.block_n / 2; ++i2) sc[i2] = 0.0f;
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
      wgmma_fence();  // part[j % 2] was read by the adds of step j - 2
      if (j < kSteps - 1) {
        const u32 k_byte = static_cast<u32>((j / 4) * 128 + (j % 4) * 32);
        wgmma_ss<DType::kE4M3, P.block_n>(part[j % 2], Q8Tile<P>::desc(q8_addr, k_byte),
                                          K8Tile<P>::desc(k_addr, k_byte), false);
      } else {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          wgmma_ss<DType::kBF16, P.block_n>(part[j % 2], Q8Tile<P>::desc(qr_addr, kk * 32),
                                            K8Tile<P>::desc(kr_addr, kk * 32), kk > 0);
      }
      wgmma_commit();
      if (j > 0) {
        wgmma_wait<1>();
        wgmma_fence_operands(part[(j - 1) % 2]);
#pragma unroll
        for (int i2 = 0; i2 < P.block_n / 2; ++i2) sc[i2] += part[(j - 1) % 2][i2];
      }
    }
    wgmma_wait<0>();
    wgmma_fence_operands(part[(kSteps - 1) % 2]);
#pragma unroll
    for (int i2 = 0; i2 < P.block_n / 2; ++i2) sc[i2] += part[(kSteps - 1) % 2][i2];

    const int key0 = tile * P.block_n;
    float tile_max[2] = {neg_inf(), neg_inf()};
#pragma unroll
    for (int i2 = 0; i2 < P.block_n / 2; ++i2) {
      const int r = (i2 / 2) % 2;
      const int col = wgmma_acc_coord(tid, i2).col;
      const float x = key0 + col <= limit[r] ? sc[i2] * c_row[r] * s.sigma[st][col] : neg_inf();
      sc[i2] = x;
      tile_max[r] = fmaxf(tile_max[r], x);
    }
    // The running σ max: P′ = p·σ/s_run·256 stays ≤ 256; O is rescaled by s_old/s_new.
    float sigma_max = s_run;
    for (int k = 0; k < P.block_n; ++k) sigma_max = fmaxf(sigma_max, s.sigma[st][k]);
    const float s_growth = sigma_max > 0.0f ? s_run / sigma_max : 1.0f;
    s_run = sigma_max;
    const float p_mul = s_run > 0.0f ? 256.0f / s_run : 0.0f;
    float scale[2];
    md::update_row_max(rs, tile_max, scale);
    scale[0] *= s_growth;  // O's units follow s_run; l's do not
    scale[1] *= s_growth;
#pragma unroll
    for (int i2 = 0; i2 < P.block_n / 2; ++i2) {
      const int r = (i2 / 2) % 2;
      const float p = rs.m[r] == neg_inf() ? 0.0f : exp2f(sc[i2] - rs.m[r]);
      rs.l[r] += p;
      sc[i2] = p * s.sigma[st][wgmma_acc_coord(tid, i2).col] * p_mul;
    }

    named_barrier_sync(Bar::kPFree, 3 * kWarpgroupThreads);
    // Tile i-1's stage is free now (S read its K long ago, P·V its V): refill it.
    if (tid == 0 && i >= 1 && tile - 1 + P.stages < t.tile_end)
      load_kv<P>(s, kv_map, rope_map, a, t.batch, tile - 1 + P.stages, i - 1 + P.stages);
    // P′ in the fragment's key order: group G (keys 16G..16G+15) of row r is the 4 bytes
    // {2t, 2t+1, 8+2t, 9+2t} at k position 16G + 4t, i.e. accumulators 8G+2r+{0,1} and
    // 8G+4+2r+{0,1}.
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int g = 0; g < 2; ++g) {
        const int i0 = 8 * g + 2 * r;
        const u32 word = e4m3x2(sc[i0], sc[i0 + 1]) | e4m3x2(sc[i0 + 4], sc[i0 + 5]) << 16;
        const P8Slot at = fp8_p_slot(tid, i0);  // byte 0 of the word (layout.cuh, CPU-tested)
        *reinterpret_cast<u32*>(s.p8 + Fp8PTile::byte_offset(static_cast<u32>(at.row), static_cast<u32>(at.kpos))) = word;
      }
    if (tid % 4 == 0) {
      s.row_scale[wgmma_acc_coord(tid, 0).row] = scale[0];
      s.row_scale[wgmma_acc_coord(tid, 2).row] = scale[1];
    }
    fence_proxy_async_smem();
    named_barrier_arrive(Bar::kPReady, 3 * kWarpgroupThreads);
  }
  md::store_row_stats(rs, s.row_max, s.row_sum, tid);
  if (tid == 0) s.s_run[0] = s_run;
  named_barrier_arrive(Bar::kStats, 3 * kWarpgroupThreads);
}

// WG1 / WG2: Oᵀ[dims half·256 .. +256][64 rows] += Vᵀ·P′ᵀ, 4 blocks of 64 dims. The loop
// needs only the tile count; the epilogue locates the tile again (a few global loads)
// rather than keep its fields live next to the 128 accumulators (they spilled).
template <auto P, int half>  // a template argument: its dim offsets fold into immediates
ATTNJIT_DEVICE void pv_warpgroup(SharedStorage<P>& s, const Args& a, int tiles) {
  const int tid = thread_in_warpgroup();
  float o[4][32];  // Oᵀ [4 × 64 dims][64 rows]: accumulator rows are dims (permuted), columns rows
#pragma unroll
  for (int mb = 0; mb < 4; ++mb)
#pragma unroll
    for (int i = 0; i < 32; ++i) o[mb][i] = 0.0f;
  if (tiles > 0) named_barrier_arrive(Bar::kPFree, 3 * kWarpgroupThreads);  // P′ starts free
  for (int i = 0, st = 0; i < tiles; ++i, st = st + 1 == P.stages ? 0 : st + 1) {
    // Unaligned: WG1 and WG2 reach it from their own instantiations (half), and bar.sync's
    // aligned form wants one instruction for all (synccheck's "divergent threads").
    named_barrier_sync_unaligned(Bar::kPReady, 3 * kWarpgroupThreads);
    const u32 v_addr = smem_u32(s.ring[st]);
    const u64 p_desc = Fp8PTile::desc(smem_u32(s.p8), 0);
    // The rescale is per column of Oᵀ (a query row): accumulators 4j..4j+3 are columns
    // 8j + 2t and 8j + 2t + 1 (rows g and g + 8), one float2 of row_scale. The empty asm
    // keeps ptxas from hoisting all eight loads next to the 128 accumulators (it spilled).
    const u32 scale_addr = smem_u32(s.row_scale) + 8u * (tid % 4);  // shared-window loads: a
                                                                     // generic pointer costs
                                                                     // 64-bit registers
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float2 f;
      asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(f.x), "=f"(f.y) : "r"(scale_addr + 32u * j));
#pragma unroll
      for (int mb = 0; mb < 4; ++mb) {
        o[mb][4 * j] *= f.x;
        o[mb][4 * j + 1] *= f.y;
        o[mb][4 * j + 2] *= f.x;
        o[mb][4 * j + 3] *= f.y;
      }
      asm volatile("" ::: "memory");
    }
    // One dim block in flight: an RS wgmma reads its A registers asynchronously, so a
    // fragment stays live until its group retires; two or four at once spill under the
    // 168-register cap next to the 128 accumulators.
#pragma unroll
    for (int mb = 0; mb < 4; ++mb) {
      u32 frag[4];
      const int dim = half * Traits<P>::kHalfDims + 64 * mb;  // first dim of the block
      fp8_vt_fragment(frag, v_addr + (dim / 128) * Traits<P>::kKChunkBytes, dim % 128, true);
      wgmma_fence();
      wgmma_rs<DType::kE4M3, 64>(o[mb], frag, p_desc, true);
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operands(o[mb]);
    }
    if (i + 1 < tiles) named_barrier_arrive(Bar::kPFree, 3 * kWarpgroupThreads);
  }
  named_barrier_sync_unaligned(Bar::kStats, 3 * kWarpgroupThreads);
  const md::Tile t = md::locate<P>(a.base, cta_item(a.base));

  // Epilogue: out[row][dim] = Oᵀ[dim][row] · (s_run / 256) / l[row]; dims 2g and 2g+1 of a
  // column are accumulators i and i+2 of the same block (A rows g and g+8).
  const layout::mla_decode::Args& b = a.base;
  const float units = s.s_run[0] / 256.0f;
  const int rows_b = t.seq.q_len * P.num_heads;
  const int warp = tid / 32, g = (tid % 32) / 4;
  // One 64-bit base per thread (row n = 0, this thread's dim pair); 32-bit offsets after:
  // 64-bit address math per store spills next to the 128 accumulators.
  const int dim0 = half * Traits<P>::kHalfDims + 16 * warp + 2 * g;
  const EpilogueRows rows = epilogue_rows<P>(b, t);
  u32* out_base = static_cast<u32*>(b.out) + (rows.row0 * kValueDim + dim0) / 2;
  float* part_base = b.part_out + rows.row0 * kValueDim + dim0;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    if ((i / 2) % 2 != 0) continue;  // handled with its pair i - 2
    const int n = wgmma_acc_coord(tid, i).col;
    if (t.row0 + n >= rows_b) continue;
    const float l = s.row_sum[n];
    const float inv = l > 0.0f ? units / l : 0.0f;
#pragma unroll
    for (int mb = 0; mb < 4; ++mb) {
      const int off = n * kValueDim + 64 * mb;
      if (!rows.partial)
        out_base[off / 2] = pack2<DType::kBF16>(o[mb][i] * inv, o[mb][i + 2] * inv);
      else
        *reinterpret_cast<float2*>(part_base + off) = make_float2(o[mb][i] * inv, o[mb][i + 2] * inv);
    }
    if (half == 0 && warp == 0 && g == 0)  // one thread per column writes its lse
      store_lse<P>(b, t, rows, n, l > 0.0f ? (s.row_max[n] + __log2f(l)) * kLn2 : neg_inf());
  }
}

// ---- entry ------------------------------------------------------------------------------

template <auto P>
__global__ void __launch_bounds__(Traits<P>::kThreads, 1)
    kernel(const __grid_constant__ TmaDesc q_map,     // u8 [total_q·h, 640], box [64, 128 B], SW128
           const __grid_constant__ TmaDesc kv_map,    // u8 [pages·page_size, 640 | 512], box [32, 128 B], SW128
           const __grid_constant__ TmaDesc rope_map,  // kv_map, or u8 [pages·page_size, 128], SW128
           const Args args) {
  static_assert(kPlanMatches<P>, "mla_decode_fp8/layout.cuh's smem_bytes is not this SharedStorage's");
  const int item = cta_item(args.base);
  if (item < 0) return;
  extern __shared__ u8 smem_raw[];
  auto& s = *reinterpret_cast<SharedStorage<P>*>((reinterpret_cast<u64>(smem_raw) + 1023) & ~u64(1023));
  const int wg = warpgroup_id_uniform();
  init_cta<kDynamicSmemBytes<P>, P.stages>(s, q_map, kv_map, rope_map);
  const md::Tile t = md::locate<P>(args.base, item);
  if (threadIdx.x == 0 && t.tile_begin < t.tile_end) {
    load_q8<P>(s, q_map, t);
    for (int i = 0; i < P.stages && t.tile_begin + i < t.tile_end; ++i)
      load_kv<P>(s, kv_map, rope_map, args, t.batch, t.tile_begin + i, i);
  }
  if (wg == 0) {
    softmax_warpgroup<P>(s, kv_map, rope_map, args, t);
  } else {
    if (wg == 1)
      pv_warpgroup<P, 0>(s, args, t.tile_end - t.tile_begin);
    else
      pv_warpgroup<P, 1>(s, args, t.tile_end - t.tile_begin);
  }
  pdl_launch_dependents();
}

}  // namespace attnjit::mla_decode_fp8::qgmma
