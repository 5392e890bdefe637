#pragma once
// mha_fwd: which row blocks ("units": one block of block_m rows of one (sequence, head,
// split)) a CTA works on, and in which order. A unit is named by a cursor u; unit_valid,
// next_unit and unit_coords walk the CTA's list.
//
// Grid launch (P.persistent = false): one unit per CTA, from blockIdx — x the row block
// (reversed under causal-like masks: the hardware starts low block indices first, so the
// longer blocks go first), y the head (the KV head when packed), z batch × split.
//
// Persistent launch: gridDim.x CTAs, as many as the SMs hold at once, walk a static list
// of items — CTA c takes items c, c + gridDim.x, c + 2·gridDim.x, ... — and load the next
// unit's Q and K/V while they finish the current one (the refill thread's cursors in
// sm90_mha_fwd.cuh), which a grid launch cannot: its CTAs pay launch, Q and first-tile
// latency and an unhidden epilogue each.
//   Items run (batch·split, head, block) with the block fastest, so CTAs that run at the
// same time share one head's K/V in L2. An item is one row block, except under the causal
// mask: there item p of a head is the pair of blocks M−1−p and p (the longer first). A
// block's visible keys grow linearly with its index, so every pair costs the same and
// equal shares of items are equal shares of work; without pairing, CTA c's blocks would
// be c mod M, (c + gridDim.x) mod M, ... and the CTAs' totals would differ by up to 2×.
// The list is static — no work counter to reset before each launch — so the host keeps
// the grid launch for configs whose unit costs do not pair (ragged or paged lengths that
// live on the GPU; window and chunked masks), where the hardware's CTA scheduler balances.
//
// Cursor u = 2·r + s: the s-th unit (s = 0, 1) of the CTA's r-th item.
#include "common/arch.cuh"
#include "mha_fwd/params.cuh"

namespace attnjit::mha_fwd {

struct Unit {
  int m_block;  // row block in the sequence (rows [m_block·block_m, +block_m))
  int head;     // query head, or KV head when packed
  int z;        // batch · num_splits + split
};

template <Params P>
ATTNJIT_DEVICE int heads_on_grid(const Args& a) {
  return Traits<P>::kPacked ? a.h_kv : a.h_q;
}

// Items per (sequence, head, split): pairs of blocks under the causal mask.
template <Params P>
ATTNJIT_DEVICE int items_per_head(const Args& a) {
  return P.mask == Mask::kCausal ? (a.m_tiles + 1) / 2 : a.m_tiles;
}

template <Params P>
ATTNJIT_DEVICE i64 item_of(int u) {
  return static_cast<i64>(blockIdx.x) + static_cast<i64>(u >> 1) * gridDim.x;
}

template <Params P>
ATTNJIT_DEVICE bool unit_valid(int u, const Args& a) {
  if constexpr (!P.persistent) {
    return u == 0;
  } else {
    const i64 items = static_cast<i64>(items_per_head<P>(a)) * heads_on_grid<P>(a) *
                      a.batch * a.num_splits;
    return item_of<P>(u) < items;
  }
}

template <Params P>
ATTNJIT_DEVICE int next_unit(int u, const Args& a) {
  if constexpr (!P.persistent) {
    return u + 1;
  } else {
    if ((u & 1) == 0 && P.mask == Mask::kCausal) {
      // The pair's second block, unless the item is the middle block of an odd count.
      const int p = static_cast<int>(item_of<P>(u) % items_per_head<P>(a));
      if (p != a.m_tiles - 1 - p) return u + 1;
    }
    return (u | 1) + 1;
  }
}

template <Params P>
ATTNJIT_DEVICE Unit unit_coords(int u, const Args& a) {
  using T = Traits<P>;
  constexpr bool kReverse = T::kCausalLike;  // longest first
  Unit c;
  if constexpr (!P.persistent) {
    const int x = static_cast<int>(blockIdx.x);
    c.m_block = kReverse ? a.m_tiles - 1 - x : x;
    c.head = static_cast<int>(blockIdx.y);
    c.z = static_cast<int>(blockIdx.z);
  } else {
    const int per = items_per_head<P>(a), heads = heads_on_grid<P>(a);
    const i64 item = item_of<P>(u);
    const int p = static_cast<int>(item % per);
    const i64 bh = item / per;
    c.head = static_cast<int>(bh % heads);
    c.z = static_cast<int>(bh / heads);
    c.m_block = P.mask == Mask::kCausal && (u & 1) == 0 ? a.m_tiles - 1 - p : p;
  }
  return c;
}

}  // namespace attnjit::mha_fwd
