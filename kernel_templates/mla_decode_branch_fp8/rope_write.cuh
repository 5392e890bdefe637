#pragma once
// mla_decode_branch_fp8's RoPE + RMSNorm + cache write (the semantics: layout.cuh, above
// CacheLayout). Every rounding step is spelled out with _rn intrinsics so that NVRTC's
// default --fmad=true cannot contract it and a host reference gets the same bits:
//   rope:    y0 = bf16(x0·cos ⊖ x1·sin), y1 = bf16(x0·sin ⊕ x1·cos), each product rounded
//            (no FMA), then the sum/difference rounded;
//   RMSNorm: thread k (c = 4k..4k+3) sums ((x0² + x1²) + x2²) + x3², each square rounded;
//            the warp sums by an xor butterfly (offsets 16, 8, 4, 2, 1: v[l] += v[l ^ o]);
//            total = ((w0 + w1) + w2) + w3; rinv = 1 / sqrt(total / 512 + ε), division
//            and sqrt IEEE-rounded; n_c = bf16((x_c · rinv) · gamma_c), products rounded;
//   the 640-byte row: mla_decode_fp8's quantizer (quantize.cuh) applied to the bf16 row;
//   the 656-byte row: mla_decode_sparse's (helpers.cuh) applied to the bf16 row.
#include "common/arch.cuh"
#include "common/fence.cuh"
#include "common/numeric.cuh"
#include "common/types.cuh"
#include "mla_decode_branch_fp8/layout.cuh"

namespace attnjit::mla_decode_branch_fp8 {

using namespace attnjit::layout::mla_decode_branch_fp8;

namespace rope_detail {

inline constexpr int kWarps = kRopeThreads / kWarpSize;
inline constexpr int kPairs = kRopeDim / 2;                   // 32: one per lane
inline constexpr int kPerThread = kLatentDim / kRopeThreads;  // 4 latent values per thread
inline constexpr int kQRopeBatch = 4;  // q rows each warp loads before it rotates any
inline constexpr int kBf16RowBytes = 2 * kCacheDim;           // 1152
inline constexpr int kTokenRopeOffset = kLatentDim;           // 512: the 640-byte row's rope
inline constexpr int kBlockScaleOffset = kLatentDim;          // 512: the 656-byte row's scales
inline constexpr int kBlockRopeOffset = kBlockScaleOffset + 4 * kWarps;  // 528
static_assert(kPerThread == 4 && kPairs == kWarpSize, "the thread ↔ value mapping below");
// Warp w's 128 content values are the 656-byte row's scale block w: its amax is a warp's.
static_assert(kWarps * kPerThread * kWarpSize == kLatentDim && kWarps == kLatentDim / kScaleBlock);
static_assert(kBlockRopeOffset + 2 * kRopeDim == 656, "the 656-byte row");

inline constexpr float kE4M3MaxF = 448.0f;

ATTNJIT_DEVICE float bf16_lo(u32 w) { return __uint_as_float(w << 16); }
ATTNJIT_DEVICE float bf16_hi(u32 w) { return __uint_as_float(w & 0xffff0000u); }

// The interleaved pair (x0, x1) of a bf16x2 word rotated by (cos, sin), as bf16x2.
ATTNJIT_DEVICE u32 rotate_bf16x2(u32 x, float cs, float sn) {
  const float x0 = bf16_lo(x), x1 = bf16_hi(x);
  const float y0 = __fsub_rn(__fmul_rn(x0, cs), __fmul_rn(x1, sn));
  const float y1 = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, cs));
  return pack2<DType::kBF16>(y0, y1);
}

ATTNJIT_DEVICE u32 ld_u32(const u16* p) { return *reinterpret_cast<const u32*>(p); }

// The token's sequence by binary search over the offsets, then its cache row: -1 when it
// has none (no sequence, a position outside [0, max_pos) or past the table, a page outside
// the pool). The search reads offs[1..batch - 1], the check offs[b], offs[b + 1]: in bounds
// whatever the offsets hold; non-monotonic garbage can only lose the token, never stray.
ATTNJIT_DEVICE i64 locate(const RopeArgs& a, int t, int& pos) {
  const int* offs = a.input_row_offsets;
  if (a.batch <= 0 || a.page_size <= 0) return -1;
  int lo = 0, hi = a.batch - 1;  // the largest b with offs[b] <= t
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (offs[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  const int b = lo;
  const int start = offs[b];
  if (!(start <= t && t < offs[b + 1])) return -1;
  const i64 p = static_cast<i64>(a.cache_lens_before[b]) + (static_cast<i64>(t) - start);
  if (p < 0 || p >= a.max_pos || p >= static_cast<i64>(a.max_pages) * a.page_size) return -1;
  pos = static_cast<int>(p);  // < max_pos: fits, and 32-bit division needs no call
  const int page = a.block_table[static_cast<i64>(b) * a.max_pages + pos / a.page_size];
  if (page < 0 || page >= a.num_pages) return -1;
  return static_cast<i64>(page) * a.page_size + pos % a.page_size;
}

}  // namespace rope_detail

// P: cache_layout (CacheLayout). Grid x = max(tokens, 1): CTA t handles token t; CTA 0
// also writes cache_lens_after when given. Thread k owns latent values 4k..4k+3 (two
// 4-byte loads, so any even kv_input_stride works), lane j owns rope pair j (kv in warp 0,
// q in every warp).
// Global accesses assume 4-byte aligned bf16 rows and 16-byte aligned cache rows.
template <auto P>
__global__ void __launch_bounds__(kRopeThreads) rope_write_kernel(const RopeArgs a) {
  using namespace rope_detail;
  constexpr int kLayout = P.cache_layout;
  static_assert(kLayout == kCacheBf16 || kLayout == kCacheFp8Token || kLayout == kCacheFp8Block,
                "cache_layout: a CacheLayout");
  constexpr int kRowBytes = cache_row_bytes(kLayout);
  static_assert(kRowBytes % 16 == 0 && kRowBytes <= kBf16RowBytes, "16-byte units of stage");

  struct Smem {
    uint4 stage[kBf16RowBytes / 16];  // the cache row, assembled for 16-byte stores
    float sumsq[kWarps];              // warp partials of Σ x² (RMSNorm)
    float amax[kWarps];               // warp partials of the content amax (640-byte row)
    i64 row;                          // the token's cache row, -1: it writes nothing
    int pos;
  };
  __shared__ Smem s;

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = lane_id(), warp = warp_id();
  const int t = static_cast<int>(blockIdx.x);
  // The absorption (launched with PDL) reads nothing this kernel writes until its own
  // griddepcontrol.wait: it may start copying weights and quantizing q now.
  pdl_launch_dependents();

  // The step's schedule launches this with lengths (and no tokens); the layers without.
  // Wrapping arithmetic: garbage lengths must not be undefined behaviour.
  if (t == 0 && a.cache_lens_after != nullptr) {
    for (int b = tid; b < a.batch; b += kRopeThreads) {
      const u32 n = static_cast<u32>(a.input_row_offsets[b + 1]) -
                    static_cast<u32>(a.input_row_offsets[b]);
      a.cache_lens_after[b] = static_cast<int>(static_cast<u32>(a.cache_lens_before[b]) + n);
    }
  }
  if (t >= a.tokens) return;

  // The kv row and gamma do not depend on the position: load them and reduce Σ x² while
  // thread 0 walks the offsets, so one barrier publishes both.
  const u16* kv = a.kv_input + static_cast<i64>(t) * a.kv_input_stride;
  const u32 xw[2] = {ld_u32(kv + kPerThread * tid), ld_u32(kv + kPerThread * tid + 2)};
  const u32 gw[2] = {ld_u32(a.gamma + kPerThread * tid), ld_u32(a.gamma + kPerThread * tid + 2)};
  const u32 rope_x = warp == 0 ? ld_u32(kv + kLatentDim + 2 * lane) : 0u;
  const float x[kPerThread] = {bf16_lo(xw[0]), bf16_hi(xw[0]), bf16_lo(xw[1]), bf16_hi(xw[1])};
  float sq = __fmul_rn(x[0], x[0]);
#pragma unroll
  for (int i = 1; i < kPerThread; ++i) sq = __fadd_rn(sq, __fmul_rn(x[i], x[i]));
#pragma unroll
  for (int o = kWarpSize / 2; o > 0; o /= 2)
    sq = __fadd_rn(sq, __shfl_xor_sync(0xffffffffu, sq, o));
  if (lane == 0) s.sumsq[warp] = sq;
  if (tid == 0) {
    int pos = 0;
    s.row = locate(a, t, pos);
    s.pos = pos;
  }
  __syncthreads();
  const i64 row = s.row;
  if (row < 0) return;  // CTA-uniform: a token without a cache row writes nothing
  const int pos = s.pos;

  float total = s.sumsq[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) total = __fadd_rn(total, s.sumsq[w]);
  const float rinv =
      __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(total, float(kLatentDim)), a.epsilon)));
  const float g[kPerThread] = {bf16_lo(gw[0]), bf16_hi(gw[0]), bf16_lo(gw[1]), bf16_hi(gw[1])};
  const u32 nw[2] = {pack2<DType::kBF16>(__fmul_rn(__fmul_rn(x[0], rinv), g[0]),
                                         __fmul_rn(__fmul_rn(x[1], rinv), g[1])),
                     pack2<DType::kBF16>(__fmul_rn(__fmul_rn(x[2], rinv), g[2]),
                                         __fmul_rn(__fmul_rn(x[3], rinv), g[3]))};
  // The quantizers see the bf16 row: the rounded values, back in f32.
  const float n[kPerThread] = {bf16_lo(nw[0]), bf16_hi(nw[0]), bf16_lo(nw[1]), bf16_hi(nw[1])};

  const float* freqs = a.freqs_cis + static_cast<i64>(pos) * kRopeDim + 2 * lane;
  const float cs = freqs[0], sn = freqs[1];
  const u32 rope_r = rotate_bf16x2(rope_x, cs, sn);  // meaningful in warp 0 only

  u32* stage = reinterpret_cast<u32*>(s.stage);
  float amax = fmaxf(fmaxf(fabsf(n[0]), fabsf(n[1])), fmaxf(fabsf(n[2]), fabsf(n[3])));
  if constexpr (kLayout == kCacheBf16) {
    reinterpret_cast<uint2*>(stage)[tid] = make_uint2(nw[0], nw[1]);
    if (warp == 0) stage[kLatentDim / 2 + lane] = rope_r;
  } else {
    // fmaxf drops NaNs, as both quantizers' amax loops do; max is order-free otherwise.
#pragma unroll
    for (int o = kWarpSize / 2; o > 0; o /= 2)
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float scale;
    if constexpr (kLayout == kCacheFp8Token) {  // one σ for the row
      if (lane == 0) s.amax[warp] = amax;
      __syncthreads();
      float m = s.amax[0];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) m = fmaxf(m, s.amax[w]);
      scale = __fdiv_rn(fmaxf(m, kCacheEpsilon), kE4M3MaxF);
      if (warp == 0)
        stage[kTokenRopeOffset / 4 + lane] = pack2<DType::kBF16>(
            __fdiv_rn(bf16_lo(rope_r), scale), __fdiv_rn(bf16_hi(rope_r), scale));
      if (tid == 0) a.cache_scale[row] = scale;
    } else {  // one scale per 128 values (this warp's); an all-zero block keeps 1
      scale = amax > 0.0f ? __fdiv_rn(amax, kE4M3MaxF) : 1.0f;
      if (lane == 0) stage[kBlockScaleOffset / 4 + warp] = __float_as_uint(scale);
      if (warp == 0) stage[kBlockRopeOffset / 4 + lane] = rope_r;  // unscaled
    }
    stage[tid] = e4m3x2(__fdiv_rn(n[0], scale), __fdiv_rn(n[1], scale)) |
                 e4m3x2(__fdiv_rn(n[2], scale), __fdiv_rn(n[3], scale)) << 16;
  }

  // q's rope part, while the stage fills: warp w rotates heads w, w + 4, ..., loading
  // kQRopeBatch rows before storing any (q and q_out may alias for all the compiler knows).
  const u16* q_row = a.q + static_cast<i64>(t) * a.q_token_stride + kNopeDim + 2 * lane;
  u16* q_out_row = a.q_out + static_cast<i64>(t) * a.q_out_token_stride + kLatentDim + 2 * lane;
  for (int h0 = warp; h0 < a.heads; h0 += kWarps * kQRopeBatch) {
    u32 qx[kQRopeBatch];
#pragma unroll
    for (int k = 0; k < kQRopeBatch; ++k) {
      const int hh = h0 + kWarps * k;
      qx[k] = hh < a.heads ? ld_u32(q_row + hh * a.q_head_stride) : 0u;
    }
#pragma unroll
    for (int k = 0; k < kQRopeBatch; ++k) {
      const int hh = h0 + kWarps * k;
      if (hh < a.heads)
        *reinterpret_cast<u32*>(q_out_row + hh * a.q_out_head_stride) =
            rotate_bf16x2(qx[k], cs, sn);
    }
  }

  __syncthreads();
  if (tid < kRowBytes / 16)
    reinterpret_cast<uint4*>(a.cache + row * kRowBytes)[tid] = s.stage[tid];
}

}  // namespace attnjit::mla_decode_branch_fp8
