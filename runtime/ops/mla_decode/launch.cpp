// mla_decode's plan and launches: the split choice, the workspace, the tensor maps and
// the two kernels (the main kernel, then the combine kernel through programmatic dependent
// launch when the KV range is split).
#include <fmt/format.h>

#include <algorithm>

#include "attnjit/error.hpp"
#include "attnjit/ops/mla_decode.hpp"
#include "attnjit/runtime.hpp"
#include "attnjit/tma.hpp"
#include "driver/driver.hpp"
#include "mla_decode/layout.cuh"
#include "ops/launch_support.hpp"
#include "ops/mla_decode/config.hpp"
#include "ops/mla_decode/internal.hpp"

namespace attnjit {
namespace {

namespace dev = layout::mla_decode;  // the kernels' layout (kernel_templates/mla_decode/layout.cuh)
using mla_detail::kMaxSplits;

const int* i32_ptr(const TensorView& t) { return static_cast<const int*>(t.data); }

int64_t length_bound(const MlaDecodeShape& s) {
  return s.max_len > 0 ? s.max_len : int64_t{s.max_pages} * s.page_size;
}

int heuristic_splits(const MlaDecodeShape& s, int sm_count) {
  const int64_t m_tiles = (int64_t{s.q_len} * s.num_heads + 63) / 64;
  const int64_t ctas = s.batch * m_tiles;
  const int64_t kv_tiles = std::max<int64_t>(1, (length_bound(s) + 63) / 64);
  if (ctas >= sm_count) return 1;
  // Fill one wave (one 229 KiB CTA per SM) without spilling into a second one — rounding
  // up cost 1.7x at b = 8 (9 splits = 144 CTAs on 132 SMs; the tuning sweep found 8) — but
  // keep >= 4 KV tiles per split so the partial's fixed costs (Q load, epilogue, combine)
  // stay small.
  const int64_t splits = sm_count / std::max<int64_t>(ctas, 1);
  return static_cast<int>(std::clamp<int64_t>(std::min(splits, kv_tiles / 4), 1, kMaxSplits));
}

// Plans without a forced count: the tuning database's split count for these shapes when
// it has one (mla_tuning::lookup), else the heuristic's.
int chosen_splits(const MlaDecodeShape& s, int sm_count) {
  if (s.num_splits > 0) return s.num_splits;
  const mla_tuning::Choice t =
      mla_tuning::lookup(s.dtype, s.batch, s.q_len, s.num_heads, s.page_size, length_bound(s));
  if (t.found && t.num_splits > 0) return t.num_splits;
  return heuristic_splits(s, sm_count);
}

Arch current_arch() {
  return ops::device_arch(driver::cached_device_info(driver::current_device()));
}

}  // namespace

size_t mla_decode_workspace_bytes(const MlaDecodeShape& shape, int num_splits) {
  if (num_splits <= 1) return 0;
  const size_t rows = static_cast<size_t>(shape.batch) * static_cast<size_t>(num_splits) *
                      static_cast<size_t>(shape.q_len) * static_cast<size_t>(shape.num_heads);
  const size_t out = rows * kMlaValueDim * sizeof(float);
  return out + (rows * sizeof(float) + 15) / 16 * 16;  // partial outputs, then their lse
}

MlaDecodePlan mla_decode_plan(const MlaDecodeShape& shape, const MlaDecodeConfig* config) {
  MlaDecodePlan plan;
  plan.shape = shape;
  plan.config = config ? *config : mla_decode_selected_config(shape);
  plan.config.validate();
  mla_detail::check_shape(shape, plan.config);
  const CUdevice device = driver::current_device();
  const driver::DeviceInfo& info = driver::cached_device_info(device);
  plan.num_splits = chosen_splits(shape, info.sm_count);
  plan.workspace_bytes = mla_decode_workspace_bytes(shape, plan.num_splits);
  const Arch arch = ops::device_arch(info);
  ops::mla_main_kernel(plan.config, arch).prepare_current_device();
  if (plan.num_splits > 1)
    ops::mla_combine_kernel({plan.config.dtype, plan.config.num_heads}, arch)
        .prepare_current_device();
  return plan;
}

void mla_decode_schedule(const MlaDecodePlan& plan, const MlaDecodeArgs& args,
                         Workspace workspace, CUstream stream) {
  // The static split reads no device-resident value ahead of the run: nothing to enqueue.
  // The checks keep a call that would fail in the run from passing here.
  (void)stream;
  const mla_detail::Sizes s = mla_detail::check_args(args, plan.config);
  mla_detail::check_matches_plan(s, plan);
  ops::check_workspace(workspace, mla_decode_workspace_bytes(plan.shape, plan.num_splits),
                       "mla_decode_plan");
}

void mla_decode(const MlaDecodeArgs& a, const MlaDecodePlan& plan, Workspace workspace,
                CUstream stream) {
  const MlaDecodeConfig& c = plan.config;
  c.validate();
  const mla_detail::Sizes s = mla_detail::check_args(a, c);
  mla_detail::check_matches_plan(s, plan);
  const int splits = plan.num_splits;
  ops::check_workspace(workspace, mla_decode_workspace_bytes(plan.shape, splits),
                       "mla_decode_plan");
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

  const CUdevice device = driver::current_device();
  if (a.q.device != static_cast<int>(device))
    fail_arg("q", fmt::format("lives on device {} but the current device is {}", a.q.device,
                              static_cast<int>(device)));
  const Arch arch = current_arch();
  const jit::Kernel& main = ops::mla_main_kernel(c, arch);
  const jit::Kernel* combine =
      splits > 1 ? &ops::mla_combine_kernel({c.dtype, c.num_heads}, arch) : nullptr;

  if (check_mode()) mla_detail::device_check(a, c, s, arch, stream);
  const TmaDescriptor q_map = encode_tma(q_spec, "q");
  const TmaDescriptor kv_map = encode_tma(kv_spec, "kv_cache");
  const size_t part_rows = static_cast<size_t>(s.b * splits * s.q_len * s.h);
  float* part_out = splits > 1 ? static_cast<float*>(workspace.data) : nullptr;
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

void mla_decode(const MlaDecodeArgs& a, CUstream stream, const MlaDecodeConfig* config) {
  const MlaDecodeShape shape = mla_decode_shape(a);
  const MlaDecodeConfig c = config ? *config : mla_decode_selected_config(shape);
  c.validate();
  // Every argument rule is reported before the plan touches the device.
  const mla_detail::Sizes s = mla_detail::check_args(a, c);
  if (s.b == 0 || s.total_q == 0) return;  // no query rows: nothing to write
  const MlaDecodePlan plan = mla_decode_plan(shape, &c);
  const ops::StreamWorkspace workspace(plan.workspace_bytes, stream);
  mla_decode_schedule(plan, a, workspace.get(), stream);
  mla_decode(a, plan, workspace.get(), stream);
}

}  // namespace attnjit
