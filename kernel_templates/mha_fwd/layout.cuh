#pragma once
// mha_fwd's layout, compiled by the host (runtime/ops/mha_fwd) and by NVRTC: the argument
// blocks of the main, combine and check kernels, the check report's kinds, the launch
// constants and the shared-memory plan's sizes. Written once; the static_asserts pin the
// byte layout both sides pass through cuLaunchKernelEx. (Its own namespace: the host's op
// function is named attnjit::mha_fwd; the kernels see it through attnjit::mha_fwd.)
#include "common/constants.cuh"

namespace attnjit::layout::mha_fwd {

// The main kernel's argument block (after the q, k and v tensor maps).
struct Args {
  const int* q_offsets;    // ragged: [b+1]
  const int* k_offsets;    // ragged contiguous KV: [b+1]
  const int* block_table;  // paged: [b, max_pages]
  const int* kv_lens;      // paged: [b]
  const float* sink;       // [h_q] logits (scaled-score units)
  const float* alibi;      // [h_q] slopes
  void* out;               // [total_q, h_q, dv] (padded: total_q = b·s_q)
  float* lse;              // [h_q, total_q] or null
  float* part_out;         // split: [splits, total_q, h_q, dv] f32
  float* part_lse;         // split: [splits, h_q, total_q]
  int batch;
  int h_q;
  int h_kv;
  int s_q;                 // padded: query positions per sequence
  int s_k;                 // padded: keys per sequence
  int total_q;             // rows of q (bounds every q row the kernel touches)
  int total_k;             // rows of contiguous k/v
  int max_pages;           // paged: block table width
  int num_splits;
  int m_tiles;             // row blocks per (sequence, head) in the grid
  int q_per_kv;            // h_q / h_kv
  int items;               // persistent: items of the unit list (schedule.cuh), else 0
  float scale_log2;        // softmax_scale · log2(e)
  float softcap_inv;       // softmax_scale / cap            (softcap)
  float softcap_log2;      // cap · log2(e)                  (softcap)
  int window_left;         // -1: unbounded
  int window_right;        // -1: unbounded
  int chunk;               // chunked: tokens per chunk
};

// Q tiles in shared memory: a persistent CTA loads the next unit's Q while the current unit
// runs where two fit next to the K/V ring (d64, d128; the barriers and the base alignment
// take 2048 bytes at most); else the next Q waits for the current unit's last S.
ATTNJIT_PLAN int q_buffers(int elem_bytes, int head_dim, int head_dim_v, int block_m, int block_n,
                           int stages, bool persistent) {
  const int tiles = 2 * block_m * head_dim * elem_bytes + stages * block_n * (head_dim + head_dim_v) * elem_bytes;
  return persistent && tiles + 2048 <= kMaxSmemPerBlock ? 2 : 1;
}

// Dynamic shared memory of the main kernel (SharedStorage<P> static_asserts against it):
// Q buffers + stages × (K + V) tiles, 2 barriers per Q buffer and 4 per stage, rounded to
// the 1024-byte tile alignment, plus 1024 to realign the dynamic base.
ATTNJIT_PLAN unsigned smem_bytes(int elem_bytes, int head_dim, int head_dim_v, int block_m,
                                 int block_n, int stages, bool persistent) {
  const int qb = q_buffers(elem_bytes, head_dim, head_dim_v, block_m, block_n, stages, persistent);
  const int tiles = qb * block_m * head_dim * elem_bytes + stages * block_n * (head_dim + head_dim_v) * elem_bytes;
  const int body = tiles + (2 * qb + 4 * stages) * 8;
  return static_cast<unsigned>((body + 1023) / 1024 * 1024 + 1024);
}

// mha_fwd_combine: grid (ceil(max s_q / kCombineWarps), h_q, batch), one (query, head) row
// per warp.
struct CombineArgs {
  const float* part_out;  // [splits, total_q, h_q, dv]
  const float* part_lse;  // [splits, h_q, total_q]
  const int* q_offsets;   // ragged: [b+1]
  const float* sink;      // [h_q]
  void* out;              // [total_q, h_q, dv]
  float* lse;             // [h_q, total_q] or null
  int h_q;
  int s_q;                // padded
  int total_q;
  int num_splits;
};

inline constexpr int kCombineWarps = 4;  // one (query, head) row per warp
inline constexpr int kCombineThreads = kCombineWarps * kWarpSize;

// mha_fwd_check (ATTNJIT_CHECK=1): grid (b), kCheckThreads threads.
inline constexpr int kCheckThreads = 128;
// What a report names (the low byte of the slot field orders kinds within a sequence).
enum class CheckKind : int { kQOffsets = 1, kKOffsets = 2, kKvLens = 3, kBlockTable = 4 };

struct CheckArgs {
  const int* q_offsets;   // [b+1]
  const int* k_offsets;   // [b+1]
  const int* kv_lens;     // [b]
  const int* block_table; // [b, max_pages]
  unsigned long long* first_bad;  // (batch << 32) | (kind << 24) | slot; host sets ~0
  int batch;
  int total_q, total_k;
  int max_seqlen_q;
  int max_pages, num_pages;
};

static_assert(sizeof(Args) == 152 && ATTNJIT_OFFSET_IS(Args, batch, 80) &&
                  ATTNJIT_OFFSET_IS(Args, scale_log2, 128) && ATTNJIT_OFFSET_IS(Args, chunk, 148),
              "mha_fwd::Args layout");
static_assert(sizeof(CombineArgs) == 64 && ATTNJIT_OFFSET_IS(CombineArgs, num_splits, 60),
              "mha_fwd::CombineArgs layout");
static_assert(sizeof(CheckArgs) == 64 && ATTNJIT_OFFSET_IS(CheckArgs, num_pages, 60),
              "mha_fwd::CheckArgs layout");

}  // namespace attnjit::layout::mha_fwd
