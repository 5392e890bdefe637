#pragma once
// Pieces shared by the mla_decode kernels: the CTA's work item (which sequence, split, rows
// and KV tiles). The two main kernels (sm90_mla_decode.cuh: softmax warpgroup + two P·V
// warpgroups; sm90_mla_decode_seesaw.cuh: two warpgroups taking turns) differ in how a CTA
// walks its tiles and writes its output.
#include "common/arch.cuh"
#include "common/types.cuh"
#include "common/wgmma.cuh"
#include "mla_decode/layout.cuh"

namespace attnjit::mla_decode {

using namespace attnjit::layout::mla_decode;  // argument blocks and plan, shared with the host

// How a CTA's warpgroups share a KV tile; each schedule is its own kernel template
// (sm90_mla_decode.cuh, sm90_mla_decode_seesaw.cuh).
enum class Schedule : int { kSeesaw, kSoftmaxWarpgroup };

// A kernel's P is the config's template fields — the rows of
// runtime/include/attnjit/ops/mla_decode_config.def — as a struct the generated translation
// unit declares (attnjit_generated::Params): P.dtype, P.num_heads, P.block_n, ...

// One sequence's tokens: [start, start + q_len) of q / out.
struct Seq {
  int start, q_len;
};

// Ragged offsets live on the GPU and may hold anything: clamped so that every row this
// sequence touches lies in [0, total_q) and there are at most q_len of them (a checked run
// reports the bad entry instead).
ATTNJIT_DEVICE Seq sequence(const QRows& q, int batch) {
  if (q.offsets == nullptr) return {batch * q.q_len, q.q_len};
  const int start = min(max(q.offsets[batch], 0), q.total_q);
  const int end = min(max(q.offsets[batch + 1], start), q.total_q);
  return {start, min(end - start, q.q_len)};
}

// Row of lse for (sequence, head, query): padded [b, h, q_len]; ragged [h, total_q].
ATTNJIT_DEVICE i64 lse_index(const QRows& q, int batch, const Seq& s, int num_heads, int head,
                             int q_idx) {
  if (q.offsets == nullptr) return (static_cast<i64>(batch) * num_heads + head) * q.q_len + q_idx;
  return static_cast<i64>(head) * q.total_q + s.start + q_idx;
}

// The CTA's work. Static split: grid (row tiles, splits, b). Balanced: grid (row tiles, the
// plan's bound on items), item blockIdx.y of the schedule's list.
struct Tile {
  int batch, slot, row0;   // slot: the partial this CTA writes, or -1: out directly; row0:
                           // first packed row (q_idx·h + head) of this CTA's tile
  Seq seq;                 // the sequence's tokens; rows ≥ seq.q_len·h are padding
  int len;                 // L, clamped to the table's capacity
  int tile_begin, tile_end;
};

// The schedule's items this CTA walks, in order: balanced, [cta_first[y], cta_first[y + 1])
// of the list (kept within the schedule's count whatever the workspace holds); static
// split, the one piece blockIdx names (item 0, unused).
struct Items {
  int begin, end;
};
ATTNJIT_DEVICE Items cta_items(const Args& a) {
  if (a.items == nullptr) return {0, 1};
  const int count = a.counts->items;
  const int y = static_cast<int>(blockIdx.y);
  const int begin = min(max(a.cta_first[y], 0), count);
  return {begin, min(max(a.cta_first[y + 1], begin), count)};
}

template <auto P>
ATTNJIT_DEVICE Tile locate(const Args& a, int item) {
  Tile t;
  t.row0 = static_cast<int>(blockIdx.x) * P.block_m;
  int split = 0;
  if (a.items != nullptr) {
    const WorkItem w = a.items[item];
    t.batch = w.batch;
    t.slot = w.slot;
    t.tile_begin = w.tile_begin;
    t.tile_end = w.tile_end;
  } else {
    t.batch = static_cast<int>(blockIdx.z);
    split = static_cast<int>(blockIdx.y);
    t.slot = a.num_splits > 1 ? t.batch * a.num_splits + split : -1;
  }
  int len = a.cache_lens[t.batch];
  const int capacity = a.max_pages * P.page_size;  // never index past the table row
  len = len < 0 ? 0 : (len > capacity ? capacity : len);
  t.len = len;
  const int tiles = ceil_div(len, P.block_n);
  if (a.items == nullptr) {
    const int per_split = ceil_div(tiles, a.num_splits);
    t.tile_begin = min(tiles, split * per_split);
    t.tile_end = min(tiles, t.tile_begin + per_split);
  } else {  // the schedule read the same lengths; clamped all the same
    t.tile_end = min(t.tile_end, tiles);
    t.tile_begin = min(t.tile_begin, t.tile_end);
  }
  // A ragged sequence shorter than the bound leaves whole row tiles without a query: they
  // walk no KV tile and write nothing.
  t.seq = sequence(a.q, t.batch);
  if (t.row0 >= t.seq.q_len * P.num_heads) t.tile_end = t.tile_begin;
  return t;
}

// Last key each of this thread's two accumulator rows sees: causal (q_len > 1) row q_idx
// sees keys 0 .. L - q_len + q_idx, q_len being the sequence's own; otherwise all L.
// Negative: the row sees no key.
template <auto P>
ATTNJIT_DEVICE void row_limits(const Tile& t, int (&limit)[2]) {
  const int q_len = t.seq.q_len;
  const int tid = static_cast<int>(threadIdx.x) % kWarpgroupThreads;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int gr = t.row0 + wgmma_acc_coord(tid, 2 * r).row;
    const int causal_limit = t.len - q_len + gr / P.num_heads;
    limit[r] = P.max_q_len > 1 && causal_limit < t.len - 1 ? causal_limit : t.len - 1;
  }
}

// The smallest of those limits over the CTA's 64 rows (uniform): a KV tile whose last key
// is at most this needs no mask for any row.
template <auto P>
ATTNJIT_DEVICE int cta_min_limit(const Tile& t) {
  const int causal_limit = t.len - t.seq.q_len + t.row0 / P.num_heads;
  return P.max_q_len > 1 && causal_limit < t.len - 1 ? causal_limit : t.len - 1;
}

}  // namespace attnjit::mla_decode
