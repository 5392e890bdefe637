#pragma once
// mla_decode_sparse's two_consumers schedule (block_n 64, 4 stages; bf16 or fp8 rows):
// FlashMLA's Hopper sparse-prefill roles on this kernel's ring, Q tile and epilogue
// (sm90_mla_decode_sparse.cuh, which includes this file).
//
// A step is 128 keys: the even 64 (KV buffer 0 = ring stages 0, 1) and the odd 64
// (buffer 1 = stages 2, 3). Each buffer is filled in two column halves, lo = chunks 0..3
// (V columns [0, 256)) and hi = chunks 4..8 (V columns [256, 512) and the rope), each
// refilled as soon as its last reader is done.
//   WG0  producer (producer.cuh): per step, the four halves in the order the consumers
//        free them (buf 0 lo, buf 1 hi, buf 0 hi, buf 1 lo); 16 groups of 8 threads, a
//        group 4 keys; the indices ahead (bf16 a step, fp8 from a buffer's last fill of
//        the step on).
//        bf16: 16-byte cp.async into the swizzled ring, a group's 8 threads the 16-byte
//          units of a 128-byte chunk row (one coalesced line per key and chunk).
//        fp8 (656-byte rows): the same cp.async of each key's raw half into its own ring
//          row, then widened in place (e4m3 · scale → bf16) a fill later; the hi halves
//          by the consumers instead (WG1 buffer 0's under its S over the lo half, WG2
//          buffer 1's before its S; fp8_producer.cuh).
//   WG1  even consumer, O[:, 0:256): S_even = Q·K_evenᵀ [64 × 64]; the row max so far
//        (running max, then the even keys) to WG2; P_even·V_even[lo] from registers (RS);
//        then the step's final max from WG2: P_even rescaled to it into shared memory for
//        WG2, O rescaled, and P_odd (WG2's, from shared memory)·V_odd[lo].
//   WG2  odd consumer, O[:, 256:512): S_odd = Q·K_oddᵀ; the final max = max(WG1's, the
//        odd keys'); P_odd·V_odd[hi] from registers, P_odd to shared memory for WG1, then
//        P_even·V_even[hi].
// Why: each S wgmma is 64 × 64 × 16 (the widest S whose operands and P fit beside O), and
// the two consumers' S chains run at once, so one consumer's softmax hides under the
// other's tensor work; softmax_wg's single S chain bounds that schedule.
//
// P_even lives in buffer 0's rope rows (chunk 8, rows 0..63): WG1's S has read them, and
// they are refilled only after WG2's P_even·V_even[hi] retired (buf 0 hi's release).
// Each buffer's key validity flags are stored with its first fill of a step (buf 0: lo,
// buf 1: hi), after the consumer that reads them released that half, so after its mask.
//
// Hand-offs, each named once:
//   kv_full[2·buf + half]   bf16: the producer's cp.async of that half landed (one noinc
//                           arrival per thread), and the 16 marking threads' flags are
//                           published (one release arrival each, on every fill). fp8 lo
//                           halves: each producer thread's widened stores (and flags) are
//                           done; hi halves: their raw bytes landed (cp.async and plain
//                           arrivals), for the consumer that widens them.
//   x.kv_empty[2·buf + half]  its reader retired: buf 0 lo WG1 (P_even·V lo), buf 0 hi WG2
//                           (P_even·V hi, P_even), buf 1 hi WG2 (P_odd·V hi), buf 1 lo WG1
//                           (P_odd·V lo; P_odd in s.p is rewritten only after this refill).
//   ConsumerBar             the max and P exchanges below; x.rows[0] carries the max.
#include "mla_decode_sparse/layout.cuh"

namespace attnjit::mla_decode_sparse {

enum class ConsumerBar : u32 {
  kEvenMax = 5,  // WG1 → WG2: its running row max after the even keys is in x.rows[0]
                 // (ids 1..4 are softmax_wg's)
  kOddMax = 6,   // WG2 → WG1: the step's final row max is in x.rows[0]
  kEvenP = 7,    // WG1 → WG2: P_even, scaled to the final max, is in buffer 0's rope rows
  kOddP = 8,     // WG2 → WG1: P_odd is in s.p
  kSums = 9,     // both: each consumer's row sums are in x.rows[c]
  kOutStaged = 12,  // consumer c's 128 threads (id kOutStaged + c): its O half is staged
                    // (10, 11: fp8_producer.cuh's kWidenedBar)
  kQFree = 14,   // persistent, both: the item's output left Q's space, its sums were read
                 // (persistent.cuh)
};
inline constexpr u32 kConsumerThreads = 2 * kWarpgroupThreads;
inline constexpr int kLoChunks = 4;                           // chunks 0..3: V columns [0, 256)
inline constexpr int kGroupThreads = 8;                       // a chunk row's 16-byte units
inline constexpr int kGroups = kWarpgroupThreads / kGroupThreads;  // 16 key groups (and markers)
enum : int { kLo = 0, kHi = 1 };
// The chunks of a column half: lo [0, 4), hi [4, 9).
template <int kHalf>
struct HalfChunks {
  static constexpr int kBegin = kHalf == kLo ? 0 : kLoChunks;
  static constexpr int kEnd = kHalf == kLo ? kLoChunks : kHeadDim * 2 / 128;
  static constexpr int kCount = kEnd - kBegin;
};

template <auto P>
struct Consumers {
  using T = Traits<P>;
  static constexpr int kBufKeys = P.block_n;                  // keys per consumer S: 64
  static constexpr int kKeysPerThread = kBufKeys / kGroups;   // 4: keys group, group + 16, ...
  static constexpr int kSAcc = kBufKeys / 2;                  // S [64 × 64] accumulators
  static constexpr int kRopeChunk = T::kChunks - 1;
  static_assert(T::kKvStages == 4 && T::kStepTiles == 4, "2 buffers × 2 halves = the 4 ring stages");
};

template <auto P>
ATTNJIT_DEVICE MBarrier* full_bar(SharedStorage<P>& s, int buf, int half) { return &s.kv_full[2 * buf + half]; }
template <auto P>
ATTNJIT_DEVICE MBarrier* empty_bar(SharedStorage<P>& s, int buf, int half) { return &s.x.kv_empty[2 * buf + half]; }

}  // namespace attnjit::mla_decode_sparse

#include "mla_decode_sparse/pair.cuh"

namespace attnjit::mla_decode_sparse {

// kv_full's arrivals per fill. bf16: a cp.async arrival per producer thread and a
// marker's per group. fp8: each producer thread's, after its widened stores (a marker's
// flags are stored before it).
template <auto P>
ATTNJIT_DEVICE void init_consumer_barriers(SharedStorage<P>& s) {
  for (int i = 0; i < Traits<P>::kKvStages; ++i) {  // i = 2·buf + half
    // fp8: the producer's widen arrivals; on the hi halves, which the consumers widen, each
    // producer thread's cp.async arrival and its plain one (fp8_producer.cuh).
    const u32 full = !Traits<P>::kFp8 ? kWarpgroupThreads + kGroups
                     : i % 2 == kHi   ? 2 * kWarpgroupThreads
                                      : kWarpgroupThreads;
    mbarrier_init(&s.kv_full[i], full);
    mbarrier_init(&s.x.kv_empty[i], kWarpgroupThreads);
  }
  if constexpr (Traits<P>::kPaired) init_pair_barriers<P>(s);
}

}  // namespace attnjit::mla_decode_sparse

#include "mla_decode_sparse/producer.cuh"

namespace attnjit::mla_decode_sparse {

// ---- consumer pieces --------------------------------------------------------------------

// S (+)= Q · K[buffer rows from row0]ᵀ over chunks [kC0, kC1); kFirst: its first k-step
// overwrites. Not committed here.
template <auto P, int kC0, int kC1, bool kFirst>
ATTNJIT_DEVICE void issue_s(float (&sc)[Consumers<P>::kSAcc], u32 q_addr, u32 kv_addr, u32 row0) {
  // Descriptors from opaque bases: the compiler would hoist all 36 out of the step loop.
  opaque(q_addr);
  opaque(kv_addr);
  const u64 q_desc = QTile::desc(q_addr, 0), k_desc = KTile<P>::desc(kv_addr, 0, row0);
  wgmma_fence();
#pragma unroll
  for (int c = kC0; c < kC1; ++c)
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const u32 k_byte = static_cast<u32>(c * 128 + kk * 32);
      wgmma_ss<DType::kBF16, P.block_n>(sc, q_desc + desc_step<QTile>(k_byte),
                                        k_desc + desc_step<KTile<P>>(k_byte), !(kFirst && c == kC0 && kk == 0));
    }
}

// O[:, cols from col_byte] += P (registers: RS fragments) · V[buffer rows from row0].
template <auto P>
ATTNJIT_DEVICE void issue_pv_local(float (&o)[kValueDim / 4], const u32 (&pf)[4][4], u32 kv_addr, u32 row0,
                                   u32 col_byte) {
  opaque(kv_addr);
  const u64 v_desc = VTile<P>::desc(kv_addr, row0, col_byte);
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < P.block_n / 16; ++ks)
    wgmma_rs<DType::kBF16, kValueDim / 2, WgmmaMajor::kMN>(o, pf[ks], v_desc + desc_step<VTile<P>>(static_cast<u32>(ks * 16)),
                                                          true);
}

// O[:, cols from col_byte] += P (shared memory at p_addr) · V[buffer rows from row0].
template <auto P>
ATTNJIT_DEVICE void issue_pv_remote(float (&o)[kValueDim / 4], u32 p_addr, u32 kv_addr, u32 row0, u32 col_byte) {
  opaque(p_addr);
  opaque(kv_addr);
  const u64 p_desc = PTile<P>::desc(p_addr, 0), v_desc = VTile<P>::desc(kv_addr, row0, col_byte);
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < P.block_n / 16; ++ks)
    wgmma_ss<DType::kBF16, kValueDim / 2, WgmmaMajor::kK, WgmmaMajor::kMN>(
        o, p_desc + desc_step<PTile<P>>(static_cast<u32>(ks * 32)),
        v_desc + desc_step<VTile<P>>(static_cast<u32>(ks * 16)), true);
}

// Skipped keys' raw scores → -inf (by replacement: never arithmetic on a stale row's
// value), and the row max of the raw scores, reduced over the 4 lanes of a row.
template <auto P>
ATTNJIT_DEVICE void mask_and_max(float (&sc)[Consumers<P>::kSAcc], u32 valid_addr, float (&tile_max)[2]) {
  const int tid = thread_in_warpgroup();
  tile_max[0] = tile_max[1] = neg_inf();
#pragma unroll
  for (int i = 0; i < Consumers<P>::kSAcc; ++i) {
    const int r = (i / 2) % 2;
    const float x = ld_shared_u32(valid_addr + 4 * wgmma_acc_coord(tid, i).col) != 0 ? sc[i] : neg_inf();
    sc[i] = x;
    tile_max[r] = fmaxf(tile_max[r], x);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
  }
}

// Raw masked scores → P = exp2(s·c − m) in place; adds this thread's part of the row sums.
// (Packing each pair into its RS fragment as it is computed spilled more, not less.)
template <auto P>
ATTNJIT_DEVICE void exponentiate(float (&sc)[Consumers<P>::kSAcc], const RowState& rs, float scale_log2,
                                 float (&l)[2]) {
  float neg_m[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) neg_m[r] = rs.m[r] == neg_inf() ? 0.0f : -rs.m[r];
#pragma unroll
  for (int i = 0; i < Consumers<P>::kSAcc; ++i) {
    const float p = exp2_ftz(fmaf(sc[i], scale_log2, neg_m[(i / 2) % 2]));
    sc[i] = p;
    l[(i / 2) % 2] += p;
  }
}

// Unconditional: skipping it while no row of the warp moved its max by more than 8 (lazy
// rescaling, the max P is taken against lagging the true one) measured 1.5 % slower at the
// prefill's target row (session 41, docs/performance.md).
ATTNJIT_DEVICE void scale_rows(float (&o)[kValueDim / 4], const float (&f)[2]) {
#pragma unroll
  for (int i = 0; i < kValueDim / 4; ++i) o[i] *= f[(i / 2) % 2];
}

// P · g (per row) → [64 × 64] K-major swizzled tile at `tile`, fenced for wgmma.
// bf16: a warp's 16 rows × 64 keys are 16 accumulator blocks of 8 × 8, stored four at a
// time by stmatrix (x4 number k: key blocks 2k and 2k + 1, each in its two row halves):
// 4 stores a thread where 16 st.shared took 16 swizzled addresses (prefill: +0–3 % on the
// L2-resident pools, +9 % at h 64, session 39). fp8 keeps the 16 stores: with stmatrix
// ptxas spilled 16 bytes in the fp8 producer (88 registers).
template <auto P>
ATTNJIT_DEVICE void store_p(const float (&sc)[Consumers<P>::kSAcc], const float (&g)[2], u32 tile) {
  u32 tid = static_cast<u32>(thread_in_warpgroup());
  opaque(tile);  // swizzled addresses computed here, not hoisted and spilled
  opaque(tid);
  if constexpr (Traits<P>::kFp8) {
#pragma unroll
    for (int i = 0; i < Consumers<P>::kSAcc; i += 2) {
      const WgmmaCoord c = wgmma_acc_coord(static_cast<int>(tid), i);
      const float f = g[(i / 2) % 2];
      st_shared_u32(tile + PTile<P>::byte_offset(c.row, c.col * 2), pack2<DType::kBF16>(sc[i] * f, sc[i + 1] * f));
    }
  } else {
    // This lane addresses row lane % 8 of matrix q = lane / 8: key block 2k + q / 2, row half q % 2.
    const u32 lane = tid % 32, q = lane / 8;
    const u32 row = 16 * (tid / 32) + 8 * (q % 2) + lane % 8;
#pragma unroll
    for (int k = 0; k < Consumers<P>::kSAcc / 8; ++k) {
      u32 r[4];
#pragma unroll
      for (int m = 0; m < 4; ++m) {  // matrix m: key block 2k + m / 2, row half m % 2
        const int i = 4 * (2 * k + m / 2) + 2 * (m % 2);
        r[m] = pack2<DType::kBF16>(sc[i] * g[m % 2], sc[i + 1] * g[m % 2]);
      }
      stmatrix_x4(tile + PTile<P>::byte_offset(row, (16 * k + 8 * (q / 2)) * 2), r[0], r[1], r[2], r[3]);
    }
  }
  fence_proxy_async_smem();
}

// ---- the two consumers ------------------------------------------------------------------

// P_even's [64 × 64] tile: buffer 0's rope rows (chunk 8, ring rows 0..63; see the top).
template <auto P>
ATTNJIT_DEVICE u32 p_even_tile(const SharedStorage<P>& s) {
  return smem_u32(s.kv) + Consumers<P>::kRopeChunk * KTile<P>::kChunkBytes;
}

template <auto P>
ATTNJIT_DEVICE void even_consumer(SharedStorage<P>& s, const Args& a, int steps, int g0,
                                  float (&o)[kValueDim / 4], RowState& rs) {
  using C = Consumers<P>;
  const int tid = thread_in_warpgroup();
  const int rows[2] = {wgmma_acc_coord(tid, 0).row, wgmma_acc_coord(tid, 2).row};
  const u32 q = smem_u32(s.q), kv = smem_u32(s.kv), p_odd = smem_u32(s.p);
  const u32 p_even = p_even_tile(s);
  float sc[C::kSAcc];  // S_even, then P_even: [64 × 64] accumulator fragment
  u32 pf[4][4];        // P_even as RS A fragments (k16 steps × 4 registers)
  for (int step = 0; step < steps; ++step) {
    const u32 phase = static_cast<u32>(g0 + step) & 1u;
    wait_full<P, 0, kLo>(s, phase);
    fence_proxy_async_smem();  // cp.async wrote in the generic proxy; wgmma reads in the async one
    issue_s<P, 0, kLoChunks, true>(sc, q, kv, 0);
    wgmma_commit();
    if (step > 0) {  // the last step's P_odd·V_odd[lo] retired: buffer 1 lo and s.p are free
      wgmma_wait<1>();
      release<P>(s, 1, kLo);
    }
    wait_full<P, 0, kHi>(s, phase);
    if constexpr (Traits<P>::kFp8) consumer_widen<P, 0>(s);  // its raw bytes → bf16, under S lo
    fence_proxy_async_smem();
    issue_s<P, kLoChunks, Traits<P>::kChunks, false>(sc, q, kv, 0);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(sc);
    wgmma_fence_operands(o);

    float tile_max[2], f[2];
    mask_and_max<P>(sc, smem_u32(&s.valid[0]), tile_max);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(rs.m[r], tile_max[r] * a.scale_log2);
      f[r] = rescale_factor(rs.m[r], m_new);
      rs.m[r] = m_new;
      rs.l[r] *= f[r];
      if (tid % 4 == 0) st_shared_f32(smem_u32(&s.x.rows[0][rows[r]]), m_new);
    }
    named_barrier_arrive(ConsumerBar::kEvenMax, kConsumerThreads);
    scale_rows(o, f);
    exponentiate<P>(sc, rs, a.scale_log2, rs.l);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) wgmma_acc_to_a_fragment<DType::kBF16>(sc, ks, pf[ks]);
    issue_pv_local<P>(o, pf, kv, 0, 0);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(o);
    release<P>(s, 0, kLo);

    // The step's final max (WG2's): P_even to it for WG2, O and l to it here.
    named_barrier_sync(ConsumerBar::kOddMax, kConsumerThreads);
    float g[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_final = ld_shared_f32(smem_u32(&s.x.rows[0][rows[r]]));
      g[r] = rescale_factor(rs.m[r], m_final);
      rs.m[r] = m_final;
      rs.l[r] *= g[r];
    }
    wait_rope_sent<P>(s, phase);  // paired: P_even's rows were copied out (pair.cuh)
    store_p<P>(sc, g, p_even);
    named_barrier_arrive(ConsumerBar::kEvenP, kConsumerThreads);
    named_barrier_sync(ConsumerBar::kOddP, kConsumerThreads);
    scale_rows(o, g);
    issue_pv_remote<P>(o, p_odd, kv, C::kBufKeys, 0);  // left in flight under the next S
    wgmma_commit();
  }
  wgmma_wait<0>();
  wgmma_fence_operands(o);
  // Persistent: the next item's producer refills buffer 1 lo (and WG2 s.p) without waiting
  // for this warpgroup's next S.
  if (Traits<P>::kPersistent && steps > 0) release<P>(s, 1, kLo);
}

template <auto P>
ATTNJIT_DEVICE void odd_consumer(SharedStorage<P>& s, const Args& a, int steps, int g0,
                                 float (&o)[kValueDim / 4], RowState& rs) {
  using C = Consumers<P>;
  const int tid = thread_in_warpgroup();
  const int rows[2] = {wgmma_acc_coord(tid, 0).row, wgmma_acc_coord(tid, 2).row};
  const u32 q = smem_u32(s.q), kv = smem_u32(s.kv), p_odd = smem_u32(s.p);
  const u32 p_even = p_even_tile(s);
  const u32 hi_byte = static_cast<u32>(kValueDim);  // V columns [256, 512): bf16 bytes 512..
  float sc[C::kSAcc];  // S_odd, then P_odd
  u32 pf[4][4];
  for (int step = 0; step < steps; ++step) {
    const u32 phase = static_cast<u32>(g0 + step) & 1u;
    // hi first: the producer fills buffer 1's hi half before its lo half.
    wait_full<P, 1, kHi>(s, phase);
    if constexpr (Traits<P>::kFp8) consumer_widen<P, 1>(s);  // its raw bytes → bf16, here
    fence_proxy_async_smem();
    issue_s<P, kLoChunks, Traits<P>::kChunks, true>(sc, q, kv, C::kBufKeys);
    wait_full<P, 1, kLo>(s, phase);
    fence_proxy_async_smem();
    issue_s<P, 0, kLoChunks, false>(sc, q, kv, C::kBufKeys);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(sc);

    float tile_max[2], f[2];
    mask_and_max<P>(sc, smem_u32(&s.valid[C::kBufKeys]), tile_max);
    named_barrier_sync(ConsumerBar::kEvenMax, kConsumerThreads);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // WG1's max already includes the running max, which this warpgroup also holds.
      const float m_new = fmaxf(ld_shared_f32(smem_u32(&s.x.rows[0][rows[r]])), tile_max[r] * a.scale_log2);
      f[r] = rescale_factor(rs.m[r], m_new);
      rs.m[r] = m_new;
      rs.l[r] *= f[r];
    }
    __syncwarp();  // the row's 4 lanes read WG1's max before lane 0 overwrites it
    if (tid % 4 == 0) {
      st_shared_f32(smem_u32(&s.x.rows[0][rows[0]]), rs.m[0]);
      st_shared_f32(smem_u32(&s.x.rows[0][rows[1]]), rs.m[1]);
    }
    named_barrier_arrive(ConsumerBar::kOddMax, kConsumerThreads);
    scale_rows(o, f);  // not in flight: the last step ended with wgmma_wait<0>
    exponentiate<P>(sc, rs, a.scale_log2, rs.l);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) wgmma_acc_to_a_fragment<DType::kBF16>(sc, ks, pf[ks]);
    issue_pv_local<P>(o, pf, kv, C::kBufKeys, hi_byte);
    wgmma_commit();
    const float one[2] = {1.0f, 1.0f};
    store_p<P>(sc, one, p_odd);  // WG1's last P_odd·V_odd[lo] retired (buffer 1 lo's refill)
    named_barrier_sync(ConsumerBar::kEvenP, kConsumerThreads);
    issue_pv_remote<P>(o, p_even, kv, 0, hi_byte);
    wgmma_commit();
    named_barrier_arrive(ConsumerBar::kOddP, kConsumerThreads);
    wgmma_wait<1>();
    release<P>(s, 1, kHi);
    wgmma_wait<0>();
    wgmma_fence_operands(o);
    release<P>(s, 0, kHi);
  }
}

// The unsplit output through shared memory. Q is free once both consumers passed kSums
// (each one's last S retired before it): consumer c stages its normalized O half
// [64 rows][256] bf16 at row pitch kOutPitch in Q's first or second 33 KiB (16 bytes of
// padding put the 8 rows of a fragment store in distinct banks), then each of its warps
// copies whole 512-byte half rows out in 16-byte pieces. Why: stored straight from the
// fragments, each 32-byte sector of the output took two 4-byte stores (ncu: twice the
// output's L2 write sectors), at the tail of every CTA.
inline constexpr u32 kOutPitch = kValueDim + 16;  // a half row: 256 bf16, padded
template <auto P>
ATTNJIT_DEVICE void write_output_staged(const float (&o)[kValueDim / 4], int c, const Args& a, const Work& w,
                                        const Seq& seq, const float (&m)[2], const float (&l)[2], u32 stage) {
  static_assert(2 * 64 * kOutPitch <= Traits<P>::kQBytes, "both halves fit in Q");
  const int tid = thread_in_warpgroup();
  stage += static_cast<u32>(c) * 64u * kOutPitch;
  opaque(stage);
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int head = w.row0 + wgmma_acc_coord(tid, 2 * r).row;
    // A row past h (h < 64) is the next token's: staged, never copied out.
    inv[r] = head < P.num_heads ? unsplit_inv(a, head, m[r], l[r]) : 0.0f;
    if (c == 0 && tid % 4 == 0 && head < P.num_heads) store_row_stats(a, w, seq, P.num_heads, head, m[r], l[r]);
  }
#pragma unroll
  for (int i = 0; i < kValueDim / 4; i += 2) {
    const WgmmaCoord x = wgmma_acc_coord(tid, i);
    const float f = inv[(i / 2) % 2];
    st_shared_u32(stage + static_cast<u32>(x.row) * kOutPitch + static_cast<u32>(x.col) * 2u,
                  pack2<DType::kBF16>(o[i] * f, o[i + 1] * f));
  }
  named_barrier_sync(static_cast<u32>(ConsumerBar::kOutStaged) + static_cast<u32>(c), kWarpgroupThreads);
  const int lane = lane_id();
  // Row `row` of this tile is (token, head row0 + row): out row seq.start·h + q_idx·h + head.
  u8* dst = static_cast<u8*>(a.out) +
            ((static_cast<i64>(seq.start) * P.num_heads + w.q_idx * P.num_heads + w.row0) * kValueDim + c * (kValueDim / 2)) * 2 +
            lane * 16;
  // kBatch rows in flight a warp; fp8's consumers, which widen beside O, have no registers
  // to spare at the end (4 spilled 16 bytes there).
  constexpr int kWarps = kWarpgroupThreads / kWarpSize;
  constexpr int kBatch = Traits<P>::kFp8 ? 1 : 4;
#pragma unroll 1
  for (int row0 = tid / kWarpSize; row0 < 64; row0 += kWarps * kBatch) {
    uint4 v[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k)
      v[k] = ld_shared_16(stage + static_cast<u32>(row0 + k * kWarps) * kOutPitch + static_cast<u32>(lane) * 16u);
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int row = row0 + k * kWarps;
      // A row past h is the next token's.
      if (w.row0 + row < P.num_heads) *reinterpret_cast<uint4*>(dst + static_cast<i64>(row) * kValueDim * 2) = v[k];
    }
  }
}

// Consumer c (0: even, WG1; 1: odd, WG2) and its O columns [256c, +256); then both row
// sums, and the output. Persistent (persistent.cuh): item bx after g0 steps of the ring and
// `q_loads` loads of Q.
template <auto P>
ATTNJIT_DEVICE void consumer_warpgroup(SharedStorage<P>& s, const Args& a, const Work& w, int c, int g0 = 0,
                                       u32 q_loads = 0, u32 bx = blockIdx.x) {
  const int tid = thread_in_warpgroup();
  float o[kValueDim / 4];  // O[64 × 256] f32
#pragma unroll
  for (int i = 0; i < kValueDim / 4; ++i) o[i] = 0.0f;
  RowState rs{{neg_inf(), neg_inf()}, {0.0f, 0.0f}};
  const int steps = (w.tile_end - w.tile_begin) / Traits<P>::kStepTiles;
  if (steps > 0) mbarrier_wait(&s.q_full, q_loads & 1u);
  if (c == 0)
    even_consumer<P>(s, a, steps, g0, o, rs);
  else
    odd_consumer<P>(s, a, steps, g0, o, rs);
  // Both end with the step's final max in rs.m; the row sums are each consumer's keys.
  const int rows[2] = {wgmma_acc_coord(tid, 0).row, wgmma_acc_coord(tid, 2).row};
  float l[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    rs.l[r] += __shfl_xor_sync(0xffffffffu, rs.l[r], 1);
    rs.l[r] += __shfl_xor_sync(0xffffffffu, rs.l[r], 2);
    if (tid % 4 == 0) st_shared_f32(smem_u32(&s.x.rows[c][rows[r]]), rs.l[r]);
  }
  named_barrier_sync(ConsumerBar::kSums, kConsumerThreads);
#pragma unroll
  for (int r = 0; r < 2; ++r) l[r] = rs.l[r] + ld_shared_f32(smem_u32(&s.x.rows[1 - c][rows[r]]));
  // Beside O and WG1's widening under its S, the prologue's Work and Seq held across the
  // loop spilled: the output's place is found again.
  Seq out_seq;
  const Work out_w = relocate<P>(a, out_seq, bx);
  if (out_w.slot < 0)
    write_output_staged<P>(o, c, a, out_w, out_seq, rs.m, l, smem_u32(s.q));
  else
    write_output<P>(o, c, a, out_w, out_seq, rs.m, l);
}

}  // namespace attnjit::mla_decode_sparse
