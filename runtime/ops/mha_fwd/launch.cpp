// mha_fwd's plan and launches: the split choice, the workspace, the tensor maps and the two
// kernels (the main kernel, then the combine kernel through programmatic dependent launch
// when the KV range is split).
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "attnjit/error.hpp"
#include "attnjit/ops/mha_fwd.hpp"
#include "attnjit/runtime.hpp"
#include "attnjit/tma.hpp"
#include "driver/driver.hpp"
#include "mha_fwd/layout.cuh"
#include "ops/launch_support.hpp"
#include "ops/mha_fwd/config.hpp"
#include "ops/mha_fwd/internal.hpp"

namespace attnjit {
namespace {

using mha_detail::kMaxGridYZ;
using mha_detail::kMaxSplits;
namespace dev = layout::mha_fwd;  // the kernels' layout (kernel_templates/mha_fwd/layout.cuh)

const int* i32_ptr(const TensorView& t) { return static_cast<const int*>(t.data); }
const float* f32_ptr(const TensorView& t) { return static_cast<const float*>(t.data); }

ops::MhaCombineConfig combine_config(const MhaFwdConfig& c) {
  return {c.dtype, c.head_dim_v, c.ragged, c.sink};
}

int64_t heads_on_grid(const mha_detail::Sizes& s, const MhaFwdConfig& c) { return c.group > 0 ? s.h_kv : s.h_q; }
int64_t m_tiles(const mha_detail::Sizes& s, const MhaFwdConfig& c) {
  return (s.max_s_q * std::max(c.group, 1) + c.block_m - 1) / c.block_m;
}

int heuristic_splits(const mha_detail::Sizes& s, const MhaFwdConfig& c, int sm_count) {
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

// The sizes the split choice reads, from a plan's shape.
mha_detail::Sizes split_sizes(const MhaFwdShape& p) {
  mha_detail::Sizes s;
  s.b = p.batch;
  s.max_s_q = p.max_seqlen_q;
  s.max_s_k = p.max_seqlen_k;
  s.h_q = p.h_q;
  s.h_kv = p.h_kv;
  return s;
}

// Plans without a forced count: the tuning database's split count for these shapes when it
// has one (mha_tuning::tuned_splits), else the heuristic's.
int chosen_splits(const MhaFwdShape& p, const MhaFwdConfig& c, int sm_count) {
  if (p.num_splits > 0) return p.num_splits;
  const mha_detail::Sizes s = split_sizes(p);
  const int t = mha_tuning::tuned_splits(c, {s.b, s.max_s_q, s.max_s_k, s.h_q, s.h_kv});
  return t > 0 ? t : heuristic_splits(s, c, sm_count);
}

TmaMapSpec tile_map(void* data, DType dtype, std::initializer_list<int64_t> dims,
                    std::array<uint32_t, kMaxRank> box, int device) {
  TmaMapSpec m;
  m.tensor = TensorView::contiguous(data, dtype, dims, device);
  m.box = box;
  m.swizzle = Swizzle::k128B;
  return m;
}

}  // namespace

size_t mha_fwd_workspace_bytes(const MhaFwdShape& shape, int num_splits) {
  if (num_splits <= 1) return 0;
  const size_t rows = static_cast<size_t>(num_splits) * static_cast<size_t>(shape.total_q) *
                      static_cast<size_t>(shape.h_q);
  const size_t out = rows * static_cast<size_t>(shape.features.head_dim_v) * sizeof(float);
  return out + (rows * sizeof(float) + 15) / 16 * 16;  // partial outputs, then their lse
}

MhaFwdPlan mha_fwd_plan(const MhaFwdShape& shape, const MhaFwdConfig* config) {
  MhaFwdPlan plan;
  plan.shape = shape;
  plan.config = config ? *config : mha_fwd_selected_config(shape);
  plan.config.validate();
  mha_detail::check_shape(shape, plan.config);
  const driver::DeviceInfo& info = driver::cached_device_info(driver::current_device());
  plan.num_splits = chosen_splits(shape, plan.config, info.sm_count);
  plan.workspace_bytes = mha_fwd_workspace_bytes(shape, plan.num_splits);
  const Arch arch = ops::device_arch(info);
  ops::mha_main_kernel(plan.config, arch).prepare_current_device();
  if (plan.num_splits > 1)
    ops::mha_combine_kernel(combine_config(plan.config), arch).prepare_current_device();
  return plan;
}

void mha_fwd_schedule(const MhaFwdPlan& plan, const MhaFwdArgs& args, Workspace workspace,
                      CUstream stream) {
  // Nothing reads a device-resident value ahead of the run: nothing to enqueue. The checks
  // keep a call that would fail in the run from passing here.
  (void)stream;
  const mha_detail::Sizes s = mha_detail::check_args(args, plan.config);
  mha_detail::check_matches_plan(s, plan);
  ops::check_workspace(workspace, mha_fwd_workspace_bytes(plan.shape, plan.num_splits),
                       "mha_fwd_plan");
}

void mha_fwd(const MhaFwdArgs& a, const MhaFwdPlan& plan, Workspace workspace, CUstream stream) {
  const MhaFwdConfig& c = plan.config;
  c.validate();
  const mha_detail::Sizes s = mha_detail::check_args(a, c);
  mha_detail::check_matches_plan(s, plan);
  const int splits = plan.num_splits;
  ops::check_workspace(workspace, mha_fwd_workspace_bytes(plan.shape, splits), "mha_fwd_plan");
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
  const Arch arch = ops::device_arch(info);
  const jit::Kernel& main = ops::mha_main_kernel(c, arch);
  const jit::Kernel* combine = splits > 1 ? &ops::mha_combine_kernel(combine_config(c), arch) : nullptr;
  if (check_mode()) mha_detail::device_check(a, c, s, arch, stream);

  const TmaDescriptor q_map = encode_tma(q_spec, "q");
  const TmaDescriptor k_map = encode_tma(k_spec, "k");
  const TmaDescriptor v_map = encode_tma(v_spec, "v");
  const size_t part_rows = static_cast<size_t>(splits) * static_cast<size_t>(s.total_q * s.h_q);
  float* part_out = splits > 1 ? static_cast<float*>(workspace.data) : nullptr;
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

void mha_fwd(const MhaFwdArgs& a, CUstream stream, const MhaFwdConfig& config) {
  config.validate();
  // Every argument rule is reported before the plan touches the device.
  const mha_detail::Sizes s = mha_detail::check_args(a, config);
  if (s.b == 0 || s.max_s_q == 0 || s.total_q == 0) return;  // no query rows: nothing to write
  MhaFwdShape shape;
  shape.features = mha_fwd_features(config);
  shape.batch = s.b;
  shape.max_seqlen_q = s.max_s_q;
  shape.max_seqlen_k = s.max_s_k;
  shape.total_q = s.total_q;
  shape.h_q = s.h_q;
  shape.h_kv = s.h_kv;
  const MhaFwdPlan plan = mha_fwd_plan(shape, &config);
  const ops::StreamWorkspace workspace(plan.workspace_bytes, stream);
  mha_fwd_schedule(plan, a, workspace.get(), stream);
  mha_fwd(a, plan, workspace.get(), stream);
}

}  // namespace attnjit
