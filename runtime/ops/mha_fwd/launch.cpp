// Host side of mha_fwd: argument checks (all before any launch), the split heuristic,
// tensor maps, the checked mode, and the launches (main kernel, then the combine kernel
// through programmatic dependent launch when the KV range is split).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "attnjit/error.hpp"
#include "attnjit/ops/mha_fwd.hpp"
#include "attnjit/runtime.hpp"
#include "attnjit/tma.hpp"
#include "driver/driver.hpp"
#include "mha_fwd/layout.cuh"
#include "ops/launch_support.hpp"
#include "ops/mha_fwd/config.hpp"
#include "ops/mha_fwd/mha_fwd_tuning.hpp"
#include "ops/registry.hpp"

namespace attnjit {
namespace {

constexpr int kMaxSplits = 256;
constexpr int kMaxGridYZ = 65535;
namespace dev = layout::mha_fwd;  // the kernels' layout (kernel_templates/mha_fwd/layout.cuh)

const int* i32_ptr(const TensorView& t) { return static_cast<const int*>(t.data); }
const float* f32_ptr(const TensorView& t) { return static_cast<const float*>(t.data); }

ops::MhaCombineConfig combine_config(const MhaFwdConfig& c) {
  return {c.dtype, c.head_dim_v, c.ragged, c.sink};
}

// ---- argument checks ---------------------------------------------------------------

void check_tensor(const TensorView& t, const char* name, DType dtype) {
  check_dtype(t, name, dtype);
  if (!t.is_contiguous())
    fail_arg(name, fmt::format("must be contiguous (row-major), got {}", t.describe()));
  check_aligned(t, name, dtype_bytes(dtype) >= 4 ? 4 : 16);
}

void check_dims(const TensorView& t, const char* name, std::initializer_list<int64_t> dims,
                const char* layout) {
  bool ok = t.data != nullptr && t.rank == static_cast<int>(dims.size());
  int d = 0;
  for (int64_t want : dims) {
    if (ok && want >= 0 && t.shape[static_cast<size_t>(d)] != want) ok = false;
    ++d;
  }
  if (!ok) fail_arg(name, fmt::format("must be {}, got {}", layout, t.data ? t.describe() : "null"));
}

struct Shapes {
  int64_t b = 0, s_q = 0, s_k = 0, total_q = 0, total_k = 0, h_q = 0, h_kv = 0;
  int64_t max_s_q = 0;       // grid bound on query positions per sequence
  int64_t max_s_k = 0;       // bound on keys per sequence (split heuristic)
  int64_t num_pages = 0, max_pages = 0;
};

Shapes check_args(const MhaFwdArgs& a, const MhaFwdConfig& c) {
  const bool paged = c.kv_layout == KvLayout::kPaged;
  const int d = c.head_dim, dv = c.head_dim_v;
  Shapes s;
  // q and out
  if (c.ragged) {
    check_dims(a.q, "q", {-1, -1, d}, fmt::format("rank 3 [total_q, h_q, {}] (ragged)", d).c_str());
    s.total_q = a.q.shape[0];
    s.h_q = a.q.shape[1];
    check_dims(a.q_offsets, "q_offsets", {-1}, "rank 1 [b+1] i32 (ragged)");
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
    check_dims(a.q, "q", {-1, -1, -1, d}, fmt::format("rank 4 [b, s_q, h_q, {}] (padded)", d).c_str());
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
    check_dims(a.out, "out", {s.total_q, s.h_q, dv}, fmt::format("[total_q, h_q, {}] like q", dv).c_str());
  else
    check_dims(a.out, "out", {s.b, s.s_q, s.h_q, dv}, fmt::format("[b, s_q, h_q, {}] like q", dv).c_str());
  check_tensor(a.out, "out", c.dtype);
  if (a.lse.data != nullptr) {
    check_dims(a.lse, "lse", {s.h_q, s.total_q}, "rank 2 [h_q, total_q] f32");
    check_tensor(a.lse, "lse", DType::kF32);
  }

  // k and v
  if (paged) {
    check_dims(a.k, "k", {-1, c.page_size, -1, d},
               fmt::format("rank 4 [pages, page_size = {}, h_kv, {}] (paged)", c.page_size, d).c_str());
    s.num_pages = a.k.shape[0];
    s.h_kv = a.k.shape[2];
    check_dims(a.v, "v", {s.num_pages, c.page_size, s.h_kv, dv},
               fmt::format("[pages, page_size, h_kv, {}] like k", dv).c_str());
    check_dims(a.block_table, "block_table", {s.b, -1}, "rank 2 [b, max_pages] i32 (paged)");
    check_tensor(a.block_table, "block_table", DType::kI32);
    s.max_pages = a.block_table.shape[1];
    check_dims(a.kv_lens, "kv_lens", {s.b}, "rank 1 [b] i32 (paged)");
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
    check_dims(a.k, "k", {-1, -1, d}, fmt::format("rank 3 [total_k, h_kv, {}] (ragged)", d).c_str());
    s.total_k = a.k.shape[0];
    s.h_kv = a.k.shape[1];
    check_dims(a.v, "v", {s.total_k, s.h_kv, dv}, fmt::format("[total_k, h_kv, {}] like k", dv).c_str());
    check_dims(a.k_offsets, "k_offsets", {s.b + 1}, "rank 1 [b+1] i32 like q_offsets (ragged)");
    check_tensor(a.k_offsets, "k_offsets", DType::kI32);
    if (a.max_seqlen_k < 0 || a.max_seqlen_k > s.total_k)
      fail_arg("max_seqlen_k", fmt::format("must be in 0..total_k = {} (0: total_k), got {}",
                                           s.total_k, a.max_seqlen_k));
    s.max_s_k = a.max_seqlen_k > 0 ? a.max_seqlen_k : s.total_k;
  } else {
    check_dims(a.k, "k", {s.b, -1, -1, d}, fmt::format("rank 4 [b, s_k, h_kv, {}] (padded)", d).c_str());
    s.s_k = s.max_s_k = a.k.shape[1];
    s.h_kv = a.k.shape[2];
    s.total_k = s.b * s.s_k;
    check_dims(a.v, "v", {s.b, s.s_k, s.h_kv, dv}, fmt::format("[b, s_k, h_kv, {}] like k", dv).c_str());
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
    check_dims(a.sink, "sink", {s.h_q}, "rank 1 [h_q] f32 (config.sink)");
    check_tensor(a.sink, "sink", DType::kF32);
  }
  if (c.score_mod == ScoreMod::kAlibi) {
    check_dims(a.alibi_slopes, "alibi_slopes", {s.h_q}, "rank 1 [h_q] f32 (score_mod alibi)");
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
  if (a.num_splits < 0 || a.num_splits > kMaxSplits)
    fail_arg("num_splits", fmt::format("must be 0 (heuristic) or 1..{}, got {}", kMaxSplits, a.num_splits));

  for (const TensorView* t : {&a.k, &a.v, &a.out})
    if (t->device != a.q.device)
      fail_arg("tensors", fmt::format("must all be on q's device {}, found one on device {}",
                                      a.q.device, t->device));
  return s;
}

int64_t heads_on_grid(const Shapes& s, const MhaFwdConfig& c) { return c.group > 0 ? s.h_kv : s.h_q; }
int64_t m_tiles(const Shapes& s, const MhaFwdConfig& c) {
  return (s.max_s_q * std::max(c.group, 1) + c.block_m - 1) / c.block_m;
}

int heuristic_splits(const Shapes& s, const MhaFwdConfig& c, int sm_count) {
  const int64_t ctas = m_tiles(s, c) * heads_on_grid(s, c) * s.b;
  if (ctas == 0 || ctas >= sm_count) return 1;
  const int64_t kv_tiles = std::max<int64_t>(1, (s.max_s_k + c.block_n - 1) / c.block_n);
  // Fill one wave without starting a second (round down: see mla_decode's heuristic),
  // keeping ≥ 4 KV tiles per split so a partial's fixed costs (Q load, epilogue, combine
  // traffic) stay small next to its work.
  const int64_t splits = sm_count / ctas;
  const int64_t by_grid = kMaxGridYZ / std::max<int64_t>(1, s.b);
  return static_cast<int>(std::clamp<int64_t>(std::min({splits, kv_tiles / 4, by_grid}), 1, kMaxSplits));
}

// Calls with num_splits = 0: the tuning database's split count for these shapes when it
// has one (mha_tuning::tuned_splits), else the heuristic's.
int default_splits(const Shapes& s, const MhaFwdConfig& c, int sm_count) {
  const int t = mha_tuning::tuned_splits(c, {s.b, s.max_s_q, s.max_s_k, s.h_q, s.h_kv});
  return t > 0 ? t : heuristic_splits(s, c, sm_count);
}

void check_workspace(const MhaFwdArgs& a, const Shapes& s, const MhaFwdConfig& c, int splits) {
  const size_t need = mha_fwd_workspace_bytes(s.total_q, static_cast<int>(s.h_q), c.head_dim_v, splits);
  if (need == 0) return;
  if (a.workspace == nullptr || a.workspace_bytes < need)
    fail_arg("workspace", fmt::format("{} splits need {} B (mha_fwd_workspace_bytes), got {} B at {}",
                                      splits, need, a.workspace_bytes, a.workspace));
  if (reinterpret_cast<uintptr_t>(a.workspace) % 16 != 0)
    fail_arg("workspace", fmt::format("pointer {} must be 16-byte aligned", a.workspace));
}

// ---- checked mode ----------------------------------------------------------------------

void device_check(const MhaFwdArgs& a, const MhaFwdConfig& c, const Shapes& s, Arch arch,
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

// ---- tensor maps -----------------------------------------------------------------------

TmaMapSpec tile_map(void* data, DType dtype, std::initializer_list<int64_t> dims,
                    std::array<uint32_t, kMaxRank> box, int device) {
  TmaMapSpec m;
  m.tensor = TensorView::contiguous(data, dtype, dims, device);
  m.box = box;
  m.swizzle = Swizzle::k128B;
  return m;
}

}  // namespace

size_t mha_fwd_workspace_bytes(int64_t total_q, int h_q, int head_dim_v, int num_splits) {
  if (num_splits <= 1) return 0;
  const size_t rows = static_cast<size_t>(num_splits) * static_cast<size_t>(total_q) *
                      static_cast<size_t>(h_q);
  const size_t out = rows * static_cast<size_t>(head_dim_v) * sizeof(float);
  return out + (rows * sizeof(float) + 15) / 16 * 16;  // partial outputs, then their lse
}

int mha_fwd_num_splits(const MhaFwdArgs& args, const MhaFwdConfig& config) {
  if (args.num_splits > 0) return args.num_splits;
  config.validate();
  const Shapes s = check_args(args, config);
  const driver::DeviceInfo& info = driver::cached_device_info(driver::current_device());
  return default_splits(s, config, info.sm_count);
}

void mha_fwd_prepare(const MhaFwdConfig& config) {
  config.validate();
  const driver::DeviceInfo& info = driver::cached_device_info(driver::current_device());
  const Arch arch = ops::device_arch(info);
  ops::mha_main_kernel(config, arch).prepare_current_device();
  ops::mha_combine_kernel(combine_config(config), arch).prepare_current_device();
}

void mha_fwd(const MhaFwdArgs& a, const MhaFwdConfig& c, CUstream stream) {
  c.validate();
  const Shapes s = check_args(a, c);
  if (a.num_splits > 0) check_workspace(a, s, c, a.num_splits);
  const int group = std::max(c.group, 1);
  const bool paged = c.kv_layout == KvLayout::kPaged;
  const int span = 128 / dtype_bytes(c.dtype);  // columns per 128B-swizzled box
  const uint32_t bn = static_cast<uint32_t>(c.block_n);

  // Maps: q [rows, h_q, d] in boxes of (block_m/g positions × g heads × 64 columns); k/v
  // [rows, h_kv, d] or [pages, page_size, h_kv, d] in boxes of (block_n or a page's share
  // × 1 head × 64 columns). Without keys at all (every s_k = 0) no K/V load is issued, and
  // the maps only need to be valid: they view q's memory, which is at least as large.
  const TmaMapSpec q_spec = tile_map(a.q.data, c.dtype, {std::max<int64_t>(s.total_q, 1), s.h_q, c.head_dim},
                                     {static_cast<uint32_t>(c.block_m / group), static_cast<uint32_t>(group),
                                      static_cast<uint32_t>(span)},
                                     a.q.device);
  TmaMapSpec k_spec, v_spec;
  if (paged) {
    const uint32_t rows = std::min<uint32_t>(bn, static_cast<uint32_t>(c.page_size));
    k_spec = tile_map(a.k.data, c.dtype, {s.num_pages, c.page_size, s.h_kv, c.head_dim},
                      {1, rows, 1, static_cast<uint32_t>(span)}, a.q.device);
    v_spec = tile_map(a.v.data, c.dtype, {s.num_pages, c.page_size, s.h_kv, c.head_dim_v},
                      {1, rows, 1, static_cast<uint32_t>(span)}, a.q.device);
  } else {
    const bool none = s.total_k == 0;
    k_spec = tile_map(none ? a.q.data : a.k.data, c.dtype, {std::max<int64_t>(s.total_k, 1), s.h_kv, c.head_dim},
                      {bn, 1, static_cast<uint32_t>(span)}, a.q.device);
    v_spec = tile_map(none ? a.q.data : a.v.data, c.dtype, {std::max<int64_t>(s.total_k, 1), s.h_kv, c.head_dim_v},
                      {bn, 1, static_cast<uint32_t>(span)}, a.q.device);
  }
  validate_tma(q_spec, "q");
  validate_tma(k_spec, "k");
  validate_tma(v_spec, "v");
  if (s.b == 0 || s.max_s_q == 0 || s.total_q == 0) return;  // no query rows: nothing to write

  const CUdevice dev = driver::current_device();
  if (a.q.device != static_cast<int>(dev))
    fail_arg("q", fmt::format("lives on device {} but the current device is {}", a.q.device,
                              static_cast<int>(dev)));
  const driver::DeviceInfo& info = driver::cached_device_info(dev);
  const int splits = a.num_splits > 0 ? a.num_splits : default_splits(s, c, info.sm_count);
  if (a.num_splits == 0) check_workspace(a, s, c, splits);
  if (s.b * splits > kMaxGridYZ)
    fail_arg("num_splits", fmt::format("b × num_splits = {} × {} exceeds the grid's {}", s.b, splits,
                                       kMaxGridYZ));
  const Arch arch = ops::device_arch(info);
  const jit::Kernel& main = ops::mha_main_kernel(c, arch);
  const jit::Kernel* combine = splits > 1 ? &ops::mha_combine_kernel(combine_config(c), arch) : nullptr;
  if (check_mode()) device_check(a, c, s, arch, stream);

  const TmaDescriptor q_map = encode_tma(q_spec, "q");
  const TmaDescriptor k_map = encode_tma(k_spec, "k");
  const TmaDescriptor v_map = encode_tma(v_spec, "v");
  const size_t part_rows = static_cast<size_t>(splits) * static_cast<size_t>(s.total_q * s.h_q);
  float* part_out = splits > 1 ? static_cast<float*>(a.workspace) : nullptr;
  float* part_lse = splits > 1 ? part_out + part_rows * static_cast<size_t>(c.head_dim_v) : nullptr;
  dev::Args ka{};
  ka.q_offsets = i32_ptr(a.q_offsets);
  ka.k_offsets = i32_ptr(a.k_offsets);
  ka.block_table = i32_ptr(a.block_table);
  ka.kv_lens = i32_ptr(a.kv_lens);
  ka.sink = c.sink ? f32_ptr(a.sink) : nullptr;
  ka.alibi = c.score_mod == ScoreMod::kAlibi ? f32_ptr(a.alibi_slopes) : nullptr;
  ka.out = a.out.data;
  ka.lse = static_cast<float*>(a.lse.data);
  ka.part_out = part_out;
  ka.part_lse = part_lse;
  ka.batch = static_cast<int>(s.b);
  ka.h_q = static_cast<int>(s.h_q);
  ka.h_kv = static_cast<int>(s.h_kv);
  ka.s_q = static_cast<int>(s.s_q);
  ka.s_k = static_cast<int>(s.s_k);
  ka.total_q = static_cast<int>(s.total_q);
  ka.total_k = static_cast<int>(s.total_k);
  ka.max_pages = static_cast<int>(s.max_pages);
  ka.num_splits = splits;
  ka.m_tiles = static_cast<int>(m_tiles(s, c));
  ka.q_per_kv = static_cast<int>(s.h_q / s.h_kv);
  if (c.persistent) {
    const int64_t items = (c.mask != MaskKind::kNone ? (ka.m_tiles + 1) / 2 : ka.m_tiles) *
                          heads_on_grid(s, c) * s.b * splits;
    if (items > INT32_MAX)
      fail_arg("q", fmt::format("{} row blocks × heads × batch × splits exceed the persistent "
                                "launch's 2^31 items", items));
    ka.items = static_cast<int>(items);
  }
  ka.scale_log2 = a.softmax_scale * kLog2e;
  ka.softcap_inv = c.score_mod == ScoreMod::kSoftcap ? a.softmax_scale / a.softcap : 0.0f;
  ka.softcap_log2 = c.score_mod == ScoreMod::kSoftcap ? a.softcap * kLog2e : 0.0f;
  ka.window_left = c.mask == MaskKind::kWindow || c.mask == MaskKind::kCausalWindow ? a.window_left : -1;
  ka.window_right = c.mask == MaskKind::kWindow ? a.window_right : (c.mask == MaskKind::kCausalWindow ? 0 : -1);
  ka.chunk = c.mask == MaskKind::kChunked ? a.chunk : 1;

  jit::LaunchShape shape;
  if (c.persistent) {
    // One CTA per SM (the registers of 384 threads at 232/32 allow no second), each walking
    // items c, c + grid, … (kernel_templates/mha_fwd/schedule.cuh: causal-like masks pair
    // the row blocks of a head).
    shape.grid[0] = static_cast<unsigned>(std::min<int64_t>(ka.items, info.sm_count));
    shape.block[0] = static_cast<unsigned>((c.block_m / kWgmmaM + 1) * kWarpgroupThreads);  // + producer
  } else {
    shape.grid[0] = static_cast<unsigned>(ka.m_tiles);
    shape.grid[1] = static_cast<unsigned>(heads_on_grid(s, c));
    shape.grid[2] = static_cast<unsigned>(s.b * splits);
    shape.block[0] = static_cast<unsigned>(c.block_m / kWgmmaM * kWarpgroupThreads);  // one per 64 rows
  }
  shape.dynamic_smem = main.dynamic_smem_bytes();
  void* main_args[] = {const_cast<TmaDescriptor*>(&q_map), const_cast<TmaDescriptor*>(&k_map),
                       const_cast<TmaDescriptor*>(&v_map), &ka};
  main.launch(shape, stream, main_args);
  if (combine == nullptr) return;

  dev::CombineArgs ca{part_out, part_lse, i32_ptr(a.q_offsets), ka.sink, a.out.data,
                      static_cast<float*>(a.lse.data), static_cast<int>(s.h_q),
                      static_cast<int>(s.s_q), static_cast<int>(s.total_q), splits};
  jit::LaunchShape cshape;
  cshape.grid[0] = static_cast<unsigned>((s.max_s_q + dev::kCombineWarps - 1) / dev::kCombineWarps);
  cshape.grid[1] = static_cast<unsigned>(s.h_q);
  cshape.grid[2] = static_cast<unsigned>(s.b);
  cshape.block[0] = dev::kCombineThreads;
  cshape.programmatic_dependent_launch = true;  // its prologue overlaps the main kernel's tail
  void* combine_args[] = {&ca};
  combine->launch(cshape, stream, combine_args);
}

// ---- registry ----------------------------------------------------------------------------

namespace ops {

OpSpec mha_fwd_op_spec() {
  OpSpec op;
  op.name = "mha_fwd";
  op.id = kMhaFwdOpId;
  op.summary = "FlashAttention forward: masks, GQA, ragged/paged KV, sinks, split-KV";
  op.archs = {kSm90a};
  op.default_set = [] {
    std::vector<nlohmann::json> set;
    auto add = [&](const MhaFwdConfig& c) { set.push_back(nlohmann::json::parse(c.to_json())); };
    const std::pair<int, int> dims[] = {{64, 64}, {128, 128}, {256, 256}, {192, 128}};
    for (DType dt : {DType::kBF16, DType::kF16})
      for (auto [d, dv] : dims)
        for (MaskKind m : {MaskKind::kNone, MaskKind::kCausal}) {
          MhaFwdConfig c = mha_fwd_default_config(dt, d, dv, m, false, KvLayout::kContiguous, 0);
          add(c);
          // The smaller tile mha_fwd_selected_config picks for short calls.
          if (const int n = mha_short_call_block_n(c, 1024); n > 0) {
            c.block_n = n;
            add(c);
          }
        }
    for (MaskKind m : {MaskKind::kNone, MaskKind::kCausal}) {
      add(mha_fwd_default_config(DType::kBF16, 128, 128, m, true, KvLayout::kContiguous, 0));
      add(mha_fwd_default_config(DType::kBF16, 128, 128, m, false, KvLayout::kPaged, 64));
      add(mha_fwd_default_config(DType::kBF16, 128, 128, m, true, KvLayout::kPaged, 64));
    }
    for (MaskKind m : {MaskKind::kWindow, MaskKind::kCausalWindow, MaskKind::kChunked})
      add(mha_fwd_default_config(DType::kBF16, 128, 128, m, true, KvLayout::kContiguous, 0));
    for (ScoreMod mod : {ScoreMod::kSoftcap, ScoreMod::kAlibi}) {
      add(mha_fwd_default_config(DType::kBF16, 128, 128, MaskKind::kCausal, true,
                                 KvLayout::kContiguous, 0, mod));
    }
    MhaFwdConfig sink = mha_fwd_default_config(DType::kBF16, 128, 128, MaskKind::kCausal, true,
                                               KvLayout::kContiguous, 0);
    sink.sink = true;
    add(sink);
    // Decode with GQA 8: packed query heads over a paged cache and a padded one.
    for (KvLayout l : {KvLayout::kPaged, KvLayout::kContiguous}) {
      MhaFwdConfig dec = mha_fwd_default_config(DType::kBF16, 128, 128, MaskKind::kCausal, false, l,
                                                l == KvLayout::kPaged ? 64 : 0);
      dec.group = 8;
      add(mha_grid_for_packed_groups(dec));  // what mha_fwd_selected_config runs
    }
    return set;
  };
  bind_mha_fwd_config(op);
  op.tuning = mha_fwd_tuning_spec();
  return op;
}

OpSpec mha_fwd_combine_op_spec() {
  OpSpec op;
  op.name = "mha_fwd_combine";
  op.id = kMhaFwdCombineOpId;
  op.summary = "merges mha_fwd's split-KV partials through their lse (launched by mha_fwd)";
  op.archs = {kSm90a};
  op.default_set = [] {
    std::vector<nlohmann::json> set;
    for (DType dt : {DType::kBF16, DType::kF16})
      for (int dv : {64, 128, 256})
        for (bool ragged : {false, true})
          set.push_back(mha_combine_json({dt, dv, ragged, false}));
    set.push_back(mha_combine_json({DType::kBF16, 128, true, true}));
    return set;
  };
  bind_mha_combine_config(op);
  return op;
}

}  // namespace ops
}  // namespace attnjit
