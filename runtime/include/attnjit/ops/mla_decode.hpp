#pragma once
// mla_decode: DeepSeek absorbed-MLA decode over a paged latent KV cache (seed:
// flare_mla_decoding). One latent KV head of 576 dims per token (512 latent + 64 rope);
// V is the first 512 dims of the same cache row, read from the same shared-memory tile.
//
//   q          [b, q_len, h, 576]        bf16/f16, last dim contiguous (padded form)
//              [total_q, h, 576]         ragged form: sequence i owns rows
//                                        [q_offsets[i], q_offsets[i+1]), at most max_q_len
//   q_offsets  [b + 1]                   i32, ragged form only (nondecreasing, within total_q)
//   kv_cache   [num_pages, page_size, 576] same dtype, contiguous rows
//   block_table[b, max_pages]            i32, pages in any order
//   cache_lens [b]                       i32; each includes the sequence's q_len new tokens
//   out        [b, q_len, h, 512]        q's dtype; ragged: [total_q, h, 512]
//   lse        [b, h, q_len]             f32, optional (natural log; -inf for a row with no
//                                        key); ragged: [h, total_q]
//
// Causal when the kernel's max_q_len > 1: query i of a sequence with q_len queries sees
// keys 0 .. L - q_len + i (ragged: each sequence's own q_len). A row that sees no key gives
// out = 0 exactly and lse = -inf. Cache rows past a sequence's length may hold anything
// (NaN included): they never reach the output. Lengths, offsets and table entries live on
// the GPU and are never read by the host; the kernel stays inside q, out and the page pool
// whatever they hold (ragged rows not covered by any sequence are left untouched), and
// ATTNJIT_CHECK=1 reports the first bad one.
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "attnjit/tensor.hpp"
#include "attnjit/types.hpp"

namespace attnjit {

inline constexpr int kMlaHeadDim = 576;   // latent 512 + rope 64
inline constexpr int kMlaValueDim = 512;  // V = the first 512 dims of a cache row

// How a CTA's warpgroups share the work of a KV tile (both sm90a, both compile-time):
//   seesaw      2 warpgroups × 255 registers, each holding half of O[64 × 512]; they take
//               turns computing S and softmax for alternate tiles and exchange P through
//               shared memory (FlashMLA's schedule). 64-key tiles, 2 buffers.
//   softmax_wg  3 warpgroups × 168 registers: one computes S and softmax for every tile,
//               two do P·V for half of O each. Any block_n / stages that fit.
enum class MlaSchedule : uint8_t { kSeesaw, kSoftmaxWarpgroup };
std::string_view to_string(MlaSchedule s);

// Compile-time shape of the kernel (template arguments). Run-time values — q_len up to
// max_q_len, lengths, the split count, the softmax scale — are kernel parameters.
struct MlaDecodeConfig {
  // The fields (dtype, num_heads, max_q_len, page_size, block_m, block_n, stages, swizzle,
  // schedule), each with its rule and doc, are the rows of mla_decode_config.def.
#define ATTNJIT_FIELD ATTNJIT_CONFIG_MEMBER
#include "attnjit/ops/mla_decode_config.def"
#undef ATTNJIT_FIELD

  void validate() const;  // throws Error(kUnsupportedConfig) naming the field
  std::string to_json() const;
  static MlaDecodeConfig from_json(std::string_view json);
  std::string describe() const;
  friend bool operator==(const MlaDecodeConfig&, const MlaDecodeConfig&) = default;
};

// The tensors of one call (one layer). Host-visible sizes come from the views; lengths,
// offsets and table entries stay on the GPU.
struct MlaDecodeArgs {
  TensorView q;                // rank 4 (padded) or rank 3 with q_offsets (ragged)
  TensorView q_offsets;        // ragged form: [b + 1] i32 row offsets into q/out/lse;
                               // data == nullptr: padded
  int max_q_len = 0;           // ragged form (required there): bound on every sequence's
                               // q_len, 1..8; it sizes the grid. Padded: 0 or q.shape[1].
  TensorView kv_cache;
  TensorView block_table;
  TensorView cache_lens;
  TensorView out;
  TensorView lse;              // data == nullptr: not wanted
  float softmax_scale = 0.0f;  // e.g. 1/sqrt(192) × mscale² for DeepSeek
  // e4m3 output for an fp8 output projection (bf16 q, the seesaw schedule): out e4m3 of
  // out's shape, out_scale f32 of that shape with 4 for 512 (σ per 128-column group): the
  // codes and scales DeepSeek's per-token cast gives the bf16 output (σ = min(amax, 1200) /
  // 448, codes e4m3(x · 448 / min(amax, 1200)); common/act_quant.cuh). data == nullptr: out
  // in q's dtype.
  TensorView out_scale;
};

// The built-in config for these shapes (before any tuning database).
MlaDecodeConfig mla_decode_default_config(DType dtype, int num_heads, int q_len, int page_size);

// What an engine knows when it captures a batch shape: host-visible sizes and bounds only.
struct MlaDecodeShape {
  DType dtype = DType::kBF16;
  int batch = 0;         // b
  int q_len = 1;         // padded: q.shape[1]; ragged: the bound on every sequence's q_len
  int num_heads = 128;   // h
  int page_size = 64;
  int max_pages = 1;     // block_table width
  bool ragged = false;   // q [total_q, h, 576] with q_offsets
  int max_len = 0;       // bound on every cache_lens entry; 0: max_pages × page_size. Only
                         // the split choice reads it (a tighter bound, fewer idle splits)
  int num_splits = 0;    // a static split: every sequence's keys in this many partitions,
                         // 1..256. 0: the tuning database's count for the shapes' bucket
                         // when it has one, else the balanced schedule (mla_decode_schedule)
};

// The host-visible shape of `args` (bounds left 0: chosen by the plan). Throws
// Error(kBadArgument) naming the tensor when q, q_offsets, kv_cache or block_table has the
// wrong rank.
MlaDecodeShape mla_decode_shape(const MlaDecodeArgs& args);

// Computed once per captured batch shape and reused by every layer and step of it.
//
// Two ways to spread a batch over the SMs:
//   static split  every sequence's keys in num_splits equal partitions (1: no combine).
//                 Right for uniform lengths; with mixed lengths the long sequences' CTAs
//                 finish last while SMs idle.
//   balanced      mla_decode_schedule reads the lengths on the GPU once per step and gives
//                 each of sm_slots CTAs an equal share of the batch's KV tiles, the
//                 sequences laid end to end: a CTA walks one or more sequences (or parts of
//                 them); a sequence left whole is written directly, a cut one goes through
//                 the combine. The grid is fixed by the plan (sm_slots CTAs per row tile).
//                 With config.invariant_tiles = C > 0 the pieces are C tiles whatever the
//                 batch holds, one CTA each: a sequence's output bits do not depend on the
//                 other sequences (batch-invariant), at the cost of more partials; the grid
//                 and workspace then hold batch × ⌈capacity / C⌉ pieces.
struct MlaDecodePlan {
  MlaDecodeShape shape;        // as given (num_splits 0 kept: the plan's own is below)
  MlaDecodeConfig config;      // the kernel that runs
  bool balanced = false;       // the balanced schedule (then num_splits is 0)
  int num_splits = 1;          // static split: partitions of each sequence's keys
  int sm_slots = 0;            // balanced: CTAs per row tile, one per SM (SMs / row tiles)
  size_t workspace_bytes = 0;  // caller-owned scratch the run needs (0: none)
};

// The config, split count and workspace for `shape`, with the kernels compiled (or read
// from the disk cache) and loaded on the current device. `config` = nullptr: the tuning
// database's winner for the shapes' bucket on this GPU (attnjit/tuning.hpp,
// docs/tuning.md), else mla_decode_default_config. The split choice reads the shape and the
// device's SM count only, so the grid is fixed for a fixed plan (CUDA-graph capturable).
// Throws before anything is compiled when the shape or config breaks a rule.
MlaDecodePlan mla_decode_plan(const MlaDecodeShape& shape, const MlaDecodeConfig* config = nullptr);

// The config mla_decode_plan picks for `shape` without one (host only: no device needed).
MlaDecodeConfig mla_decode_selected_config(const MlaDecodeShape& shape);

// Workspace bytes of a static split (0 when unsplit), and of a balanced plan (partials of
// the pieces it may cut, and the schedule; block_n: the config's keys per tile); host only.
size_t mla_decode_workspace_bytes(const MlaDecodeShape& shape, int num_splits);
size_t mla_decode_balanced_workspace_bytes(const MlaDecodeShape& shape, int sm_slots,
                                           int invariant_tiles = 0, int block_n = 64);

// Per step, before the step's runs: device work that depends on device-resident lengths.
// Balanced plans: one small kernel writes the step's work list into the workspace, read by
// every layer's run until the next schedule (lengths must not change in between). A static
// split needs none (this enqueues nothing). Graph-capturable: a replay reads the lengths
// the buffers hold then.
void mla_decode_schedule(const MlaDecodePlan& plan, const MlaDecodeArgs& args, Workspace workspace,
                         CUstream stream);

// Per layer: the decode on `stream` (the main kernel, then the combine kernel when split).
// Every argument is checked against the plan before anything is launched; nothing is
// compiled, loaded or allocated (CUDA-graph capturable).
void mla_decode(const MlaDecodeArgs& args, const MlaDecodePlan& plan, Workspace workspace,
                CUstream stream);

// One call that plans, schedules and runs with a workspace it allocates on `stream`
// (stream-ordered, freed after the run). For use outside graph capture.
void mla_decode(const MlaDecodeArgs& args, CUstream stream, const MlaDecodeConfig* config = nullptr);

}  // namespace attnjit
