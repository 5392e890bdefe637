// mla_decode_fp8's plan and launches. The split choice, the balanced schedule, the
// workspace layout and the combine are mla_decode's (ops/mla_decode/internal.hpp), read
// through the fp8 shape's mla_decode view; what is the fp8 op's own is the main kernel's
// tensor maps (640-byte rows, or three tensors) and argument block.
#include <fmt/format.h>

#include <algorithm>

#include "attnjit/error.hpp"
#include "attnjit/runtime.hpp"
#include "attnjit/tma.hpp"
#include "driver/driver.hpp"
#include "mla_decode_fp8/layout.cuh"
#include "ops/launch_support.hpp"
#include "ops/mla_decode/config.hpp"
#include "ops/mla_decode_fp8/internal.hpp"

namespace attnjit {
namespace {

namespace dev = layout::mla_decode_fp8;
using mla_fp8_detail::as_mla_config;
using mla_fp8_detail::as_mla_shape;

const int* i32_ptr(const TensorView& t) { return static_cast<const int*>(t.data); }

Arch current_arch() {
  return ops::device_arch(driver::cached_device_info(driver::current_device()));
}

// mla_decode's view of the plan: its checks and split machinery read it.
MlaDecodePlan as_mla_plan(const MlaDecodeFp8Plan& p) {
  MlaDecodePlan m;
  m.shape = as_mla_shape(p.shape);
  m.config = as_mla_config(p.config);
  m.balanced = p.balanced;
  m.num_splits = p.num_splits;
  m.sm_slots = p.sm_slots;
  m.workspace_bytes = p.workspace_bytes;
  return m;
}

size_t plan_workspace_bytes(const MlaDecodeFp8Plan& p) {
  return p.balanced ? mla_decode_balanced_workspace_bytes(as_mla_shape(p.shape), p.sm_slots,
                                                          0, p.config.block_n)
                    : mla_decode_workspace_bytes(as_mla_shape(p.shape), p.num_splits);
}

// The call's checks against the plan (mla_decode's rules on the shared sizes).
mla_fp8_detail::Fp8Sizes checked(const MlaDecodeFp8Args& a, const MlaDecodeFp8Plan& plan, Workspace ws) {
  const mla_fp8_detail::Fp8Sizes f = mla_fp8_detail::check_args(a, plan.config);
  mla_detail::check_matches_plan(f.s, as_mla_plan(plan));
  ops::check_workspace(ws, plan_workspace_bytes(plan), "mla_decode_fp8_plan");
  return f;
}

}  // namespace

MlaDecodeFp8Plan mla_decode_fp8_plan(const MlaDecodeFp8Shape& shape, const MlaDecodeFp8Config* config) {
  MlaDecodeFp8Plan plan;
  plan.shape = shape;
  plan.config = config ? *config
                       : mla_decode_fp8_default_config(shape.num_heads, shape.q_len, shape.page_size);
  plan.config.validate();
  const MlaDecodeShape ms = as_mla_shape(shape);
  mla_detail::check_shape(ms, as_mla_config(plan.config));
  const driver::DeviceInfo& info = driver::cached_device_info(driver::current_device());
  // No tuning database yet: a forced count is a static split, none the balanced schedule.
  plan.num_splits = shape.num_splits;
  plan.balanced = plan.num_splits == 0;
  if (plan.balanced) plan.sm_slots = mla_detail::sm_slots(ms, info.sm_count, plan.config.block_m);
  plan.workspace_bytes = plan_workspace_bytes(plan);
  const Arch arch = ops::device_arch(info);
  ops::mla_fp8_main_kernel(plan.config, arch).prepare_current_device();
  if (plan.balanced || plan.num_splits > 1)
    ops::mla_combine_kernel({DType::kBF16, plan.config.num_heads}, arch).prepare_current_device();
  if (plan.balanced) ops::mla_balance_kernel({plan.config.block_n}, arch).prepare_current_device();
  return plan;
}

void mla_decode_fp8_schedule(const MlaDecodeFp8Plan& plan, const MlaDecodeFp8Args& args,
                             Workspace workspace, CUstream stream) {
  const mla_detail::Sizes s = checked(args, plan, workspace).s;
  if (!plan.balanced || s.b == 0) return;
  // Its kernels run one piece per CTA: the pieces form, never packed.
  mla_detail::launch_balance(as_mla_shape(plan.shape), plan.sm_slots, 0, plan.config.block_n,
                             /*packable=*/false, i32_ptr(args.cache_lens), workspace, stream);
}

void mla_decode_fp8(const MlaDecodeFp8Args& a, const MlaDecodeFp8Plan& plan, Workspace workspace,
                    CUstream stream) {
  const MlaDecodeFp8Config& c = plan.config;
  c.validate();
  const mla_fp8_detail::Fp8Sizes f = checked(a, plan, workspace);
  const mla_detail::Sizes& s = f.s;
  if (s.b == 0 || s.total_q == 0) return;

  // Byte-typed maps in 128-byte boxes: q [total_q·h, 640 | 576] in block_m-row boxes; the
  // cache [pages·page_size, 640 | 576 | 512] in block_n-row boxes; the rope either the
  // cache's columns 512.. (a 576-byte row's box is half out of bounds: zeros) or kv_rope
  // [rows, 128 bytes]. Unswizzled for the widening kernels (they rewrite the bytes as bf16),
  // 128B-swizzled where fp8 wgmma reads the boxes directly.
  const bool three = f.three;
  const int64_t row_bytes = f.per_tensor ? 576 : kMlaFp8RowBytes;
  const int64_t cache_rows = s.num_pages * s.page_size;
  TmaMapSpec q_spec;
  q_spec.tensor = TensorView::contiguous(a.q.data, DType::kU8, {s.total_q * s.h, row_bytes}, a.q.device);
  q_spec.box[0] = static_cast<uint32_t>(c.block_m);
  q_spec.box[1] = dev::kBoxBytes;
  TmaMapSpec kv_spec;
  kv_spec.tensor = TensorView::contiguous(
      a.kv_cache.data, DType::kU8, {cache_rows, three ? kMlaFp8ContentBytes : row_bytes}, a.q.device);
  kv_spec.box[0] = static_cast<uint32_t>(c.block_n);
  kv_spec.box[1] = dev::kBoxBytes;
  kv_spec.l2_promotion = TmaL2Promotion::k256B;
  TmaMapSpec rope_spec = kv_spec;
  if (three)
    rope_spec.tensor = TensorView::contiguous(a.kv_rope.data, DType::kU8, {cache_rows, dev::kRopeBytes},
                                              a.q.device);
  if (c.fp8_mma || c.schedule == 2) {  // fp8 wgmma reads the boxes: 128B-swizzled, K-major
    q_spec.swizzle = kv_spec.swizzle = rope_spec.swizzle = Swizzle::k128B;
  }
  validate_tma(q_spec, "q");
  validate_tma(kv_spec, "kv_cache");
  validate_tma(rope_spec, "kv_rope");

  const CUdevice device = driver::current_device();
  if (a.q.device != static_cast<int>(device))
    fail_arg("q", fmt::format("lives on device {} but the current device is {}", a.q.device,
                              static_cast<int>(device)));
  const Arch arch = current_arch();
  const jit::Kernel& main = ops::mla_fp8_main_kernel(c, arch);
  const int splits = plan.num_splits;
  const jit::Kernel* combine = plan.balanced || splits > 1
                                   ? &ops::mla_combine_kernel({DType::kBF16, c.num_heads}, arch)
                                   : nullptr;
  if (check_mode()) {
    MlaDecodeArgs view;  // the device check reads the table, the lengths and the offsets
    view.q_offsets = a.q_offsets;
    view.block_table = a.block_table;
    view.cache_lens = a.cache_lens;
    mla_detail::device_check(view, as_mla_config(c), s, arch, stream);
  }
  const TmaDescriptor q_map = encode_tma(q_spec, "q");
  const TmaDescriptor kv_map = encode_tma(kv_spec, "kv_cache");
  const TmaDescriptor rope_map = encode_tma(rope_spec, "kv_rope");
  const mla_detail::SplitRun sr = mla_detail::split_run(as_mla_shape(plan.shape), plan.balanced, splits,
                                                        plan.sm_slots, 0, c.block_n, s, workspace);
  const layout::mla_decode::QRows q_rows{s.ragged ? i32_ptr(a.q_offsets) : nullptr,
                                         static_cast<int>(s.q_len), static_cast<int>(s.total_q)};
  dev::Args ka{{i32_ptr(a.block_table), i32_ptr(a.cache_lens), a.out.data,
                static_cast<float*>(a.lse.data), sr.part_out, sr.part_lse, q_rows,
                static_cast<int>(s.max_pages), splits, a.softmax_scale * kLog2e, sr.items, sr.counts,
                sr.cta_first, nullptr},
               static_cast<const float*>(a.q_scale.data),
               static_cast<const float*>(a.kv_scale.data),
               f.q_scale_mode,
               static_cast<int>(s.num_pages),
               three ? 0 : kMlaFp8ContentBytes,
               f.per_tensor ? 0 : 1,
               f.per_tensor ? 1 : 0,
               0};
  jit::LaunchShape shape;
  shape.grid[0] = static_cast<unsigned>((s.q_len * s.h + c.block_m - 1) / c.block_m);
  if (plan.balanced) {
    shape.grid[1] = static_cast<unsigned>(sr.ctas_bound);
  } else {
    shape.grid[1] = static_cast<unsigned>(splits);
    shape.grid[2] = static_cast<unsigned>(s.b);
  }
  shape.block[0] = static_cast<unsigned>(ops::mla_fp8_threads(c.schedule));
  shape.dynamic_smem = main.dynamic_smem_bytes();
  void* main_args[] = {const_cast<TmaDescriptor*>(&q_map), const_cast<TmaDescriptor*>(&kv_map),
                       const_cast<TmaDescriptor*>(&rope_map), &ka};
  main.launch(shape, stream, main_args);
  if (combine != nullptr)
    mla_detail::launch_combine(*combine, sr, a.out.data, static_cast<float*>(a.lse.data), q_rows, s,
                               stream);
}

void mla_decode_fp8(const MlaDecodeFp8Args& a, CUstream stream, const MlaDecodeFp8Config* config) {
  const MlaDecodeFp8Shape shape = mla_decode_fp8_shape(a);
  const MlaDecodeFp8Config c =
      config ? *config : mla_decode_fp8_default_config(shape.num_heads, shape.q_len, shape.page_size);
  c.validate();
  const mla_detail::Sizes s = mla_fp8_detail::check_args(a, c).s;
  if (s.b == 0 || s.total_q == 0) return;
  const MlaDecodeFp8Plan plan = mla_decode_fp8_plan(shape, &c);
  const ops::StreamWorkspace workspace(plan.workspace_bytes, stream);
  mla_decode_fp8_schedule(plan, a, workspace.get(), stream);
  mla_decode_fp8(a, plan, workspace.get(), stream);
}

}  // namespace attnjit
