// mla_decode_branch_fp8's argument checks: every host-visible rule of a call before
// anything is launched, each error naming the argument and its rule. Offsets, lengths and
// table entries stay on the GPU (the kernels stay in bounds whatever they hold).
#include <fmt/format.h>

#include <cmath>

#include "attnjit/error.hpp"
#include "mla_decode_branch_fp8/layout.cuh"
#include "ops/launch_support.hpp"
#include "ops/mla_decode_branch_fp8/internal.hpp"

namespace attnjit::mla_branch_detail {
namespace {

namespace dev = layout::mla_decode_branch_fp8;

void check_last_contiguous_rows(const TensorView& t, const char* name, DType dtype) {
  if (t.data == nullptr) fail_arg(name, "is required (data is null)");
  check_dtype(t, name, dtype);
  check_last_dim_contiguous(t, name);
  check_aligned(t, name, 16);
  for (int d = 0; d + 1 < t.rank; ++d)
    if (t.shape[d] > 1 && (t.strides[d] * t.element_bytes()) % 16 != 0)
      fail_arg(name, fmt::format("stride {} of dim {} is not a multiple of 16 bytes (rows are "
                                 "read in 16-byte vectors): {}",
                                 t.strides[d], d, t.describe()));
}

}  // namespace

void check_rows(const TensorView& t, const char* name, int64_t tokens, int64_t heads, int64_t cols, DType dtype) {
  if (t.rank != 3 || (tokens >= 0 && t.shape[0] != tokens) || t.shape[1] != heads || t.shape[2] < cols)
    fail_arg(name, fmt::format("must be rank 3 [tokens{}, h = {}, >= {}], got {}",
                               tokens >= 0 ? fmt::format(" = {}", tokens) : "", heads, cols,
                               t.describe()));
  check_last_contiguous_rows(t, name, dtype);
}

void check_weight(const TensorView& w, const char* w_name, const TensorView& scale,
                  const char* scale_name, int64_t heads, int n, int k) {
  ops::check_dims(w, w_name, {heads, n, k}, n == 512 ? "rank 3 [h, 512, 128] e4m3 (W_UK)"
                                                     : "rank 3 [h, 128, 512] e4m3 (W_UV)");
  if (w.dtype != DType::kE4M3 && w.dtype != DType::kU8)
    fail_arg(w_name, fmt::format("must hold e4m3 codes (e4m3 or u8), got {}", to_string(w.dtype)));
  ops::check_tensor(w, w_name, w.dtype, 16);
  ops::check_dims(scale, scale_name, {heads, n / dev::kScaleBlock, k / dev::kScaleBlock},
                  n == 512 ? "rank 3 [h, 4, 1] f32 (one per 128 × 128 block)"
                           : "rank 3 [h, 1, 4] f32 (one per 128 × 128 block)");
  ops::check_tensor(scale, scale_name, DType::kF32, 4);
}

Sizes check_args(const MlaDecodeBranchFp8Args& a) {
  Sizes s;
  if (a.q.rank != 3 || a.q.shape[2] != kMlaBranchQDim)
    fail_arg("q", fmt::format("must be rank 3 [tokens, h, 192] bf16 (nope 128 + rope 64), got {}",
                              a.q.describe()));
  s.tokens = a.q.shape[0];
  s.heads = a.q.shape[1];
  if (s.heads < 1 || s.heads > 128)
    fail_arg("q", fmt::format("has {} heads; the attention stage takes 1..128", s.heads));
  check_rows(a.q, "q", s.tokens, s.heads, kMlaBranchQDim);
  if (s.tokens * s.heads > INT32_MAX)
    fail_arg("q", fmt::format("holds {} × {} rows, over 2^31", s.tokens, s.heads));

  if (a.input_row_offsets.rank != 1 || a.input_row_offsets.shape[0] < 1)
    fail_arg("input_row_offsets",
             fmt::format("must be rank 1 [b + 1] i32, got {}", a.input_row_offsets.describe()));
  ops::check_tensor(a.input_row_offsets, "input_row_offsets", DType::kI32, 4);
  s.batch = a.input_row_offsets.shape[0] - 1;
  ops::check_dims(a.cache_lens_before, "cache_lens_before", {s.batch}, "rank 1 [b] i32");
  ops::check_tensor(a.cache_lens_before, "cache_lens_before", DType::kI32, 4);

  if (a.kv_input.rank != 2 || a.kv_input.shape[0] != s.tokens || a.kv_input.shape[1] != dev::kCacheDim)
    fail_arg("kv_input", fmt::format("must be rank 2 [tokens = {}, 576] bf16, got {}", s.tokens,
                                     a.kv_input.describe()));
  check_last_contiguous_rows(a.kv_input, "kv_input", DType::kBF16);
  if (a.freqs_cis.rank != 2 || a.freqs_cis.shape[1] != dev::kRopeDim || a.freqs_cis.shape[0] < 1)
    fail_arg("freqs_cis", fmt::format("must be rank 2 [max_pos >= 1, 64] f32 ((cos, sin) pairs), "
                                      "got {}",
                                      a.freqs_cis.describe()));
  ops::check_tensor(a.freqs_cis, "freqs_cis", DType::kF32, 16);
  if (a.freqs_cis.shape[0] > INT32_MAX) fail_arg("freqs_cis", "more than 2^31 positions");
  s.max_pos = a.freqs_cis.shape[0];
  ops::check_dims(a.kv_norm_gamma, "kv_norm_gamma", {dev::kLatentDim}, "rank 1 [512] bf16");
  ops::check_tensor(a.kv_norm_gamma, "kv_norm_gamma", DType::kBF16, 16);
  if (!std::isfinite(a.epsilon) || a.epsilon < 0.0f)
    fail_arg("epsilon", fmt::format("must be finite and >= 0, got {}", a.epsilon));

  const TensorView& kv = a.kv_cache;
  if (kv.rank != 3)
    fail_arg("kv_cache", fmt::format("must be rank 3 [pages, page_size, 576] bf16 or [pages, "
                                     "page_size, 640] u8, got {}",
                                     kv.describe()));
  if (kv.dtype == DType::kBF16 && kv.shape[2] == dev::kCacheDim) {
    s.cache = MlaBranchCache::kBF16;
    ops::check_tensor(kv, "kv_cache", DType::kBF16, 16);
    if (a.kv_scale.data != nullptr)
      fail_arg("kv_scale", "is for the 640-byte fp8 cache; a bf16 cache has none (leave it null)");
  } else if ((kv.dtype == DType::kU8 || kv.dtype == DType::kE4M3) && kv.shape[2] == kMlaFp8RowBytes) {
    s.cache = MlaBranchCache::kFp8Token;
    ops::check_tensor(kv, "kv_cache", kv.dtype, 16);
  } else if (kv.dtype == DType::kU8 && kv.shape[2] == kMlaSparseFp8RowBytes) {
    s.cache = MlaBranchCache::kFp8Block;
    ops::check_tensor(kv, "kv_cache", kv.dtype, 16);
    if (a.kv_scale.data != nullptr)
      fail_arg("kv_scale", "is for the 640-byte cache; the 656-byte rows carry their scales (leave it null)");
  } else {
    fail_arg("kv_cache", fmt::format("must be [pages, page_size, 576] bf16, [pages, page_size, 640] "
                                     "u8 (512 e4m3 + 64 bf16 rope) or [pages, page_size, 656] u8 "
                                     "(block scales, sparse), got {}",
                                     kv.describe()));
  }
  // Sparse attention: the index widths here; every other rule of the sparse tensors is
  // mla_decode_sparse's, checked before anything launches (launch.cpp, checked()).
  if (a.indices.data != nullptr) {
    if (s.cache == MlaBranchCache::kFp8Token)
      fail_arg("indices", "sparse attention reads the bf16 or the 656-byte cache, not the 640-byte one");
    if (a.indices.rank != 2 || a.indices.shape[0] != s.tokens || a.indices.shape[1] < 1)
      fail_arg("indices", fmt::format("must be rank 2 [tokens = {}, topk >= 1] i32, got {}", s.tokens,
                                      a.indices.describe()));
    s.topk = a.indices.shape[1];
    if (a.extra_indices.data != nullptr) {
      if (a.extra_indices.rank != 2 || a.extra_indices.shape[0] != s.tokens || a.extra_indices.shape[1] < 1)
        fail_arg("extra_indices", fmt::format("must be rank 2 [tokens = {}, topk_extra >= 1] i32, got {}",
                                              s.tokens, a.extra_indices.describe()));
      s.topk_extra = a.extra_indices.shape[1];
    }
  } else {
    if (s.cache == MlaBranchCache::kFp8Block)
      fail_arg("indices", "is required with the 656-byte cache (its attention is the sparse one)");
    for (const auto& [t, name] : {std::pair{&a.topk_lengths, "topk_lengths"}, {&a.attn_sink, "attn_sink"},
                                  {&a.extra_kv_cache, "extra_kv_cache"}, {&a.extra_indices, "extra_indices"},
                                  {&a.extra_topk_lengths, "extra_topk_lengths"}})
      if (t->data != nullptr) fail_arg(name, "belongs to sparse attention: set indices too, or leave it null");
  }
  s.num_pages = kv.shape[0];
  s.page_size = kv.shape[1];
  if (s.num_pages * s.page_size > INT32_MAX)
    fail_arg("kv_cache", fmt::format("holds {} rows, over 2^31", s.num_pages * s.page_size));
  if (s.cache == MlaBranchCache::kFp8Token) {
    ops::check_dims(a.kv_scale, "kv_scale", {s.num_pages, s.page_size},
                    "rank 2 [pages, page_size] f32 (σ per cache row)");
    ops::check_tensor(a.kv_scale, "kv_scale", DType::kF32, 4);
  }
  if (a.block_table.rank != 2 || a.block_table.shape[0] != s.batch || a.block_table.shape[1] < 1)
    fail_arg("block_table", fmt::format("must be rank 2 [b = {}, max_pages >= 1] i32, got {}",
                                        s.batch, a.block_table.describe()));
  ops::check_tensor(a.block_table, "block_table", DType::kI32, 4);
  s.max_pages = a.block_table.shape[1];

  check_weight(a.w_uk, "w_uk", a.w_uk_scale, "w_uk_scale", s.heads, dev::kLatentDim, dev::kNopeDim);
  check_weight(a.w_uv, "w_uv", a.w_uv_scale, "w_uv_scale", s.heads, dev::kVDim, dev::kLatentDim);
  check_rows(a.out, "out", s.tokens, s.heads, dev::kVDim);
  if (a.out.shape[2] != dev::kVDim)
    fail_arg("out", fmt::format("must be [tokens, h, 128] bf16, got {}", a.out.describe()));
  if (!std::isfinite(a.softmax_scale) || a.softmax_scale <= 0.0f)
    fail_arg("softmax_scale", fmt::format("must be finite and > 0, got {}", a.softmax_scale));
  for (const auto& [t, name] : {std::pair{&a.input_row_offsets, "input_row_offsets"},
                                {&a.cache_lens_before, "cache_lens_before"}, {&a.kv_input, "kv_input"},
                                {&a.freqs_cis, "freqs_cis"}, {&a.kv_norm_gamma, "kv_norm_gamma"},
                                {&a.kv_cache, "kv_cache"}, {&a.block_table, "block_table"},
                                {&a.w_uk, "w_uk"}, {&a.w_uv, "w_uv"}, {&a.out, "out"}})
    check_same_device(a.q, "q", *t, name);
  return s;
}

void check_matches_plan(const Sizes& s, const MlaDecodeBranchFp8Plan& plan) {
  const MlaDecodeBranchFp8Shape& p = plan.shape;
  auto differ = [](const char* arg, const char* what, int64_t got, int64_t planned) {
    fail_arg(arg, fmt::format("{} is {} but the plan was made for {}", what, got, planned));
  };
  if (s.cache != p.cache)
    fail_arg("kv_cache", fmt::format("is a {} cache but the plan was made for {}", to_string(s.cache),
                                     to_string(p.cache)));
  if (s.topk != p.topk) differ("indices", "topk (0: dense attention)", s.topk, p.topk);
  if (s.topk_extra != p.topk_extra) differ("extra_indices", "topk_extra", s.topk_extra, p.topk_extra);
  if (s.batch != p.batch) differ("input_row_offsets", "the batch", s.batch, p.batch);
  if (s.tokens != p.tokens) differ("q", "the token count", s.tokens, p.tokens);
  if (s.heads != p.num_heads) differ("q", "the head count", s.heads, p.num_heads);
  if (s.page_size != p.page_size) differ("kv_cache", "page_size", s.page_size, p.page_size);
  if (s.max_pages != p.max_pages) differ("block_table", "max_pages", s.max_pages, p.max_pages);
}

}  // namespace attnjit::mla_branch_detail
