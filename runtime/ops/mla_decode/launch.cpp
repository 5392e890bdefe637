// Host side of mla_decode: argument checks, the split heuristic, tensor maps and the two
// launches (main kernel, then the combine kernel
// through programmatic dependent launch when the KV range is split).
#include "attnjit/ops/mla_decode.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>

#include "attnjit/error.hpp"
#include "attnjit/runtime.hpp"
#include "attnjit/tma.hpp"
#include "driver/driver.hpp"
#include "mla_decode/layout.cuh"
#include "ops/mla_decode/mla_decode_tuning.hpp"
#include "ops/launch_support.hpp"
#include "ops/mla_decode/config.hpp"
#include "ops/registry.hpp"

namespace attnjit {
namespace {

constexpr int kMaxSplits = 256;
namespace dev = layout::mla_decode;  // the kernels' layout (kernel_templates/mla_decode/layout.cuh)

const int* i32_ptr(const TensorView& t) { return static_cast<const int*>(t.data); }

// Host-visible sizes of a call (check_args). Ragged: q_len is the max_q_len bound.
struct Shapes {
  bool ragged = false;
  int64_t b = 0, q_len = 0, h = 0, total_q = 0, num_pages = 0, page_size = 0, max_pages = 0;
};

// Checked mode: runs the validation kernel, synchronizes, and names the first bad value.
// Reading back is allowed here only: this is a debugging mode, never the hot path.
void device_check(const MlaDecodeArgs& a, const MlaDecodeConfig& c, const Shapes& s, Arch arch,
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

void check_contiguous(const TensorView& t, const char* name) {
  if (!t.is_contiguous())
    fail_arg(name, fmt::format("must be contiguous (row-major), got {}", t.describe()));
}

void check_shape(const TensorView& t, const char* name, std::initializer_list<int64_t> dims,
                 const char* layout) {
  bool ok = t.rank == static_cast<int>(dims.size());
  int d = 0;
  for (int64_t want : dims) {
    if (ok && want >= 0 && t.shape[static_cast<size_t>(d)] != want) ok = false;
    ++d;
  }
  if (!ok) fail_arg(name, fmt::format("must be {}, got {}", layout, t.describe()));
}

// Every host-visible rule, before anything touches the GPU.
Shapes check_args(const MlaDecodeArgs& a, const MlaDecodeConfig& c) {
  const TensorView& q = a.q;
  Shapes s;
  s.ragged = a.q_offsets.data != nullptr;
  if (s.ragged) {
    if (q.rank != 3 || q.shape[2] != kMlaHeadDim)
      fail_arg("q", fmt::format("with q_offsets (ragged) must be rank 3 [total_q, h, {}], got {}",
                                kMlaHeadDim, q.describe()));
    const TensorView& off = a.q_offsets;
    if (off.rank != 1 || off.shape[0] < 1)
      fail_arg("q_offsets", fmt::format("must be rank 1 [b + 1] i32, got {}", off.describe()));
    check_dtype(off, "q_offsets", DType::kI32);
    check_contiguous(off, "q_offsets");
    check_aligned(off, "q_offsets", 4);
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
  check_contiguous(q, "q");
  check_aligned(q, "q", 16);
  if (s.h != c.num_heads)
    fail_arg("q", fmt::format("has {} heads but the config was built for num_heads = {}", s.h,
                              c.num_heads));
  if (q.dtype != c.dtype)
    fail_arg("q", fmt::format("dtype {} does not match the config's dtype {}", to_string(q.dtype),
                              to_string(c.dtype)));
  if (s.total_q * s.h > INT32_MAX)  // q rows are int32 TMA coordinates
    fail_arg("q", fmt::format("holds {} × {} query rows, over 2^31", s.total_q, s.h));

  const TensorView& kv = a.kv_cache;
  if (kv.rank != 3 || kv.shape[2] != kMlaHeadDim)
    fail_arg("kv_cache", fmt::format("must be rank 3 [num_pages, page_size, {}], got {}", kMlaHeadDim,
                                     kv.describe()));
  check_dtype(kv, "kv_cache", q.dtype);
  check_contiguous(kv, "kv_cache");
  check_aligned(kv, "kv_cache", 16);
  s.num_pages = kv.shape[0];
  s.page_size = kv.shape[1];
  if (s.page_size != c.page_size)
    fail_arg("kv_cache", fmt::format("has page size {} but the config was built for {}",
                                     s.page_size, c.page_size));
  if (s.num_pages < 1 || s.num_pages * s.page_size > INT32_MAX)
    fail_arg("kv_cache", fmt::format("must hold 1..2^31 rows (num_pages × page_size), got {}",
                                     kv.describe()));

  const TensorView& bt = a.block_table;
  if (bt.rank != 2 || bt.shape[0] != s.b)
    fail_arg("block_table", fmt::format("must be rank 2 [b = {}, max_pages], got {}", s.b, bt.describe()));
  check_dtype(bt, "block_table", DType::kI32);
  check_contiguous(bt, "block_table");
  check_aligned(bt, "block_table", 4);
  s.max_pages = bt.shape[1];
  if (s.max_pages < 1 || s.max_pages * s.page_size > INT32_MAX)
    fail_arg("block_table", fmt::format("needs 1.. pages per sequence, got {}", bt.describe()));

  check_shape(a.cache_lens, "cache_lens", {s.b}, "rank 1 [b] i32");
  check_dtype(a.cache_lens, "cache_lens", DType::kI32);
  check_contiguous(a.cache_lens, "cache_lens");
  check_aligned(a.cache_lens, "cache_lens", 4);

  if (s.ragged)
    check_shape(a.out, "out", {s.total_q, s.h, kMlaValueDim}, "rank 3 [total_q, h, 512] like q");
  else
    check_shape(a.out, "out", {s.b, s.q_len, s.h, kMlaValueDim}, "rank 4 [b, q_len, h, 512] like q");
  check_dtype(a.out, "out", q.dtype);
  check_contiguous(a.out, "out");
  check_aligned(a.out, "out", 16);

  if (a.lse.data != nullptr) {
    if (s.ragged)
      check_shape(a.lse, "lse", {s.h, s.total_q}, "rank 2 [h, total_q] f32 (ragged)");
    else
      check_shape(a.lse, "lse", {s.b, s.h, s.q_len}, "rank 3 [b, h, q_len] f32");
    check_dtype(a.lse, "lse", DType::kF32);
    check_contiguous(a.lse, "lse");
    check_aligned(a.lse, "lse", 4);
  }
  for (const TensorView* t : {&a.kv_cache, &a.block_table, &a.cache_lens, &a.out, &a.lse})
    if (t->data != nullptr && t->device != q.device)
      fail_arg("tensors", fmt::format("must all be on q's device {}, found one on device {}",
                                      q.device, t->device));
  if (!(a.softmax_scale > 0.0f) || !std::isfinite(a.softmax_scale))
    fail_arg("softmax_scale", fmt::format("must be a positive finite number, got {}", a.softmax_scale));
  if (a.max_len_hint < 0)
    fail_arg("max_len_hint", fmt::format("must be >= 0, got {}", a.max_len_hint));
  if (a.max_len_hint > s.max_pages * s.page_size)
    fail_arg("block_table", fmt::format("{} pages × page size {} = {} tokens cannot hold "
                                        "max_len_hint = {}",
                                        s.max_pages, s.page_size, s.max_pages * s.page_size,
                                        a.max_len_hint));
  if (a.num_splits < 0 || a.num_splits > kMaxSplits)
    fail_arg("num_splits", fmt::format("must be 0 (heuristic) or 1..{}, got {}", kMaxSplits,
                                       a.num_splits));
  return s;
}

int heuristic_splits(const Shapes& s, int max_len_hint, int sm_count) {
  const int64_t m_tiles = (s.q_len * s.h + 63) / 64;
  const int64_t ctas = s.b * m_tiles;
  const int64_t max_len = max_len_hint > 0 ? max_len_hint : s.max_pages * s.page_size;
  const int64_t kv_tiles = std::max<int64_t>(1, (max_len + 63) / 64);
  if (ctas >= sm_count) return 1;
  // Fill one wave (one 229 KiB CTA per SM) without spilling into a second one — rounding
  // up cost 1.7x at b = 8 (9 splits = 144 CTAs on 132 SMs; the tuning sweep found 8) — but
  // keep >= 4 KV tiles per split so the partial's fixed costs (Q load, epilogue, combine)
  // stay small.
  const int64_t splits = sm_count / ctas;
  return static_cast<int>(std::clamp<int64_t>(std::min(splits, kv_tiles / 4), 1, kMaxSplits));
}

// Calls with num_splits = 0: the tuning database's split count for these shapes when it
// has one (mla_tuning::lookup), else the heuristic's.
int default_splits(const Shapes& s, DType dtype, int max_len_hint, int sm_count) {
  const int64_t max_len = max_len_hint > 0 ? max_len_hint : s.max_pages * s.page_size;
  const mla_tuning::Choice t = mla_tuning::lookup(dtype, s.b, s.q_len, s.h, s.page_size, max_len);
  if (t.found && t.num_splits > 0) return t.num_splits;
  return heuristic_splits(s, max_len_hint, sm_count);
}

void check_workspace(const MlaDecodeArgs& a, const Shapes& s, int splits) {
  const size_t need = mla_decode_workspace_bytes(static_cast<int>(s.b), static_cast<int>(s.q_len),
                                                 static_cast<int>(s.h), splits);
  if (need == 0) return;
  if (a.workspace == nullptr || a.workspace_bytes < need)
    fail_arg("workspace", fmt::format("{} splits need {} B (mla_decode_workspace_bytes), got {} B "
                                      "at {}",
                                      splits, need, a.workspace_bytes, a.workspace));
  if (reinterpret_cast<uintptr_t>(a.workspace) % 16 != 0)
    fail_arg("workspace", fmt::format("pointer {} must be 16-byte aligned", a.workspace));
}

}  // namespace

size_t mla_decode_workspace_bytes(int batch, int q_len, int num_heads, int num_splits) {
  if (num_splits <= 1) return 0;
  const size_t rows = static_cast<size_t>(batch) * static_cast<size_t>(num_splits) *
                      static_cast<size_t>(q_len) * static_cast<size_t>(num_heads);
  const size_t out = rows * kMlaValueDim * sizeof(float);
  return out + (rows * sizeof(float) + 15) / 16 * 16;  // partial outputs, then their lse
}

namespace mla_detail {

CallShape call_shape(const MlaDecodeArgs& a) {
  CallShape cs;
  if (a.q_offsets.data != nullptr) {
    if (a.q.rank != 3 || a.q_offsets.rank != 1) return cs;
    cs.ragged = true;
    cs.b = a.q_offsets.shape[0] - 1;
    cs.q_len = a.max_q_len;
    cs.h = a.q.shape[1];
  } else {
    if (a.q.rank != 4) return cs;
    cs.b = a.q.shape[0];
    cs.q_len = a.q.shape[1];
    cs.h = a.q.shape[2];
  }
  cs.ok = true;
  return cs;
}

}  // namespace mla_detail

int mla_decode_num_splits(const MlaDecodeArgs& args) {
  if (args.num_splits > 0) return args.num_splits;
  const mla_detail::CallShape cs = mla_detail::call_shape(args);
  if (!cs.ok || args.block_table.rank != 2 || args.kv_cache.rank != 3)
    fail_arg("args", "q (rank 4, or rank 3 with q_offsets rank 1), block_table (rank 2) and "
                     "kv_cache (rank 3) must be set to size the split");
  Shapes s;
  s.ragged = cs.ragged;
  s.b = cs.b;
  s.q_len = cs.q_len;
  s.h = cs.h;
  s.num_pages = args.kv_cache.shape[0];
  s.page_size = args.kv_cache.shape[1];
  s.max_pages = args.block_table.shape[1];
  const driver::DeviceInfo& info = driver::cached_device_info(driver::current_device());
  return default_splits(s, args.q.dtype, args.max_len_hint, info.sm_count);
}

void mla_decode_prepare(const MlaDecodeConfig& config) {
  config.validate();
  const driver::DeviceInfo& info = driver::cached_device_info(driver::current_device());
  const Arch arch = ops::device_arch(info);
  ops::mla_main_kernel(config, arch).prepare_current_device();
  ops::mla_combine_kernel({config.dtype, config.num_heads}, arch).prepare_current_device();
}

void mla_decode(const MlaDecodeArgs& a, CUstream stream, const MlaDecodeConfig* config) {
  if (!mla_detail::call_shape(a).ok)
    fail_arg("q", fmt::format("must be rank 4 [b, q_len, h, {}], or rank 3 [total_q, h, {}] with "
                              "q_offsets rank 1 [b + 1]; got q {} and q_offsets {}",
                              kMlaHeadDim, kMlaHeadDim, a.q.describe(), a.q_offsets.describe()));
  const MlaDecodeConfig c = config ? *config : mla_decode_selected_config(a);
  c.validate();
  const Shapes s = check_args(a, c);
  if (a.num_splits > 0) check_workspace(a, s, a.num_splits);
  if (s.b == 0 || s.total_q == 0) return;  // no query rows: nothing to write

  // Tensor maps: q as [total_q·h, 576] and the page pool as [pages·page_size, 576], both
  // in 128B-swizzled boxes of 64 columns (one swizzle span).
  const int elems_per_span = 128 / dtype_bytes(c.dtype);
  TmaMapSpec q_spec;
  q_spec.tensor = TensorView::contiguous(a.q.data, c.dtype, {s.total_q * s.h, kMlaHeadDim},
                                         a.q.device);
  q_spec.box[0] = static_cast<uint32_t>(c.block_m);
  q_spec.box[1] = static_cast<uint32_t>(elems_per_span);
  q_spec.swizzle = c.swizzle;
  TmaMapSpec kv_spec;
  kv_spec.tensor = TensorView::contiguous(a.kv_cache.data, c.dtype,
                                          {s.num_pages * s.page_size, kMlaHeadDim}, a.q.device);
  kv_spec.box[0] = static_cast<uint32_t>(std::min(c.block_n, c.page_size));
  kv_spec.box[1] = static_cast<uint32_t>(elems_per_span);
  kv_spec.swizzle = c.swizzle;
  kv_spec.l2_promotion = TmaL2Promotion::k256B;
  validate_tma(q_spec, "q");
  validate_tma(kv_spec, "kv_cache");

  const CUdevice dev = driver::current_device();
  if (a.q.device != static_cast<int>(dev))
    fail_arg("q", fmt::format("lives on device {} but the current device is {}", a.q.device,
                              static_cast<int>(dev)));
  const driver::DeviceInfo& info = driver::cached_device_info(dev);
  const int splits = a.num_splits > 0 ? a.num_splits : default_splits(s, c.dtype, a.max_len_hint, info.sm_count);
  if (a.num_splits == 0) check_workspace(a, s, splits);
  const Arch arch = ops::device_arch(info);
  const jit::Kernel& main = ops::mla_main_kernel(c, arch);
  const jit::Kernel* combine =
      splits > 1 ? &ops::mla_combine_kernel({c.dtype, c.num_heads}, arch) : nullptr;

  if (check_mode()) device_check(a, c, s, arch, stream);
  const TmaDescriptor q_map = encode_tma(q_spec, "q");
  const TmaDescriptor kv_map = encode_tma(kv_spec, "kv_cache");
  const size_t part_rows = static_cast<size_t>(s.b * splits * s.q_len * s.h);
  float* part_out = splits > 1 ? static_cast<float*>(a.workspace) : nullptr;
  float* part_lse = splits > 1 ? part_out + part_rows * kMlaValueDim : nullptr;
  const dev::QRows q_rows{s.ragged ? i32_ptr(a.q_offsets) : nullptr, static_cast<int>(s.q_len),
                          static_cast<int>(s.total_q)};
  dev::Args ka{i32_ptr(a.block_table),
               i32_ptr(a.cache_lens),
               a.out.data,
               static_cast<float*>(a.lse.data),
               part_out,
               part_lse,
               q_rows,
               static_cast<int>(s.max_pages),
               splits,
               a.softmax_scale * kLog2e};
  jit::LaunchShape shape;
  shape.grid[0] = static_cast<unsigned>((s.q_len * s.h + c.block_m - 1) / c.block_m);
  shape.grid[1] = static_cast<unsigned>(splits);
  shape.grid[2] = static_cast<unsigned>(s.b);
  shape.block[0] = static_cast<unsigned>(ops::mla_threads(c));
  shape.dynamic_smem = main.dynamic_smem_bytes();
  void* main_args[] = {const_cast<TmaDescriptor*>(&q_map), const_cast<TmaDescriptor*>(&kv_map), &ka};
  main.launch(shape, stream, main_args);
  if (combine == nullptr) return;

  dev::CombineArgs ca{part_out, part_lse, a.out.data, static_cast<float*>(a.lse.data), q_rows,
                      splits};
  jit::LaunchShape cshape;
  cshape.grid[0] = static_cast<unsigned>(s.q_len * s.h);
  cshape.grid[1] = static_cast<unsigned>(s.b);
  cshape.block[0] = dev::kCombineThreads;
  cshape.programmatic_dependent_launch = true;  // its prologue overlaps the main kernel's tail
  void* combine_args[] = {&ca};
  combine->launch(cshape, stream, combine_args);
}

}  // namespace attnjit
