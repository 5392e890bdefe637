// mla_decode's plan and launches: the split choice (static or balanced), the workspace, the
// step's schedule kernel (balanced), the tensor maps and the two kernels of a run (the main
// kernel, then the combine kernel through programmatic dependent launch when pieces of a
// sequence's keys were written as partials).
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
using mla_detail::BalancedLayout;
using mla_detail::balanced_layout;
using mla_detail::row_tiles;
using mla_detail::sm_slots;

const int* i32_ptr(const TensorView& t) { return static_cast<const int*>(t.data); }

int64_t length_bound(const MlaDecodeShape& s) {
  return s.max_len > 0 ? s.max_len : int64_t{s.max_pages} * s.page_size;
}

// A static split count: the shape's forced one, else the tuning database's for these
// shapes when it has one (mla_tuning::lookup); 0: the balanced schedule.
int static_splits(const MlaDecodeShape& s) {
  if (s.num_splits > 0) return s.num_splits;
  const mla_tuning::Choice t =
      mla_tuning::lookup(s.dtype, s.batch, s.q_len, s.num_heads, s.page_size, length_bound(s));
  return t.found && t.num_splits > 0 ? t.num_splits : 0;
}

// A batch-invariant config's rules against the shape. Its pieces follow from the table's
// capacity alone, not from the SM count, so these are checked before the device is asked.
void check_invariant(const MlaDecodeShape& shape, const MlaDecodeConfig& c) {
  const int inv = c.invariant_tiles;
  if (inv == 0) return;
  if (shape.num_splits > 0)
    fail_arg("shape.num_splits",
             fmt::format("must be 0 with a batch-invariant config (invariant_tiles {} fixes the "
                         "split), got {}",
                         inv, shape.num_splits));
  // Every sequence may have capacity / C pieces, which the combine must merge and the grid
  // (y ≤ 65535) must hold. (Fixed pieces do not depend on the SM slots: 1 stands in.)
  const dev::BalanceBounds bound = balanced_layout(shape, 1, inv, c.block_n).bound;
  const int64_t per_sequence = bound.items / std::max(1, shape.batch);
  if (per_sequence > dev::kMaxCombineParts || bound.items > 65535)
    fail_config("mla_decode.invariant_tiles",
                fmt::format("{} tiles per piece cut a {}-key capacity into {} pieces per sequence "
                            "({} in all); at most {} per sequence and 65535 in all",
                            inv, int64_t{shape.max_pages} * shape.page_size, per_sequence,
                            bound.items, dev::kMaxCombineParts));
}

Arch current_arch() {
  return ops::device_arch(driver::cached_device_info(driver::current_device()));
}

}  // namespace

namespace mla_detail {

int64_t row_tiles(int64_t q_len, int64_t num_heads, int block_m) {
  return (q_len * num_heads + block_m - 1) / block_m;
}

// Pieces the GPU runs at once: one CTA per SM (224 KiB of shared memory each), a piece being
// one CTA per row tile of its sequence's q_len·h rows. A cut sequence has fewer than
// 2 × slots partials, which the combine merges in shared memory (kMaxCombineParts).
int sm_slots(const MlaDecodeShape& s, int sm_count, int block_m) {
  const int64_t slots = std::max<int64_t>(1, sm_count / row_tiles(s.q_len, s.num_heads, block_m));
  return static_cast<int>(std::min<int64_t>(slots, dev::kMaxCombineParts / 2));
}

BalancedLayout balanced_layout(const MlaDecodeShape& s, int slots, int invariant_tiles, int block_n) {
  // In the balance kernel's tiles: a fixed piece size C counts block_n-key tiles.
  const int64_t capacity_tiles = (int64_t{s.max_pages} * s.page_size + block_n - 1) / block_n;
  const dev::BalanceBounds b = dev::balance_bounds(s.batch, slots, invariant_tiles, capacity_tiles);
  return {b, dev::balanced_workspace(s.batch, int64_t{s.q_len} * s.num_heads, b)};
}

void launch_balance(const MlaDecodeShape& shape, int slots, int invariant_tiles, int block_n,
                    bool packable, const int* cache_lens, Workspace workspace, CUstream stream) {
  const BalancedLayout l = balanced_layout(shape, slots, invariant_tiles, block_n);
  const dev::BalancedWorkspace& w = l.ws;
  const dev::BalanceBounds& b = l.bound;
  auto* base = static_cast<unsigned char*>(workspace.data);
  dev::BalanceArgs ba{cache_lens,
                      reinterpret_cast<int*>(base + w.scratch),
                      reinterpret_cast<dev::WorkItem*>(base + w.items),
                      reinterpret_cast<int*>(base + w.cta_first),
                      reinterpret_cast<dev::SplitSeq*>(base + w.split_seqs),
                      reinterpret_cast<dev::WorkCounts*>(base + w.counts),
                      shape.batch,
                      shape.max_pages * shape.page_size,
                      slots,
                      invariant_tiles,
                      static_cast<int>(b.items),
                      static_cast<int>(b.slots),
                      static_cast<int>(b.cuts),
                      static_cast<int>(b.ctas),
                      packable && row_tiles(shape.q_len, shape.num_heads) == 1 ? 1 : 0,
                      0};
  jit::LaunchShape ls;
  ls.block[0] = dev::kBalanceThreads;
  void* kargs[] = {&ba};
  ops::mla_balance_kernel({block_n}, current_arch()).launch(ls, stream, kargs);
}

SplitRun split_run(const MlaDecodeShape& shape, bool balanced, int splits, int sm_slots,
                   int invariant_tiles, int block_n, const Sizes& s, Workspace workspace) {
  SplitRun r;
  r.balanced = balanced;
  r.splits = splits;
  r.combine = balanced || splits > 1;
  auto* base = static_cast<unsigned char*>(workspace.data);
  r.part_out = r.combine ? reinterpret_cast<float*>(base) : nullptr;
  if (!balanced) {
    if (r.combine)
      r.part_lse = r.part_out + static_cast<size_t>(s.b * splits * s.q_len * s.h) * kMlaValueDim;
    return r;
  }
  const BalancedLayout bl = balanced_layout(shape, sm_slots, invariant_tiles, block_n);
  r.part_lse = reinterpret_cast<float*>(base + bl.ws.part_lse);
  r.items = reinterpret_cast<const dev::WorkItem*>(base + bl.ws.items);
  r.counts = reinterpret_cast<const dev::WorkCounts*>(base + bl.ws.counts);
  r.split_seqs = reinterpret_cast<const dev::SplitSeq*>(base + bl.ws.split_seqs);
  r.cta_first = reinterpret_cast<const int*>(base + bl.ws.cta_first);
  r.ctas_bound = bl.bound.ctas;
  r.cuts_bound = bl.bound.cuts;
  return r;
}

void launch_combine(const jit::Kernel& combine, const SplitRun& r, void* out, float* lse,
                    const dev::QRows& q_rows, const Sizes& s, CUstream stream, const float* sink,
                    float* out_scale) {
  dev::CombineArgs ca{r.part_out, r.part_lse, out, lse, q_rows, r.splits, 0, r.split_seqs, r.counts, sink, out_scale};
  jit::LaunchShape cshape;
  if (r.balanced) {  // (cut sequence, row) pairs: at most cuts × q_len·h of them
    const int64_t sms = driver::cached_device_info(driver::current_device()).sm_count;
    cshape.grid[0] = static_cast<unsigned>(
        std::min<int64_t>(r.cuts_bound * s.q_len * s.h, dev::kCombineCtasPerSm * sms));
  } else {
    cshape.grid[0] = static_cast<unsigned>(s.q_len * s.h);
    cshape.grid[1] = static_cast<unsigned>(s.b);
  }
  cshape.block[0] = dev::kCombineThreads;
  cshape.programmatic_dependent_launch = true;  // its prologue overlaps the main kernel's tail
  void* combine_args[] = {&ca};
  combine.launch(cshape, stream, combine_args);
}

}  // namespace mla_detail

size_t mla_decode_workspace_bytes(const MlaDecodeShape& shape, int num_splits) {
  if (num_splits <= 1) return 0;
  const size_t rows = static_cast<size_t>(shape.batch) * static_cast<size_t>(num_splits) *
                      static_cast<size_t>(shape.q_len) * static_cast<size_t>(shape.num_heads);
  const size_t out = rows * kMlaValueDim * sizeof(float);
  return out + (rows * sizeof(float) + 15) / 16 * 16;  // partial outputs, then their lse
}

size_t mla_decode_balanced_workspace_bytes(const MlaDecodeShape& shape, int sm_slots,
                                           int invariant_tiles, int block_n) {
  return static_cast<size_t>(
      balanced_layout(shape, std::max(sm_slots, 1), invariant_tiles, block_n).ws.total);
}

namespace {

// The bytes a plan's run reads and writes in the caller's workspace.
size_t plan_workspace_bytes(const MlaDecodePlan& plan) {
  return plan.balanced ? mla_decode_balanced_workspace_bytes(plan.shape, plan.sm_slots,
                                                             plan.config.invariant_tiles,
                                                             plan.config.block_n)
                       : mla_decode_workspace_bytes(plan.shape, plan.num_splits);
}

}  // namespace

MlaDecodePlan mla_decode_plan(const MlaDecodeShape& shape, const MlaDecodeConfig* config) {
  MlaDecodePlan plan;
  plan.shape = shape;
  plan.config = config ? *config : mla_decode_selected_config(shape);
  plan.config.validate();
  mla_detail::check_shape(shape, plan.config);
  check_invariant(shape, plan.config);
  const CUdevice device = driver::current_device();
  const driver::DeviceInfo& info = driver::cached_device_info(device);
  // A batch-invariant config fixes the pieces itself; otherwise a forced or tuned count is a
  // static split, and none is the balanced schedule.
  plan.num_splits = plan.config.invariant_tiles > 0 ? 0 : static_splits(shape);
  plan.balanced = plan.num_splits == 0;
  if (plan.balanced) {
    plan.sm_slots = sm_slots(shape, info.sm_count);
    plan.workspace_bytes = plan_workspace_bytes(plan);
  } else {
    plan.workspace_bytes = mla_decode_workspace_bytes(shape, plan.num_splits);
  }
  const Arch arch = ops::device_arch(info);
  ops::mla_main_kernel(plan.config, arch).prepare_current_device();
  if (plan.balanced || plan.num_splits > 1)
    ops::mla_combine_kernel({plan.config.dtype, plan.config.num_heads}, arch)
        .prepare_current_device();
  if (plan.balanced) ops::mla_balance_kernel({plan.config.block_n}, arch).prepare_current_device();
  return plan;
}

void mla_decode_schedule(const MlaDecodePlan& plan, const MlaDecodeArgs& args,
                         Workspace workspace, CUstream stream) {
  // The checks keep a call that would fail in the run from passing here.
  const mla_detail::Sizes s = mla_detail::check_args(args, plan.config);
  mla_detail::check_matches_plan(s, plan);
  check_invariant(plan.shape, plan.config);
  ops::check_workspace(workspace, plan_workspace_bytes(plan), "mla_decode_plan");
  // A static split reads no device-resident value ahead of the run: nothing to enqueue.
  if (!plan.balanced || s.b == 0) return;
  // Packing across sequences pays for one-row-tile (memory-bound) shapes, whose main kernel
  // walks a CTA's pieces.
  mla_detail::launch_balance(plan.shape, plan.sm_slots, plan.config.invariant_tiles,
                             plan.config.block_n, /*packable=*/true, i32_ptr(args.cache_lens),
                             workspace, stream);
}

void mla_decode(const MlaDecodeArgs& a, const MlaDecodePlan& plan, Workspace workspace,
                CUstream stream) {
  const MlaDecodeConfig& c = plan.config;
  c.validate();
  const mla_detail::Sizes s = mla_detail::check_args(a, c);
  mla_detail::check_matches_plan(s, plan);
  check_invariant(plan.shape, c);  // a plan made by hand: more pieces than the combine merges
  const int splits = plan.num_splits;
  ops::check_workspace(workspace, plan_workspace_bytes(plan), "mla_decode_plan");
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
  const jit::Kernel* combine = plan.balanced || splits > 1
                                   ? &ops::mla_combine_kernel({c.dtype, c.num_heads}, arch)
                                   : nullptr;

  if (check_mode()) mla_detail::device_check(a, c, s, arch, stream);
  const TmaDescriptor q_map = encode_tma(q_spec, "q");
  const TmaDescriptor kv_map = encode_tma(kv_spec, "kv_cache");
  // The partials: [slots, q_len·h, 512] f32, then their lse (static: b·splits slots).
  const mla_detail::SplitRun sr = mla_detail::split_run(
      plan.shape, plan.balanced, splits, plan.sm_slots, c.invariant_tiles, c.block_n, s, workspace);
  const dev::QRows q_rows{s.ragged ? i32_ptr(a.q_offsets) : nullptr, static_cast<int>(s.q_len),
                          static_cast<int>(s.total_q)};
  dev::Args ka{i32_ptr(a.block_table),
               i32_ptr(a.cache_lens),
               a.out.data,
               static_cast<float*>(a.lse.data),
               sr.part_out,
               sr.part_lse,
               q_rows,
               static_cast<int>(s.max_pages),
               splits,
               a.softmax_scale * kLog2e,
               sr.items,
               sr.counts,
               sr.cta_first,
               static_cast<float*>(a.out_scale.data)};
  jit::LaunchShape shape;
  shape.grid[0] = static_cast<unsigned>((s.q_len * s.h + c.block_m - 1) / c.block_m);
  if (plan.balanced) {  // the plan's bound on CTAs; the schedule gives each its pieces
    shape.grid[1] = static_cast<unsigned>(sr.ctas_bound);
  } else {
    shape.grid[1] = static_cast<unsigned>(splits);
    shape.grid[2] = static_cast<unsigned>(s.b);
  }
  shape.block[0] = static_cast<unsigned>(ops::mla_threads(c));
  shape.dynamic_smem = main.dynamic_smem_bytes();
  void* main_args[] = {const_cast<TmaDescriptor*>(&q_map), const_cast<TmaDescriptor*>(&kv_map), &ka};
  main.launch(shape, stream, main_args);
  if (combine == nullptr) return;

  mla_detail::launch_combine(*combine, sr, a.out.data, static_cast<float*>(a.lse.data), q_rows, s,
                             stream, nullptr, static_cast<float*>(a.out_scale.data));
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
