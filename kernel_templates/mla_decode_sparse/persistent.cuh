#pragma once
// two_consumers as a persistent kernel (config `persistent`; bf16 rows, cluster 1): one CTA
// per SM walks the grid's x items blockIdx.x, + gridDim.x, … (Args::items), so a token's
// two 64-head tiles (adjacent x) still run side by side on two SMs and share the rows they
// gather through L2. Included by sm90_mla_decode_sparse.cuh after the roles.
//
// Why: a 16-step CTA (the prefill's topk 2048) paid ~5 % of its time once: the launch, Q's
// load, the first fills behind an index load, the output (the same pairs in 128-step CTAs
// ran 531 against 504 TFLOP/s, H200, session 39). Here the producer gathers the next
// item's first steps while the consumers finish the current one; only Q's load is still
// exposed, since Q's space stages the output (two_consumers.cuh's write_output_staged).
// Measured (H200, session 40): the target row +1.5 %, topk 512 +6 %. Tried and dropped:
// the next Q prefetched into L2 two steps ahead (no change; topk 512 −2 %), and the next Q
// loaded mid last step with the output stored from the fragments instead of staged
// (−3 % at the target row, −11 % at topk 512: the unstaged stores cost more than Q's wait).
// Session 41: the next Q loaded mid last step with the output staged in s.p, a warp at a
// time: no change, even at topk 512. The next item's first step waits for buffer 0 hi's
// and buffer 1's gathers, released at the last step's end as at every step boundary, and
// Q's load ran beside that latency (docs/performance.md, "Four probes at the target row").
//
// The roles run their item loops independently, through the same barriers:
//   the ring       kv_full / kv_empty phases continue across items: each role counts the
//                  steps before the item (g0) and waits on parity (g0 + step); WG1
//                  releases buffer 1 lo at the item's end (two_consumers.cuh).
//   q_full         completes once per item with steps (an item without keys loads no Q):
//                  the consumers count those loads for its parity.
//   ConsumerBar::kQFree  both consumers copied the item's output out of Q's space, and WG2
//                  read WG1's row sums in x.rows[0], which WG1's next running max
//                  overwrites; WG1's thread 0 then loads the next item's Q (the CTA's
//                  thread 0 loads the first).
#include "mla_decode_sparse/layout.cuh"

namespace attnjit::mla_decode_sparse {

// Item x's work, and whether its token exists (ragged q: a sequence's slots past its
// length are not tokens, and such an item does nothing).
template <auto P>
ATTNJIT_DEVICE Work item_work(const Args& a, u32 x, bool& exists) {
  const int slot = token_slot<P>(x);
  const Seq seq = sequence(a.q, slot / a.q.q_len);
  exists = slot % a.q.q_len < seq.q_len;
  return locate<P>(a, seq, x);
}
template <auto P>
ATTNJIT_DEVICE int item_steps(const Work& w, bool exists) {
  return exists ? (w.tile_end - w.tile_begin) / Traits<P>::kStepTiles : 0;
}

template <auto P>
ATTNJIT_DEVICE void persistent_kernel(const TmaDesc& q_map, const Args& a) {
  // Item x is blockIdx.x + k·gridDim.x, kept as uniform arithmetic (a token that does not
  // exist is skipped inside the loop, not by the stride): ptxas then holds it in a uniform
  // register. Skipping in the stride spilled it beside the consumers' 208 registers.
  const u32 items = static_cast<u32>(a.items);
  extern __shared__ u8 smem_raw[];
  auto& s = *reinterpret_cast<SharedStorage<P>*>((reinterpret_cast<u64>(smem_raw) + 1023) & ~u64(1023));
  const int wg = warpgroup_id_uniform();
  if (threadIdx.x == 0) {
    init_shared<P>(q_map, s);
    bool exists;
    const Work w = item_work<P>(a, blockIdx.x, exists);
    if (blockIdx.x < items && item_steps<P>(w, exists) > 0) load_q<P>(q_map, s, w);
  }
  __syncthreads();
  int g0 = 0;  // the ring's steps before the item
  if (wg == 0) {
    warpgroup_reg_dealloc<Traits<P>::kProducerRegs>();
    for (u32 x = blockIdx.x; x < items; x += gridDim.x) {
      bool exists;
      const Work w = item_work<P>(a, x, exists);
      if (!exists) continue;
      producer_warpgroup<P>(s, a, w, g0);
      g0 += item_steps<P>(w, exists);
    }
  } else {
    warpgroup_reg_alloc<Traits<P>::kConsumerRegs>();
    const int c = wg - 1;
    u32 q_loads = 0;  // Q loads consumed: q_full's phase
    for (u32 x = blockIdx.x; x < items; x += gridDim.x) {
      bool exists;
      const Work w = item_work<P>(a, x, exists);
      const int steps = item_steps<P>(w, exists);
      if (exists) consumer_warpgroup<P>(s, a, w, c, g0, q_loads, x);
      g0 += steps;
      q_loads += steps > 0 ? 1u : 0u;
      // Q's space is free once both consumers copied their output out of it.
      named_barrier_sync(ConsumerBar::kQFree, kConsumerThreads);
      const u32 next = x + gridDim.x;
      if (c == 0 && thread_in_warpgroup() == 0 && next < items) {
        const Work nw = item_work<P>(a, next, exists);
        fence_proxy_async_smem();  // the staging's generic accesses before the TMA's writes
        if (item_steps<P>(nw, exists) > 0) load_q<P>(q_map, s, nw);
      }
    }
  }
  pdl_launch_dependents();
}

}  // namespace attnjit::mla_decode_sparse
