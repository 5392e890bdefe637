#pragma once
// mla_prefill_sparse: DeepSeek V3.2 top-k sparse prefill (seed: mla_sm100_prefill_sparse).
// Every query token attends to its own list of physical cache rows, chosen by the caller's
// indexer; no causal mask (the indexer applies causality when it picks the rows).
//
//   q             [tokens, h, 576]  bf16 (latent 512 + rope 64, the absorbed V3.2 form)
//   kv_cache      [num_pages, page_size, 576] bf16 (any page size) or [rows, 576]: one flat
//                 pool of physical rows
//   indices       [tokens, topk] i32, last dim contiguous, any token stride >= topk;
//                 physical row = page · page_size + offset; a value outside [0, rows) is
//                 skipped (-1 is the usual padding); duplicates count as often as they appear
//   topk_lengths  [tokens] i32, optional: only the first clamp(n, 0, topk) indices are read
//   attn_sink     [h] f32, optional (design.md's convention: denominator only)
//   out           [tokens, h, 512] bf16
//   lse           [tokens, h] f32, optional: natural log of the softmax denominator, sink
//                 excluded
//   max_logit     [tokens, h] f32, optional: the largest softmax_scale · q·k over the
//                 token's valid keys (the sink is not a key)
//   A token with no valid index: out = 0 exactly, lse = max_logit = -inf.
//
// The kernel is mla_decode_sparse's bf16 kernel over one-token sequences (64 heads of one
// token per CTA, the top-k in 32-key tiles gathered by cp.async); a prefill call is never
// split, so it needs no workspace and one plan serves every token count. Indices and
// lengths live on the GPU and are never read by the host: the kernel never dereferences a
// row outside the pool whatever they hold, and ATTNJIT_CHECK=1 reports the first index
// outside the pool other than -1 and the first length outside 0..topk.
#include <cuda.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "attnjit/ops/mla_decode_sparse.hpp"
#include "attnjit/tensor.hpp"
#include "attnjit/types.hpp"

namespace attnjit {

struct MlaPrefillSparseConfig {
  // The fields (num_heads, stages) are the rows of mla_prefill_sparse_config.def.
#define ATTNJIT_FIELD ATTNJIT_CONFIG_MEMBER
#include "attnjit/ops/mla_prefill_sparse_config.def"
#undef ATTNJIT_FIELD

  void validate() const;  // throws Error(kUnsupportedConfig) naming the field
  std::string to_json() const;
  static MlaPrefillSparseConfig from_json(std::string_view json);
  std::string describe() const;
  // The kernel this config runs: mla_decode_sparse's, bf16 rows, 32-key tiles.
  MlaDecodeSparseConfig kernel() const;
  friend bool operator==(const MlaPrefillSparseConfig&, const MlaPrefillSparseConfig&) = default;
};

// One call's tensors (one layer). Views with data == nullptr are absent.
struct MlaPrefillSparseArgs {
  TensorView q;
  TensorView kv_cache;
  TensorView indices;
  TensorView topk_lengths;  // optional
  TensorView attn_sink;     // optional [h] f32
  TensorView out;
  TensorView lse;           // optional
  TensorView max_logit;     // optional
  float softmax_scale = 0.0f;  // (1/sqrt(192)) · mscale² for DeepSeek V3.2 with YaRN
};

// What a plan depends on: not the token count (the grid is one CTA per token and 64-head
// tile, sized at the call).
struct MlaPrefillSparseShape {
  int num_heads = 128;
  int topk = 2048;
};

MlaPrefillSparseShape mla_prefill_sparse_shape(const MlaPrefillSparseArgs& args);
MlaPrefillSparseConfig mla_prefill_sparse_default_config(int num_heads);

struct MlaPrefillSparsePlan {
  MlaPrefillSparseShape shape;
  MlaPrefillSparseConfig config;
  size_t workspace_bytes = 0;  // always 0: the call is never split
};

// Compiles or loads the kernel on the current device; throws before compiling when the
// shape or config breaks a rule.
MlaPrefillSparsePlan mla_prefill_sparse_plan(const MlaPrefillSparseShape& shape,
                                             const MlaPrefillSparseConfig* config = nullptr);
// Per layer; every argument checked against the plan before any launch; graph-capturable
// (one launch, no host reads of device values, no allocation).
void mla_prefill_sparse(const MlaPrefillSparseArgs& args, const MlaPrefillSparsePlan& plan,
                        CUstream stream);
// Plans and runs.
void mla_prefill_sparse(const MlaPrefillSparseArgs& args, CUstream stream,
                        const MlaPrefillSparseConfig* config = nullptr);

}  // namespace attnjit
