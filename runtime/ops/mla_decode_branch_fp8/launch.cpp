// mla_decode_branch_fp8's plan and launches: the workspace layout, the step's schedule
// (lengths after the step, then the attention's schedule), and per layer the four stages —
// rope / norm / cache write, Q absorption, attention (with the q quantizer on the fp8
// cache), output projection — on the caller's stream.
#include <fmt/format.h>

#include <algorithm>

#include "attnjit/error.hpp"
#include "attnjit/tma.hpp"
#include "driver/driver.hpp"
#include "mla_decode_branch_fp8/layout.cuh"
#include "ops/launch_support.hpp"
#include "ops/mla_decode_branch_fp8/internal.hpp"
#include "ops/mla_decode_fp8/internal.hpp"
#include "ops/mla_decode_sparse/internal.hpp"

namespace attnjit {
namespace {

namespace dev = layout::mla_decode_branch_fp8;
using mla_branch_detail::Sizes;

Arch current_arch() {
  return ops::device_arch(driver::cached_device_info(driver::current_device()));
}

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

char* at(Workspace ws, size_t offset) { return static_cast<char*>(ws.data) + offset; }

MlaDecodeShape dense_shape(const MlaDecodeBranchFp8Shape& s) {
  MlaDecodeShape m;
  m.dtype = DType::kBF16;
  m.batch = s.batch;
  m.q_len = s.max_q_len;
  m.num_heads = s.num_heads;
  m.page_size = s.page_size;
  m.max_pages = s.max_pages;
  m.ragged = true;  // the step's tokens, ragged over the batch by input_row_offsets
  m.max_len = s.max_len;
  return m;
}

MlaDecodeFp8Shape fp8_shape(const MlaDecodeBranchFp8Shape& s) {
  MlaDecodeFp8Shape m;
  m.batch = s.batch;
  m.q_len = s.max_q_len;
  m.num_heads = s.num_heads;
  m.page_size = s.page_size;
  m.max_pages = s.max_pages;
  m.ragged = true;
  m.max_len = s.max_len;
  return m;
}

MlaDecodeSparseShape sparse_shape(const MlaDecodeBranchFp8Shape& s) {
  MlaDecodeSparseShape m;
  m.layout = s.cache == MlaBranchCache::kFp8Block ? MlaSparseLayout::kFp8 : MlaSparseLayout::kBF16;
  m.batch = s.batch;
  m.q_len = s.max_q_len;
  m.num_heads = s.num_heads;
  m.ragged = true;
  m.topk = s.topk;
  m.topk_extra = s.topk_extra;
  return m;
}

// The rope kernel's row format for the cache the branch writes.
int rope_layout(MlaBranchCache cache) {
  switch (cache) {
    case MlaBranchCache::kBF16: return dev::kCacheBf16;
    case MlaBranchCache::kFp8Token: return dev::kCacheFp8Token;
    case MlaBranchCache::kFp8Block: return dev::kCacheFp8Block;
  }
  return dev::kCacheBf16;
}

// The workspace's views of one call (the plan's offsets; tokens and h from the shape).
struct Scratch {
  TensorView lens_after;  // i32 [b]
  TensorView q_abs;       // bf16 [tokens, h, 576]: the absorbed q
  TensorView q8;          // u8 [tokens, h, 640] (fp8 cache)
  TensorView q_scale;     // f32 [tokens] (fp8 cache): σ_Q per token over all heads
  TensorView raw;         // bf16 [tokens, h, 512]: the attention's output (output.a_e4m3: its
                          // e4m3 codes, u8 [tokens, h, 512])
  TensorView raw_scale;   // f32 [tokens, h, 4] (output.a_e4m3): σ of raw's 128-column groups
  Workspace attention;
};

Scratch scratch(const MlaDecodeBranchFp8Plan& p, Workspace ws, int device) {
  const int64_t t = p.shape.tokens, h = p.shape.num_heads;
  Scratch s;
  s.lens_after = TensorView::contiguous(at(ws, p.lens_offset), DType::kI32, {p.shape.batch}, device);
  s.q_abs = TensorView::contiguous(at(ws, p.q_offset), DType::kBF16, {t, h, dev::kCacheDim}, device);
  if (p.shape.cache == MlaBranchCache::kFp8Token) {
    s.q8 = TensorView::contiguous(at(ws, p.q8_offset), DType::kU8, {t, h, kMlaFp8RowBytes}, device);
    s.q_scale = TensorView::contiguous(at(ws, p.q_scale_offset), DType::kF32, {t}, device);
  }
  if (p.output.a_e4m3) {
    s.raw = TensorView::contiguous(at(ws, p.raw_offset), DType::kE4M3, {t, h, dev::kLatentDim}, device);
    s.raw_scale = TensorView::contiguous(at(ws, p.raw_scale_offset), DType::kF32,
                                         {t, h, dev::kLatentDim / dev::kScaleBlock}, device);
  } else {
    s.raw = TensorView::contiguous(at(ws, p.raw_offset), DType::kBF16, {t, h, dev::kLatentDim}, device);
  }
  s.attention = {at(ws, p.attention_offset), ws.bytes - p.attention_offset};
  return s;
}

MlaDecodeArgs dense_args(const MlaDecodeBranchFp8Args& a, const MlaDecodeBranchFp8Plan& p,
                         const Scratch& s) {
  MlaDecodeArgs m;
  m.q = s.q_abs;
  m.q_offsets = a.input_row_offsets;
  m.max_q_len = p.shape.max_q_len;
  m.kv_cache = a.kv_cache;
  m.block_table = a.block_table;
  m.cache_lens = s.lens_after;
  m.out = s.raw;
  m.out_scale = s.raw_scale;  // output.a_e4m3: the attention writes the projection's codes
  m.softmax_scale = a.softmax_scale;
  return m;
}

MlaDecodeFp8Args fp8_args(const MlaDecodeBranchFp8Args& a, const MlaDecodeBranchFp8Plan& p,
                          const Scratch& s) {
  MlaDecodeFp8Args m;
  m.q = s.q8;
  m.q_offsets = a.input_row_offsets;
  m.max_q_len = p.shape.max_q_len;
  m.q_scale = s.q_scale;
  m.kv_cache = a.kv_cache;
  m.kv_scale = a.kv_scale;
  m.block_table = a.block_table;
  m.cache_lens = s.lens_after;
  m.out = s.raw;
  m.softmax_scale = a.softmax_scale;
  return m;
}

MlaDecodeSparseArgs sparse_args(const MlaDecodeBranchFp8Args& a, const MlaDecodeBranchFp8Plan& p,
                                const Scratch& s) {
  MlaDecodeSparseArgs m;
  m.q = s.q_abs;
  m.q_offsets = a.input_row_offsets;
  m.max_q_len = p.shape.max_q_len;
  m.kv_cache = a.kv_cache;
  m.indices = a.indices;
  m.topk_lengths = a.topk_lengths;
  m.attn_sink = a.attn_sink;
  m.extra_kv_cache = a.extra_kv_cache;
  m.extra_indices = a.extra_indices;
  m.extra_topk_lengths = a.extra_topk_lengths;
  m.out = s.raw;
  m.softmax_scale = a.softmax_scale;
  return m;
}

// The rope kernel: per token (lens_after null), or the step's lengths only (tokens 0).
void launch_rope(const MlaDecodeBranchFp8Args& a, const Sizes& s, MlaBranchCache cache,
                 const TensorView& q_out, int* lens_after, bool tokens_too, CUstream stream) {
  ops::MlaBranchRopeConfig c;
  c.cache_layout = rope_layout(cache);
  const jit::Kernel& k = ops::mla_branch_rope_kernel(c, current_arch());
  const int tokens = tokens_too ? static_cast<int>(s.tokens) : 0;
  dev::RopeArgs ra{static_cast<const unsigned short*>(a.q.data),
                   static_cast<unsigned short*>(q_out.data),
                   static_cast<const unsigned short*>(a.kv_input.data),
                   static_cast<const float*>(a.freqs_cis.data),
                   static_cast<const unsigned short*>(a.kv_norm_gamma.data),
                   static_cast<const int*>(a.input_row_offsets.data),
                   static_cast<const int*>(a.cache_lens_before.data),
                   lens_after,
                   static_cast<const int*>(a.block_table.data),
                   static_cast<unsigned char*>(a.kv_cache.data),
                   static_cast<float*>(a.kv_scale.data),
                   a.q.strides[0],
                   a.q.strides[1],
                   q_out.strides[0],
                   q_out.strides[1],
                   a.kv_input.strides[0],
                   a.epsilon,
                   static_cast<int>(s.max_pos),
                   static_cast<int>(s.batch),
                   tokens,
                   static_cast<int>(s.heads),
                   static_cast<int>(s.max_pages),
                   static_cast<int>(s.num_pages),
                   static_cast<int>(s.page_size),
                   0};
  jit::LaunchShape shape;
  shape.grid[0] = static_cast<unsigned>(std::max(tokens, 1));
  shape.block[0] = dev::kRopeThreads;
  void* args[] = {&ra};
  k.launch(shape, stream, args);
}

// The projection grid's z: CTAs of m_steps token blocks of block_m, at most 65535 (checked
// by the plan and by mla_branch_project before anything runs).
int64_t token_blocks(int64_t tokens, const MlaBranchProjConfig& c, const char* name) {
  const int64_t per_cta = int64_t{c.block_m} * c.m_steps;
  const int64_t blocks = (tokens + per_cta - 1) / per_cta;
  if (blocks > 65535)
    fail_arg(name, fmt::format("{} tokens need {} CTAs of block_m · m_steps = {}: the grid's z "
                               "dimension holds 65535 (a larger block_m or m_steps, or fewer tokens a call)",
                               tokens, blocks, per_cta));
  return blocks;
}

// One projection: a [tokens, h, ≥ K] → out [tokens, h, ≥ N] (checked by the caller).
// a_ready: a does not come from the kernel before this one in the stream (ProjArgs).
// a_scale: with c.a_e4m3, a holds e4m3 codes and a_scale their σ_A [tokens, h, K / 128].
void launch_project(const TensorView& a, const TensorView& w, const TensorView& w_scale,
                    const TensorView& out, const MlaBranchProjConfig& c, bool a_ready, CUstream stream,
                    const TensorView* a_scale = nullptr) {
  const int64_t tokens = a.shape[0], heads = a.shape[1];
  if (tokens == 0) return;
  const jit::Kernel& k = ops::mla_branch_proj_kernel(c, current_arch());
  // W [h, N, K] as rows of K bytes; one box (64 rows × one 128-column k group) a wgmma tile.
  TmaMapSpec w_spec;
  w_spec.tensor = TensorView::contiguous(w.data, DType::kU8, {heads * c.n_dim, c.k_dim}, w.device);
  w_spec.box[0] = dev::kProjRowBlock;
  w_spec.box[1] = dev::kScaleBlock;
  w_spec.swizzle = Swizzle::k128B;
  w_spec.l2_promotion = TmaL2Promotion::k256B;
  const TmaDescriptor w_map = encode_tma(w_spec, "w");
  dev::ProjArgs pa{static_cast<const unsigned short*>(a.data),
                   static_cast<const float*>(w_scale.data),
                   static_cast<unsigned short*>(out.data),
                   a.strides[0],
                   a.strides[1],
                   out.strides[0],
                   out.strides[1],
                   static_cast<int>(tokens),
                   static_cast<int>(heads),
                   a_ready ? 1 : 0,
                   0,
                   c.a_e4m3 ? static_cast<const float*>(a_scale->data) : nullptr};
  // a_e4m3: the codes [tokens, h, K] by a's strides, one box (block_m tokens × one 128-byte
  // k group, 128B-swizzled) a wgmma tile; rows past the tokens arrive zero.
  TmaDescriptor a8_map{};
  if (c.a_e4m3) {
    TmaMapSpec a8_spec;
    a8_spec.tensor = TensorView::strided(a.data, DType::kU8, {tokens, heads, c.k_dim},
                                         {a.strides[0], a.strides[1], 1}, a.device);
    a8_spec.box[0] = static_cast<uint32_t>(c.block_m);
    a8_spec.box[1] = 1;
    a8_spec.box[2] = dev::kScaleBlock;
    a8_spec.swizzle = Swizzle::k128B;
    a8_spec.l2_promotion = TmaL2Promotion::k256B;
    a8_map = encode_tma(a8_spec, "a");
  }
  jit::LaunchShape shape;
  // Its weight copies (and, a_ready, its activations) overlap the previous kernel's tail.
  shape.programmatic_dependent_launch = true;
  shape.grid[0] = static_cast<unsigned>(c.n_dim / c.block_n);
  shape.grid[1] = static_cast<unsigned>(heads);
  shape.grid[2] = static_cast<unsigned>(token_blocks(tokens, c, "a"));
  shape.block[0] = dev::kProjThreads;
  shape.dynamic_smem = k.dynamic_smem_bytes();
  void* args[] = {const_cast<TmaDescriptor*>(&w_map), &a8_map, &pa};
  k.launch(shape, stream, args);
}

void check_device(const TensorView& t, const char* name) {
  const CUdevice device = driver::current_device();
  if (t.device != static_cast<int>(device))
    fail_arg(name, fmt::format("lives on device {} but the current device is {}", t.device,
                               static_cast<int>(device)));
}

// Every rule of a call, before any stage launches; `sparse` gets the sparse attention's
// checked sizes (topk > 0), which its stage then launches with, not checking again.
Sizes checked(const MlaDecodeBranchFp8Args& a, const MlaDecodeBranchFp8Plan& plan, Workspace ws,
              sparse_detail::Sizes* sparse = nullptr) {
  const Sizes s = mla_branch_detail::check_args(a);
  mla_branch_detail::check_matches_plan(s, plan);
  ops::check_workspace(ws, plan.workspace_bytes, "mla_decode_branch_fp8_plan");
  // The sparse attention's own rules (indices, lengths, sink, the extra cache).
  if (s.topk > 0) {
    const sparse_detail::Sizes ss =
        sparse_detail::check_args(sparse_args(a, plan, scratch(plan, ws, a.q.device)), plan.attention_sparse.config);
    sparse_detail::check_matches_plan(ss, plan.attention_sparse);
    if (sparse != nullptr) *sparse = ss;
  }
  check_device(a.q, "q");
  return s;
}

}  // namespace

MlaDecodeBranchFp8Shape mla_decode_branch_fp8_shape(const MlaDecodeBranchFp8Args& a, int max_q_len) {
  const Sizes s = mla_branch_detail::check_args(a);
  MlaDecodeBranchFp8Shape shape;
  shape.cache = s.cache;
  shape.batch = static_cast<int>(s.batch);
  shape.tokens = static_cast<int>(s.tokens);
  shape.max_q_len = max_q_len;
  shape.num_heads = static_cast<int>(s.heads);
  shape.page_size = static_cast<int>(s.page_size);
  shape.max_pages = static_cast<int>(s.max_pages);
  shape.topk = static_cast<int>(s.topk);
  shape.topk_extra = static_cast<int>(s.topk_extra);
  return shape;
}

MlaDecodeBranchFp8Plan mla_decode_branch_fp8_plan(const MlaDecodeBranchFp8Shape& shape,
                                                  const MlaBranchProjConfig* absorb,
                                                  const MlaBranchProjConfig* output) {
  if (shape.max_q_len < 1 || shape.max_q_len > 8)
    fail_arg("max_q_len", fmt::format("must be 1..8 (new tokens per sequence), got {}", shape.max_q_len));
  if (shape.tokens < 0 || shape.batch < 0)
    fail_arg("shape", fmt::format("tokens {} and batch {} must be >= 0", shape.tokens, shape.batch));
  MlaDecodeBranchFp8Plan p;
  p.shape = shape;
  p.absorb = absorb ? *absorb : mla_branch_proj_default_config(dev::kNopeDim, shape.tokens, shape.num_heads);
  p.output = output ? *output : mla_branch_proj_default_config(dev::kLatentDim, shape.tokens, shape.num_heads);
  p.absorb.validate();
  p.output.validate();
  if (p.absorb.k_dim != dev::kNopeDim)
    fail_config("absorb.k_dim", fmt::format("the absorption reduces q_nope's 128 columns, got {}", p.absorb.k_dim));
  if (p.output.k_dim != dev::kLatentDim)
    fail_config("output.k_dim", fmt::format("the output projection reduces the 512 latent columns, got {}",
                                            p.output.k_dim));
  token_blocks(shape.tokens, p.absorb, "shape.tokens");
  token_blocks(shape.tokens, p.output, "shape.tokens");
  const bool fp8 = shape.cache == MlaBranchCache::kFp8Token, sparse = shape.topk > 0;
  if (shape.cache == MlaBranchCache::kFp8Block && !sparse)
    fail_arg("shape.topk", "must be >= 1 with the 656-byte cache (its attention is the sparse one)");
  if (fp8 && sparse) fail_arg("shape.topk", "sparse attention reads the bf16 or the 656-byte cache");
  if (sparse) {
    p.attention_sparse = mla_decode_sparse_plan(sparse_shape(shape));
  } else if (fp8) {
    p.attention_fp8 = mla_decode_fp8_plan(fp8_shape(shape));
  } else {
    p.attention = mla_decode_plan(dense_shape(shape));
  }
  // The output projection's activations quantized where the attention makes them (its e4m3
  // output: half the bytes out and in, no quantization in the projection) when the attention
  // can: the dense bf16 cache on the seesaw schedule. Elsewhere they stay bf16.
  const bool codes_possible = !sparse && !fp8 && p.attention.config.schedule == MlaSchedule::kSeesaw;
  if (output == nullptr && codes_possible) {
    p.output = mla_branch_proj_default_config(dev::kLatentDim, shape.tokens, shape.num_heads, true);
    p.output.validate();
    token_blocks(shape.tokens, p.output, "shape.tokens");
  }
  if (p.output.a_e4m3 && !codes_possible)
    fail_config("output.a_e4m3", "needs the attention's e4m3 output: the dense bf16 cache on the seesaw "
                                 "schedule (not the 640-byte cache, sparse attention or softmax_wg)");
  const size_t t = static_cast<size_t>(shape.tokens), h = static_cast<size_t>(shape.num_heads);
  size_t off = 0;
  p.lens_offset = off;
  off += align256(static_cast<size_t>(shape.batch) * 4);
  p.q_offset = off;
  off += align256(t * h * dev::kCacheDim * 2);
  if (fp8) {
    p.q8_offset = off;
    off += align256(t * h * kMlaFp8RowBytes);
    p.q_scale_offset = off;
    off += align256(t * 4);
  }
  p.raw_offset = off;
  off += align256(t * h * dev::kLatentDim * (p.output.a_e4m3 ? 1 : 2));
  if (p.output.a_e4m3) {
    p.raw_scale_offset = off;
    off += align256(t * h * (dev::kLatentDim / dev::kScaleBlock) * 4);
  }
  p.attention_offset = off;
  off += sparse ? p.attention_sparse.workspace_bytes
       : fp8  ? p.attention_fp8.workspace_bytes
              : p.attention.workspace_bytes;
  p.workspace_bytes = off;

  const Arch arch = current_arch();
  ops::mla_branch_proj_kernel(p.absorb, arch).prepare_current_device();
  ops::mla_branch_proj_kernel(p.output, arch).prepare_current_device();
  ops::MlaBranchRopeConfig rc;
  rc.cache_layout = rope_layout(shape.cache);
  ops::mla_branch_rope_kernel(rc, arch).prepare_current_device();
  if (fp8) ops::mla_fp8_quantize_kernel({}, arch).prepare_current_device();
  return p;
}

void mla_decode_branch_fp8_schedule(const MlaDecodeBranchFp8Plan& plan, const MlaDecodeBranchFp8Args& a,
                                    Workspace workspace, CUstream stream) {
  const Sizes s = checked(a, plan, workspace);
  if (s.batch == 0) return;
  const Scratch w = scratch(plan, workspace, a.q.device);
  launch_rope(a, s, s.cache, w.q_abs, static_cast<int*>(w.lens_after.data), /*tokens_too=*/false, stream);
  // The sparse attention's schedule is its checks alone, which `checked` ran.
  if (s.topk > 0) return;
  if (s.cache == MlaBranchCache::kFp8Token)
    mla_decode_fp8_schedule(plan.attention_fp8, fp8_args(a, plan, w), w.attention, stream);
  else
    mla_decode_schedule(plan.attention, dense_args(a, plan, w), w.attention, stream);
}

void mla_decode_branch_fp8_stage(const MlaDecodeBranchFp8Args& a, const MlaDecodeBranchFp8Plan& plan,
                                 Workspace workspace, CUstream stream, MlaBranchStage stage) {
  sparse_detail::Sizes sparse;
  const Sizes s = checked(a, plan, workspace, &sparse);
  if (s.batch == 0 || s.tokens == 0) return;
  const Scratch w = scratch(plan, workspace, a.q.device);
  const bool all = stage == MlaBranchStage::kAll;
  if (all || stage == MlaBranchStage::kRope)
    launch_rope(a, s, s.cache, w.q_abs, nullptr, /*tokens_too=*/true, stream);
  if (all || stage == MlaBranchStage::kAbsorb)
    launch_project(a.q, a.w_uk, a.w_uk_scale, w.q_abs, plan.absorb, /*a_ready=*/true, stream);
  if (all || stage == MlaBranchStage::kAttention) {
    if (s.topk > 0) {
      const MlaDecodeSparsePlan& sp = plan.attention_sparse;
      sparse_detail::launch(sparse_args(a, plan, w), sparse, sp.config, sp.num_splits, sp.merge_in_cluster,
                            w.attention, nullptr, stream);
    } else if (s.cache == MlaBranchCache::kFp8Token) {
      MlaFp8QuantizeArgs qa;
      qa.in = TensorView::contiguous(w.q_abs.data, DType::kBF16, {s.tokens * s.heads, dev::kCacheDim},
                                     a.q.device);
      qa.rows_per_group = static_cast<int>(s.heads);
      qa.group = MlaFp8Group::kToken;
      qa.out = TensorView::contiguous(w.q8.data, DType::kU8, {s.tokens * s.heads, kMlaFp8RowBytes},
                                      a.q.device);
      qa.scale = w.q_scale;
      mla_fp8_quantize(qa, stream);
      mla_decode_fp8(fp8_args(a, plan, w), plan.attention_fp8, w.attention, stream);
    } else {
      mla_decode(dense_args(a, plan, w), plan.attention, w.attention, stream);
    }
  }
  if (all || stage == MlaBranchStage::kOutput)
    launch_project(w.raw, a.w_uv, a.w_uv_scale, a.out, plan.output, /*a_ready=*/false, stream, &w.raw_scale);
}

void mla_decode_branch_fp8(const MlaDecodeBranchFp8Args& a, const MlaDecodeBranchFp8Plan& plan,
                           Workspace workspace, CUstream stream) {
  mla_decode_branch_fp8_stage(a, plan, workspace, stream, MlaBranchStage::kAll);
}

void mla_decode_branch_fp8(const MlaDecodeBranchFp8Args& a, int max_q_len, CUstream stream) {
  const MlaDecodeBranchFp8Shape shape = mla_decode_branch_fp8_shape(a, max_q_len);
  const MlaDecodeBranchFp8Plan plan = mla_decode_branch_fp8_plan(shape);
  const ops::StreamWorkspace workspace(plan.workspace_bytes, stream);
  mla_decode_branch_fp8_schedule(plan, a, workspace.get(), stream);
  mla_decode_branch_fp8(a, plan, workspace.get(), stream);
}

void mla_branch_project(const TensorView& a, const TensorView& w, const TensorView& w_scale,
                        const TensorView& out, const MlaBranchProjConfig& config, CUstream stream,
                        const TensorView& a_scale) {
  config.validate();
  if (a.rank != 3)
    fail_arg("a", fmt::format("must be rank 3 [tokens, h, >= {}] {}, got {}", config.k_dim,
                              config.a_e4m3 ? "e4m3" : "bf16", a.describe()));
  const int64_t tokens = a.shape[0], heads = a.shape[1];
  mla_branch_detail::check_rows(a, "a", tokens, heads, config.k_dim, config.a_e4m3 ? DType::kE4M3 : DType::kBF16);
  if (config.a_e4m3) {
    ops::check_dims(a_scale, "a_scale", {tokens, heads, config.k_dim / dev::kScaleBlock},
                    "rank 3 [tokens, h, K / 128] f32 (σ_A of a's codes; config a_e4m3)");
    ops::check_tensor(a_scale, "a_scale", DType::kF32, 4);
  } else if (a_scale.data != nullptr) {
    fail_arg("a_scale", "is for e4m3 activations (config a_e4m3); a is bf16 here");
  }
  mla_branch_detail::check_weight(w, "w", w_scale, "w_scale", heads, config.n_dim, config.k_dim);
  mla_branch_detail::check_rows(out, "out", tokens, heads, config.n_dim);
  if (tokens * heads > INT32_MAX) fail_arg("a", "more than 2^31 rows");
  token_blocks(tokens, config, "a");
  check_device(a, "a");
  launch_project(a, w, w_scale, out, config, /*a_ready=*/false, stream, &a_scale);
}

}  // namespace attnjit
