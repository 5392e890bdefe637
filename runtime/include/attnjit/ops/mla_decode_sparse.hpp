#pragma once
// mla_decode_sparse: DeepSeek V3.2 sparse MLA decode (seeds: the sparse arguments of
// flare_mla_decoding and mla_decode_branch_fp8). Each query token attends to its own top-k
// list of physical cache rows — chosen by the caller's indexer — plus, optionally, an
// extra always-attend cache with its own list, in one softmax. No causal mask.
//
//   q             [b, q_len, h, 576]   bf16 (padded form)
//                 [total_q, h, 576]    ragged form, with q_offsets [b + 1] and max_q_len
//   kv_cache      fp8:  [num_pages, page_size, 656] u8 (or [rows, 656]): bytes [0, 512)
//                       e4m3 content, [512, 528) four f32 scales (one per 128 values),
//                       [528, 656) 64 bf16 rope dims (not scaled)
//                 bf16: [num_pages, page_size, 576] bf16 (or [rows, 576])
//   indices       [b, q_len, topk] i32 (ragged: [total_q, topk]); last dim contiguous, any
//                 token stride >= topk (padded: stride[0] = q_len · stride[1]). Physical
//                 row = page · page_size + offset; a value outside [0, rows) is skipped
//                 (-1 is the usual padding); duplicates count as often as they appear
//   topk_lengths  [b] or per token [b, q_len] / [total_q] i32, optional: only the first
//                 min(max(n, 0), topk) indices of a token are read
//   attn_sink     [h] f32, optional (design.md's convention: denominator only)
//   extra_*       an optional second cache in the same layout with its own indices
//                 [..., topk_extra] and lengths, attended in the same softmax
//   out           [b, q_len, h, 512] bf16 (ragged: [total_q, h, 512])
//   lse           [b, h, q_len] f32 (ragged: [h, total_q]), optional; natural log, sink
//                 excluded. A token with no valid index: out = 0 exactly, lse = -inf.
//
// Dequantization: k = e4m3 · scale of its 128-value block; V = the dequantized content;
// rope as stored. Indices, lengths and offsets live on the GPU and are never read by the
// host: the kernel never dereferences a row outside the pool whatever they hold, and
// ATTNJIT_CHECK=1 reports the first index outside the pool other than -1 and the first
// length > topk.
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "attnjit/tensor.hpp"
#include "attnjit/types.hpp"

namespace attnjit {

// The cache row format (both sm_90a; the kernel dequantizes fp8 rows to bf16 in shared
// memory and runs bf16 wgmma).
enum class MlaSparseLayout : uint8_t { kFp8, kBF16 };
std::string_view to_string(MlaSparseLayout l);

inline constexpr int kMlaSparseFp8RowBytes = 656;

// The main kernel's warpgroup roles: a softmax warpgroup computing S and P for two P·V
// warpgroups that also gather; or (64-key steps) a gathering producer and two consumers
// that each compute S for half of a step's keys and P·V for half of the columns; or
// narrow (fp8, h ≤ 16): a gathering producer and two consumers taking alternate 64-key
// tiles with the keys on wgmma's M and the heads on N.
enum class MlaSparseSchedule : uint8_t { kSoftmaxWarpgroup, kTwoConsumers, kNarrow };
std::string_view to_string(MlaSparseSchedule s);

struct MlaDecodeSparseConfig {
  // The fields (cache_layout, num_heads, block_n, stages) are the rows of
  // mla_decode_sparse_config.def.
#define ATTNJIT_FIELD ATTNJIT_CONFIG_MEMBER
#include "attnjit/ops/mla_decode_sparse_config.def"
#undef ATTNJIT_FIELD

  void validate() const;  // throws Error(kUnsupportedConfig) naming the field
  std::string to_json() const;
  static MlaDecodeSparseConfig from_json(std::string_view json);
  std::string describe() const;
  friend bool operator==(const MlaDecodeSparseConfig&, const MlaDecodeSparseConfig&) = default;
};

// One call's tensors (one layer). Views with data == nullptr are absent.
struct MlaDecodeSparseArgs {
  TensorView q;
  TensorView q_offsets;   // ragged form: [b + 1] i32; absent: padded
  int max_q_len = 0;      // ragged form: bound on every sequence's q_len, 1..8
  TensorView kv_cache;
  TensorView indices;
  TensorView topk_lengths;       // optional
  TensorView attn_sink;          // optional [h] f32
  TensorView extra_kv_cache;     // optional; then extra_indices is required
  TensorView extra_indices;
  TensorView extra_topk_lengths;  // optional
  TensorView out;
  TensorView lse;                 // optional
  float softmax_scale = 0.0f;     // 1/sqrt(192) × mscale² for DeepSeek V3.2
};

// Host-visible sizes and bounds of a batch shape.
struct MlaDecodeSparseShape {
  MlaSparseLayout layout = MlaSparseLayout::kFp8;
  int batch = 0;
  int q_len = 1;         // padded: q.shape[1]; ragged: the bound
  int num_heads = 128;
  bool ragged = false;
  int topk = 2048;       // indices per token
  int topk_extra = 0;    // 0: no extra cache
  int num_splits = 0;    // 1..256 forces a split of each token's key list; 0: heuristic
};

MlaDecodeSparseShape mla_decode_sparse_shape(const MlaDecodeSparseArgs& args);

MlaDecodeSparseConfig mla_decode_sparse_default_config(MlaSparseLayout layout, int num_heads);

// The split over the top-k: each token's key list (main then extra) is cut into
// num_splits runs of the config's block_n-key tiles; num_splits > 1 writes f32 partials
// that mla_decode's combine merges (attn_sink applied there), or, with merge_in_cluster,
// the narrow kernel's CTAs of a token form one cluster and merge there (no combine; the
// workspace is sized for partials either way). The grid is fixed by the plan.
struct MlaDecodeSparsePlan {
  MlaDecodeSparseShape shape;
  MlaDecodeSparseConfig config;
  int num_splits = 1;
  bool merge_in_cluster = false;  // narrow at 2, 4 or 8 splits when their clusters run at once
  size_t workspace_bytes = 0;
};

// The split count the plan picks for `shape` on a device with `sm_count` SMs (host only).
int mla_decode_sparse_splits(const MlaDecodeSparseShape& shape, int sm_count);
size_t mla_decode_sparse_workspace_bytes(const MlaDecodeSparseShape& shape, int num_splits);

// Compiles or loads the kernels on the current device; throws before compiling when the
// shape or config breaks a rule.
MlaDecodeSparsePlan mla_decode_sparse_plan(const MlaDecodeSparseShape& shape,
                                           const MlaDecodeSparseConfig* config = nullptr);
// Nothing depends on device values ahead of the run: checks the call and enqueues nothing.
void mla_decode_sparse_schedule(const MlaDecodeSparsePlan& plan, const MlaDecodeSparseArgs& args,
                                Workspace workspace, CUstream stream);
// Per layer; every argument checked against the plan before any launch; graph-capturable.
void mla_decode_sparse(const MlaDecodeSparseArgs& args, const MlaDecodeSparsePlan& plan,
                       Workspace workspace, CUstream stream);
// Plans and runs with a workspace allocated on `stream`. Outside graph capture.
void mla_decode_sparse(const MlaDecodeSparseArgs& args, CUstream stream,
                       const MlaDecodeSparseConfig* config = nullptr);

// ---- helpers that ship with the op ------------------------------------------------------

// Quantizes bf16 rows src [n, 576] into 656-byte rows of `pool` ([rows, 656] u8, any
// leading shape) at physical rows dst_rows [n] i32 (absent: rows 0..n-1); a destination
// outside the pool is not written. Per 128-value block: scale = amax / 448 (1 when the
// block is all zero), e4m3 = saturate(x / scale) rounded to nearest even; rope copied.
void mla_sparse_quantize(const TensorView& src, const TensorView& dst_rows, const TensorView& pool,
                         CUstream stream);
// The host reference of one row (bit-exact against the device).
void mla_sparse_quantize_row_host(const uint16_t* src /* [576] bf16 */, uint8_t* dst /* [656] */);

// Logical token positions → physical rows: physical[t, j] = block_table[batch(t)][pos /
// page_size] · page_size + pos % page_size for pos = logical[t, j]; -1 when pos is outside
// [0, max_pages · page_size) or the table entry outside [0, num_pages). logical
// [tokens, topk] i32 (any token stride), block_table [b, max_pages], physical [tokens, topk];
// token t belongs to sequence t / (tokens / b) (padded [b, q_len, topk] flattened).
void mla_sparse_remap(const TensorView& logical, const TensorView& block_table, int page_size,
                      int num_pages, const TensorView& physical, CUstream stream);
int mla_sparse_remap_host(int pos, const int* table_row, int max_pages, int page_size, int num_pages);

}  // namespace attnjit
