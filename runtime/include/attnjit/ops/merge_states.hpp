#pragma once
// merge_states: (v_a, lse_a) ⊕ (v_b, lse_b), the attention state of a query over the union
// of two disjoint key sets from the states over each — cascade attention (a shared prefix
// and each request's suffix) and context parallelism (each rank's share of the keys, merged
// pairwise). FlashInfer's merge_state; the pairwise form of mla_decode's split-KV combine.
//
//   v_a, v_b, v_out     [n, h, d] or [b, s, h, d]   bf16, f16 or f32 (all one type);
//                                                   d contiguous, rows 16-byte aligned
//   lse_a, lse_b        [n, h] or [b, s, h]         f32, any strides: mla_decode's
//                                                   [b, h, q_len] and mha_fwd's
//                                                   [h, total_q] go in as strided views
//   lse_out             as lse_a, optional (data == nullptr: not wanted)
//
//   m = max(lse_a, lse_b),  w_x = exp(lse_x − m),
//   v_out = (w_a·v_a + w_b·v_b) / (w_a + w_b),   lse_out = m + log(w_a + w_b)
//
// lse in natural log (attnjit's ops), or in log2 units with config.lse_log2 (FlashInfer's).
// A state with lse −inf saw no key: weight 0, and its values never reach v_out (NaN there
// cannot leak); both −inf: v_out = 0 exactly and lse_out = −inf. In place: v_out may be
// v_a or v_b and lse_out may be lse_a or lse_b (the same view); any other overlap of an
// output with an input is refused. The merge is associative up to rounding: N states merge
// pairwise.
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "attnjit/tensor.hpp"
#include "attnjit/types.hpp"

namespace attnjit {

struct MergeStatesConfig {
  // The fields (dtype, head_dim, lse_log2, threads), each with its rule and doc, are the
  // rows of merge_states_config.def.
#define ATTNJIT_FIELD ATTNJIT_CONFIG_MEMBER
#include "attnjit/ops/merge_states_config.def"
#undef ATTNJIT_FIELD

  // Throws Error(kUnsupportedConfig) naming the first invalid field and the rule.
  void validate() const;
  std::string to_json() const;  // canonical: fixed key order, no spaces
  static MergeStatesConfig from_json(std::string_view json);
  std::string describe() const;  // "bf16 d512 t256"
  friend bool operator==(const MergeStatesConfig&, const MergeStatesConfig&) = default;
};

// The built-in choice for `dtype` rows of `head_dim` (natural-log lse).
MergeStatesConfig merge_states_default_config(DType dtype, int head_dim);

struct MergeStatesArgs {
  TensorView v_a, lse_a;
  TensorView v_b, lse_b;
  TensorView v_out, lse_out;  // lse_out.data == nullptr: not wanted
};

// Host-visible shape of a merge: tokens = n (or b·s), heads h, head_dim d.
struct MergeStatesShape {
  DType dtype = DType::kBF16;
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
};
MergeStatesShape merge_states_shape(const MergeStatesArgs& args);  // v_a's dtype and sizes

struct MergeStatesPlan {
  MergeStatesShape shape;
  MergeStatesConfig config;
  size_t workspace_bytes = 0;  // always 0: a merge needs no scratch (the op-wide convention)
};

// The config merge_states_plan picks without one: merge_states_default_config (a one-pass
// memory-bound kernel: no tuning database entry is consulted). Host only.
MergeStatesConfig merge_states_selected_config(const MergeStatesShape& shape);

// The config for `shape`, compiled (or read from the disk cache) and loaded on the current
// device, so that a run does no compile or load (e.g. before a CUDA-graph capture). A
// config given must match the shape's dtype and head_dim.
MergeStatesPlan merge_states_plan(const MergeStatesShape& shape, const MergeStatesConfig* config = nullptr);

// Nothing depends on device-resident values: enqueues nothing (the op-wide convention).
void merge_states_schedule(const MergeStatesPlan& plan, const MergeStatesArgs& args, Workspace workspace,
                           CUstream stream);

// The merge on `stream` (current device's context), checked against the plan first.
// CUDA-graph capturable.
void merge_states(const MergeStatesArgs& args, const MergeStatesPlan& plan, Workspace workspace,
                  CUstream stream);

// Plan and run in one call (outside graph capture).
void merge_states(const MergeStatesArgs& args, CUstream stream, const MergeStatesConfig* config = nullptr);

}  // namespace attnjit
