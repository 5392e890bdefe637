#pragma once
// sm90_mla_decode_seesaw: absorbed-MLA decode over a paged latent cache on Hopper, with two
// warpgroups that take turns (FlashMLA's "seesaw" schedule).
//
// One CTA = one tile of 64 query rows (q_len × heads packed, row = t·h + head) over its
// pieces of KV tiles: one split of one sequence (static), or the balanced schedule's
// pieces for this CTA, one after the other (walk_pieces); it walks each piece's tiles in
// pairs (even tile, odd tile).
// 256 threads = two warpgroups; each owns half of O[64 × 512] (128 f32 accumulators per
// thread) and both keep a 255-register budget (at 384 threads ptxas would cap every thread
// at 168):
//   even (WG0)  O[:, 0:256):   S_even = Q·K_evenᵀ, softmax of it, P_even·V_even[:, 0:256),
//                              then P_odd (from WG1, via smem)·V_odd[:, 0:256)
//   odd  (WG1)  O[:, 256:512): S_odd = Q·K_oddᵀ, softmax of it, P_odd·V_odd[:, 256:512),
//                              then P_even (from WG0, via smem)·V_even[:, 256:512)
// Each warpgroup computes S for one tile in two, so S (576 of every 1088 FLOPs) is split
// evenly, and while one warpgroup does softmax the other keeps the tensor cores busy. The
// running row max lives in shared memory: the odd tile's softmax starts from the even
// tile's max, and each P that crosses to the other warpgroup is scaled to the pair's final
// max first (P_even by exp2(m_even - m_odd)).
//
// Shared memory (224 KiB at 64 keys): Q (72 KiB), two KV tile buffers (even, odd; 72 KiB
// each), P_even (8 KiB). P_odd takes the place of Q's rope chunk, which both warpgroups
// copy into registers first (their S uses it as a register A operand). Each KV buffer has
// a TMA barrier per 64-column chunk; its "lo" half (chunks 0..3 = V columns 0..255, read by
// WG0's P·V) and its "hi" half (chunks 4..8 = V columns 256..511 and the rope, read by
// WG1's P·V) are refilled separately, each by its warpgroup as soon as its P·V is done.
#include "mla_decode/seesaw_pieces.cuh"

namespace attnjit::mla_decode::seesaw {

// What both roles know about the CTA's work (kept small: registers are at the cap).
struct Walk {
  Tile tile;      // sequence, split, first row, length, KV tile range
  int min_limit;  // tiles whose keys are all <= this need no mask (cta_min_limit)
  u32 base;       // shared address of SharedStorage (Offsets<P> from here)
  u32 fills;      // bit b: parity of the fills of KV buffer b by the CTA's earlier pieces
                  // (the roles count their pairs from it: a pair's phase is its count, mod 2)
};

// Masks a tile that needs it (the row limits are recomputed there: boundary tiles only)
// and returns the row max of its raw scores.
template <auto P>
ATTNJIT_DEVICE void tile_row_max(float (&sc)[Traits<P>::kSAcc], const Walk& w, int tile,
                                 float (&tile_max)[2]) {
  const int key0 = tile * P.block_n;
  int limit[2];
  row_limits<P>(w.tile, limit);
  mask_and_max<P>(sc, key0 + P.block_n - 1 > w.min_limit, key0, limit, tile_max);
}

// ---- the two roles ----------------------------------------------------------------------

// WG0: even tiles' S and softmax, O[:, 0:256). On entry S of the first even tile is done.
template <auto P, class Feed>
ATTNJIT_DEVICE void even_role(SharedStorage<P>& s, const TmaDesc& kv_map, const Args& a,
                              const Feed& feed, const Walk& w, float (&o)[Traits<P>::kAcc],
                              float (&l)[2], const u32 (&q_rope)[4][4]) {
  using T = Traits<P>;
  using O = Offsets<P>;
  const int tid = thread_in_warpgroup();
  const int row[2] = {wgmma_acc_coord(tid, 0).row, wgmma_acc_coord(tid, 2).row};
  const int tile_end = w.tile.tile_end, len = w.tile.len;
  float sc[T::kSAcc];  // S_even, then P_even: [64 × 64] accumulator fragment
  u32 pf[4][4];        // P_even as RS A fragments (k16 steps × 4 registers)

  // S of the pair's even tile (chunks 0..3 first: their half is refilled first).
  auto s_even = [&](int pair) {
    const u32 phase = static_cast<u32>(pair) & 1u;
    issue_qk<P, 0, T::kLoChunks, true>(sc, w.base + O::kQ, w.base + O::kKv0, q_rope,
                                       s.kv_full[0], phase);
    wgmma_commit();
    return phase;
  };
  const int first = static_cast<int>(w.fills & 1u);
  const u32 phase0 = s_even(first);
  issue_qk<P, T::kLoChunks, T::kChunks, false>(sc, w.base + O::kQ, w.base + O::kKv0, q_rope,
                                               s.kv_full[0], phase0);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operands(sc);

  for (int even = w.tile.tile_begin, pair = first; even < tile_end; even += 2, ++pair) {
    const int odd = even + 1;
    const bool has_odd = odd < tile_end;
    const int key0 = even * P.block_n;

    // 1. Softmax of the even tile against the running max; O scaled to the new max.
    float tile_max[2], m_new[2], scale[2], sum[2];
    feed.template scale_keys<P>(sc, w.base, 0);
    tile_row_max<P>(sc, w, even, tile_max);
    const float c[2] = {feed.template row_factor<P>(w.base, a, row[0]),
                        feed.template row_factor<P>(w.base, a, row[1])};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_old = ld_shared_f32(w.base + O::kRowMax + 4 * row[r]);
      m_new[r] = fmaxf(m_old, tile_max[r] * c[r]);
      scale[r] = rescale_factor(m_old, m_new[r]);
    }
    __syncwarp();  // the 4 lanes of a row have read row_max before one of them writes it
    if (tid % 4 == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        st_shared_f32(w.base + O::kRowMax + 4 * row[r], m_new[r]);
        st_shared_f32(w.base + O::kScaleEven + 4 * row[r], scale[r]);
      }
    }
    named_barrier_arrive(Bar::kEvenMax, kBothWarpgroups);
    exponentiate<P>(sc, m_new, c, sum);
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = l[r] * scale[r] + sum[r];
    scale_rows<P>(o, scale);

    // 2. O += P_even · V_even[:, 0:256) from registers (P_even carries the key factors from
    //    here on, into WG1's half too).
    feed.template scale_keys<P>(sc, w.base, 0);
    to_a_fragments<P>(sc, pf);
    if (len - key0 < P.block_n) zero_v_rows<P>(w.base + O::kKv0, len - key0, 0);
    wgmma_fence();
    issue_pv_local<P>(o, pf, w.base + O::kKv0, 0);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(o);

    // 3. The odd tile's max is known: P_even scaled to it goes to WG1; the even buffer's lo
    //    half (read by S_even and by the P·V just retired) is free for the next even tile.
    //    WG1 arrives at kOddMax also without an odd tile: it then has retired its last
    //    read of p_even, which is about to be overwritten.
    named_barrier_sync(Bar::kOddMax, kBothWarpgroups);
    float scale_odd[2] = {1.0f, 1.0f};
    if (has_odd) {
      scale_odd[0] = ld_shared_f32(w.base + O::kScaleOdd + 4 * row[0]);
      scale_odd[1] = ld_shared_f32(w.base + O::kScaleOdd + 4 * row[1]);
    }
    if (tid == 0 && even + 2 < tile_end)
      feed.template refill<P, 0>(s, kv_map, a, w.tile.batch, even + 2, 0);
    store_p<P>(sc, scale_odd, w.base + O::kPEven);
    named_barrier_arrive(Bar::kPEvenReady, kBothWarpgroups);
    if (!has_odd) break;

    // 4. O += P_odd · V_odd[:, 0:256), P_odd from WG1 through smem. O moves to the odd
    //    tile's max first, while WG1 is still writing P_odd.
    scale_rows<P>(o, scale_odd);
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] *= scale_odd[r];
    named_barrier_sync(Bar::kPOddReady, kBothWarpgroups);
    if (len - odd * P.block_n < P.block_n) zero_v_rows<P>(w.base + O::kKv1, len - odd * P.block_n, 0);
    wgmma_fence();
    issue_pv_remote<P>(o, w.base + O::kPOdd, w.base + O::kKv1, 0);
    wgmma_commit();

    // 5. S of the next even tile behind it; the odd buffer's lo half is free once that
    //    P·V retires.
    if (even + 2 < tile_end) {
      const u32 phase = s_even(pair + 1);
      wgmma_wait<1>();
      if (tid == 0 && odd + 2 < tile_end)
        feed.template refill<P, 0>(s, kv_map, a, w.tile.batch, odd + 2, 1);
      issue_qk<P, T::kLoChunks, T::kChunks, false>(sc, w.base + O::kQ, w.base + O::kKv0, q_rope,
                                                   s.kv_full[0], phase);
      wgmma_commit();
    }
    wgmma_wait<0>();
    wgmma_fence_operands(o);
    wgmma_fence_operands(sc);
  }
}

// WG1: odd tiles' S and softmax, O[:, 256:512). On entry S of the first odd tile is done.
template <auto P, class Feed>
ATTNJIT_DEVICE void odd_role(SharedStorage<P>& s, const TmaDesc& kv_map, const Args& a,
                             const Feed& feed, const Walk& w, float (&o)[Traits<P>::kAcc],
                             float (&l)[2], const u32 (&q_rope)[4][4]) {
  using T = Traits<P>;
  using O = Offsets<P>;
  const int tid = thread_in_warpgroup();
  const int row[2] = {wgmma_acc_coord(tid, 0).row, wgmma_acc_coord(tid, 2).row};
  const int tile_end = w.tile.tile_end, len = w.tile.len;
  float sc[T::kSAcc];  // S_odd, then P_odd
  u32 pf[4][4];        // P_odd as RS A fragments

  // S of the pair's odd tile (chunks 4..8 first: their half is refilled first).
  auto s_odd = [&](int pair) {
    const u32 phase = static_cast<u32>(pair) & 1u;
    issue_qk<P, T::kLoChunks, T::kChunks, true>(sc, w.base + O::kQ, w.base + O::kKv1, q_rope,
                                                s.kv_full[1], phase);
    issue_qk<P, 0, T::kLoChunks, false>(sc, w.base + O::kQ, w.base + O::kKv1, q_rope,
                                        s.kv_full[1], phase);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(sc);
  };
  const int first = static_cast<int>(w.fills >> 1);
  if (w.tile.tile_begin + 1 < tile_end) s_odd(first);

  for (int even = w.tile.tile_begin, pair = first; even < tile_end; even += 2, ++pair) {
    const int odd = even + 1;
    const bool has_odd = odd < tile_end;

    // 1. Softmax of the odd tile, starting from the even tile's max.
    named_barrier_sync(Bar::kEvenMax, kBothWarpgroups);
    float scale[2];
    const float scale_even[2] = {ld_shared_f32(w.base + O::kScaleEven + 4 * row[0]),
                                 ld_shared_f32(w.base + O::kScaleEven + 4 * row[1])};
    if (has_odd) {
      float tile_max[2], m_new[2], scale_odd[2], sum[2];
      feed.template scale_keys<P>(sc, w.base, 1);
      tile_row_max<P>(sc, w, odd, tile_max);
      const float c[2] = {feed.template row_factor<P>(w.base, a, row[0]),
                        feed.template row_factor<P>(w.base, a, row[1])};
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float m_even = ld_shared_f32(w.base + O::kRowMax + 4 * row[r]);
        m_new[r] = fmaxf(m_even, tile_max[r] * c[r]);
        scale_odd[r] = rescale_factor(m_even, m_new[r]);
        scale[r] = scale_even[r] * scale_odd[r];
      }
      __syncwarp();
      if (tid % 4 == 0) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          st_shared_f32(w.base + O::kRowMax + 4 * row[r], m_new[r]);
          st_shared_f32(w.base + O::kScaleOdd + 4 * row[r], scale_odd[r]);
        }
      }
      named_barrier_arrive(Bar::kOddMax, kBothWarpgroups);
      exponentiate<P>(sc, m_new, c, sum);
#pragma unroll
      for (int r = 0; r < 2; ++r) l[r] = l[r] * scale[r] + sum[r];
    } else {
      named_barrier_arrive(Bar::kOddMax, kBothWarpgroups);  // p_even may be overwritten
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        scale[r] = scale_even[r];
        l[r] *= scale[r];
      }
    }
    scale_rows<P>(o, scale);

    // 2. P_odd to smem (for WG0) and O += P_odd · V_odd[:, 256:512) from registers.
    if (has_odd) {
      const float one[2] = {1.0f, 1.0f};
      feed.template scale_keys<P>(sc, w.base, 1);
      to_a_fragments<P>(sc, pf);
      store_p<P>(sc, one, w.base + O::kPOdd);
      named_barrier_arrive(Bar::kPOddReady, kBothWarpgroups);
      if (len - odd * P.block_n < P.block_n) zero_v_rows<P>(w.base + O::kKv1, len - odd * P.block_n, 1);
      wgmma_fence();
      issue_pv_local<P>(o, pf, w.base + O::kKv1, 1);
      wgmma_commit();
    }

    // 3. O += P_even · V_even[:, 256:512), P_even from WG0 through smem.
    named_barrier_sync(Bar::kPEvenReady, kBothWarpgroups);
    if (len - even * P.block_n < P.block_n) zero_v_rows<P>(w.base + O::kKv0, len - even * P.block_n, 1);
    wgmma_fence();
    issue_pv_remote<P>(o, w.base + O::kPEven, w.base + O::kKv0, 1);
    wgmma_commit();

    // 4. Refill the hi halves as their P·V retire: odd buffer first, then even.
    if (has_odd) {
      wgmma_wait<1>();
      if (tid == 0 && odd + 2 < tile_end)
        feed.template refill<P, 1>(s, kv_map, a, w.tile.batch, odd + 2, 1);
    }
    wgmma_wait<0>();
    wgmma_fence_operands(o);
    if (tid == 0 && even + 2 < tile_end)
      feed.template refill<P, 1>(s, kv_map, a, w.tile.batch, even + 2, 0);

    // 5. S of the next odd tile.
    if (odd + 2 < tile_end) s_odd(pair + 1);
  }
}

// ---- the walk over the CTA's pieces ------------------------------------------------------

// One warpgroup's walk over the CTA's pieces (balanced: possibly of several sequences;
// static: one), kWg 0 the even role, 1 the odd. Each piece fills the pipeline afresh; the
// barriers' phases run on (`phases`: bit b the parity of KV buffer b's fills so far, bit 2
// that of Q's loads). Each warpgroup runs its own copy of the loop: one loop around both
// roles made ptxas spill 16-30 registers at the loop's merge points.
template <auto P, int kWg, class Feed = TmaFeed>
ATTNJIT_DEVICE void walk_pieces(SharedStorage<P>& s, const TmaDesc& q_map, const TmaDesc& kv_map,
                                const Args& args, const Items items, const Feed& feed = Feed{}) {
  using T = Traits<P>;
  const int tid = thread_in_warpgroup();
  u32 phases = 0;
  for (int item = items.begin; item < items.end; ++item) {
    if (kWg == 0 && tid < P.block_m) s.row_max[tid] = neg_inf();
    float o[T::kAcc];  // this warpgroup's O[64 × 256] f32 accumulator fragment
#pragma unroll
    for (int i = 0; i < T::kAcc; ++i) o[i] = 0.0f;
    float l[2] = {0.0f, 0.0f};
    // Registers are at the cap: the piece is located again for the epilogue rather than
    // kept live across the role.
    if (const Tile t = locate<P>(args, item); t.tile_begin < t.tile_end) {
      if (kWg == 0 && tid == 0)  // Q and both buffers of the first pair
        feed.template piece_start<P>(s, q_map, kv_map, args, t);
      Walk w;
      w.tile = t;
      w.min_limit = cta_min_limit<P>(t);
      w.base = smem_u32(&s);
      w.fills = phases & 3u;
      // Buffer 0 takes the piece's even tiles, buffer 1 its odd ones; Q one load.
      const u32 n = static_cast<u32>(t.tile_end - t.tile_begin);
      const u32 q_phase = (phases >> 2) & 1u;
      phases ^= ((n + 1) / 2 & 1u) | ((n / 2 & 1u) << 1) | 4u;

      // Both warpgroups copy Q's rope chunk into registers; only then may P_odd overwrite it.
      mbarrier_wait(&s.q_full, q_phase);
      u32 q_rope[4][4];  // Q[:, 512:576) as RS A fragments, one per k16 step
      // The fragments' 16 addresses are the same for every piece: hidden from the compiler
      // per piece, or it keeps them live across the whole loop (and spills them).
      const u8* q_tile = s.q;
      asm volatile("" : "+l"(q_tile));
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma_load_a_fragment<QTile<P>>(q_rope[kk], q_tile, static_cast<u32>(T::kRopeChunk * 128 + kk * 32));
      named_barrier_sync_unaligned(Bar::kPiece, kBothWarpgroups);  // also publishes row_max's reset

      if constexpr (kWg == 0)
        even_role<P, Feed>(s, kv_map, args, feed, w, o, l, q_rope);
      else
        odd_role<P, Feed>(s, kv_map, args, feed, w, o, l, q_rope);
    } else {
      named_barrier_sync_unaligned(Bar::kPiece, kBothWarpgroups);  // row_max's reset
    }

    // Epilogue: the row sum is the two warpgroups' parts; the max is the last one written.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    const int row[2] = {wgmma_acc_coord(tid, 0).row, wgmma_acc_coord(tid, 2).row};
    if (tid % 4 == 0) {
      s.row_sum[kWg][row[0]] = l[0];
      s.row_sum[kWg][row[1]] = l[1];
    }
    named_barrier_sync_unaligned(Bar::kRowSums, kBothWarpgroups);
    const float m[2] = {s.row_max[row[0]], s.row_max[row[1]]};
    const float l_all[2] = {s.row_sum[0][row[0]] + s.row_sum[1][row[0]],
                            s.row_sum[0][row[1]] + s.row_sum[1][row[1]]};
    write_output<P>(smem_u32(s.kv[0]), o, kWg, args, locate<P>(args, item), m, l_all);
    // The next piece's TMA loads overwrite the staging tile, Q and P_odd, which this
    // piece's threads read and wrote through the generic proxy.
    fence_proxy_async_smem();
    named_barrier_sync_unaligned(Bar::kPiece, kBothWarpgroups);
  }
}

// ---- entry -----------------------------------------------------------------------------

template <auto P>
__global__ void __launch_bounds__(Traits<P>::kThreads, 1)
    kernel(const __grid_constant__ TmaDesc q_map,   // [total_q·h, 576], box [64, 64]
           const __grid_constant__ TmaDesc kv_map,  // [pages·page_size, 576], box [min(64, page), 64]
           const Args args) {
  static_assert(kPlanMatches<P>, "mla_decode/layout.cuh's smem_bytes is not this SharedStorage's");
  const Items items = cta_items(args);
  if (items.begin >= items.end) return;  // balanced: no piece for this CTA
  using T = Traits<P>;
  extern __shared__ u8 smem_raw[];
  auto& s = *reinterpret_cast<SharedStorage<P>*>(
      (reinterpret_cast<u64>(smem_raw) + 1023) & ~u64(1023));
  const int wg = warpgroup_id_uniform();
  if (threadIdx.x == 0) {
    u32 dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    if (dyn < kDynamicSmemBytes<P>) __trap();  // host and device disagree on the plan
    if (!layout_ok<P>(s)) __trap();            // Offsets<P> disagrees with SharedStorage<P>
    prefetch_tma_desc(q_map);
    prefetch_tma_desc(kv_map);
    mbarrier_init(&s.q_full, 1);
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < T::kChunks; ++c) mbarrier_init(&s.kv_full[b][c], 1);
    fence_mbarrier_init();
  }
  __syncthreads();

  if (wg == 0)
    walk_pieces<P, 0>(s, q_map, kv_map, args, items);
  else
    walk_pieces<P, 1>(s, q_map, kv_map, args, items);
  pdl_launch_dependents();  // the combine kernel may start its prologue
}

}  // namespace attnjit::mla_decode::seesaw
