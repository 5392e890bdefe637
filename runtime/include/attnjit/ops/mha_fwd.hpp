#pragma once
// mha_fwd: FlashAttention forward (seed: SM100MHA2Q / FlashAttention-4; Hopper design after
// FlashAttention-3). out = softmax(mod(scale · Q·Kᵀ) masked) · V per query head, with
// GQA/MQA (query head hq reads KV head hq / (h_q / h_kv)).
//
// Layouts (last dim contiguous, 16-byte aligned; d = head_dim, dv = head_dim_v):
//   padded   q [b, s_q, h_q, d]      k [b, s_k, h_kv, d]      v [b, s_k, h_kv, dv]
//   ragged   q [total_q, h_q, d]     k [total_k, h_kv, d]     v [total_k, h_kv, dv]
//            q_offsets [b+1] i32, k_offsets [b+1] i32 (sequence i = rows off[i] .. off[i+1])
//   paged KV k [pages, page_size, h_kv, d]  v [pages, page_size, h_kv, dv]
//            block_table [b, max_pages] i32, kv_lens [b] i32 (q padded or ragged as above)
//   out      like q with dv: [b, s_q, h_q, dv] or [total_q, h_q, dv], q's dtype
//   lse      [h_q, total_q] f32 (total_q = b·s_q when padded), optional
//
// Masks align query i of a sequence bottom-right: i' = i + s_k − s_q (docs/design.md).
//   causal: j ≤ i';  window (left, right): i' − left ≤ j ≤ i' + right (−1 = unbounded);
//   causal_window: window with right = 0;  chunked (c): ⌊j/c⌋ = ⌊i'/c⌋ and j ≤ i'.
// Score mods on the scaled score, before masking: softcap s = cap·tanh(s/cap);
// ALiBi s += −slope_h·(i' − j). Sink: one f32 logit per query head, added to the
// denominator only; lse is returned without it. A row that sees no key: out = 0, lse = −inf.
// Lengths, offsets and table entries live on the GPU and are never read by the host; the
// kernels stay in bounds whatever they hold (ATTNJIT_CHECK=1 validates them on the device).
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "attnjit/tensor.hpp"
#include "attnjit/types.hpp"

namespace attnjit {

enum class MaskKind : uint8_t { kNone, kCausal, kWindow, kCausalWindow, kChunked };
enum class ScoreMod : uint8_t { kNone, kSoftcap, kAlibi };
enum class KvLayout : uint8_t { kContiguous, kPaged };  // contiguous: padded or ragged like q

std::string_view to_string(MaskKind m) noexcept;  // "none", "causal", "window", ...
std::string_view to_string(ScoreMod s) noexcept;  // "none", "softcap", "alibi"
std::string_view to_string(KvLayout l) noexcept;  // "contiguous", "paged"

// Compile-time shape and features of the kernel (template arguments). Values — window
// sizes, chunk, cap, slopes, sink logits, scale, lengths, the split count — are run-time.
struct MhaFwdConfig {
  // The fields (dtype, head_dim, head_dim_v, block_m, block_n, stages, swizzle, mask,
  // score_mod, ragged, kv_layout, page_size, group, sink, persistent), each with its rule
  // and doc, are the rows of mha_fwd_config.def.
#define ATTNJIT_FIELD ATTNJIT_CONFIG_MEMBER
#include "attnjit/ops/mha_fwd_config.def"
#undef ATTNJIT_FIELD

  void validate() const;  // throws Error(kUnsupportedConfig) naming the field and the rule
  unsigned dynamic_smem_bytes() const;
  int q_buffers() const;  // Q tiles in shared memory: 2 when persistent and they fit, else 1
  std::string to_json() const;  // canonical: fixed key order
  static MhaFwdConfig from_json(std::string_view json);
  std::string describe() const;  // "bf16 d128 128x128 s2 causal ragged"
  friend bool operator==(const MhaFwdConfig&, const MhaFwdConfig&) = default;
};

struct MhaFwdArgs {
  TensorView q, k, v, out;
  TensorView lse;            // data == nullptr: not wanted
  TensorView q_offsets;      // ragged: [b+1] i32
  TensorView k_offsets;      // ragged with contiguous KV: [b+1] i32
  TensorView block_table;    // paged: [b, max_pages] i32
  TensorView kv_lens;        // paged: [b] i32 (keys of each sequence)
  TensorView sink;           // config.sink: [h_q] f32 logits (scaled-score units; ±inf allowed)
  TensorView alibi_slopes;   // score_mod alibi: [h_q] f32
  int batch = 0;             // ragged: number of sequences (offsets have batch + 1 entries)
  int max_seqlen_q = 0;      // ragged: bound on every q length (sizes the grid)
  int max_seqlen_k = 0;      // ragged/paged: bound on every k length (0: capacity); split heuristic
  float softmax_scale = 0.0f;
  float softcap = 0.0f;      // score_mod softcap: cap > 0
  int window_left = -1;      // window / causal_window: ≥ -1 (-1 = unbounded)
  int window_right = -1;     // window: ≥ -1
  int chunk = 0;             // chunked: chunk size > 0
};

// What selects the kernel and cannot be read from the tensors: the mask, the score mod,
// the layouts, packed query heads, sinks.
struct MhaFwdFeatures {
  DType dtype = DType::kBF16;
  int head_dim = 128;
  int head_dim_v = 128;
  MaskKind mask = MaskKind::kNone;
  ScoreMod score_mod = ScoreMod::kNone;
  bool ragged = false;
  KvLayout kv_layout = KvLayout::kContiguous;
  int page_size = 0;  // paged KV only
  int group = 0;      // 0, or query heads packed per KV head (MhaFwdConfig::group)
  bool sink = false;
};

// The built-in config for these features (before any tuning database).
MhaFwdConfig mha_fwd_default_config(const MhaFwdFeatures& features);

// The features a config was built for.
MhaFwdFeatures mha_fwd_features(const MhaFwdConfig& config);

// What an engine knows when it captures a batch shape: the features and the host-visible
// sizes and bounds.
struct MhaFwdShape {
  MhaFwdFeatures features;
  int64_t batch = 0;
  int64_t max_seqlen_q = 0;  // bound on every sequence's query count (padded: s_q); sizes the grid
  int64_t max_seqlen_k = 0;  // bound on every sequence's keys (padded: s_k; ragged: 0 = total_k;
                             // paged: 0 = max_pages × page_size); the split choice reads it
  int64_t total_q = 0;       // query rows (padded: b · s_q; ragged: q's dim 0); sizes the workspace
  int64_t h_q = 0;
  int64_t h_kv = 0;
  int num_splits = 0;        // split-KV partitions, 1..256; 0: the tuning database's for the
                             // shapes' bucket (decode-like shapes), else the heuristic's
};

// The shape of `args` under `features`. Throws Error(kBadArgument) naming the argument when
// a tensor breaks a rule of the layout the features choose.
MhaFwdShape mha_fwd_shape(const MhaFwdArgs& args, const MhaFwdFeatures& features);

// The config mha_fwd_plan picks for `shape` without one (host only): the default config of
// its features with the key tile and ring depth (block_n, stages) of the tuning database's
// winner for the shapes' bucket on this GPU (attnjit/tuning.hpp, docs/tuning.md) when it has
// one and it validates. Without a tuned entry, short calls get a smaller key tile where the
// key count makes it pay (d64 causal: 128 keys up to 2k when persistent, 64 up to 4k on the
// grid launch; d128 up to 2k: 128 — see docs/performance.md). Packed query heads run the grid
// launch. Masks other than none and causal: the default config.
MhaFwdConfig mha_fwd_selected_config(const MhaFwdShape& shape);

// Workspace bytes of a plan (0 when unsplit); host only.
size_t mha_fwd_workspace_bytes(const MhaFwdShape& shape, int num_splits);

// Computed once per captured batch shape and reused by every layer and step of it.
struct MhaFwdPlan {
  MhaFwdShape shape;
  MhaFwdConfig config;         // the kernel that runs (its features are the shape's)
  int num_splits = 1;          // partitions of each sequence's keys (1: no combine kernel)
  size_t workspace_bytes = 0;  // caller-owned scratch the run needs (0: none)
};

// The config, split count and workspace for `shape`, with the kernels compiled (or read
// from the disk cache) and loaded on the current device. `config` = nullptr:
// mha_fwd_selected_config(shape); a given config must have the shape's features. The split
// choice reads the shape and the device's SM count only (CUDA-graph capturable). Throws
// before anything is compiled when the shape or config breaks a rule.
MhaFwdPlan mha_fwd_plan(const MhaFwdShape& shape, const MhaFwdConfig* config = nullptr);

// Per step: nothing depends on device-resident values ahead of the run, so this checks the
// call and enqueues nothing (the op-wide convention).
void mha_fwd_schedule(const MhaFwdPlan& plan, const MhaFwdArgs& args, Workspace workspace,
                      CUstream stream);

// Per layer: the forward pass on `stream` (the main kernel, then the combine kernel when
// split). Every argument is checked against the plan before anything is launched; nothing
// is compiled, loaded or allocated (CUDA-graph capturable).
void mha_fwd(const MhaFwdArgs& args, const MhaFwdPlan& plan, Workspace workspace, CUstream stream);

// One call that plans (with `config`, which carries the features), schedules and runs with
// a workspace it allocates on `stream`. For use outside graph capture.
void mha_fwd(const MhaFwdArgs& args, CUstream stream, const MhaFwdConfig& config);

}  // namespace attnjit
