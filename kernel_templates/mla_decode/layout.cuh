#pragma once
// mla_decode's layout, compiled by the host (runtime/ops/mla_decode) and by NVRTC: the
// argument blocks of the main, combine and check kernels, the check report's codes, and
// the launch constants. Written once; the static_asserts pin the byte layout both sides
// pass through cuLaunchKernelEx. (Its own namespace: the host's op function is named
// attnjit::mla_decode; the kernels see it through attnjit::mla_decode.)
#include "common/constants.cuh"

namespace attnjit::layout::mla_decode {

inline constexpr int kHeadDim = 576;   // latent 512 + rope 64
inline constexpr int kValueDim = 512;  // V = the first 512 dims of a cache row

// Where each sequence's query tokens live in q / out. Padded: sequence i owns tokens
// [i·q_len, (i+1)·q_len). Ragged: tokens [offsets[i], offsets[i+1]) of q [total_q, h, 576],
// at most q_len of them (q_len is then the host's bound, which sized the grid).
struct QRows {
  const int* offsets;  // [b + 1] (ragged) or null (padded)
  int q_len;           // padded: every sequence's q_len; ragged: the bound
  int total_q;         // tokens in q and out
};

// The main kernel's argument block (after the q and kv tensor maps).
struct Args {
  const int* block_table;  // [b, max_pages]
  const int* cache_lens;   // [b]
  void* out;               // [total_q, h, 512] contiguous (padded: [b, q_len, h, 512])
  float* lse;              // lse_index layout, or null
  float* part_out;         // [b, splits, q_len·h, 512] f32 (splits > 1; q_len = the bound)
  float* part_lse;         // [b, splits, q_len·h]
  QRows q;
  int max_pages;
  int num_splits;
  float scale_log2;        // softmax_scale · log2(e)
};

// Dynamic shared memory of the main kernel (both schedules' SharedStorage<P>, which
// static_assert against it): Q + stages × KV tile + P, row statistics, mbarriers, rounded
// to the 1024-byte tile alignment, plus 1024 to realign the dynamic base.
ATTNJIT_PLAN unsigned smem_bytes(int elem_bytes, int block_m, int block_n, int stages, bool seesaw) {
  const int q_tile = block_m * kHeadDim * elem_bytes;   // 72 KiB
  const int kv_tile = block_n * kHeadDim * elem_bytes;  // 72 KiB at 64 keys
  const int p_tile = block_m * block_n * elem_bytes;    // 8 KiB at 64 keys
  // seesaw: row_max, scale_even, scale_odd, 2 × row_sum; q_full + one per chunk of each
  // buffer. softmax_wg: row max, sum and scale; q_full + one per stage.
  const int stats = (seesaw ? 5 : 3) * block_m * 4;
  const int chunks = kHeadDim * elem_bytes / 128;
  const int barriers = (seesaw ? 1 + chunks * stages : 1 + stages) * 8;
  const int body = q_tile + kv_tile * stages + p_tile + stats + barriers;
  return static_cast<unsigned>((body + 1023) / 1024 * 1024 + 1024);
}

// mla_decode_combine: grid (q_len·h, b), kCombineThreads threads, 4 columns (one float4)
// per thread.
inline constexpr int kCombineThreads = kValueDim / 4;
struct CombineArgs {
  const float* part_out;  // [b, splits, q_len·h, 512] f32 (q_len = the bound when ragged)
  const float* part_lse;  // [b, splits, q_len·h]
  void* out;              // [total_q, h, 512]
  float* lse;             // lse_index layout, or null
  QRows q;
  int num_splits;
};

// mla_decode_check (ATTNJIT_CHECK=1): grid (b), kCheckThreads threads.
inline constexpr int kCheckThreads = 128;
struct CheckArgs {
  const int* block_table;         // [b, max_pages]
  const int* cache_lens;          // [b]
  const int* q_offsets;           // [b + 1] (ragged) or null
  unsigned long long* first_bad;  // (batch << 32) | what; the host sets it to ~0 (nothing
                                  // found) before the launch
  int max_pages;
  int num_pages;
  int total_q;                    // ragged: rows of q
  int max_q_len;                  // ragged: the bound every sequence's q_len must keep
};
// What a report's low 32 bits name (the high 32 bits hold the sequence).
inline constexpr unsigned kBadQOffsets = 0;  // q_offsets[b], q_offsets[b + 1]
inline constexpr unsigned kBadLength = 1;    // cache_lens[b]
inline constexpr unsigned kBadSlot0 = 2;     // block_table[b][slot]: kBadSlot0 + slot

static_assert(sizeof(QRows) == 16 && sizeof(Args) == 80 && ATTNJIT_OFFSET_IS(Args, q, 48) &&
                  ATTNJIT_OFFSET_IS(Args, scale_log2, 72),
              "mla_decode::Args layout");
static_assert(sizeof(CombineArgs) == 56 && ATTNJIT_OFFSET_IS(CombineArgs, num_splits, 48),
              "mla_decode::CombineArgs layout");
static_assert(sizeof(CheckArgs) == 48 && ATTNJIT_OFFSET_IS(CheckArgs, max_q_len, 44),
              "mla_decode::CheckArgs layout");

}  // namespace attnjit::layout::mla_decode
