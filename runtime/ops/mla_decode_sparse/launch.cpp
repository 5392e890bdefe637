// mla_decode_sparse's plan and launches: the split over the top-k, the workspace (laid out
// as mla_decode's static split, so mla_decode's combine merges the partials), the q tensor
// map, the main kernel and the combine (through programmatic dependent launch), and the
// checked mode's validation kernel.
#include <fmt/format.h>

#include <algorithm>

#include "attnjit/error.hpp"
#include "attnjit/ops/mla_decode.hpp"
#include "attnjit/ops/mla_decode_sparse.hpp"
#include "attnjit/runtime.hpp"
#include "attnjit/tma.hpp"
#include "driver/driver.hpp"
#include "mla_decode_sparse/layout.cuh"
#include "ops/launch_support.hpp"
#include "ops/mla_decode/config.hpp"
#include "ops/mla_decode/internal.hpp"
#include "ops/mla_decode_sparse/internal.hpp"

namespace attnjit {
namespace {

namespace dev = layout::mla_decode_sparse;
namespace dense = layout::mla_decode;
using sparse_detail::Sizes;

const int* i32_ptr(const TensorView& t) { return static_cast<const int*>(t.data); }

// The dense op's shape with the same partial layout: [b·splits, q_len·h, 512].
MlaDecodeShape partial_shape(const MlaDecodeSparseShape& s) {
  MlaDecodeShape d;
  d.batch = s.batch;
  d.q_len = s.q_len;
  d.num_heads = s.num_heads;
  return d;
}

Arch current_arch() {
  return ops::device_arch(driver::cached_device_info(driver::current_device()));
}

dev::Pool pool_of(const TensorView& rows, const TensorView& indices, const TensorView& lens,
                  int64_t num_rows, int64_t stride, int64_t topk, bool per_token) {
  return {rows.data,
          i32_ptr(indices),
          i32_ptr(lens),
          static_cast<int>(num_rows),
          static_cast<int>(stride),
          static_cast<int>(topk),
          per_token ? 1 : 0};
}

}  // namespace

int mla_decode_sparse_splits(const MlaDecodeSparseShape& s, int sm_count) {
  if (s.num_splits > 0) return s.num_splits;
  // One CTA per (token, 64-head tile), one CTA per SM. Fewer CTAs than SMs leave SMs idle
  // for the whole call: cut each token's key list into runs, the count that makes waves ×
  // (the longest run + a CTA's fixed cost) least (the fewest on a tie: a split costs the
  // combine), every run at least 256 keys long.
  // The fixed cost, in 64-key tiles: a CTA that walks one tile takes as long as ~6 in the
  // middle of a long walk (the indices' and the first rows' latency, the pipeline's fill
  // and drain, the output; (128, 1, 8, topk 64) fp8 9.0 µs against 1.44 µs a tile at
  // topk 1024 → 2048, H200). Without it, more waves of shorter runs looked cheaper than
  // they are: (96, 1, 16, 2048) fp8 took 4 splits, 67.8 µs, against 51.9 unsplit; (48, 1,
  // 16) 8 splits, 47.8 µs, against 33.8 at 2 (H200, one call). Session 29's choice for 64
  // tokens at h 64 holds: 2 runs (81 µs) over 3 (103 µs, two waves) on (64, 1, 64, 2048).
  constexpr int64_t kFixedTiles = 5;
  const int64_t ctas = int64_t{s.batch} * s.q_len * dev::row_tiles(s.num_heads);
  const int64_t tiles = (int64_t{s.topk} + s.topk_extra + 63) / 64;  // of 64 keys, whatever block_n
  if (ctas <= 0 || ctas >= sm_count) return 1;
  int best = 1;
  int64_t best_cost = tiles + kFixedTiles;  // one wave of whole lists
  const int64_t most = std::min<int64_t>(tiles / 4, sparse_detail::kMaxSplits);
  for (int64_t n = 2; n <= most; ++n) {
    const int64_t cost = (ctas * n + sm_count - 1) / sm_count * ((tiles + n - 1) / n + kFixedTiles);
    if (cost < best_cost) best = static_cast<int>(n), best_cost = cost;
  }
  return best;
}

namespace sparse_detail {

bool merges_in_cluster(const MlaDecodeSparseShape& shape, const MlaDecodeSparseConfig& c, int splits,
                       const jit::Kernel& main) {
  if (!cluster_merge_possible(c, splits)) return false;
  jit::LaunchShape cluster;
  cluster.block[0] = ops::kMlaSparseThreads;
  cluster.dynamic_smem = main.dynamic_smem_bytes();
  cluster.cluster[1] = static_cast<unsigned>(splits);
  return int64_t{shape.batch} * shape.q_len <= main.max_active_clusters(cluster);
}

}  // namespace sparse_detail

size_t mla_decode_sparse_workspace_bytes(const MlaDecodeSparseShape& shape, int num_splits) {
  return mla_decode_workspace_bytes(partial_shape(shape), num_splits);
}

MlaDecodeSparsePlan mla_decode_sparse_plan(const MlaDecodeSparseShape& shape,
                                           const MlaDecodeSparseConfig* config) {
  MlaDecodeSparsePlan plan;
  plan.shape = shape;
  plan.config = config ? *config : mla_decode_sparse_default_config(shape.layout, shape.num_heads);
  plan.config.validate();
  sparse_detail::check_shape(shape, plan.config);
  const driver::DeviceInfo& info = driver::cached_device_info(driver::current_device());
  plan.num_splits = mla_decode_sparse_splits(shape, info.sm_count);
  plan.workspace_bytes = mla_decode_sparse_workspace_bytes(shape, plan.num_splits);
  const Arch arch = ops::device_arch(info);
  const jit::Kernel& main = ops::mla_sparse_main_kernel(plan.config, arch);
  main.prepare_current_device();
  plan.merge_in_cluster = sparse_detail::merges_in_cluster(shape, plan.config, plan.num_splits, main);
  if (plan.num_splits > 1 && !plan.merge_in_cluster)
    ops::mla_combine_kernel({DType::kBF16, plan.config.num_heads}, arch).prepare_current_device();
  return plan;
}

void mla_decode_sparse_schedule(const MlaDecodeSparsePlan& plan, const MlaDecodeSparseArgs& args,
                                Workspace workspace, CUstream) {
  // Nothing depends on device values ahead of the run; the checks keep a call that would
  // fail in the run from passing here.
  const Sizes s = sparse_detail::check_args(args, plan.config);
  sparse_detail::check_matches_plan(s, plan);
  ops::check_workspace(workspace, mla_decode_sparse_workspace_bytes(plan.shape, plan.num_splits),
                       "mla_decode_sparse_plan");
}

void mla_decode_sparse(const MlaDecodeSparseArgs& a, const MlaDecodeSparsePlan& plan,
                       Workspace workspace, CUstream stream) {
  const MlaDecodeSparseConfig& c = plan.config;
  c.validate();
  const Sizes s = sparse_detail::check_args(a, c);
  sparse_detail::check_matches_plan(s, plan);
  sparse_detail::check_shape(plan.shape, c);
  ops::check_workspace(workspace, mla_decode_sparse_workspace_bytes(plan.shape, plan.num_splits),
                       "mla_decode_sparse_plan");
  sparse_detail::launch(a, s, c, plan.num_splits, plan.merge_in_cluster, workspace, nullptr, stream);
}

void mla_decode_sparse(const MlaDecodeSparseArgs& a, CUstream stream,
                       const MlaDecodeSparseConfig* config) {
  const MlaDecodeSparseShape shape = mla_decode_sparse_shape(a);
  const MlaDecodeSparseConfig c =
      config ? *config : mla_decode_sparse_default_config(shape.layout, shape.num_heads);
  c.validate();
  // Every argument rule is reported before the plan touches the device.
  const Sizes s = sparse_detail::check_args(a, c);
  if (s.b == 0 || s.total_q == 0) return;
  const MlaDecodeSparsePlan plan = mla_decode_sparse_plan(shape, &c);
  const ops::StreamWorkspace workspace(plan.workspace_bytes, stream);
  mla_decode_sparse_schedule(plan, a, workspace.get(), stream);
  mla_decode_sparse(a, plan, workspace.get(), stream);
}

namespace sparse_detail {

void launch(const MlaDecodeSparseArgs& a, const Sizes& s, const MlaDecodeSparseConfig& c, int splits,
            bool merge_in_cluster, Workspace workspace, float* max_logit, CUstream stream) {
  if (s.b == 0 || s.total_q == 0) return;  // no query rows: nothing to write

  // q as [total_q·h, 576] in 128B-swizzled boxes of 64 rows (narrow: h) × 64 columns (one span).
  TmaMapSpec q_spec;
  q_spec.tensor = TensorView::contiguous(a.q.data, DType::kBF16, {s.total_q * s.h, dev::kHeadDim},
                                         a.q.device);
  q_spec.box[0] = c.schedule == MlaSparseSchedule::kNarrow ? static_cast<unsigned>(s.h) : 64u;
  q_spec.box[1] = 64;
  q_spec.swizzle = Swizzle::k128B;
  validate_tma(q_spec, "q");

  const CUdevice device = driver::current_device();
  if (a.q.device != static_cast<int>(device))
    fail_arg("q", fmt::format("lives on device {} but the current device is {}", a.q.device,
                              static_cast<int>(device)));
  const Arch arch = current_arch();
  const jit::Kernel& main = ops::mla_sparse_main_kernel(c, arch);
  const bool in_cluster = splits > 1 && merge_in_cluster;
  const jit::Kernel* combine = splits > 1 && !in_cluster
                                   ? &ops::mla_combine_kernel({DType::kBF16, c.num_heads}, arch)
                                   : nullptr;
  if (check_mode()) device_check(a, s, arch, stream);
  const TmaDescriptor q_map = encode_tma(q_spec, "q");

  // Partials [b·splits, q_len·h, 512] f32, then their lse: mla_decode's static layout.
  float* part_out = combine ? static_cast<float*>(workspace.data) : nullptr;
  float* part_lse =
      combine ? part_out + static_cast<size_t>(s.b * splits * s.q_len * s.h) * dev::kValueDim : nullptr;
  const dense::QRows q_rows{s.ragged ? i32_ptr(a.q_offsets) : nullptr, static_cast<int>(s.q_len),
                            static_cast<int>(s.total_q)};
  dev::Args ka{pool_of(a.kv_cache, a.indices, a.topk_lengths, s.pool_rows, s.index_stride, s.topk,
                       s.lens_per_token),
               a.extra_kv_cache.data
                   ? pool_of(a.extra_kv_cache, a.extra_indices, a.extra_topk_lengths, s.extra_rows,
                             s.extra_stride, s.topk_extra, s.extra_lens_per_token)
                   : dev::Pool{},
               static_cast<const float*>(a.attn_sink.data),
               a.out.data,
               static_cast<float*>(a.lse.data),
               part_out,
               part_lse,
               q_rows,
               splits,
               a.softmax_scale * kLog2e,
               splits == 1 ? max_logit : nullptr,
               in_cluster ? 1 : 0,
               0};
  const int row_tiles = dev::row_tiles(static_cast<int>(s.h));
  const int64_t items = s.b * s.q_len * row_tiles;
  if (items > INT32_MAX)
    fail_arg("q", fmt::format("{} token slots × 64-head tiles exceed the grid's 2^31 - 1", items));
  ka.items = static_cast<int>(items);
  jit::LaunchShape shape;
  shape.grid[0] = static_cast<unsigned>(items);
  if (c.persistent) {
    // One CTA per SM (Q and the ring fill its shared memory) for each split, a whole number
    // of tokens, so that a token's head tiles (adjacent items) run side by side.
    const int sms = driver::cached_device_info(device).sm_count;
    const int64_t per_split = std::max<int64_t>(sms / splits / row_tiles, 1) * row_tiles;
    shape.grid[0] = static_cast<unsigned>(std::min(items, per_split));
  }
  shape.grid[1] = static_cast<unsigned>(splits);
  shape.cluster[0] = static_cast<unsigned>(c.cluster);  // the token's head tiles: adjacent x
  if (in_cluster) shape.cluster[1] = static_cast<unsigned>(splits);  // the token's splits
  shape.block[0] = ops::kMlaSparseThreads;
  shape.dynamic_smem = main.dynamic_smem_bytes();
  void* main_args[] = {const_cast<TmaDescriptor*>(&q_map), &ka};
  main.launch(shape, stream, main_args);
  if (combine == nullptr) return;

  // mla_decode's combine over the static split's slots; it applies the sink.
  mla_detail::SplitRun run;
  run.combine = true;
  run.splits = splits;
  run.part_out = part_out;
  run.part_lse = part_lse;
  mla_detail::Sizes dense_sizes;
  dense_sizes.b = s.b, dense_sizes.q_len = s.q_len, dense_sizes.h = s.h, dense_sizes.total_q = s.total_q;
  mla_detail::launch_combine(*combine, run, a.out.data, static_cast<float*>(a.lse.data), q_rows,
                             dense_sizes, stream, static_cast<const float*>(a.attn_sink.data));
}

void device_check(const MlaDecodeSparseArgs& a, const Sizes& s, Arch arch, CUstream stream) {
  const jit::Kernel& k = ops::mla_sparse_check_kernel(arch);
  const unsigned long long found = ops::run_device_check(stream, [&](unsigned long long* word) {
    dev::CheckArgs ca{pool_of(a.kv_cache, a.indices, a.topk_lengths, s.pool_rows, s.index_stride,
                              s.topk, s.lens_per_token),
                      a.extra_kv_cache.data
                          ? pool_of(a.extra_kv_cache, a.extra_indices, a.extra_topk_lengths,
                                    s.extra_rows, s.extra_stride, s.topk_extra, s.extra_lens_per_token)
                          : dev::Pool{},
                      word,
                      {s.ragged ? i32_ptr(a.q_offsets) : nullptr, static_cast<int>(s.q_len),
                       static_cast<int>(s.total_q)},
                      static_cast<int>(s.b),
                      0};
    jit::LaunchShape shape;
    shape.grid[0] = static_cast<unsigned>(std::max<int64_t>(s.total_q, s.b));
    shape.block[0] = dev::kCheckThreads;
    void* args[] = {&ca};
    k.launch(shape, stream, args);
  });
  if (found == ~0ull) return;
  const int64_t token = static_cast<int64_t>(found >> 32);
  const unsigned what = static_cast<unsigned>(found & 0xffffffffu);
  const bool extra = what == dev::kBadExtraIndex || what == dev::kBadExtraLength;
  if (what == dev::kBadQOffsets)
    fail_arg("q_offsets", fmt::format("ATTNJIT_CHECK: q_offsets[{}..{}] must satisfy 0 <= start <= "
                                      "end <= total_q = {} and end - start <= max_q_len = {}",
                                      token, token + 1, s.total_q, s.q_len));
  if (what == dev::kBadLength || what == dev::kBadExtraLength) {
    const TensorView& lens = extra ? a.extra_topk_lengths : a.topk_lengths;
    const bool per_token = extra ? s.extra_lens_per_token : s.lens_per_token;
    const int64_t slot = per_token ? token : token / std::max<int64_t>(1, s.q_len);
    fail_arg(extra ? "extra_topk_lengths" : "topk_lengths",
             fmt::format("ATTNJIT_CHECK: [{}] = {} is outside 0..topk = {}", slot,
                         ops::read_device_i32(lens.data, slot), extra ? s.topk_extra : s.topk));
  }
  fail_arg(extra ? "extra_indices" : "indices",
           fmt::format("ATTNJIT_CHECK: token {} holds an index outside [0, {}) other than -1",
                       token, extra ? s.extra_rows : s.pool_rows));
}

}  // namespace sparse_detail
}  // namespace attnjit
