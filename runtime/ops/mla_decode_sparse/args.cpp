// mla_decode_sparse's argument checks: every host-visible rule of a call, of a plan's
// shape and of the call against its plan (errors name the argument and the rule, before
// anything is launched), and the checked mode's device-side validation of the indices,
// lengths and offsets.
#include <fmt/format.h>

#include <cmath>
#include <utility>

#include "attnjit/error.hpp"
#include "attnjit/runtime.hpp"
#include "mla_decode_sparse/layout.cuh"
#include "ops/launch_support.hpp"
#include "ops/mla_decode_sparse/internal.hpp"

namespace attnjit {
namespace {

namespace dev = layout::mla_decode_sparse;
using sparse_detail::Sizes;

constexpr int kMaxQLen = 8;

// q's rows per sequence and its head count, ragged or padded.
void check_q(const MlaDecodeSparseArgs& a, const MlaDecodeSparseConfig& c, Sizes& s) {
  const TensorView& q = a.q;
  s.ragged = a.q_offsets.data != nullptr;
  if (s.ragged) {
    if (q.rank != 3 || q.shape[2] != dev::kHeadDim)
      fail_arg("q", fmt::format("with q_offsets (ragged) must be rank 3 [total_q, h, 576], got {}",
                                q.describe()));
    if (a.q_offsets.rank != 1 || a.q_offsets.shape[0] < 1)
      fail_arg("q_offsets", fmt::format("must be rank 1 [b + 1] i32, got {}", a.q_offsets.describe()));
    ops::check_tensor(a.q_offsets, "q_offsets", DType::kI32, 4);
    s.b = a.q_offsets.shape[0] - 1;
    s.total_q = q.shape[0];
    s.h = q.shape[1];
    s.q_len = a.max_q_len;
    if (s.q_len < 1 || s.q_len > kMaxQLen)
      fail_arg("max_q_len", fmt::format("the ragged form needs the bound on every sequence's "
                                        "q_len, 1..{}; got {}",
                                        kMaxQLen, a.max_q_len));
  } else {
    if (q.rank != 4 || q.shape[3] != dev::kHeadDim)
      fail_arg("q", fmt::format("must be rank 4 [b, q_len, h, 576] (or rank 3 [total_q, h, 576] "
                                "with q_offsets), got {}",
                                q.describe()));
    s.b = q.shape[0];
    s.q_len = q.shape[1];
    s.h = q.shape[2];
    s.total_q = s.b * s.q_len;
    if (s.q_len < 1 || s.q_len > kMaxQLen)
      fail_arg("q", fmt::format("q_len {} is outside 1..{}", s.q_len, kMaxQLen));
    if (a.max_q_len != 0 && a.max_q_len != s.q_len)
      fail_arg("max_q_len", fmt::format("is for the ragged form (q_offsets); padded q takes its "
                                        "q_len {} from q's shape, got max_q_len = {}",
                                        s.q_len, a.max_q_len));
  }
  ops::check_tensor(q, "q", DType::kBF16, 16);
  if (s.h != c.num_heads)
    fail_arg("q", fmt::format("has {} heads but the config was built for num_heads = {} (8..128)",
                              s.h, c.num_heads));
  if (s.total_q * s.h > INT32_MAX)  // q rows are int32 TMA coordinates
    fail_arg("q", fmt::format("holds {} × {} query rows, over 2^31", s.total_q, s.h));
}

// A cache pool: [rows, row] or [pages, page_size, row], contiguous, in the config's layout.
// Returns its rows.
int64_t check_pool(const TensorView& kv, const char* name, const MlaDecodeSparseConfig& c) {
  const bool fp8 = c.cache_layout == MlaSparseLayout::kFp8;
  const int64_t last = fp8 ? dev::kFp8RowBytes : dev::kHeadDim;
  const char* form = fp8 ? "[num_pages, page_size, 656] (or [rows, 656]) u8 rows of the fp8 layout"
                         : "[num_pages, page_size, 576] (or [rows, 576]) bf16";
  if ((kv.rank != 2 && kv.rank != 3) || kv.shape[kv.rank - 1] != last)
    fail_arg(name, fmt::format("must be {} for cache_layout {}, got {}", form,
                               to_string(c.cache_layout), kv.describe()));
  if (fp8 && kv.dtype != DType::kU8 && kv.dtype != DType::kE4M3)
    fail_arg(name, fmt::format("holds 656-byte fp8 rows: dtype u8 or e4m3, got {}", to_string(kv.dtype)));
  ops::check_tensor(kv, name, fp8 ? kv.dtype : DType::kBF16, 16);
  const int64_t rows = kv.rank == 3 ? kv.shape[0] * kv.shape[1] : kv.shape[0];
  if (rows < 1 || rows > INT32_MAX)
    fail_arg(name, fmt::format("must hold 1..2^31 rows (indices are int32), got {}", kv.describe()));
  return rows;
}

// Indices of a key source: [b, q_len, topk] (padded) or [total_q, topk] (ragged) i32, last
// dim contiguous; one row stride per token. Returns topk and sets the stride.
int64_t check_indices(const TensorView& t, const char* name, const Sizes& s, int64_t& stride) {
  if (t.data == nullptr) fail_arg(name, "is required (top-k physical rows per query token)");
  if (t.dtype != DType::kI32) fail_arg(name, fmt::format("must be i32, got {}", to_string(t.dtype)));
  const bool ok = s.ragged ? t.rank == 2 && t.shape[0] == s.total_q
                           : t.rank == 3 && t.shape[0] == s.b && t.shape[1] == s.q_len;
  if (!ok)
    fail_arg(name, fmt::format("must be {} i32, got {}",
                               s.ragged ? fmt::format("rank 2 [total_q = {}, topk]", s.total_q)
                                        : fmt::format("rank 3 [b = {}, q_len = {}, topk]", s.b, s.q_len),
                               t.describe()));
  const int64_t topk = t.shape[t.rank - 1];
  if (topk < 1 || topk > (1 << 20))
    fail_arg(name, fmt::format("topk must be 1..2^20, got {}", topk));
  if (t.stride(t.rank - 1) != 1)
    fail_arg(name, fmt::format("last dimension must be contiguous (stride 1), got {}", t.describe()));
  stride = t.stride(t.rank - 2);
  if (!s.ragged && s.q_len > 1 && t.stride(0) != s.q_len * stride)
    fail_arg(name, fmt::format("token rows must be evenly spaced: stride[0] = q_len × stride[1] "
                               "= {}, got {}",
                               s.q_len * stride, t.describe()));
  if (stride < topk && !(s.total_q <= 1))
    fail_arg(name, fmt::format("token stride {} is below topk {}: rows would overlap", stride, topk));
  if (stride * s.total_q > INT32_MAX)
    fail_arg(name, fmt::format("spans {} × {} elements, over 2^31", s.total_q, stride));
  if (reinterpret_cast<uintptr_t>(t.data) % 4 != 0)
    fail_arg(name, "must be 4-byte aligned");
  return topk;
}

// Optional lengths: padded [b] (per sequence) or [b, q_len] (per token); ragged [total_q].
void check_lengths(const TensorView& t, const char* name, const Sizes& s, bool& per_token) {
  per_token = false;
  if (t.data == nullptr) return;
  if (s.ragged) {
    ops::check_dims(t, name, {s.total_q}, "rank 1 [total_q] i32 (one length per query token)");
    per_token = true;
  } else if (t.rank == 2) {
    ops::check_dims(t, name, {s.b, s.q_len}, "rank 2 [b, q_len] i32 (per token) or rank 1 [b]");
    per_token = true;
  } else {
    ops::check_dims(t, name, {s.b}, "rank 1 [b] i32 (per sequence) or rank 2 [b, q_len]");
  }
  ops::check_tensor(t, name, DType::kI32, 4);
}

void check_outputs(const MlaDecodeSparseArgs& a, const Sizes& s) {
  if (s.ragged)
    ops::check_dims(a.out, "out", {s.total_q, s.h, dev::kValueDim}, "rank 3 [total_q, h, 512] like q");
  else
    ops::check_dims(a.out, "out", {s.b, s.q_len, s.h, dev::kValueDim}, "rank 4 [b, q_len, h, 512] like q");
  ops::check_tensor(a.out, "out", DType::kBF16, 16);
  if (a.lse.data != nullptr) {
    if (s.ragged)
      ops::check_dims(a.lse, "lse", {s.h, s.total_q}, "rank 2 [h, total_q] f32 (ragged)");
    else
      ops::check_dims(a.lse, "lse", {s.b, s.h, s.q_len}, "rank 3 [b, h, q_len] f32");
    ops::check_tensor(a.lse, "lse", DType::kF32, 4);
  }
}

}  // namespace

MlaDecodeSparseShape mla_decode_sparse_shape(const MlaDecodeSparseArgs& a) {
  MlaDecodeSparseShape s;
  s.layout = a.kv_cache.dtype == DType::kBF16 ? MlaSparseLayout::kBF16 : MlaSparseLayout::kFp8;
  s.ragged = a.q_offsets.data != nullptr;
  if (s.ragged) {
    if (a.q.rank != 3 || a.q_offsets.rank != 1)
      fail_arg("q", fmt::format("with q_offsets (ragged) must be rank 3 [total_q, h, 576] and "
                                "q_offsets rank 1 [b + 1]; got q {} and q_offsets {}",
                                a.q.describe(), a.q_offsets.describe()));
    s.batch = static_cast<int>(a.q_offsets.shape[0] - 1);
    s.q_len = a.max_q_len;
    s.num_heads = static_cast<int>(a.q.shape[1]);
  } else {
    if (a.q.rank != 4)
      fail_arg("q", fmt::format("must be rank 4 [b, q_len, h, 576], or rank 3 with q_offsets; got {}",
                                a.q.describe()));
    s.batch = static_cast<int>(a.q.shape[0]);
    s.q_len = static_cast<int>(a.q.shape[1]);
    s.num_heads = static_cast<int>(a.q.shape[2]);
  }
  if (a.indices.rank < 2)
    fail_arg("indices", fmt::format("must be [b, q_len, topk] or [total_q, topk], got {}",
                                    a.indices.describe()));
  s.topk = static_cast<int>(a.indices.shape[a.indices.rank - 1]);
  if (a.extra_kv_cache.data != nullptr && a.extra_indices.rank >= 2)
    s.topk_extra = static_cast<int>(a.extra_indices.shape[a.extra_indices.rank - 1]);
  return s;
}

namespace sparse_detail {

Sizes check_args(const MlaDecodeSparseArgs& a, const MlaDecodeSparseConfig& c) {
  Sizes s;
  check_q(a, c, s);
  s.pool_rows = check_pool(a.kv_cache, "kv_cache", c);
  s.topk = check_indices(a.indices, "indices", s, s.index_stride);
  check_lengths(a.topk_lengths, "topk_lengths", s, s.lens_per_token);
  const bool extra = a.extra_kv_cache.data != nullptr;
  if (!extra && (a.extra_indices.data != nullptr || a.extra_topk_lengths.data != nullptr))
    fail_arg("extra_kv_cache", "is required when extra_indices or extra_topk_lengths is given");
  if (extra) {
    s.extra_rows = check_pool(a.extra_kv_cache, "extra_kv_cache", c);
    s.topk_extra = check_indices(a.extra_indices, "extra_indices", s, s.extra_stride);
    check_lengths(a.extra_topk_lengths, "extra_topk_lengths", s, s.extra_lens_per_token);
  }
  if (a.attn_sink.data != nullptr) {
    ops::check_dims(a.attn_sink, "attn_sink", {s.h}, "rank 1 [h] f32 (one logit per head)");
    ops::check_tensor(a.attn_sink, "attn_sink", DType::kF32, 4);
  }
  check_outputs(a, s);
  for (auto [t, name] : {std::pair{&a.q_offsets, "q_offsets"}, {&a.kv_cache, "kv_cache"},
                         {&a.indices, "indices"}, {&a.topk_lengths, "topk_lengths"},
                         {&a.attn_sink, "attn_sink"}, {&a.extra_kv_cache, "extra_kv_cache"},
                         {&a.extra_indices, "extra_indices"},
                         {&a.extra_topk_lengths, "extra_topk_lengths"}, {&a.out, "out"},
                         {&a.lse, "lse"}})
    if (t->data != nullptr) check_same_device(a.q, "q", *t, name);
  if (!(a.softmax_scale > 0.0f) || !std::isfinite(a.softmax_scale))
    fail_arg("softmax_scale", fmt::format("must be a positive finite number, got {}", a.softmax_scale));
  return s;
}

void check_shape(const MlaDecodeSparseShape& s, const MlaDecodeSparseConfig& c) {
  if (s.batch < 0 || s.batch > kMaxBatch)
    fail_arg("shape.batch", fmt::format("must be in 0..{} (a grid dimension), got {}", kMaxBatch, s.batch));
  if (s.q_len < 1 || s.q_len > kMaxQLen)
    fail_arg("shape.q_len", fmt::format("must be 1..{}, got {}", kMaxQLen, s.q_len));
  if (s.num_heads != c.num_heads)
    fail_arg("shape.num_heads", fmt::format("{} does not match the config's num_heads = {}",
                                            s.num_heads, c.num_heads));
  if (s.layout != c.cache_layout)
    fail_arg("shape.layout", fmt::format("{} does not match the config's cache_layout {}",
                                         to_string(s.layout), to_string(c.cache_layout)));
  if (s.topk < 1 || s.topk > (1 << 20))
    fail_arg("shape.topk", fmt::format("must be 1..2^20, got {}", s.topk));
  if (s.topk_extra < 0 || s.topk_extra > (1 << 20))
    fail_arg("shape.topk_extra", fmt::format("must be 0 (no extra cache) ..2^20, got {}", s.topk_extra));
  if (s.num_splits < 0 || s.num_splits > kMaxSplits)
    fail_arg("shape.num_splits", fmt::format("must be 0 (chosen by the plan) or 1..{}, got {}",
                                             kMaxSplits, s.num_splits));
}

void check_matches_plan(const Sizes& s, const MlaDecodeSparsePlan& plan) {
  const MlaDecodeSparseShape& p = plan.shape;
  if (s.ragged != p.ragged)
    fail_arg("q_offsets", fmt::format("the call is {} but the plan was made for the {} form",
                                      s.ragged ? "ragged" : "padded", p.ragged ? "ragged" : "padded"));
  if (s.b != p.batch)
    fail_arg(s.ragged ? "q_offsets" : "q",
             fmt::format("holds {} sequences but the plan was made for batch = {}", s.b, p.batch));
  if (s.q_len != p.q_len)
    fail_arg(s.ragged ? "max_q_len" : "q",
             fmt::format("q_len {} differs from the plan's q_len = {}", s.q_len, p.q_len));
  if (s.topk != p.topk)
    fail_arg("indices", fmt::format("topk {} differs from the plan's topk = {}", s.topk, p.topk));
  if (s.topk_extra != p.topk_extra)
    fail_arg("extra_indices", fmt::format("topk_extra {} differs from the plan's topk_extra = {} "
                                          "(0: no extra cache)",
                                          s.topk_extra, p.topk_extra));
  if (plan.num_splits < 1 || plan.num_splits > kMaxSplits)
    fail_arg("plan", fmt::format("num_splits {} is not 1..{} (make plans with "
                                 "mla_decode_sparse_plan)",
                                 plan.num_splits, kMaxSplits));
  if (plan.merge_in_cluster && !cluster_merge_possible(plan.config, plan.num_splits))
    fail_arg("plan", fmt::format("merge_in_cluster needs the narrow schedule at 2, 4 or 8 splits, got "
                                 "{} splits of {} (make plans with mla_decode_sparse_plan)",
                                 plan.num_splits, plan.config.describe()));
}

}  // namespace sparse_detail
}  // namespace attnjit
