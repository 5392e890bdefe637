#pragma once
// mla_decode_branch_fp8: DeepSeek's MLA decode branch in one call per layer and step (seed:
// mla_decode_branch_fp8): the pre-attention activations in, the step's new rows written
// into the cache, the attention output projected out. Tokens are ragged over the batch
// through input_row_offsets; nope 128, rope 64, latent L = 512, v 128 per head.
//
//   q                  [tokens, h, 192]  bf16 (q_nope 0..127, q_rope 128..191); any token
//                                        and head strides, last dim contiguous
//   input_row_offsets  [b + 1]           i32 on the GPU: sequence i owns tokens
//                                        [offsets[i], offsets[i + 1]) (0 tokens allowed)
//   cache_lens_before  [b]               i32 on the GPU: each cache length before the step
//   kv_input           [tokens, 576]     bf16: the new tokens' latent (512) and rope (64)
//   freqs_cis          [max_pos, 64]     f32: (cos θ_j, sin θ_j) pairs, j < 32 (interleaved)
//   kv_norm_gamma      [512]             bf16, with `epsilon` (RMSNorm of the latent)
//   kv_cache           bf16 [pages, page_size, 576]            (MlaBranchCache::kBF16)
//                      u8   [pages, page_size, 640], kv_scale  (kFp8Token; kv_scale
//                           [pages, page_size] f32: σ per row, rope divided by σ)
//                      u8   [pages, page_size, 656]            (kFp8Block, sparse only: 512
//                           e4m3, four f32 block scales, 64 bf16 rope)
//   indices            [tokens, topk]    i32 on the GPU, optional: sparse attention (DeepSeek
//                                        V3.2) over these physical rows instead of the
//                                        sequence's positions; with topk_lengths, attn_sink
//                                        and the extra cache as mla_decode_sparse takes them
//   block_table        [b, max_pages]    i32 on the GPU; pages for the new rows allocated
//   w_uk, w_uk_scale   [h, 512, 128] e4m3, [h, 4, 1] f32   (128 × 128 block scales)
//   w_uv, w_uv_scale   [h, 128, 512] e4m3, [h, 1, 4] f32
//   out                [tokens, h, 128]  bf16
//
// The stages, each a kernel launched in this order on the caller's stream:
//   1. rope      (mla_branch_rope) per new token i of sequence b at p = before[b] + i:
//                q's rope part rotated into the absorbed q [tokens, h, 576] (columns
//                512..575); the new KV row RMS-normalized (latent) and rotated (rope),
//                rounded to bf16 and written at p in the cache's layout. Rows other than
//                the new positions are never touched.
//   2. absorb    (mla_decode_branch_fp8, K 128 → N 512) q_nope · W_UKᵀ into the absorbed
//                q's columns 0..511, activations quantized per token and 128-group:
//                σ = min(amax, 1200) / 448, codes e4m3(x · 448 / min(amax, 1200))
//                (saturating).
//   3. attention over lengths before + n_b, causal within a sequence's new tokens:
//                mla_decode on the bf16 cache; on the 640-byte cache the absorbed q is
//                quantized per token (mla_fp8_quantize, σ_Q over all heads) and
//                mla_decode_fp8 runs. With indices: mla_decode_sparse over the listed rows
//                (the bf16 or the 656-byte cache; the step's new rows are in the pool by
//                then, so an index may name them), no causal mask.
//   4. output    (mla_decode_branch_fp8, K 512 → N 128) raw · W_UVᵀ → out.
// The lengths after the step (before + n_b) are built once per step on the GPU by
// mla_decode_branch_fp8_schedule, which also runs the attention's own schedule.
//
// Device-resident values (offsets, lengths, table entries) are never read by the host:
// whatever they hold, nothing outside out, the workspace and the cache pool is written; a
// token with no sequence, a position outside freqs_cis or the table, or a page outside the
// pool writes no cache row.
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "attnjit/ops/mla_decode.hpp"
#include "attnjit/ops/mla_decode_fp8.hpp"
#include "attnjit/ops/mla_decode_sparse.hpp"
#include "attnjit/tensor.hpp"
#include "attnjit/types.hpp"

namespace attnjit {

inline constexpr int kMlaBranchQDim = 192;     // q per head: nope 128 + rope 64
inline constexpr int kMlaBranchNopeDim = 128;
inline constexpr int kMlaBranchVDim = 128;     // out per head

// The cache the branch writes and attends over.
enum class MlaBranchCache : uint8_t {
  kBF16,      // 576 bf16 per row: mla_decode
  kFp8Token,  // 640-byte rows + σ per row: mla_decode_fp8
  kFp8Block,  // 656-byte rows with block scales: mla_decode_sparse only
};
std::string_view to_string(MlaBranchCache c);

// The fp8 block-scale projection's compile-time shape (rows of
// mla_decode_branch_fp8_config.def): the op's own kernel, used for both products.
struct MlaBranchProjConfig {
#define ATTNJIT_FIELD ATTNJIT_CONFIG_MEMBER
#include "attnjit/ops/mla_decode_branch_fp8_config.def"
#undef ATTNJIT_FIELD

  void validate() const;  // throws Error(kUnsupportedConfig) naming the field
  std::string to_json() const;
  static MlaBranchProjConfig from_json(std::string_view json);
  std::string describe() const;
  friend bool operator==(const MlaBranchProjConfig&, const MlaBranchProjConfig&) = default;
};

// The built-in projection config: k_dim 128 (absorption) or 512 (output projection), for
// `tokens` rows and h heads; a_e4m3: the output projection on the attention's e4m3 output
// (what the plan picks where the attention writes it).
MlaBranchProjConfig mla_branch_proj_default_config(int k_dim, int tokens, int num_heads, bool a_e4m3 = false);

struct MlaDecodeBranchFp8Args {
  TensorView q;
  TensorView input_row_offsets;
  TensorView cache_lens_before;
  TensorView kv_input;
  TensorView freqs_cis;
  TensorView kv_norm_gamma;
  float epsilon = 1e-6f;
  TensorView kv_cache;
  TensorView kv_scale;     // kFp8Token only
  TensorView block_table;
  TensorView w_uk;
  TensorView w_uk_scale;
  TensorView w_uv;
  TensorView w_uv_scale;
  TensorView out;
  float softmax_scale = 0.0f;
  // Sparse attention (indices set; see mla_decode_sparse.hpp for each one's rules). The
  // extra cache has the main cache's row format.
  TensorView indices;             // [tokens, topk] i32
  TensorView topk_lengths;        // [tokens] i32, optional
  TensorView attn_sink;           // [h] f32, optional
  TensorView extra_kv_cache;      // optional: [pages or rows, ..., row] like kv_cache
  TensorView extra_indices;       // [tokens, topk_extra] i32, with extra_kv_cache
  TensorView extra_topk_lengths;  // [tokens] i32, optional
};

// Host-visible sizes and bounds of one batch shape.
struct MlaDecodeBranchFp8Shape {
  MlaBranchCache cache = MlaBranchCache::kBF16;
  int batch = 0;        // b
  int tokens = 0;       // q.shape[0]: the step's new tokens over the batch
  int max_q_len = 1;    // bound on every sequence's new tokens, 1..8 (> 1: causal)
  int num_heads = 128;  // h
  int page_size = 64;
  int max_pages = 1;
  int max_len = 0;      // bound on every length after the step; 0: max_pages × page_size
  int topk = 0;         // sparse attention: indices per token (0: dense)
  int topk_extra = 0;   // sparse, with the extra cache: its indices per token
};
// The shape of `args` (max_q_len and max_len left as given: the caller's bounds).
MlaDecodeBranchFp8Shape mla_decode_branch_fp8_shape(const MlaDecodeBranchFp8Args& args,
                                                    int max_q_len);

struct MlaDecodeBranchFp8Plan {
  MlaDecodeBranchFp8Shape shape;
  MlaBranchProjConfig absorb;   // k_dim 128, n_dim 512
  MlaBranchProjConfig output;   // k_dim 512, n_dim 128
  MlaDecodePlan attention;      // kBF16
  MlaDecodeFp8Plan attention_fp8;  // kFp8Token
  MlaDecodeSparsePlan attention_sparse;  // shape.topk > 0
  // The workspace: the lengths after the step, the absorbed q (and its fp8 form), the
  // attention's output (bf16, or with output.a_e4m3 its e4m3 codes and their σ) and the
  // attention's own workspace, in this order.
  size_t lens_offset = 0, q_offset = 0, q8_offset = 0, q_scale_offset = 0, raw_offset = 0,
         raw_scale_offset = 0, attention_offset = 0;
  size_t workspace_bytes = 0;
};

// Configs, attention plan and workspace for `shape`, with every kernel compiled (or read
// from the disk cache) and loaded. nullptr: the built-in projection configs.
MlaDecodeBranchFp8Plan mla_decode_branch_fp8_plan(const MlaDecodeBranchFp8Shape& shape,
                                                  const MlaBranchProjConfig* absorb = nullptr,
                                                  const MlaBranchProjConfig* output = nullptr);

// Once per step, before the step's layers: the lengths after the step (before + n_b) into
// the workspace, then the attention's schedule over them. Lengths, offsets and the table
// must not change until the step's last layer has run. Graph-capturable.
void mla_decode_branch_fp8_schedule(const MlaDecodeBranchFp8Plan& plan,
                                    const MlaDecodeBranchFp8Args& args, Workspace workspace,
                                    CUstream stream);

// Per layer: the four stages on `stream`. Every argument is checked before anything is
// launched; nothing is compiled or allocated (CUDA-graph capturable).
void mla_decode_branch_fp8(const MlaDecodeBranchFp8Args& args, const MlaDecodeBranchFp8Plan& plan,
                           Workspace workspace, CUstream stream);

// Plans, schedules and runs with a workspace allocated on `stream`. Outside graph capture.
void mla_decode_branch_fp8(const MlaDecodeBranchFp8Args& args, int max_q_len, CUstream stream);

// One stage alone (kAll: the four in order, as mla_decode_branch_fp8), reading and writing
// the same workspace: what the benchmark times per stage, and what a test inspects between
// stages (the absorbed q at plan.q_offset, the attention output at plan.raw_offset).
enum class MlaBranchStage : uint8_t { kAll, kRope, kAbsorb, kAttention, kOutput };
std::string_view to_string(MlaBranchStage s);
void mla_decode_branch_fp8_stage(const MlaDecodeBranchFp8Args& args,
                                 const MlaDecodeBranchFp8Plan& plan, Workspace workspace,
                                 CUstream stream, MlaBranchStage stage);

// ---- the stages alone (each checked like the op; for tests, benchmarks and engines that
// fuse differently) -----------------------------------------------------------------------

// out[t, h, :] = a[t, h, :] · W[h]ᵀ with W e4m3 [h, N, K] and f32 scales [h, N/128, K/128],
// the activations quantized per token, head and 128 columns (σ = min(amax, 1200) / 448).
// a [tokens, h, ≥ K] bf16 (first K columns read), out [tokens, h, ≥ N] bf16 (first N
// written); last dims contiguous, rows 16-byte aligned. With config.a_e4m3 (K 512) a holds
// the e4m3 codes instead and a_scale their σ_A, f32 [tokens, h, K / 128] contiguous (what
// mla_decode's e4m3 output writes).
void mla_branch_project(const TensorView& a, const TensorView& w, const TensorView& w_scale,
                        const TensorView& out, const MlaBranchProjConfig& config, CUstream stream,
                        const TensorView& a_scale = {});

}  // namespace attnjit
