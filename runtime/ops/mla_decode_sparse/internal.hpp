#pragma once
// mla_decode_sparse's host internals shared by its files: the helper kernels' config, the
// loaded kernels (config.cpp), the checked sizes of a call and the argument checks
// (args.cpp), read by the plan and the launches (launch.cpp, helpers.cpp).
#include <cuda.h>

#include <cstdint>

#include "attnjit/ops/mla_decode_sparse.hpp"
#include "jit/kernel_table.hpp"
#include "mla_decode_sparse/layout.cuh"
#include "ops/field_table.hpp"

namespace attnjit::ops {

// The spellings of the config enums (JSON, describe, the kernel's template argument); the
// prefill's config table names the schedule too.
template <>
struct EnumSpelling<MlaSparseLayout> {
  static constexpr std::array<Spelled<MlaSparseLayout>, 2> kAll{{
      {MlaSparseLayout::kFp8, "fp8", "attnjit::mla_decode_sparse::CacheLayout::kFp8"},
      {MlaSparseLayout::kBF16, "bf16", "attnjit::mla_decode_sparse::CacheLayout::kBF16"},
  }};
};

template <>
struct EnumSpelling<MlaSparseSchedule> {
  static constexpr std::array<Spelled<MlaSparseSchedule>, 3> kAll{{
      {MlaSparseSchedule::kSoftmaxWarpgroup, "softmax_wg",
       "attnjit::mla_decode_sparse::Schedule::kSoftmaxWarpgroup"},
      {MlaSparseSchedule::kTwoConsumers, "two_consumers", "attnjit::mla_decode_sparse::Schedule::kTwoConsumers"},
      {MlaSparseSchedule::kNarrow, "narrow", "attnjit::mla_decode_sparse::Schedule::kNarrow"},
  }};
};

// The quantizer's, the remap's and the check kernel's compile-time shape.
struct MlaSparseHelperConfig {
#define ATTNJIT_FIELD ATTNJIT_CONFIG_MEMBER
#include "ops/mla_decode_sparse/helper_config.def"
#undef ATTNJIT_FIELD
  void validate() const;
};

unsigned mla_sparse_smem_bytes(const MlaDecodeSparseConfig& c);
inline constexpr int kMlaSparseThreads = 3 * 128;  // softmax + two P·V, or producer + two consumers

// The main kernel's recipe without an arch rule (each op calling it states its own, so the
// refusal names that op; mla_prefill_sparse runs this kernel too).
jit::KernelRecipe mla_sparse_main_recipe(const MlaDecodeSparseConfig& c, Arch arch);
const jit::Kernel& mla_sparse_main_kernel(const MlaDecodeSparseConfig& c, Arch arch);
const jit::Kernel& mla_sparse_quantize_kernel(Arch arch);
const jit::Kernel& mla_sparse_remap_kernel(Arch arch);
const jit::Kernel& mla_sparse_check_kernel(Arch arch);

}  // namespace attnjit::ops

namespace attnjit::sparse_detail {

inline constexpr int kMaxSplits = 256;
inline constexpr int kMaxBatch = 65535;  // grid y of the combine

// Host-visible sizes of a call whose arguments passed check_args.
struct Sizes {
  bool ragged = false;
  int64_t b = 0, q_len = 0, h = 0, total_q = 0;
  int64_t pool_rows = 0, extra_rows = 0;
  int64_t topk = 0, topk_extra = 0;
  int64_t index_stride = 0, extra_stride = 0;
  bool lens_per_token = false, extra_lens_per_token = false;
};

// Every host-visible rule of `a` under config `c`; errors name the argument and the rule.
Sizes check_args(const MlaDecodeSparseArgs& a, const MlaDecodeSparseConfig& c);
// Every rule of a plan's shape (errors name "shape.<field>") and of the config against it.
void check_shape(const MlaDecodeSparseShape& s, const MlaDecodeSparseConfig& c);
// A call of sizes `s` is one `plan` was made for; errors name the argument.
void check_matches_plan(const Sizes& s, const MlaDecodeSparsePlan& plan);
// Whether config `c`'s kernel can merge a token's `splits` in their cluster at all: the
// narrow schedule at 2, 4 or 8 splits (layout.cuh). A plan asking for more is refused.
inline bool cluster_merge_possible(const MlaDecodeSparseConfig& c, int splits) {
  return c.schedule == MlaSparseSchedule::kNarrow && layout::mla_decode_sparse::narrow_merges_in_cluster(splits);
}
// Whether the main kernel (`main`, of config `c`) merges a token's `splits` in their
// cluster instead of leaving partials for mla_decode's combine: when it can
// (cluster_merge_possible) and every token's cluster runs at once on the current device
// (clusters stay within a GPC: 32 tokens' clusters of 4 did not, and ran 1.6× slower than
// the combine, H200). The plan decides; the launches follow it.
bool merges_in_cluster(const MlaDecodeSparseShape& shape, const MlaDecodeSparseConfig& c, int splits,
                       const jit::Kernel& main);
// The launches of a checked call (`s` from check_args, `splits` and `merge_in_cluster` from
// its plan, the workspace checked against it): the main kernel, then mla_decode's combine
// when split and not merged in the cluster. max_logit (lse's layout, or null) is written
// only unsplit. Shared with mla_prefill_sparse, which runs the bf16 kernel over one-token
// sequences.
void launch(const MlaDecodeSparseArgs& a, const Sizes& s, const MlaDecodeSparseConfig& c, int splits,
            bool merge_in_cluster, Workspace workspace, float* max_logit, CUstream stream);
// Checked mode: validates indices, lengths and offsets on the device; names the first bad one.
void device_check(const MlaDecodeSparseArgs& a, const Sizes& s, Arch arch, CUstream stream);

}  // namespace attnjit::sparse_detail
