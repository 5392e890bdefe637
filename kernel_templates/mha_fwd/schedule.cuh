#pragma once
// mha_fwd: the units of a launch and which CTA runs them.
//
// A unit is one row block (block_m rows) of one (sequence, head) over one KV split, named by
// the coordinates a grid launch gives its CTA: x = row block, head (the KV head when packed),
// z = batch · num_splits + split (locate() in mask.cuh turns them into a Work).
//
// Grid launch: one CTA per unit; the hardware's CTA scheduler balances the SMs.
// Persistent launch (P.persistent): gridDim.x CTAs (one per SM) walk a static list —
// CTA c takes items c, c + gridDim.x, … . An item is one unit, or under a causal-like mask a
// pair of row blocks of one (head, z), the longest and the shortest left (x = p and
// M − 1 − p, locate() reversing x), so that items cost about the same: a static list is only
// balanced when they do. Row blocks of one (head, z) sit next to each other in the list, so
// the CTAs running them at the same time share that head's K/V through L2.
#include "common/arch.cuh"
#include "mha_fwd/params.cuh"

namespace attnjit::mha_fwd {

struct UnitCoords {
  int x;     // row block (reversed by locate() under causal-like masks: longest first)
  int head;  // query head, or KV head when packed
  int z;     // batch · num_splits + split
};

// The grid launch's unit: the CTA's own coordinates.
ATTNJIT_DEVICE UnitCoords grid_unit() {
  return {static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z)};
}

// A persistent CTA's walk over its units: item, and which unit of a causal pair.
template <auto P>
struct UnitWalk {
  using T = Traits<P>;
  int item;
  int half;  // 0: row block x = p (the pair's long one); 1: x = M − 1 − p

  ATTNJIT_DEVICE static int heads(const Args& a) { return T::kPacked ? a.h_kv : a.h_q; }
  ATTNJIT_DEVICE static int items_per_head(const Args& a) {
    return T::kCausalLike ? (a.m_tiles + 1) / 2 : a.m_tiles;
  }
  ATTNJIT_DEVICE static UnitWalk first() { return {static_cast<int>(blockIdx.x), 0}; }
  // a.items = items_per_head · heads · batch · num_splits, counted by the host (launch.cpp).
  ATTNJIT_DEVICE bool valid(const Args& a) const { return item < a.items; }

  ATTNJIT_DEVICE UnitCoords coords(const Args& a) const {
    const int per_head = items_per_head(a);
    const int p = item % per_head, hz = item / per_head;
    return {half == 0 ? p : a.m_tiles - 1 - p, hz % heads(a), hz / heads(a)};
  }

  ATTNJIT_DEVICE void advance(const Args& a) {
    const int p = item % items_per_head(a);
    if (T::kCausalLike && half == 0 && a.m_tiles - 1 - p != p) {
      half = 1;  // the pair's short row block (an odd count leaves the middle one alone)
    } else {
      item += static_cast<int>(gridDim.x);
      half = 0;
    }
  }
};

}  // namespace attnjit::mha_fwd
