// mha_fwd's argument checks: every host-visible rule of a call, of a plan's shape and of the
// call against its plan, and the checked mode's device-side validation of the GPU-resident
// offsets, lengths and table entries.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <utility>

#include "attnjit/error.hpp"
#include "mha_fwd/layout.cuh"
#include "ops/launch_support.hpp"
#include "ops/mha_fwd/config.hpp"
#include "ops/mha_fwd/internal.hpp"

namespace attnjit {
namespace {

namespace dev = layout::mha_fwd;  // the kernels' layout (kernel_templates/mha_fwd/layout.cuh)

const int* i32_ptr(const TensorView& t) { return static_cast<const int*>(t.data); }

// Set, of `dtype`, contiguous, aligned (16 bytes for 16-bit tensors, 4 for 32-bit ones).
void check_tensor(const TensorView& t, const char* name, DType dtype) {
  ops::check_tensor(t, name, dtype, dtype_bytes(dtype) >= 4 ? 4 : 16);
}

}  // namespace

namespace mha_detail {

Sizes check_args(const MhaFwdArgs& a, const MhaFwdConfig& c) {
  const bool paged = c.kv_layout == KvLayout::kPaged;
  const int d = c.head_dim, dv = c.head_dim_v;
  Sizes s;
  // q and out
  if (c.ragged) {
    ops::check_dims(a.q, "q", {-1, -1, d}, fmt::format("rank 3 [total_q, h_q, {}] (ragged)", d).c_str());
    s.total_q = a.q.shape[0];
    s.h_q = a.q.shape[1];
    ops::check_dims(a.q_offsets, "q_offsets", {-1}, "rank 1 [b+1] i32 (ragged)");
    check_tensor(a.q_offsets, "q_offsets", DType::kI32);
    s.b = a.q_offsets.shape[0] - 1;
    if (s.b < 0) fail_arg("q_offsets", "needs b+1 ≥ 1 entries");
    if (a.batch != 0 && a.batch != s.b)
      fail_arg("batch", fmt::format("is {} but q_offsets has {} entries (b+1)", a.batch, s.b + 1));
    if (a.max_seqlen_q < 0 || a.max_seqlen_q > s.total_q)
      fail_arg("max_seqlen_q", fmt::format("must be in 0..total_q = {} (a bound on every q "
                                           "length; it sizes the grid), got {}",
                                           s.total_q, a.max_seqlen_q));
    s.max_s_q = a.max_seqlen_q;
  } else {
    ops::check_dims(a.q, "q", {-1, -1, -1, d}, fmt::format("rank 4 [b, s_q, h_q, {}] (padded)", d).c_str());
    s.b = a.q.shape[0];
    s.s_q = s.max_s_q = a.q.shape[1];
    s.h_q = a.q.shape[2];
    s.total_q = s.b * s.s_q;
  }
  if (a.q.dtype != c.dtype)
    fail_arg("q", fmt::format("dtype {} does not match the config's {}", to_string(a.q.dtype),
                              to_string(c.dtype)));
  check_tensor(a.q, "q", c.dtype);
  if (c.ragged)
    ops::check_dims(a.out, "out", {s.total_q, s.h_q, dv}, fmt::format("[total_q, h_q, {}] like q", dv).c_str());
  else
    ops::check_dims(a.out, "out", {s.b, s.s_q, s.h_q, dv}, fmt::format("[b, s_q, h_q, {}] like q", dv).c_str());
  check_tensor(a.out, "out", c.dtype);
  if (a.lse.data != nullptr) {
    ops::check_dims(a.lse, "lse", {s.h_q, s.total_q}, "rank 2 [h_q, total_q] f32");
    check_tensor(a.lse, "lse", DType::kF32);
  }

  // k and v
  if (paged) {
    ops::check_dims(a.k, "k", {-1, c.page_size, -1, d},
               fmt::format("rank 4 [pages, page_size = {}, h_kv, {}] (paged)", c.page_size, d).c_str());
    s.num_pages = a.k.shape[0];
    s.h_kv = a.k.shape[2];
    ops::check_dims(a.v, "v", {s.num_pages, c.page_size, s.h_kv, dv},
               fmt::format("[pages, page_size, h_kv, {}] like k", dv).c_str());
    ops::check_dims(a.block_table, "block_table", {s.b, -1}, "rank 2 [b, max_pages] i32 (paged)");
    check_tensor(a.block_table, "block_table", DType::kI32);
    s.max_pages = a.block_table.shape[1];
    ops::check_dims(a.kv_lens, "kv_lens", {s.b}, "rank 1 [b] i32 (paged)");
    check_tensor(a.kv_lens, "kv_lens", DType::kI32);
    if (s.num_pages < 1 || s.max_pages < 1)
      fail_arg("block_table", fmt::format("needs ≥ 1 page in the pool ({}) and per sequence ({})",
                                          s.num_pages, s.max_pages));
    if (s.num_pages * c.page_size > INT32_MAX || s.max_pages * c.page_size > INT32_MAX)
      fail_arg("k", "page pool and table capacity must stay below 2^31 rows");
    const int64_t cap = s.max_pages * c.page_size;
    if (a.max_seqlen_k < 0 || a.max_seqlen_k > cap)
      fail_arg("max_seqlen_k", fmt::format("must be in 0..max_pages × page_size = {} (0: the "
                                           "capacity), got {}",
                                           cap, a.max_seqlen_k));
    s.max_s_k = a.max_seqlen_k > 0 ? a.max_seqlen_k : cap;
  } else if (c.ragged) {
    ops::check_dims(a.k, "k", {-1, -1, d}, fmt::format("rank 3 [total_k, h_kv, {}] (ragged)", d).c_str());
    s.total_k = a.k.shape[0];
    s.h_kv = a.k.shape[1];
    ops::check_dims(a.v, "v", {s.total_k, s.h_kv, dv}, fmt::format("[total_k, h_kv, {}] like k", dv).c_str());
    ops::check_dims(a.k_offsets, "k_offsets", {s.b + 1}, "rank 1 [b+1] i32 like q_offsets (ragged)");
    check_tensor(a.k_offsets, "k_offsets", DType::kI32);
    if (a.max_seqlen_k < 0 || a.max_seqlen_k > s.total_k)
      fail_arg("max_seqlen_k", fmt::format("must be in 0..total_k = {} (0: total_k), got {}",
                                           s.total_k, a.max_seqlen_k));
    s.max_s_k = a.max_seqlen_k > 0 ? a.max_seqlen_k : s.total_k;
  } else {
    ops::check_dims(a.k, "k", {s.b, -1, -1, d}, fmt::format("rank 4 [b, s_k, h_kv, {}] (padded)", d).c_str());
    s.s_k = s.max_s_k = a.k.shape[1];
    s.h_kv = a.k.shape[2];
    s.total_k = s.b * s.s_k;
    ops::check_dims(a.v, "v", {s.b, s.s_k, s.h_kv, dv}, fmt::format("[b, s_k, h_kv, {}] like k", dv).c_str());
  }
  check_tensor(a.k, "k", c.dtype);
  check_tensor(a.v, "v", c.dtype);
  if (s.total_q > INT32_MAX || s.total_k > INT32_MAX)
    fail_arg("q", "row counts must stay below 2^31 (offsets are int32)");

  // heads
  if (s.h_q < 1 || s.h_kv < 1 || s.h_q % s.h_kv != 0)
    fail_arg("k", fmt::format("h_q = {} must be a positive multiple of h_kv = {} (GQA/MQA)", s.h_q, s.h_kv));
  if (s.h_q > kMaxGridYZ)
    fail_arg("q", fmt::format("h_q = {} exceeds the grid's {} heads", s.h_q, kMaxGridYZ));
  if (c.group > 0 && s.h_q != c.group * s.h_kv)
    fail_arg("q", fmt::format("the config packs group = {} query heads per KV head, but h_q / "
                              "h_kv = {} / {}",
                              c.group, s.h_q, s.h_kv));

  // per-head vectors and run-time values
  if (c.sink) {
    ops::check_dims(a.sink, "sink", {s.h_q}, "rank 1 [h_q] f32 (config.sink)");
    check_tensor(a.sink, "sink", DType::kF32);
  }
  if (c.score_mod == ScoreMod::kAlibi) {
    ops::check_dims(a.alibi_slopes, "alibi_slopes", {s.h_q}, "rank 1 [h_q] f32 (score_mod alibi)");
    check_tensor(a.alibi_slopes, "alibi_slopes", DType::kF32);
  }
  if (!(a.softmax_scale > 0.0f) || !std::isfinite(a.softmax_scale))
    fail_arg("softmax_scale", fmt::format("must be a positive finite number, got {}", a.softmax_scale));
  if (c.score_mod == ScoreMod::kSoftcap && (!(a.softcap > 0.0f) || !std::isfinite(a.softcap)))
    fail_arg("softcap", fmt::format("must be a positive finite cap for score_mod softcap, got {}", a.softcap));
  if (c.mask == MaskKind::kWindow || c.mask == MaskKind::kCausalWindow) {
    if (a.window_left < -1)
      fail_arg("window_left", fmt::format("must be ≥ -1 (-1 = unbounded), got {}", a.window_left));
    if (c.mask == MaskKind::kWindow && a.window_right < -1)
      fail_arg("window_right", fmt::format("must be ≥ -1 (-1 = unbounded), got {}", a.window_right));
  }
  if (c.mask == MaskKind::kChunked && a.chunk < 1)
    fail_arg("chunk", fmt::format("must be ≥ 1 token for the chunked mask, got {}", a.chunk));

  // The kernels run on q's device, where another device's pointer faults: every tensor the
  // call sets must live there (one the config does not read too, as in mla_decode).
  for (auto [t, name] : {std::pair{&a.k, "k"}, {&a.v, "v"}, {&a.out, "out"}, {&a.lse, "lse"},
                         {&a.q_offsets, "q_offsets"}, {&a.k_offsets, "k_offsets"},
                         {&a.block_table, "block_table"}, {&a.kv_lens, "kv_lens"}, {&a.sink, "sink"},
                         {&a.alibi_slopes, "alibi_slopes"}})
    if (t->data != nullptr) check_same_device(a.q, "q", *t, name);
  return s;
}

void check_shape(const MhaFwdShape& s, const MhaFwdConfig& c) {
  const MhaFwdFeatures& f = s.features;
  auto differs = [&](const char* field, auto shape_value, auto config_value) {
    fail_arg(fmt::format("shape.features.{}", field).c_str(),
             fmt::format("{} differs from the config's {} (a config carries the features it "
                         "was built for)",
                         shape_value, config_value));
  };
  if (f.dtype != c.dtype) differs("dtype", to_string(f.dtype), to_string(c.dtype));
  if (f.head_dim != c.head_dim) differs("head_dim", f.head_dim, c.head_dim);
  if (f.head_dim_v != c.head_dim_v) differs("head_dim_v", f.head_dim_v, c.head_dim_v);
  if (f.mask != c.mask) differs("mask", to_string(f.mask), to_string(c.mask));
  if (f.score_mod != c.score_mod) differs("score_mod", to_string(f.score_mod), to_string(c.score_mod));
  if (f.ragged != c.ragged) differs("ragged", f.ragged, c.ragged);
  if (f.kv_layout != c.kv_layout) differs("kv_layout", to_string(f.kv_layout), to_string(c.kv_layout));
  if (f.kv_layout == KvLayout::kPaged && f.page_size != c.page_size)
    differs("page_size", f.page_size, c.page_size);
  if (f.group != c.group) differs("group", f.group, c.group);
  if (f.sink != c.sink) differs("sink", f.sink, c.sink);
  if (s.batch < 0) fail_arg("shape.batch", fmt::format("must be >= 0, got {}", s.batch));
  if (s.max_seqlen_q < 0 || s.max_seqlen_k < 0)
    fail_arg("shape.max_seqlen_q", fmt::format("bounds must be >= 0, got q {} and k {}",
                                               s.max_seqlen_q, s.max_seqlen_k));
  if (s.total_q < 0 || s.total_q > INT32_MAX)
    fail_arg("shape.total_q", fmt::format("must be 0..2^31, got {}", s.total_q));
  if (s.h_q < 1 || s.h_kv < 1 || s.h_q % s.h_kv != 0)
    fail_arg("shape.h_q", fmt::format("h_q = {} must be a positive multiple of h_kv = {}", s.h_q,
                                      s.h_kv));
  if (s.num_splits < 0 || s.num_splits > kMaxSplits)
    fail_arg("shape.num_splits", fmt::format("must be 0 (chosen by the plan) or 1..{}, got {}",
                                             kMaxSplits, s.num_splits));
  if (s.batch * s.num_splits > kMaxGridYZ)
    fail_arg("shape.num_splits", fmt::format("b × num_splits = {} × {} exceeds the grid's {}",
                                             s.batch, s.num_splits, kMaxGridYZ));
}

void check_matches_plan(const Sizes& s, const MhaFwdPlan& plan) {
  const MhaFwdShape& p = plan.shape;
  const char* q_name = plan.config.ragged ? "q_offsets" : "q";
  if (s.b != p.batch)
    fail_arg(q_name, fmt::format("holds {} sequences but the plan was made for batch = {}", s.b,
                                 p.batch));
  if (s.max_s_q != p.max_seqlen_q)
    fail_arg(plan.config.ragged ? "max_seqlen_q" : "q",
             fmt::format("the query bound {} differs from the plan's max_seqlen_q = {}", s.max_s_q,
                         p.max_seqlen_q));
  if (s.total_q > p.total_q)
    fail_arg("q", fmt::format("holds {} query rows, more than the plan's total_q = {} (its "
                              "workspace holds that many)",
                              s.total_q, p.total_q));
  if (s.h_q != p.h_q || s.h_kv != p.h_kv)
    fail_arg("q", fmt::format("has h_q / h_kv = {} / {} but the plan was made for {} / {}", s.h_q,
                              s.h_kv, p.h_q, p.h_kv));
  if (plan.num_splits < 1 || plan.num_splits > kMaxSplits || s.b * plan.num_splits > kMaxGridYZ)
    fail_arg("plan", fmt::format("num_splits {} is outside 1..{} or b × num_splits exceeds the "
                                 "grid's {} (make plans with mha_fwd_plan)",
                                 plan.num_splits, kMaxSplits, kMaxGridYZ));
}

void device_check(const MhaFwdArgs& a, const MhaFwdConfig& c, const Sizes& s, Arch arch,
                  CUstream stream) {
  const bool paged = c.kv_layout == KvLayout::kPaged;
  if (!c.ragged && !paged) return;  // nothing lives on the GPU
  const jit::Kernel& k =
      ops::mha_check_kernel({.ragged = c.ragged, .paged = paged, .page_size = c.page_size}, arch);
  if (s.b == 0) return;
  const unsigned long long found = ops::run_device_check(stream, [&](unsigned long long* word) {
    dev::CheckArgs ca{i32_ptr(a.q_offsets), i32_ptr(a.k_offsets), i32_ptr(a.kv_lens),
                      i32_ptr(a.block_table), word, static_cast<int>(s.b),
                      static_cast<int>(s.total_q), static_cast<int>(s.total_k),
                      static_cast<int>(s.max_s_q), static_cast<int>(s.max_pages),
                      static_cast<int>(s.num_pages)};
    jit::LaunchShape shape;
    shape.grid[0] = static_cast<unsigned>(s.b);
    shape.block[0] = dev::kCheckThreads;
    void* args[] = {&ca};
    k.launch(shape, stream, args);
  });
  if (found == ~0ull) return;
  const int b = static_cast<int>(found >> 32);
  const int kind = static_cast<int>((found >> 24) & 0xff);
  const int slot = static_cast<int>(found & 0xffffff);
  auto read_i32 = [](const TensorView& t, int64_t index) { return ops::read_device_i32(t.data, index); };
  switch (static_cast<dev::CheckKind>(kind)) {
    case dev::CheckKind::kQOffsets:
      fail_arg("q_offsets", fmt::format("ATTNJIT_CHECK: sequence {} spans q_offsets[{}] = {} .. "
                                        "q_offsets[{}] = {}, outside 0..total_q = {}, decreasing, "
                                        "or longer than max_seqlen_q = {}",
                                        b, b, read_i32(a.q_offsets, b), b + 1,
                                        read_i32(a.q_offsets, b + 1), s.total_q, s.max_s_q));
    case dev::CheckKind::kKOffsets:
      fail_arg("k_offsets", fmt::format("ATTNJIT_CHECK: sequence {} spans k_offsets[{}] = {} .. "
                                        "k_offsets[{}] = {}, outside 0..total_k = {} or decreasing",
                                        b, b, read_i32(a.k_offsets, b), b + 1,
                                        read_i32(a.k_offsets, b + 1), s.total_k));
    case dev::CheckKind::kKvLens:
      fail_arg("kv_lens", fmt::format("ATTNJIT_CHECK: kv_lens[{}] = {} is outside 0..{} "
                                      "(max_pages × page_size)",
                                      b, read_i32(a.kv_lens, b), s.max_pages * c.page_size));
    default:
      fail_arg("block_table", fmt::format("ATTNJIT_CHECK: block_table[{}][{}] = {} is not a page "
                                          "(0..{}), and kv_lens[{}] = {} makes it visible",
                                          b, slot, read_i32(a.block_table, b * s.max_pages + slot),
                                          s.num_pages - 1, b, read_i32(a.kv_lens, b)));
  }
}

}  // namespace mha_detail

MhaFwdShape mha_fwd_shape(const MhaFwdArgs& a, const MhaFwdFeatures& features) {
  const MhaFwdConfig c = mha_fwd_default_config(features);
  c.validate();
  const mha_detail::Sizes s = mha_detail::check_args(a, c);
  MhaFwdShape shape;
  shape.features = features;
  shape.batch = s.b;
  shape.max_seqlen_q = s.max_s_q;
  shape.max_seqlen_k = s.max_s_k;
  shape.total_q = s.total_q;
  shape.h_q = s.h_q;
  shape.h_kv = s.h_kv;
  return shape;
}

}  // namespace attnjit
