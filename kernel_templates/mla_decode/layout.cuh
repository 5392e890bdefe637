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

// ---- the balanced schedule (mixed lengths) ----------------------------------------------
// mla_decode_schedule's kernel reads the lengths on the GPU and spreads the step's KV tiles
// over the main kernel's CTA slots (SMs / row tiles) in one of two forms (balance.cuh):
// pieces of at most C tiles (about 1.1 × the tiles per slot), one per CTA, listed longest
// first; or, for memory-bound shapes whose pieces would need a second wave, an equal share
// of the sequences laid end to end per CTA, which walks its pieces in order (FlashMLA's
// packing). A sequence left in one piece writes out directly; the pieces of a cut one go
// through the combine. Bounds, either form (n_i = ⌈tiles_i / C⌉ < tiles_i/C + 1; packed:
// each of the slots − 1 run boundaries cuts at most one sequence):
//   pieces in all  < slots + b
//   partial slots  < 2 · slots
//   cut sequences  < slots
// With invariant_tiles = C (batch-invariant) every sequence is cut into pieces of C tiles,
// whatever the batch, one CTA each.
struct WorkItem {
  int batch, tile_begin, tile_end;
  int slot;  // its partial's slot in part_out / part_lse, or -1: the sequence is whole here
};
struct SplitSeq {  // a sequence cut into pieces: its partials are slots [first_slot, +count)
  int batch, first_slot, count, pad;
};
struct WorkCounts {  // written by the schedule kernel, read by the main and combine kernels
  int items, split_seqs, pad[2];
};
// CTA y of the main kernel walks items [cta_first[y], cta_first[y + 1]) of the list
// (cta_first has the grid's y extent + 1 entries).

// The main kernel's argument block (after the q and kv tensor maps).
struct Args {
  const int* block_table;  // [b, max_pages]
  const int* cache_lens;   // [b]
  void* out;               // [total_q, h, 512] contiguous (padded: [b, q_len, h, 512])
  float* lse;              // lse_index layout, or null
  float* part_out;         // [slots, q_len·h, 512] f32 (q_len = the bound), or null; the
  float* part_lse;         // [slots, q_len·h]        static split's slot = batch·splits + split
  QRows q;
  int max_pages;
  int num_splits;          // static split: grid y = splits; balanced: 0
  float scale_log2;        // softmax_scale · log2(e)
  const WorkItem* items;   // balanced: the schedule's pieces; null: static split
  const WorkCounts* counts;
  const int* cta_first;    // balanced: [grid y + 1], each CTA's first item
  float* out_scale;        // e4m3 output (seesaw only): [total_q, h, 4] f32 σ per 128-column
                           // group, out then holds the codes (common/act_quant.cuh); null:
                           // out in q's dtype
};

// Dynamic shared memory of the main kernel (both schedules' SharedStorage<P>, which
// static_assert against it): Q + stages × KV tile + P, row statistics, mbarriers, rounded
// to the 1024-byte tile alignment, plus 1024 to realign the dynamic base.
ATTNJIT_PLAN unsigned smem_bytes(int elem_bytes, int block_m, int block_n, int stages, bool seesaw) {
  const int q_tile = block_m * kHeadDim * elem_bytes;   // 72 KiB
  const int kv_tile = block_n * kHeadDim * elem_bytes;  // 72 KiB at 64 keys
  const int p_tile = block_m * block_n * elem_bytes;    // 8 KiB at 64 keys
  // seesaw: row_max, scale_even, scale_odd, 2 × row_sum, a widening feed's σ_KV per
  // buffer; q_full + one per chunk of each buffer, the feed's kv_staged (per buffer half) and
  // q_staged. softmax_wg: row max, sum and scale; q_full + one per stage.
  const int stats = seesaw ? 5 * block_m * 4 + stages * block_n * 4 : 3 * block_m * 4;
  const int chunks = kHeadDim * elem_bytes / 128;
  const int barriers = (seesaw ? 1 + chunks * stages + 2 * stages + 1 : 1 + stages) * 8;
  const int body = q_tile + kv_tile * stages + p_tile + stats + barriers;
  return static_cast<unsigned>((body + 1023) / 1024 * 1024 + 1024);
}

// mla_decode_combine: kCombineThreads threads, 4 columns (one float4) per thread. Static
// split: grid (q_len·h, b). Balanced: a 1-D grid of min(cut bound × q_len·h, kCombineCtasPerSm
// × SMs) CTAs striding over (cut sequence, row) pairs.
inline constexpr int kCombineThreads = kValueDim / 4;
inline constexpr int kCombineCtasPerSm = 8;
inline constexpr int kMaxCombineParts = 512;  // partials per row: static ≤ 256 splits,
                                              // balanced < 2 · SM slots, or the
                                              // invariant split's pieces per sequence
struct CombineArgs {
  const float* part_out;  // [slots, q_len·h, 512] f32 (q_len = the bound when ragged)
  const float* part_lse;  // [slots, q_len·h]
  void* out;              // [total_q, h, 512]
  float* lse;             // lse_index layout, or null
  QRows q;
  int num_splits;             // static split
  int pad;
  const SplitSeq* split_seqs;  // balanced: the cut sequences; null: static
  const WorkCounts* counts;
  const float* sink;           // [h] f32 attention sink (mla_decode_sparse), or null: none.
                               // Denominator only: out ·= Σ / (Σ + exp(sink − max)); lse
                               // is written without it
  float* out_scale;            // as Args::out_scale: e4m3 out and its σ, or null
};

// mla_decode_balance (the schedule kernel): one CTA of kBalanceThreads threads.
inline constexpr int kBalanceThreads = 1024;
inline constexpr int kMinPieceTiles = 4;  // a piece's fixed costs (Q load, epilogue, combine)
                                          // stay small against its KV tiles
inline constexpr int kSeqCostTiles = 2;   // packed: a sequence's fixed costs (Q load,
                                          // pipeline fill, epilogue) in KV tiles' time
struct BalanceArgs {
  const int* cache_lens;  // [b]
  int* scratch;           // [2·b]: each sequence's tiles, then its pieces or first position
  WorkItem* items;        // [max_items]
  int* cta_first;         // [ctas + 1]
  SplitSeq* split_seqs;   // [max_cuts]
  WorkCounts* counts;
  int batch;
  int capacity;           // max_pages · page_size: lengths are clamped to it, as in the run
  int slots;              // SM slots one piece can fill: SMs / row tiles per piece
  int fixed_cap;          // > 0: the piece size in tiles (batch-invariant); 0: from the batch
  int max_items, max_slots, max_cuts;  // BalanceBounds: the stores stay within them
  int ctas;               // the main kernel's grid y (cta_first has ctas + 1 entries)
  int packed_ok;          // 1: the shape is one row tile (memory-bound), packing may pay
  int pad;
};

// What a balanced plan's workspace must hold and the main kernel's grid y (ctas): the
// bounds at the top of this section (fixed_cap 0), or, with a fixed piece size C, at most
// ⌈capacity tiles / C⌉ pieces per sequence, one CTA each.
struct BalanceBounds {
  long long items, slots, cuts, ctas;
};
ATTNJIT_PLAN BalanceBounds balance_bounds(long long batch, long long sm_slots, long long fixed_cap,
                                          long long capacity_tiles) {
  if (fixed_cap <= 0) return {sm_slots + batch, 2 * sm_slots, sm_slots, sm_slots + batch};
  const long long pieces = capacity_tiles > fixed_cap ? (capacity_tiles + fixed_cap - 1) / fixed_cap : 1;
  return {batch * pieces, pieces > 1 ? batch * pieces : 1, batch, batch * pieces};
}

// The workspace of a balanced plan, in bytes from its start: the partials (as many slots as
// a schedule can cut), their lse, then the schedule. 256-byte aligned regions.
struct BalancedWorkspace {
  unsigned long long part_out, part_lse, items, split_seqs, counts, cta_first, scratch, total;
};
ATTNJIT_PLAN unsigned long long align256(unsigned long long x) { return (x + 255) / 256 * 256; }
ATTNJIT_PLAN BalancedWorkspace balanced_workspace(long long batch, long long part_rows,
                                                  const BalanceBounds& bound) {
  BalancedWorkspace w{};
  w.part_out = 0;
  w.part_lse = align256(w.part_out + 4ull * bound.slots * part_rows * kValueDim);
  w.items = align256(w.part_lse + 4ull * bound.slots * part_rows);
  w.split_seqs = align256(w.items + 16ull * bound.items);
  w.counts = align256(w.split_seqs + 16ull * bound.cuts);
  w.cta_first = align256(w.counts + 16);
  w.scratch = align256(w.cta_first + 4ull * (bound.ctas + 1));
  w.total = align256(w.scratch + 8ull * batch);
  return w;
}

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

static_assert(sizeof(WorkItem) == 16 && sizeof(SplitSeq) == 16 && sizeof(WorkCounts) == 16,
              "mla_decode schedule records");
static_assert(sizeof(QRows) == 16 && sizeof(Args) == 112 && ATTNJIT_OFFSET_IS(Args, out_scale, 104) && ATTNJIT_OFFSET_IS(Args, q, 48) &&
                  ATTNJIT_OFFSET_IS(Args, scale_log2, 72) && ATTNJIT_OFFSET_IS(Args, items, 80) &&
                  ATTNJIT_OFFSET_IS(Args, counts, 88) && ATTNJIT_OFFSET_IS(Args, cta_first, 96),
              "mla_decode::Args layout");
static_assert(sizeof(CombineArgs) == 88 && ATTNJIT_OFFSET_IS(CombineArgs, out_scale, 80) && ATTNJIT_OFFSET_IS(CombineArgs, num_splits, 48) &&
                  ATTNJIT_OFFSET_IS(CombineArgs, split_seqs, 56) &&
                  ATTNJIT_OFFSET_IS(CombineArgs, counts, 64) &&
                  ATTNJIT_OFFSET_IS(CombineArgs, sink, 72),
              "mla_decode::CombineArgs layout");
static_assert(sizeof(BalanceArgs) == 88 && ATTNJIT_OFFSET_IS(BalanceArgs, batch, 48) &&
                  ATTNJIT_OFFSET_IS(BalanceArgs, fixed_cap, 60) &&
                  ATTNJIT_OFFSET_IS(BalanceArgs, packed_ok, 80),
              "mla_decode::BalanceArgs layout");
static_assert(sizeof(CheckArgs) == 48 && ATTNJIT_OFFSET_IS(CheckArgs, max_q_len, 44),
              "mla_decode::CheckArgs layout");

}  // namespace attnjit::layout::mla_decode
