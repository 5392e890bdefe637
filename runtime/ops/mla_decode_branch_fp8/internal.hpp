#pragma once
// mla_decode_branch_fp8's host internals: the kernels of the config tables (config.cpp),
// the argument checks (args.cpp), read by the plan and the launches (launch.cpp).
#include <cuda.h>

#include <cstdint>

#include "attnjit/ops/mla_decode_branch_fp8.hpp"
#include "jit/kernel_table.hpp"

namespace attnjit::ops {

// The rope / norm / cache-write kernel's compile-time shape: the rows of rope_config.def.
struct MlaBranchRopeConfig {
#define ATTNJIT_FIELD ATTNJIT_CONFIG_MEMBER
#include "ops/mla_decode_branch_fp8/rope_config.def"
#undef ATTNJIT_FIELD
  void validate() const;
};

unsigned mla_branch_proj_smem_bytes(const MlaBranchProjConfig& c);
const jit::Kernel& mla_branch_proj_kernel(const MlaBranchProjConfig& c, Arch arch);
const jit::Kernel& mla_branch_rope_kernel(const MlaBranchRopeConfig& c, Arch arch);

}  // namespace attnjit::ops

namespace attnjit::mla_branch_detail {

// The host-visible sizes of a checked call.
struct Sizes {
  int64_t batch = 0, tokens = 0, heads = 0, page_size = 0, max_pages = 0, num_pages = 0,
          max_pos = 0;
  MlaBranchCache cache = MlaBranchCache::kBF16;
  int64_t topk = 0, topk_extra = 0;  // sparse attention: indices' widths (0: dense)
};

// Every host-visible rule of a call; errors name the argument.
Sizes check_args(const MlaDecodeBranchFp8Args& a);
// The sizes against the plan's shape (errors name the argument and the plan's value).
void check_matches_plan(const Sizes& s, const MlaDecodeBranchFp8Plan& plan);

// A projection operand [tokens, h, ≥ cols] of dtype with the last dim contiguous and rows
// 16-byte aligned (strides multiples of 16 bytes).
void check_rows(const TensorView& t, const char* name, int64_t tokens, int64_t heads, int64_t cols,
                DType dtype = DType::kBF16);
// W e4m3 [h, n, k] contiguous and its scales f32 [h, n / 128, k / 128].
void check_weight(const TensorView& w, const char* w_name, const TensorView& scale,
                  const char* scale_name, int64_t heads, int n, int k);

}  // namespace attnjit::mla_branch_detail
