#pragma once
// mla_decode_branch_fp8's fp8 block-scale projection (layout.cuh: the math, ProjArgs, the
// grid): out[t, h, n0 .. n0 + block_n) for block_m tokens of head h; activations quantized to
// e4m3 on the fly (σ_A per token and 128-column group), W e4m3 with 128 × 128 scales σ_W.
// One CTA = 4 warps, each owning block_n / 4 output columns: (1) activation rows into
// registers, (2) each warp cp.asyncs its own W rows into the swizzled tile, (3) quantization
// into the A8 tile and σ_A while W streams, (4) MMAs from ldmatrix fragments, a partial sum
// per k group scaled into the accumulators, (5) bf16 rows out through shared memory.
#include "common/arch.cuh"
#include "common/fence.cuh"
#include "common/numeric.cuh"
#include "common/smem.cuh"
#include "common/types.cuh"
#include "mla_decode_branch_fp8/layout.cuh"

namespace attnjit::mla_decode_branch_fp8 {

using namespace attnjit::layout::mla_decode_branch_fp8;

// ---- shared memory -------------------------------------------------------------------
// e4m3 rows (K bytes) and staged bf16 rows (2·block_n bytes) are swizzled in 16-byte chunks:
// chunk c of row r sits at c ^ (r % 8). Each access phase below touches one logical chunk of
// 8 consecutive rows (ldmatrix's 8 row addresses, a fragment's 8 groupIDs): 8 bank quads.
ATTNJIT_DEVICE u32 swizzled(int row, int row_bytes, int chunk) {
  return static_cast<u32>(row * row_bytes + ((chunk ^ (row & 7)) << 4));
}

template <auto P>
struct ProjSmem {
  static constexpr int kGroups = P.k_dim / kScaleBlock;
  static constexpr u32 kW = 0;                             // e4m3 [block_n][K]
  static constexpr u32 kA = kW + P.block_n * P.k_dim;      // e4m3 [block_m][K]
  static constexpr u32 kSigma = kA + P.block_m * P.k_dim;  // f32 [block_m][K / 128]
  static constexpr u32 kOut = 0;  // bf16 [block_m][block_n], over W and A8 after the MMAs
  static_assert(kOut + P.block_m * P.block_n * 2 <= kSigma, "the output tile fits W + A8");
  static_assert(kSigma + P.block_m * kGroups * 4 <= proj_smem_bytes(P.k_dim, P.block_m, P.block_n),
                "layout.cuh's plan");
};

// ---- PTX -------------------------------------------------------------------------------
ATTNJIT_DEVICE void cp_async_16(u32 dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
ATTNJIT_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
ATTNJIT_DEVICE void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

ATTNJIT_DEVICE void ldsm_x4(u32 addr, u32 (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// sm_90 has no fp8 mma.sync: ptxas lowers mma.m16n8k32.e4m3 to e4m3 → f16 conversions, two
// HMMA.16816 into zeroed registers and four FADDs. Split here, the HMMAs accumulate in place:
// an fp8 fragment register (4 consecutive k bytes) gives its low pair to one m16n8k16 step and
// its high pair to the other, in A and B alike, so the two steps sum exactly the k32 step's
// products (e4m3 values are exact in f16, their products in f32).
ATTNJIT_DEVICE void e4m3x4_to_f16(u32 v, u32& lo, u32& hi) {
  asm("{ .reg .b16 l, h; mov.b32 {l, h}, %2;\n"
      "cvt.rn.f16x2.e4m3x2 %0, l; cvt.rn.f16x2.e4m3x2 %1, h; }"
      : "=r"(lo), "=r"(hi)
      : "r"(v));
}

// d += A · B over one 16 × 8 × 16 f16 step, f32 accumulation.
ATTNJIT_DEVICE void mma_f16(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, "
      "%7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats → two e4m3 codes (RN, saturating) in the low 16 bits, `lo` in the low byte
// (the PTX form puts its first operand in the upper byte).
ATTNJIT_DEVICE u32 e4m3x2(float lo, float hi) {
  u32 r;
  asm("{ .reg .b16 c; cvt.rn.satfinite.e4m3x2.f32 c, %1, %2; cvt.u32.u16 %0, c; }"
      : "=r"(r)
      : "f"(hi), "f"(lo));
  return r;
}

// ---- the activations ---------------------------------------------------------------------
// σ_A and the codes of a / σ_A must be those of __fdiv_rn (IEEE, as the host reference has
// them). Its fast path is guarded by FCHK and a slow-path call, whose call sites make ptxas
// spill; over this narrow domain (a bf16, |a| ≤ amax, σ_A ≤ 1200 / 448) the fast path runs
// unguarded and its failures are steered around: subnormal σ_A in integers; groups with
// min(amax, 1200) < 2^-60 divide a·2^64 by σ_A·2^64, so every quotient that can reach e4m3's
// range (≥ 2^-10) has a normal, exact residual; ±inf kept. Checked on an H200 against
// __fdiv_rn for every (a, amax) bf16 pair: σ_A bit-exact, every e4m3 code equal.

// RN(x / d) from r within an ulp of 1/d: the product, one correction by the exact residual,
// the sign of x kept for zeros (lost in the residual's sum).
ATTNJIT_DEVICE float div_by(float x, float d, float r) {
  const float q0 = x * r;
  return copysignf(fmaf(r, fmaf(-d, q0, x), q0), x);
}

// One group's 16 values of this lane (8 lanes a group) → their quotients by σ_A, in place;
// returns σ_A = RN(min(amax, 1200) / 448). Groups with amax in [2^-60, FLT_MAX] — all but
// the degenerate — take the short path: 4 instructions a value.
ATTNJIT_DEVICE float act_quotients(float amax, float (&x)[16]) {
  constexpr float kRcp448 = 1.0f / kE4M3Max;  // RN(1/448)
  const float a = fminf(amax, kActAmaxCap);
  float sigma;
  if (a >= __uint_as_float(0x05000000u)) {  // 2^-117: σ_A normal, one correction of a / 448
    const float q = a * kRcp448;
    sigma = fmaf(kRcp448, fmaf(-kE4M3Max, q, a), q);
  } else {  // σ_A subnormal: RN(a·2^149 / 448) ulps of 2^-149, ties to even
    const u32 b = __float_as_uint(a), ex = b >> 23;
    const u64 n = ex ? static_cast<u64>((b & 0x7fffffu) | 0x800000u) << (ex - 1) : b;
    const u64 q = n / 448, rem = n % 448;
    sigma = __uint_as_float(static_cast<u32>(q + (rem > 224 || (rem == 224 && (q & 1)))));
  }
  const bool tiny = a < __uint_as_float(0x21800000u);            // 2^-60
  const float pre = tiny ? __uint_as_float(0x5f800000u) : 1.0f;  // 2^64
  const float d = sigma * pre;                                   // normal
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
  r = fmaf(r, fmaf(-d, r, 1.0f), r);  // one Newton step
  if (!tiny && amax <= __uint_as_float(0x7f7fffffu)) {
#pragma unroll
    for (int j = 0; j < 16; ++j) x[j] = div_by(x[j], d, r);
  } else {  // amax 0 (σ_A = 0: codes 0), inf (kept: inf − inf in the residual), tiny
#pragma unroll
    for (int j = 0; j < 16; ++j)
      x[j] = amax == 0.0f                                  ? 0.0f
             : fabsf(x[j]) == __uint_as_float(0x7f800000u) ? x[j]
                                                           : div_by(x[j] * pre, d, r);
  }
  return sigma;
}

// Thread i takes the 32-byte chunks (16 bf16) c = j·128 + i of the row-major [block_m][K]
// tile: a warp reads 1 KiB of a row (K = 512) or four 256-byte rows (K = 128), 8 consecutive
// lanes hold one (row, group). All loads go out at once (≤ 16 chunks: 128 registers).
template <auto P>
struct ActTile {
  static constexpr int kRowChunks = P.k_dim / 16;
  static constexpr int kChunks = P.block_m * kRowChunks / kProjThreads;  // 1 .. 16
  static_assert(kChunks >= 1 && kRowChunks % 8 == 0, "8 lanes = one group");
  uint4 v[kChunks][2];

  // Zeros for rows past `tokens` (amax 0: σ_A = 0, codes 0).
  ATTNJIT_DEVICE void load(const ProjArgs& a, int m0) {
    const unsigned short* a_head = a.a + static_cast<i64>(blockIdx.y) * a.a_head_stride;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int c = i * kProjThreads + static_cast<int>(threadIdx.x);
      const int t = m0 + c / kRowChunks;
      v[i][0] = v[i][1] = make_uint4(0u, 0u, 0u, 0u);
      if (t >= a.tokens) continue;
      const auto* src =
          reinterpret_cast<const uint4*>(a_head + t * a.a_token_stride + (c % kRowChunks) * 16);
      v[i][0] = __ldg(src);
      v[i][1] = __ldg(src + 1);
    }
  }

  // The A8 codes (one 16-byte chunk of a swizzled row per lane) and σ_A (the group's first lane).
  ATTNJIT_DEVICE void quantize(u32 s_a8, u32 s_sigma) const {
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int c = i * kProjThreads + static_cast<int>(threadIdx.x);
      const int row = c / kRowChunks, chunk = c % kRowChunks;
      const u32 w[8] = {v[i][0].x, v[i][0].y, v[i][0].z, v[i][0].w,
                        v[i][1].x, v[i][1].y, v[i][1].z, v[i][1].w};
      float x[16], m = 0.0f;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        x[j] = __uint_as_float(j % 2 ? w[j / 2] & 0xffff0000u : w[j / 2] << 16);
        m = fmaxf(m, fabsf(x[j]));
      }
#pragma unroll
      for (int o = 4; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
      const float sigma = act_quotients(m, x);
      u32 code[4];
#pragma unroll
      for (int j = 0; j < 4; ++j)
        code[j] = e4m3x2(x[4 * j], x[4 * j + 1]) | e4m3x2(x[4 * j + 2], x[4 * j + 3]) << 16;
      st_shared_16(s_a8 + swizzled(row, P.k_dim, chunk),
                   make_uint4(code[0], code[1], code[2], code[3]));
      if ((lane_id() & 7) == 0)
        st_shared_f32(s_sigma + (row * (P.k_dim / kScaleBlock) + chunk / 8) * 4, sigma);
    }
  }
};

// ---- the kernel ------------------------------------------------------------------------
template <auto P>
__global__ void __launch_bounds__(kProjThreads) project_kernel(const ProjArgs a) {
  static_assert((P.k_dim == 128 && P.n_dim == 512) || (P.k_dim == 512 && P.n_dim == 128),
                "the two MLA projections: K = 128, N = 512 or K = 512, N = 128");
  static_assert((P.block_m == 16 || P.block_m == 32 || P.block_m == 64) &&
                    (P.block_n == 64 || P.block_n == 128) && P.n_dim % P.block_n == 0,
                "block_m 16, 32 or 64; block_n 64 or 128 (one σ_W per k group), dividing N");
  using L = ProjSmem<P>;
  constexpr int K = P.k_dim, kGroups = K / kScaleBlock;
  constexpr int kWarpN = P.block_n / 4;  // columns per warp: 16 or 32
  constexpr int kNT = kWarpN / 8;        // n tiles of 8 per warp: 2 or 4 (even: ldsm .x4)
  constexpr int kMT = P.block_m / 16;    // m tiles of 16: 1, 2 or 4
  extern __shared__ __align__(128) unsigned char smem[];
  const u32 s0 = smem_u32(smem);
  const int h = blockIdx.y, n0 = blockIdx.x * P.block_n, m0 = blockIdx.z * P.block_m;
  const int tid = threadIdx.x, lane = lane_id(), warp = warp_id();
  if (m0 >= a.tokens) return;  // uniform: a grid larger than ⌈tokens / block_m⌉

  // 1. Activations before W: behind every CTA's weight requests (8 MB at h = 128) they would
  // arrive last, and their quantization would not overlap the W stream. Activations the
  // previous kernel writes (a_ready 0) wait for it: then W goes first, under that wait.
  ActTile<P> act;
  if (a.a_ready) act.load(a, m0);

  // 2. W [block_n][K]: each warp copies the block_n / 4 rows it multiplies by (contiguous in
  // global) in address order, and waits for them alone. (In K / 128 strided passes, one per k
  // group, W landed ~1.3 µs later at h = 128 on an H200.)
  const unsigned char* w_warp = a.w + (static_cast<i64>(h) * P.n_dim + n0 + warp * kWarpN) * K;
#pragma unroll 4  // fully unrolled, every copy's address would sit in a register beside `act`
  for (int j = 0; j < kWarpN * K / 16 / kWarpSize; ++j) {
    const int i = j * kWarpSize + lane;  // 16-byte chunk i of the warp's rows
    cp_async_16(s0 + L::kW + swizzled(warp * kWarpN + i / (K / 16), K, i % (K / 16)),
                w_warp + i * 16);
  }
  cp_async_commit();
  // σ_W[h, n0 / 128, g]: one per k group for the whole CTA (block_n ≤ 128).
  float sigma_w[kGroups];
  const float* ws =
      a.w_scale + (static_cast<i64>(h) * (P.n_dim / kScaleBlock) + n0 / kScaleBlock) * kGroups;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) sigma_w[g] = __ldg(ws + g);
  // The previous kernel's writes are visible past this point, and it has finished: a kernel
  // launched after this one in the stream may rely on both (layout.cuh, ProjArgs).
  pdl_wait_prior_grids();
  if (!a.a_ready) act.load(a, m0);

  // 3. A8 and σ_A, while W streams in.
  act.quantize(s0 + L::kA, s0 + L::kSigma);

  // 4. MMAs. ldmatrix .x4: lanes 8q..8q+7 give the row addresses of matrix q, and register q
  // of lane l holds row l / 4, bytes 4·(l % 4)..+3 of matrix q — one fp8 fragment register.
  //   A (16 rows × 32 k bytes): matrix q = rows 8·(q % 2).., k bytes 16·(q / 2)..
  //     → a0 (row gid, k 4·tig..), a1 (gid + 8), a2 (gid, k 16 + 4·tig..), a3 (gid + 8, k 16..)
  //   B (W rows = n, k-contiguous = the .col operand): matrix q = n rows 8·(q / 2).. of a
  //     16-column pair, k bytes 16·(q % 2).. → b0, b1 of n tile 2p, then b0, b1 of 2p + 1.
  // Every row either reads is ≡ lane (mod 8), so its swizzle term is lane % 8.
  const int gid = lane >> 2, tig = lane & 3, lane_swz = lane & 7;
  const int a_half = lane >> 4, b_half = (lane >> 3) & 1;
  const u32 a_base = s0 + L::kA + ((lane & 7) + (lane & 8)) * K;
  const u32 b_base = s0 + L::kW + (warp * kWarpN + (lane & 7) + ((lane >> 4) << 3)) * K;

  // acc[mt][nt][4]: rows 16·mt + gid (+8 for [2], [3]), cols warp·kWarpN + 8·nt + 2·tig (+1)
  float acc[kMT][kNT][4] = {};
  __syncthreads();      // A8 and σ_A are written
  cp_async_wait_all();  // this lane's W copies have landed,
  __syncwarp();         // and the warp's: its B operand is its own rows
  // Each group's partials are an independent chain of 8 MMAs: unrolled, ptxas interleaves the
  // groups' chains — while all partials fit 64 registers (past that, 64 × 128 tiles spill).
  constexpr int kGroupUnroll = kMT * kNT * 4 * kGroups <= 64 ? kGroups : 1;
#pragma unroll kGroupUnroll
  for (int g = 0; g < kGroups; ++g) {
    float part[kMT][kNT][4] = {};  // Σ over group g only, the layout of acc
#pragma unroll
    for (int kk = 0; kk < kScaleBlock / 32; ++kk) {
      const u32 a_off = g * 128 + (((kk * 2 + a_half) ^ lane_swz) << 4);
      const u32 b_off = g * 128 + (((kk * 2 + b_half) ^ lane_swz) << 4);
      // bh[nt][half][reg]: the f16 B fragment (b0, b1) of n tile nt for k step `half`
      u32 bh[kNT][2][2];
#pragma unroll
      for (int p = 0; p < kNT / 2; ++p) {
        u32 b8[4];  // fp8 b0, b1 of n tile 2p, then of 2p + 1
        ldsm_x4(b_base + p * 16 * K + b_off, b8);
#pragma unroll
        for (int r = 0; r < 4; ++r)
          e4m3x4_to_f16(b8[r], bh[2 * p + r / 2][0][r % 2], bh[2 * p + r / 2][1][r % 2]);
      }
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        u32 a8[4], ah[2][4];  // fp8 a0..a3; ah[half]: the f16 A fragment of k step `half`
        ldsm_x4(a_base + mt * 16 * K + a_off, a8);
#pragma unroll
        for (int r = 0; r < 4; ++r) e4m3x4_to_f16(a8[r], ah[0][r], ah[1][r]);
#pragma unroll
        for (int i = 0; i < kNT * 2; ++i)  // n tile i / 2, k step i % 2
          mma_f16(part[mt][i / 2], ah[i % 2], bh[i / 2][i % 2][0], bh[i / 2][i % 2][1]);
      }
    }
    float sigma_wg = sigma_w[0];  // σ_W[g] by selects (indexed in a rolled loop, sigma_w
#pragma unroll                    // would go to local memory)
    for (int gg = 1; gg < kGroups; ++gg) sigma_wg = g == gg ? sigma_w[gg] : sigma_wg;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      const u32 s_row = s0 + L::kSigma + ((mt * 16 + gid) * kGroups + g) * 4;
      const float s_lo = ld_shared_f32(s_row) * sigma_wg;  // rows gid, gid + 8
      const float s_hi = ld_shared_f32(s_row + 8 * kGroups * 4) * sigma_wg;
#pragma unroll
      for (int i = 0; i < kNT * 4; ++i)
        acc[mt][i / 4][i % 4] =
            fmaf(part[mt][i / 4][i % 4], i % 4 < 2 ? s_lo : s_hi, acc[mt][i / 4][i % 4]);
    }
  }

  // 5. bf16 [block_m][block_n] over W and A8 (every warp is past its last ldmatrix); a quad
  // writes one 16-byte chunk of each of 8 rows per store.
  __syncthreads();
  constexpr int kOutRow = P.block_n * 2;
#pragma unroll
  for (int i = 0; i < kMT * kNT * 2; ++i) {
    const int mt = i / (2 * kNT), nt = i / 2 % kNT, r = 2 * (i % 2);  // r: rows gid, gid + 8
    st_shared_u32(
        s0 + L::kOut + swizzled(mt * 16 + gid + 4 * r, kOutRow, warp * kWarpN / 8 + nt) + tig * 4,
        pack2<DType::kBF16>(acc[mt][nt][r], acc[mt][nt][r + 1]));
  }
  __syncthreads();
  // Rows of 128 or 256 bytes by 16-byte stores (the host checks out's rows are 16-byte aligned).
  unsigned short* out_head = a.out + static_cast<i64>(h) * a.out_head_stride + n0;
  constexpr int kRowOutChunks = P.block_n / 8;
#pragma unroll
  for (int j = 0; j < P.block_m * kRowOutChunks / kProjThreads; ++j) {
    const int i = j * kProjThreads + tid, row = i / kRowOutChunks, c = i % kRowOutChunks;
    const int t = m0 + row;
    if (t < a.tokens)
      *reinterpret_cast<uint4*>(out_head + t * a.out_token_stride + c * 8) =
          ld_shared_16(s0 + L::kOut + swizzled(row, kOutRow, c));
  }
}

}  // namespace attnjit::mla_decode_branch_fp8
