#pragma once
// mla_decode_branch_fp8's layout, compiled by the host (runtime/ops/mla_decode_branch_fp8)
// and by NVRTC: the dimensions of DeepSeek's MLA branch, the argument blocks of its two
// kernels (the fp8 block-scale projection and the RoPE + RMSNorm + cache write) and the
// projection's shared-memory plan. The attention stage is mla_decode, mla_decode_fp8 or
// mla_decode_sparse, each with its own layout.
#include "common/constants.cuh"

namespace attnjit::layout::mla_decode_branch_fp8 {

// ---- the branch's dimensions (DeepSeek V2/V3) ---------------------------------------------
inline constexpr int kNopeDim = 128;                   // q's non-rope part, per head
inline constexpr int kRopeDim = 64;                    // the rope part (q and the cache)
inline constexpr int kQDim = kNopeDim + kRopeDim;      // 192: q as the caller gives it
inline constexpr int kLatentDim = 512;                 // the latent (kv_lora_rank)
inline constexpr int kCacheDim = kLatentDim + kRopeDim;  // 576: a bf16 cache row, absorbed q
inline constexpr int kVDim = 128;                      // v_head_dim: the output per head

// ---- the fp8 block-scale projection ----------------------------------------------------
// out[t, h, n] = Σ_g σ_A[t, h, g] · σ_W[h, n / 128, g] · Σ_{k in group g} A8[t, h, k] · W[h, n, k]
// where A8 = e4m3(a · RN(448 / m)) (RN, saturating) and σ_A = RN(m / 448), m = min(amax of
// a's group, 1200), per (token, head, 128-column group) — the activations are quantized on
// the fly (groups with m < 2^-60 take a·2^64 and m·2^64: the same product) — and W
// is e4m3 [h, N, K] with f32 scales [h, N / 128, K / 128] (128 × 128 blocks). A group with
// amax 0 has σ_A = 0 and contributes 0.
//   Q absorption:      K = 128 (q_nope), N = 512: q_latent = q_nope · W_UKᵀ
//   output projection: K = 512 (latent), N = 128: out = raw · W_UVᵀ
inline constexpr int kScaleBlock = 128;       // the block-scale granularity (k and n)
using ::attnjit::kActAmaxCap;  // σ_A's bound on the group amax (the seed's; common/constants.cuh)
inline constexpr float kE4M3Max = kActE4M3Max;

// Grid: x = W row block (N / block_n), y = head, z = token block (⌈tokens / block_m⌉).
// Rows of A and out are addressed by (token, head) strides in elements, so A can be a
// slice of a wider row (q's first 128 of 192) and out one of a wider row (the absorbed q's
// first 512 of 576).
// W comes by its tensor map (the kernel's first parameter): e4m3 [h·N, K] as bytes, box 64
// rows × 128, 128B-swizzled — one box a wgmma tile.
struct ProjArgs {
  const unsigned short* a;     // bf16, row (t, h) at a + t·a_token_stride + h·a_head_stride
  const float* w_scale;        // f32 [h, N / 128, K / 128]
  unsigned short* out;         // bf16, row (t, h) at out + t·out_token_stride + h·out_head_stride
  long long a_token_stride;
  long long a_head_stride;
  long long out_token_stride;
  long long out_head_stride;
  int tokens;
  int heads;
  // Programmatic dependent launch: the kernel may start while the previous one in the
  // stream runs, and always waits for it (griddepcontrol.wait) before it exits. It requests
  // W before waiting; A too when a_ready (A does not come from the previous kernel: the
  // absorption's q, while the rope kernel runs), else A after the wait (the attention's
  // output).
  int a_ready;
  int pad;
  // a_e4m3 (config): A arrives quantized — the codes by the kernel's second tensor map
  // (e4m3 [tokens, h, K], a's strides) and σ_A here, f32 [tokens, h, K / 128] contiguous:
  // what mla_decode's e4m3 output writes (common/act_quant.cuh). Else null.
  const float* a_scale;
};
static_assert(sizeof(ProjArgs) == 80, "ProjArgs: the block cuLaunchKernelEx passes");

// The product runs transposed on wgmma: outᵀ[n, t] = Σ_k W[n, k] · A8[t, k], W's rows on
// M (64 a row block: no padding whatever the token count) and the block_m tokens on N
// (8 … 128). Two warpgroups: both quantize the activations, then each takes every other
// 64-row block of W. A CTA walks m_steps token blocks of block_m with its W tiles kept, the
// next block's activations loaded while the current one is multiplied and stored.
inline constexpr int kProjWarpgroups = 2;
inline constexpr int kProjThreads = 128 * kProjWarpgroups;
inline constexpr int kProjRowBlock = 64;  // W rows per wgmma (M)
// Activation chunks (16 bf16) a thread keeps in registers at once: block_m · K ≤ 32768.
inline constexpr int kProjMaxActChunks = 8;

// Dynamic shared memory of the projection (offsets from a 1024-byte-aligned base; the
// launch adds the alignment slack):
//   w      e4m3 tiles [block_n / 64][K / 128][64 rows][128 B], 128B-swizzled (wgmma A)
//   a8     e4m3 [slots][K / 128][block_m rows][128 B], 128B-swizzled (wgmma B, K-major): one
//          slot, or with a_e4m3 and more than one step two (the next step's codes land by
//          TMA while this one multiplies)
//   sigma  f32 σ_A [slots][K / 128][block_m]
//   stage  bf16 [2 warpgroups][block_m][64]: a row block's output, staged for 16-byte stores;
//          none where the CTA takes one step and it fits the row block's own W tiles, dead
//          once its wgmmas are done (block_m · 128 B <= (K / 128) · 8 KiB): the output
//          projection at block_m 64 then fits two CTAs an SM.
//   bars   one mbarrier per W tile [2 warpgroups][its ≤ 4 tiles]: the tile's copy completes
//          on it; with a_e4m3 then one per A8 slot
inline constexpr int kProjA8Slots = 2;
struct ProjPlan {
  unsigned w, a8, sigma, stage, bars, bytes;
  int a8_slots;
  bool stage_over_w;
};
ATTNJIT_PLAN ProjPlan proj_plan(int k_dim, int block_m, int block_n, int m_steps, bool a_e4m3) {
  ProjPlan p{};
  p.a8_slots = a_e4m3 && m_steps > 1 ? kProjA8Slots : 1;
  p.w = 0;
  p.a8 = p.w + static_cast<unsigned>(block_n * k_dim);
  p.sigma = p.a8 + static_cast<unsigned>(p.a8_slots * block_m * k_dim);
  p.stage = (p.sigma + static_cast<unsigned>(p.a8_slots * (k_dim / kScaleBlock) * block_m * 4) + 127) / 128 * 128;
  p.stage_over_w =
      m_steps == 1 && block_m * kProjRowBlock * 2 <= k_dim / kScaleBlock * kProjRowBlock * kScaleBlock;
  p.bars = p.stage + (p.stage_over_w ? 0u : static_cast<unsigned>(kProjWarpgroups * block_m * kProjRowBlock * 2));
  p.bytes = p.bars + static_cast<unsigned>(block_n / kProjRowBlock * (k_dim / kScaleBlock) +
                                           (a_e4m3 ? kProjA8Slots : 0)) * 8;
  return p;
}
inline constexpr unsigned kProjSmemAlign = 1024;  // a 128B-swizzle atom
ATTNJIT_PLAN unsigned proj_smem_bytes(int k_dim, int block_m, int block_n, int m_steps, bool a_e4m3) {
  return proj_plan(k_dim, block_m, block_n, m_steps, a_e4m3).bytes + kProjSmemAlign;
}

// ---- RoPE + RMSNorm + cache write -------------------------------------------------------
// One CTA per new token t, of sequence b (input_row_offsets[b] <= t < input_row_offsets[b + 1]),
// at position p = cache_lens_before[b] + (t - input_row_offsets[b]):
//   q:  the rope part (q[t, h, 128..191]) rotated by θ(p) into q_out[t, h, 512..575];
//   kv: kv_input[t, 0..511] RMS-normalized with gamma (f32 math, then bf16), kv_input[t,
//       512..575] rotated by θ(p) (then bf16), the row written to the cache at p: page
//       block_table[b, p / page_size], row p % page_size, in the cache's layout.
// Interleaved RoPE: the pair (x_2j, x_2j+1) is rotated by θ_j with
//   freqs_cis[p, 2j] = cos θ_j, freqs_cis[p, 2j + 1] = sin θ_j (j < 32).
// CTA 0 also writes cache_lens_after[b] = cache_lens_before[b] + n_b for every b when
// cache_lens_after is set (the step's schedule: one CTA, tokens 0; the layers pass null).
// Whatever the device-resident values hold, nothing outside q_out, the cache pool and
// cache_lens_after is written: a token with no sequence, a position outside [0, max_pos) or
// past the table, or a table entry outside [0, num_pages) writes no cache row (and no q
// rope: its q_out rope columns are left untouched).
enum CacheLayout : int {
  kCacheBf16 = 0,      // 576 bf16 (1152 bytes): mla_decode's row
  kCacheFp8Token = 1,  // 640 bytes (512 e4m3 + 64 bf16 rope ÷ σ) with σ per row in
                       // cache_scale [pages, page_size]: mla_decode_fp8's row
  kCacheFp8Block = 2,  // 656 bytes (512 e4m3, four f32 scales, 64 bf16 rope): the sparse row
};
ATTNJIT_PLAN int cache_row_bytes(int layout) {
  return layout == kCacheBf16 ? 2 * kCacheDim : layout == kCacheFp8Token ? 640 : 656;
}

struct RopeArgs {
  const unsigned short* q;          // bf16, row (t, h) at q + t·q_token_stride + h·q_head_stride
  unsigned short* q_out;            // bf16 absorbed q, row (t, h) likewise; rope to 512..575
  const unsigned short* kv_input;   // bf16 [tokens, kv_input_stride ≥ 576]
  const float* freqs_cis;           // f32 [max_pos, 64]
  const unsigned short* gamma;      // bf16 [512]
  const int* input_row_offsets;     // i32 [batch + 1]
  const int* cache_lens_before;     // i32 [batch]
  int* cache_lens_after;            // i32 [batch], or null: not written
  const int* block_table;           // i32 [batch, max_pages]
  unsigned char* cache;             // [num_pages, page_size, cache_row_bytes(layout)]
  float* cache_scale;               // f32 [num_pages, page_size] (kCacheFp8Token only)
  long long q_token_stride;
  long long q_head_stride;
  long long q_out_token_stride;
  long long q_out_head_stride;
  long long kv_input_stride;
  float epsilon;                    // RMSNorm's
  int max_pos;
  int batch;
  int tokens;
  int heads;
  int max_pages;
  int num_pages;
  int page_size;
  int pad;
};
static_assert(sizeof(RopeArgs) == 168, "RopeArgs: the block cuLaunchKernelEx passes");

inline constexpr int kRopeThreads = 128;  // per token: 4 latent values and half a rope pair each
inline constexpr float kCacheEpsilon = 1e-8f;  // σ's floor in the 640-byte row (mla_decode_fp8's)

}  // namespace attnjit::layout::mla_decode_branch_fp8
