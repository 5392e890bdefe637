// mla_decode_fp8's argument checks: every host-visible rule of a call before anything is
// launched, each error naming the argument and its rule. The block table, lengths and
// ragged offsets follow mla_decode's rules (its checked mode validates them on the GPU).
#include <fmt/format.h>

#include <cmath>

#include "attnjit/error.hpp"
#include "mla_decode_fp8/layout.cuh"
#include "ops/launch_support.hpp"
#include "ops/mla_decode_fp8/internal.hpp"

namespace attnjit {
namespace {

// Rows of raw bytes (u8 or e4m3 views), contiguous, 16-byte aligned (TMA).
void check_bytes(const TensorView& t, const char* name) {
  if (t.data != nullptr && t.dtype != DType::kU8 && t.dtype != DType::kE4M3)
    fail_arg(name, fmt::format("must hold bytes (u8 or e4m3), got {}", to_string(t.dtype)));
  ops::check_tensor(t, name, t.dtype, 16);
}

constexpr int64_t kTensorRowBytes = 576;  // the per-tensor form: 576 e4m3

bool row_bytes_ok(int64_t n) { return n == kMlaFp8RowBytes || n == kTensorRowBytes; }

void check_q(const MlaDecodeFp8Args& a, const MlaDecodeFp8Config& c, mla_fp8_detail::Fp8Sizes& f) {
  mla_detail::Sizes& s = f.s;
  const TensorView& q = a.q;
  s.ragged = a.q_offsets.data != nullptr;
  if (s.ragged) {
    if (q.rank != 3 || !row_bytes_ok(q.shape[2]))
      fail_arg("q", fmt::format("with q_offsets (ragged) must be rank 3 [total_q, h, 640] "
                                "(640-byte rows: 512 e4m3 + 64 bf16; 576 e4m3 per tensor), got {}",
                                q.describe()));
    if (a.q_offsets.rank != 1 || a.q_offsets.shape[0] < 1)
      fail_arg("q_offsets", fmt::format("must be rank 1 [b + 1] i32, got {}", a.q_offsets.describe()));
    ops::check_tensor(a.q_offsets, "q_offsets", DType::kI32, 4);
    s.b = a.q_offsets.shape[0] - 1;
    s.total_q = q.shape[0];
    s.h = q.shape[1];
    s.q_len = a.max_q_len;
    if (s.q_len < 1 || s.q_len > c.max_q_len)
      fail_arg("max_q_len", fmt::format("the ragged form needs the bound on every sequence's "
                                        "q_len, 1..max_q_len = {} of the config; got {}",
                                        c.max_q_len, a.max_q_len));
  } else {
    if (q.rank != 4 || !row_bytes_ok(q.shape[3]))
      fail_arg("q", fmt::format("must be rank 4 [b, q_len, h, 640] (640-byte rows: 512 e4m3 + "
                                "64 bf16; 576 e4m3 per tensor), or rank 3 with q_offsets; got {}",
                                q.describe()));
    s.b = q.shape[0];
    s.q_len = q.shape[1];
    s.h = q.shape[2];
    s.total_q = s.b * s.q_len;
    if (s.q_len < 1 || s.q_len > c.max_q_len)
      fail_arg("q", fmt::format("q_len {} is outside 1..max_q_len = {} of the config", s.q_len,
                                c.max_q_len));
    if (a.max_q_len != 0 && a.max_q_len != s.q_len)
      fail_arg("max_q_len", fmt::format("is for the ragged form (q_offsets); padded q takes its "
                                        "q_len {} from q's shape, got max_q_len = {}",
                                        s.q_len, a.max_q_len));
  }
  check_bytes(q, "q");
  if (s.h != c.num_heads)
    fail_arg("q", fmt::format("has {} heads but the config was built for num_heads = {}", s.h,
                              c.num_heads));
  if (s.total_q * s.h > INT32_MAX)
    fail_arg("q", fmt::format("holds {} × {} query rows, over 2^31", s.total_q, s.h));

  f.per_tensor = q.shape[q.rank - 1] == kTensorRowBytes;
  if (f.per_tensor && c.fp8_mma)
    fail_arg("q", "576-byte rows (the per-tensor form) run on the widening kernel only (config "
                  "fp8_mma 0): the fp8 kernel reads a bf16 rope");
  // σ_Q: one per query token, or per token and head; one for all in the per-tensor form.
  const TensorView& qs = a.q_scale;
  namespace dev = layout::mla_decode_fp8;
  if (f.per_tensor) {
    if (qs.rank != 1 || qs.shape[0] != 1)
      fail_arg("q_scale", fmt::format("must be f32 [1] with 576-byte rows (the per-tensor form), "
                                      "got {}",
                                      qs.describe()));
    f.q_scale_mode = dev::kQScalePerTensor;
  } else {
    const bool per_token = qs.rank == 1 && qs.shape[0] == s.total_q;
    const bool per_head = qs.rank == 2 && qs.shape[0] == s.total_q && qs.shape[1] == s.h;
    if (!per_token && !per_head)
      fail_arg("q_scale", fmt::format("must be f32 [tokens = {}] (per query token) or [tokens, h "
                                      "= {}] (per token and head), got {}",
                                      s.total_q, s.h, qs.describe()));
    f.q_scale_mode = per_head ? dev::kQScalePerHead : dev::kQScalePerToken;
  }
  ops::check_tensor(qs, "q_scale", DType::kF32, 4);
}

void check_cache(const MlaDecodeFp8Args& a, const MlaDecodeFp8Config& c, mla_fp8_detail::Fp8Sizes& f) {
  mla_detail::Sizes& s = f.s;
  const TensorView& kv = a.kv_cache;
  const bool three = a.kv_rope.data != nullptr;
  f.three = three;
  if (three && f.per_tensor)
    fail_arg("kv_rope", "is for 640-byte q rows (per-token scales); the per-tensor form's cache "
                        "rows are 576 e4m3 bytes with the rope inside");
  const int64_t row = three ? kMlaFp8ContentBytes : f.per_tensor ? kTensorRowBytes : kMlaFp8RowBytes;
  if (kv.rank != 3 || kv.shape[2] != row)
    fail_arg("kv_cache", three ? fmt::format("with kv_rope (three-tensor form) must be rank 3 "
                                             "[pages, page_size, 512] e4m3 content, got {}",
                                             kv.describe())
                               : fmt::format("must be rank 3 [pages, page_size, {}] like q's rows "
                                             "(640: 512 e4m3 + 64 bf16, or [.., 512] with kv_rope; "
                                             "576: all e4m3, the per-tensor form); got {}",
                                             row, kv.describe()));
  check_bytes(kv, "kv_cache");
  s.num_pages = kv.shape[0];
  s.page_size = kv.shape[1];
  if (s.page_size != c.page_size)
    fail_arg("kv_cache", fmt::format("has page size {} but the config was built for {} (64..256)",
                                     s.page_size, c.page_size));
  if (s.num_pages < 1 || s.num_pages * s.page_size > INT32_MAX)
    fail_arg("kv_cache", fmt::format("must hold 1..2^31 rows (pages × page_size), got {}",
                                     kv.describe()));
  if (three) {
    ops::check_dims(a.kv_rope, "kv_rope", {s.num_pages, s.page_size, kMlaFp8RopeDims},
                    "rank 3 [pages, page_size, 64] bf16 like kv_cache");
    ops::check_tensor(a.kv_rope, "kv_rope", DType::kBF16, 16);
  }
  if (f.per_tensor)
    ops::check_dims(a.kv_scale, "kv_scale", {1}, "rank 1 [1] f32 (the per-tensor form: one σ)");
  else
    ops::check_dims(a.kv_scale, "kv_scale", {s.num_pages, s.page_size},
                    "rank 2 [pages, page_size] f32: one σ per cache row");
  ops::check_tensor(a.kv_scale, "kv_scale", DType::kF32, 4);

  mla_detail::check_table(a.block_table, a.cache_lens, s);
}


}  // namespace

MlaDecodeFp8Shape mla_decode_fp8_shape(const MlaDecodeFp8Args& a) {
  MlaDecodeFp8Shape s;
  if (a.q_offsets.data != nullptr) {
    if (a.q.rank != 3 || a.q_offsets.rank != 1)
      fail_arg("q", fmt::format("with q_offsets (ragged) must be rank 3 [total_q, h, 640] and "
                                "q_offsets rank 1 [b + 1]; got q {} and q_offsets {}",
                                a.q.describe(), a.q_offsets.describe()));
    s.ragged = true;
    s.batch = static_cast<int>(a.q_offsets.shape[0] - 1);
    s.q_len = a.max_q_len;
    s.num_heads = static_cast<int>(a.q.shape[1]);
  } else {
    if (a.q.rank != 4)
      fail_arg("q", fmt::format("must be rank 4 [b, q_len, h, 640], or rank 3 [total_q, h, 640] "
                                "with q_offsets; got {}",
                                a.q.describe()));
    s.batch = static_cast<int>(a.q.shape[0]);
    s.q_len = static_cast<int>(a.q.shape[1]);
    s.num_heads = static_cast<int>(a.q.shape[2]);
  }
  if (a.kv_cache.rank != 3)
    fail_arg("kv_cache", fmt::format("must be rank 3 [pages, page_size, 640 | 512], got {}",
                                     a.kv_cache.describe()));
  if (a.block_table.rank != 2)
    fail_arg("block_table", fmt::format("must be rank 2 [b, max_pages], got {}",
                                        a.block_table.describe()));
  s.page_size = static_cast<int>(a.kv_cache.shape[1]);
  s.max_pages = static_cast<int>(a.block_table.shape[1]);
  return s;
}

namespace mla_fp8_detail {

Fp8Sizes check_args(const MlaDecodeFp8Args& a, const MlaDecodeFp8Config& c) {
  Fp8Sizes f;
  check_q(a, c, f);
  check_cache(a, c, f);
  mla_detail::check_outputs(a.out, a.lse, DType::kBF16, "bf16", f.s);
  for (const TensorView* t : {&a.q_offsets, &a.q_scale, &a.kv_cache, &a.kv_rope, &a.kv_scale,
                              &a.block_table, &a.cache_lens, &a.out, &a.lse})
    if (t->data != nullptr && t->device != a.q.device)
      fail_arg("tensors", fmt::format("must all be on q's device {}, found one on device {}",
                                      a.q.device, t->device));
  if (!(a.softmax_scale > 0.0f) || !std::isfinite(a.softmax_scale))
    fail_arg("softmax_scale", fmt::format("must be a positive finite number, got {}",
                                          a.softmax_scale));
  return f;
}

}  // namespace mla_fp8_detail
}  // namespace attnjit
