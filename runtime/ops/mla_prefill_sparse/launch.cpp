// mla_prefill_sparse's checks, plan and run. A prefill call is mla_decode_sparse's bf16 call
// with every token its own one-token sequence: q [tokens, h, 576] is viewed as padded
// [tokens, 1, h, 576], indices as [tokens, 1, topk], lse as [tokens, h, 1]. This file
// checks the prefill's own forms first, so errors name its shapes; the decode op's rules
// then run on the view (pool, strides, alignment, dtypes), and its launch runs unsplit.
#include <fmt/format.h>

#include "attnjit/error.hpp"
#include "attnjit/ops/mla_prefill_sparse.hpp"
#include "driver/driver.hpp"
#include "mla_decode_sparse/layout.cuh"
#include "ops/launch_support.hpp"
#include "ops/mla_decode_sparse/internal.hpp"

namespace attnjit {
namespace {

namespace dev = layout::mla_decode_sparse;

// `t` with a unit dimension inserted before dimension `at`; its stride is the one of the
// dimension it follows, which the decode op reads as the token stride.
TensorView with_unit_dim(const TensorView& t, int at) {
  TensorView v = t;
  if (t.data == nullptr) return v;
  v.rank = t.rank + 1;
  for (int d = t.rank; d > at; --d) {
    v.shape[static_cast<size_t>(d)] = t.shape[static_cast<size_t>(d - 1)];
    v.strides[static_cast<size_t>(d)] = t.strides[static_cast<size_t>(d - 1)];
  }
  v.shape[static_cast<size_t>(at)] = 1;
  v.strides[static_cast<size_t>(at)] = at > 0 ? t.strides[static_cast<size_t>(at - 1)] : 1;
  return v;
}

struct Checked {
  MlaDecodeSparseArgs view;  // the decode op's padded form of the call
  sparse_detail::Sizes sizes;
  int64_t tokens = 0;
};

// Every host-visible rule of the call under config `c`; errors name the prefill's argument.
Checked check_call(const MlaPrefillSparseArgs& a, const MlaPrefillSparseConfig& c) {
  Checked r;
  if (a.q.rank != 3 || a.q.shape[2] != dev::kHeadDim)
    fail_arg("q", fmt::format("must be rank 3 [tokens, h, 576] bf16, got {}", a.q.describe()));
  r.tokens = a.q.shape[0];
  const int64_t h = a.q.shape[1];
  if (h != c.num_heads)
    fail_arg("q", fmt::format("has {} heads but the config was built for num_heads = {} (8..128)",
                              h, c.num_heads));
  if (a.indices.data == nullptr) fail_arg("indices", "is required (top-k physical rows per token)");
  if (a.indices.rank != 2 || a.indices.shape[0] != r.tokens)
    fail_arg("indices", fmt::format("must be rank 2 [tokens = {}, topk] i32, got {}", r.tokens,
                                    a.indices.describe()));
  if (a.topk_lengths.data != nullptr)
    ops::check_dims(a.topk_lengths, "topk_lengths", {r.tokens}, "rank 1 [tokens] i32");
  ops::check_dims(a.out, "out", {r.tokens, h, dev::kValueDim}, "rank 3 [tokens, h, 512] bf16");
  for (const auto& [t, name] : {std::pair{&a.lse, "lse"}, {&a.max_logit, "max_logit"}}) {
    if (t->data == nullptr) continue;
    ops::check_dims(*t, name, {r.tokens, h}, "rank 2 [tokens, h] f32");
    ops::check_tensor(*t, name, DType::kF32, 4);
    check_same_device(a.q, "q", *t, name);
  }
  r.view.q = with_unit_dim(a.q, 1);
  r.view.kv_cache = a.kv_cache;
  r.view.indices = with_unit_dim(a.indices, 1);
  r.view.topk_lengths = a.topk_lengths;  // [tokens]: the decode op's per-sequence [b]
  r.view.attn_sink = a.attn_sink;
  r.view.out = with_unit_dim(a.out, 1);
  r.view.lse = with_unit_dim(a.lse, 2);
  r.view.softmax_scale = a.softmax_scale;
  r.sizes = sparse_detail::check_args(r.view, c.kernel());
  return r;
}

void check_matches_plan(const Checked& call, const MlaPrefillSparsePlan& plan) {
  if (call.sizes.h != plan.shape.num_heads)
    fail_arg("q", fmt::format("has {} heads but the plan was made for num_heads = {}", call.sizes.h,
                              plan.shape.num_heads));
  if (call.sizes.topk != plan.shape.topk)
    fail_arg("indices",
             fmt::format("topk {} differs from the plan's topk = {}", call.sizes.topk, plan.shape.topk));
}

void check_shape(const MlaPrefillSparseShape& s, const MlaPrefillSparseConfig& c) {
  if (s.num_heads != c.num_heads)
    fail_arg("shape.num_heads", fmt::format("{} does not match the config's num_heads = {}",
                                            s.num_heads, c.num_heads));
  if (s.topk < 1 || s.topk > (1 << 20))
    fail_arg("shape.topk", fmt::format("must be 1..2^20, got {}", s.topk));
}

}  // namespace

MlaPrefillSparseShape mla_prefill_sparse_shape(const MlaPrefillSparseArgs& a) {
  if (a.q.rank != 3) fail_arg("q", fmt::format("must be rank 3 [tokens, h, 576], got {}", a.q.describe()));
  if (a.indices.data == nullptr) fail_arg("indices", "is required (top-k physical rows per token)");
  if (a.indices.rank != 2)
    fail_arg("indices", fmt::format("must be rank 2 [tokens, topk], got {}", a.indices.describe()));
  MlaPrefillSparseShape s;
  s.num_heads = static_cast<int>(a.q.shape[1]);
  s.topk = static_cast<int>(a.indices.shape[1]);
  return s;
}

MlaPrefillSparsePlan mla_prefill_sparse_plan(const MlaPrefillSparseShape& shape,
                                             const MlaPrefillSparseConfig* config) {
  MlaPrefillSparsePlan plan;
  plan.shape = shape;
  plan.config = config ? *config : mla_prefill_sparse_default_config(shape.num_heads);
  plan.config.validate();
  check_shape(shape, plan.config);
  const Arch arch = ops::device_arch(driver::cached_device_info(driver::current_device()));
  ops::require_sm90a(arch, "mla_prefill_sparse");
  ops::mla_sparse_main_kernel(plan.config.kernel(), arch).prepare_current_device();
  return plan;
}

void mla_prefill_sparse(const MlaPrefillSparseArgs& a, const MlaPrefillSparsePlan& plan,
                        CUstream stream) {
  plan.config.validate();
  check_shape(plan.shape, plan.config);
  const Checked call = check_call(a, plan.config);
  check_matches_plan(call, plan);
  // Never split: one CTA per token and 64-head tile already fills the machine at prefill
  // token counts, and an unsplit run writes max_logit and needs no workspace.
  sparse_detail::launch(call.view, call.sizes, plan.config.kernel(), 1, false, Workspace{},
                        static_cast<float*>(a.max_logit.data), stream);
}

void mla_prefill_sparse(const MlaPrefillSparseArgs& a, CUstream stream,
                        const MlaPrefillSparseConfig* config) {
  const MlaPrefillSparseShape shape = mla_prefill_sparse_shape(a);
  const MlaPrefillSparseConfig c = config ? *config : mla_prefill_sparse_default_config(shape.num_heads);
  c.validate();
  // Every argument rule is reported before the plan touches the device.
  const Checked call = check_call(a, c);
  if (call.tokens == 0) return;
  mla_prefill_sparse(a, mla_prefill_sparse_plan(shape, &c), stream);
}

}  // namespace attnjit
