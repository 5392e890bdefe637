// mla_decode's argument checks: every host-visible rule of a call, of a plan's shape and of
// the call against its plan, and the checked mode's device-side validation of the
// GPU-resident lengths, offsets and table entries.
#include <fmt/format.h>

#include <cmath>
#include <utility>

#include "attnjit/error.hpp"
#include "attnjit/runtime.hpp"
#include "mla_decode/layout.cuh"
#include "ops/launch_support.hpp"
#include "ops/mla_decode/config.hpp"
#include "ops/mla_decode/internal.hpp"

namespace attnjit {
namespace {

namespace dev = layout::mla_decode;  // the kernels' layout (kernel_templates/mla_decode/layout.cuh)

const int* i32_ptr(const TensorView& t) { return static_cast<const int*>(t.data); }

// q's rows per sequence and its head count, ragged or padded.
void check_q(const MlaDecodeArgs& a, const MlaDecodeConfig& c, mla_detail::Sizes& s) {
  const TensorView& q = a.q;
  s.ragged = a.q_offsets.data != nullptr;
  if (s.ragged) {
    if (q.rank != 3 || q.shape[2] != kMlaHeadDim)
      fail_arg("q", fmt::format("with q_offsets (ragged) must be rank 3 [total_q, h, {}], got {}",
                                kMlaHeadDim, q.describe()));
    const TensorView& off = a.q_offsets;
    if (off.rank != 1 || off.shape[0] < 1)
      fail_arg("q_offsets", fmt::format("must be rank 1 [b + 1] i32, got {}", off.describe()));
    ops::check_tensor(off, "q_offsets", DType::kI32, 4);
    if (off.device != q.device)
      fail_arg("q_offsets", fmt::format("must be on q's device {}, got device {}", q.device,
                                        off.device));
    s.b = off.shape[0] - 1;
    s.total_q = q.shape[0];
    s.h = q.shape[1];
    s.q_len = a.max_q_len;
    if (s.q_len < 1 || s.q_len > c.max_q_len)
      fail_arg("max_q_len", fmt::format("the ragged form needs the bound on every sequence's "
                                        "q_len, 1..max_q_len = {} of the config; got {}",
                                        c.max_q_len, a.max_q_len));
  } else {
    if (q.rank != 4 || q.shape[3] != kMlaHeadDim)
      fail_arg("q", fmt::format("must be rank 4 [b, q_len, h, {}] (or rank 3 [total_q, h, {}] "
                                "with q_offsets), got {}",
                                kMlaHeadDim, kMlaHeadDim, q.describe()));
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
  if (q.dtype != DType::kBF16 && q.dtype != DType::kF16)
    fail_arg("q", fmt::format("must be bf16 or f16, got {}", to_string(q.dtype)));
  ops::check_tensor(q, "q", q.dtype, 16);
  if (s.h != c.num_heads)
    fail_arg("q", fmt::format("has {} heads but the config was built for num_heads = {}", s.h,
                              c.num_heads));
  if (q.dtype != c.dtype)
    fail_arg("q", fmt::format("dtype {} does not match the config's dtype {}", to_string(q.dtype),
                              to_string(c.dtype)));
  if (s.total_q * s.h > INT32_MAX)  // q rows are int32 TMA coordinates
    fail_arg("q", fmt::format("holds {} × {} query rows, over 2^31", s.total_q, s.h));
}

// The page pool, the block table and the lengths.
void check_cache(const MlaDecodeArgs& a, const MlaDecodeConfig& c, mla_detail::Sizes& s) {
  const TensorView& kv = a.kv_cache;
  if (kv.rank != 3 || kv.shape[2] != kMlaHeadDim)
    fail_arg("kv_cache", fmt::format("must be rank 3 [num_pages, page_size, {}], got {}",
                                     kMlaHeadDim, kv.describe()));
  ops::check_tensor(kv, "kv_cache", a.q.dtype, 16);
  s.num_pages = kv.shape[0];
  s.page_size = kv.shape[1];
  if (s.page_size != c.page_size)
    fail_arg("kv_cache", fmt::format("has page size {} but the config was built for {}",
                                     s.page_size, c.page_size));
  if (s.num_pages < 1 || s.num_pages * s.page_size > INT32_MAX)
    fail_arg("kv_cache", fmt::format("must hold 1..2^31 rows (num_pages × page_size), got {}",
                                     kv.describe()));

  mla_detail::check_table(a.block_table, a.cache_lens, s);
}


}  // namespace

MlaDecodeShape mla_decode_shape(const MlaDecodeArgs& a) {
  MlaDecodeShape s;
  s.dtype = a.q.dtype;
  if (a.q_offsets.data != nullptr) {
    if (a.q.rank != 3 || a.q_offsets.rank != 1)
      fail_arg("q", fmt::format("with q_offsets (ragged) must be rank 3 [total_q, h, {}] and "
                                "q_offsets rank 1 [b + 1]; got q {} and q_offsets {}",
                                kMlaHeadDim, a.q.describe(), a.q_offsets.describe()));
    s.ragged = true;
    s.batch = static_cast<int>(a.q_offsets.shape[0] - 1);
    s.q_len = a.max_q_len;
    s.num_heads = static_cast<int>(a.q.shape[1]);
  } else {
    if (a.q.rank != 4)
      fail_arg("q", fmt::format("must be rank 4 [b, q_len, h, {}], or rank 3 [total_q, h, {}] "
                                "with q_offsets; got {}",
                                kMlaHeadDim, kMlaHeadDim, a.q.describe()));
    s.batch = static_cast<int>(a.q.shape[0]);
    s.q_len = static_cast<int>(a.q.shape[1]);
    s.num_heads = static_cast<int>(a.q.shape[2]);
  }
  if (a.kv_cache.rank != 3)
    fail_arg("kv_cache", fmt::format("must be rank 3 [num_pages, page_size, {}], got {}",
                                     kMlaHeadDim, a.kv_cache.describe()));
  if (a.block_table.rank != 2)
    fail_arg("block_table", fmt::format("must be rank 2 [b, max_pages], got {}",
                                        a.block_table.describe()));
  s.page_size = static_cast<int>(a.kv_cache.shape[1]);
  s.max_pages = static_cast<int>(a.block_table.shape[1]);
  return s;
}

namespace mla_detail {

void check_outputs(const TensorView& out, const TensorView& lse, DType out_dtype,
                   const char* out_type, const Sizes& s) {
  if (s.ragged)
    ops::check_dims(out, "out", {s.total_q, s.h, kMlaValueDim},
                    fmt::format("rank 3 [total_q, h, 512] {}", out_type).c_str());
  else
    ops::check_dims(out, "out", {s.b, s.q_len, s.h, kMlaValueDim},
                    fmt::format("rank 4 [b, q_len, h, 512] {}", out_type).c_str());
  ops::check_tensor(out, "out", out_dtype, 16);
  if (lse.data != nullptr) {
    if (s.ragged)
      ops::check_dims(lse, "lse", {s.h, s.total_q}, "rank 2 [h, total_q] f32 (ragged)");
    else
      ops::check_dims(lse, "lse", {s.b, s.h, s.q_len}, "rank 3 [b, h, q_len] f32");
    ops::check_tensor(lse, "lse", DType::kF32, 4);
  }
}

void check_table(const TensorView& bt, const TensorView& cache_lens, Sizes& s) {
  if (bt.rank != 2 || bt.shape[0] != s.b)
    fail_arg("block_table", fmt::format("must be rank 2 [b = {}, max_pages], got {}", s.b,
                                        bt.describe()));
  ops::check_tensor(bt, "block_table", DType::kI32, 4);
  s.max_pages = bt.shape[1];
  if (s.max_pages < 1 || s.max_pages * s.page_size > INT32_MAX)
    fail_arg("block_table", fmt::format("needs 1.. pages per sequence, got {}", bt.describe()));
  ops::check_dims(cache_lens, "cache_lens", {s.b}, "rank 1 [b] i32");
  ops::check_tensor(cache_lens, "cache_lens", DType::kI32, 4);
}

Sizes check_args(const MlaDecodeArgs& a, const MlaDecodeConfig& c) {
  Sizes s;
  check_q(a, c, s);
  check_cache(a, c, s);
  if (a.out_scale.data == nullptr) {
    mla_detail::check_outputs(a.out, a.lse, a.q.dtype, "like q", s);
  } else {
    mla_detail::check_outputs(a.out, a.lse, DType::kE4M3, "e4m3 (out_scale is set)", s);
    if (a.q.dtype != DType::kBF16)
      fail_arg("out_scale", fmt::format("e4m3 output quantizes bf16 rows: q must be bf16, got {}",
                                        to_string(a.q.dtype)));
    if (c.schedule != MlaSchedule::kSeesaw)
      fail_arg("out_scale", "e4m3 output is written by the seesaw schedule only (config schedule seesaw)");
    if (s.ragged)
      ops::check_dims(a.out_scale, "out_scale", {s.total_q, s.h, kMlaValueDim / 128},
                      "rank 3 [total_q, h, 4] f32 (one σ per 128 columns of out)");
    else
      ops::check_dims(a.out_scale, "out_scale", {s.b, s.q_len, s.h, kMlaValueDim / 128},
                      "rank 4 [b, q_len, h, 4] f32 (one σ per 128 columns of out)");
    ops::check_tensor(a.out_scale, "out_scale", DType::kF32, 4);
  }
  // The kernels run on q's device, where another device's pointer faults.
  for (auto [t, name] : {std::pair{&a.kv_cache, "kv_cache"}, {&a.block_table, "block_table"},
                         {&a.cache_lens, "cache_lens"}, {&a.out, "out"}, {&a.lse, "lse"},
                         {&a.out_scale, "out_scale"}})
    if (t->data != nullptr) check_same_device(a.q, "q", *t, name);
  if (!(a.softmax_scale > 0.0f) || !std::isfinite(a.softmax_scale))
    fail_arg("softmax_scale", fmt::format("must be a positive finite number, got {}",
                                          a.softmax_scale));
  return s;
}

void check_shape(const MlaDecodeShape& s, const MlaDecodeConfig& c) {
  if (s.batch < 0 || s.batch > kMaxBatch)
    fail_arg("shape.batch", fmt::format("must be in 0..{} (a grid dimension holds the batch "
                                        "plus the SM slots), got {}",
                                        kMaxBatch, s.batch));
  if (s.q_len < 1 || s.q_len > c.max_q_len)
    fail_arg("shape.q_len", fmt::format("must be 1..max_q_len = {} of the config, got {}",
                                        c.max_q_len, s.q_len));
  if (s.num_heads != c.num_heads)
    fail_arg("shape.num_heads", fmt::format("{} does not match the config's num_heads = {}",
                                            s.num_heads, c.num_heads));
  if (s.page_size != c.page_size)
    fail_arg("shape.page_size", fmt::format("{} does not match the config's page_size = {}",
                                            s.page_size, c.page_size));
  if (s.dtype != c.dtype)
    fail_arg("shape.dtype", fmt::format("{} does not match the config's dtype {}",
                                        to_string(s.dtype), to_string(c.dtype)));
  const int64_t capacity = int64_t{s.max_pages} * s.page_size;
  if (s.max_pages < 1 || capacity > INT32_MAX)
    fail_arg("shape.max_pages", fmt::format("must be >= 1 with max_pages × page_size <= 2^31, "
                                            "got {}",
                                            s.max_pages));
  if (s.max_len < 0 || s.max_len > capacity)
    fail_arg("shape.max_len", fmt::format("must be 0 (capacity) or a bound within max_pages × "
                                          "page_size = {}, got {}",
                                          capacity, s.max_len));
  if (s.num_splits < 0 || s.num_splits > kMaxSplits)
    fail_arg("shape.num_splits", fmt::format("must be 0 (chosen by the plan) or 1..{}, got {}",
                                             kMaxSplits, s.num_splits));
}

void check_matches_plan(const Sizes& s, const MlaDecodePlan& plan) {
  const MlaDecodeShape& p = plan.shape;
  const char* q_name = s.ragged ? "q_offsets" : "q";
  if (s.ragged != p.ragged)
    fail_arg("q_offsets", fmt::format("the call is {} but the plan was made for the {} form",
                                      s.ragged ? "ragged" : "padded",
                                      p.ragged ? "ragged" : "padded"));
  if (s.b != p.batch)
    fail_arg(q_name, fmt::format("holds {} sequences but the plan was made for batch = {}", s.b,
                                 p.batch));
  if (s.q_len != p.q_len)
    fail_arg(s.ragged ? "max_q_len" : "q",
             fmt::format("q_len {} differs from the plan's q_len = {}", s.q_len, p.q_len));
  if (s.max_pages != p.max_pages)
    fail_arg("block_table", fmt::format("has {} pages per sequence but the plan was made for "
                                        "max_pages = {}",
                                        s.max_pages, p.max_pages));
  if (plan.balanced ? plan.num_splits != 0 || plan.sm_slots < 1
                    : plan.num_splits < 1 || plan.num_splits > kMaxSplits)
    fail_arg("plan", fmt::format("{} with num_splits {} and sm_slots {} is not a plan (a static "
                                 "split has num_splits 1..{}; make plans with mla_decode_plan)",
                                 plan.balanced ? "a balanced plan" : "a static split",
                                 plan.num_splits, plan.sm_slots, kMaxSplits));
}

void device_check(const MlaDecodeArgs& a, const MlaDecodeConfig& c, const Sizes& s, Arch arch,
                  CUstream stream) {
  const jit::Kernel& k = ops::mla_check_kernel({.page_size = c.page_size}, arch);
  const unsigned long long found = ops::run_device_check(stream, [&](unsigned long long* word) {
    dev::CheckArgs ca{i32_ptr(a.block_table),
                      i32_ptr(a.cache_lens),
                      s.ragged ? i32_ptr(a.q_offsets) : nullptr,
                      word,
                      static_cast<int>(s.max_pages),
                      static_cast<int>(s.num_pages),
                      static_cast<int>(s.total_q),
                      static_cast<int>(s.q_len)};
    jit::LaunchShape shape;
    shape.grid[0] = static_cast<unsigned>(s.b);
    shape.block[0] = dev::kCheckThreads;
    void* args[] = {&ca};
    k.launch(shape, stream, args);
  });
  if (found == ~0ull) return;
  const int batch = static_cast<int>(found >> 32);
  const unsigned what = static_cast<unsigned>(found & 0xffffffffu);
  if (what == dev::kBadQOffsets) {
    const int start = ops::read_device_i32(a.q_offsets.data, batch);
    const int end = ops::read_device_i32(a.q_offsets.data, batch + 1);
    fail_arg("q_offsets", fmt::format("ATTNJIT_CHECK: q_offsets[{}..{}] = {}, {} must satisfy "
                                      "0 <= start <= end <= total_q = {} and end - start <= "
                                      "max_q_len = {}",
                                      batch, batch + 1, start, end, s.total_q, s.q_len));
  }
  const int len = ops::read_device_i32(a.cache_lens.data, batch);
  if (what == dev::kBadLength)
    fail_arg("cache_lens", fmt::format("ATTNJIT_CHECK: cache_lens[{}] = {} is outside 0..{} "
                                       "(max_pages × page_size)",
                                       batch, len, s.max_pages * c.page_size));
  const int slot = static_cast<int>(what - dev::kBadSlot0);
  const int page = ops::read_device_i32(a.block_table.data, batch * s.max_pages + slot);
  fail_arg("block_table", fmt::format("ATTNJIT_CHECK: block_table[{}][{}] = {} is not a page "
                                      "(0..{}), and cache_lens[{}] = {} makes it visible",
                                      batch, slot, page, s.num_pages - 1, batch, len));
}

}  // namespace mla_detail
}  // namespace attnjit
