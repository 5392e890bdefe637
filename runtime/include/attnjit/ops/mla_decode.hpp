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
  DType dtype = DType::kBF16;        // bf16 or f16 (q, cache and out)
  int num_heads = 128;               // h: 16..128, multiple of 16
  int max_q_len = 1;                 // 1..8; > 1 compiles the causal (MTP) mask
  int page_size = 64;                // 16, 32, 64, 128 or 256 tokens
  int block_m = 64;                  // query rows (q_len × h packed) per CTA: 64 (one wgmma M)
  int block_n = 64;                  // keys per KV tile: 32 or 64
  int stages = 2;                    // KV tile ring depth: 2..4 while Q + stages × tile fits
                                     // (64 keys: 2 × 72 KiB; 32 keys: up to 4 × 36 KiB)
  Swizzle swizzle = Swizzle::k128B;  // smem layout of Q/K/V tiles: 128B
  MlaSchedule schedule = MlaSchedule::kSeesaw;  // seesaw needs block_n 64 and stages 2

  void validate() const;  // throws Error(kUnsupportedConfig) naming the field
  std::string to_json() const;
  static MlaDecodeConfig from_json(std::string_view json);
  std::string describe() const;
  friend bool operator==(const MlaDecodeConfig&, const MlaDecodeConfig&) = default;
};

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
  int num_splits = 0;          // split-KV partitions; 0 = heuristic (host-visible numbers only)
  int max_len_hint = 0;        // caller's bound on cache_lens (0: capacity = max_pages × page_size)
  void* workspace = nullptr;   // device scratch for split partials (see workspace query)
  size_t workspace_bytes = 0;
};

// The config the runtime picks for these shapes (before any tuning database).
MlaDecodeConfig mla_decode_default_config(DType dtype, int num_heads, int q_len, int page_size);

// The config mla_decode(args, stream, nullptr) uses: the tuning database's winner for the
// shapes' bucket on this GPU (attnjit/tuning.hpp, docs/tuning.md), else
// mla_decode_default_config.
MlaDecodeConfig mla_decode_selected_config(const MlaDecodeArgs& args);

// The split count a call with `args` will use: args.num_splits when set, else the tuning
// database's for the shapes' bucket when it has one, else the heuristic's — a function of
// batch, heads, q_len, the length bound and the current device's SM count only, so the
// grid is fixed for fixed shapes (CUDA-graph capturable).
int mla_decode_num_splits(const MlaDecodeArgs& args);

// Workspace bytes for a call with these shapes and split count (0 when unsplit); ragged
// calls pass their max_q_len as q_len.
size_t mla_decode_workspace_bytes(int batch, int q_len, int num_heads, int num_splits);

// Compiles/loads the main and combine kernels for `config` on the current device.
void mla_decode_prepare(const MlaDecodeConfig& config);

// Runs the decode on `stream`. Every argument is checked before anything is launched.
void mla_decode(const MlaDecodeArgs& args, CUstream stream, const MlaDecodeConfig* config = nullptr);

}  // namespace attnjit
