#pragma once
// two_consumers' producer on fp8 rows (the 656-byte layout), included by two_consumers.cuh
// after the roles' hand-offs.
//
// A fill (64 keys, one column half of a buffer) goes in two moves:
//   issue   once the half is released: each key's raw bytes for the half (its 256 e4m3 and
//           the row's 16 bytes of scales) by 16-byte cp.async into the key's own ring row
//           of the half, at the swizzled places its bf16 bytes [0, 272) will take (the raw
//           bytes are half as wide, so a key's raw data stays inside its own row); on the hi
//           half the 64 bf16 rope dims straight to their place; one commit group per fill.
//           Skipped keys are zero-filled (src-size 0 reads nothing): they widen to zero rows.
//   widen   once that group landed: the 4 lanes of each key (one warp's) read their 64
//           e4m3 and the scale, sync the warp (every read before any write over the raw
//           bytes), write e4m3 · scale (f32, rounded once) as bf16 where wgmma reads it;
//           then each thread arrives on kv_full.
// The hi halves are widened by the consumer whose S reads them first (consumer_widen): WG1
// buffer 0's under its S over the lo half, WG2 buffer 1's before its S. The producer is
// the limit, and the consumers wait for it most of the time.
// Like bf16's cp.async, several fills are in flight: a fill is issued as soon as its half
// is free, and the previous fill widened after it (buffer 1 lo before buffer 0 lo's issue
// when that half is not free yet, so WG2 never waits on a release that waits on WG1). The
// first version loaded each fill into registers and widened it before loading the next:
// one fill in flight, 695 µs on (128, 2, 128, 2048) against softmax_wg's 659 (H100).
//
// Two thread ↔ key maps, over the same 16 key rows per warp (16w .. 16w + 15 of the fill),
// so a warp's widen waits only on its own cp.async groups:
//   copy   lane l: keys 16w + l/8 + 4r (r < 4), raw units l%8 and l%8 + 8 (and 16 + l%8:
//          lane 0's is the scales, the others zero-fill unused bytes of the row; on the hi
//          half the rope unit l%8): a quarter-warp's 8 stores fill one row's 8 bank groups.
//   widen  lane l: keys 16w + 8t + l%8 (t < 2), bf16 chunk q = l/8 of the half (64 values:
//          raw units 4q .. 4q + 3, the scale of block q/2 of the half). A quarter-warp is 8
//          rows at 8 swizzle phases, so one unit index of theirs is 8 bank groups. (The
//          first map put a key's 8 lanes in one quarter-warp writing 4 chunks at one unit
//          index: 4-way conflicts, 16 wavefronts per STS.128 where 4 suffice; ncu had the
//          shared-memory pipe 76 % busy, 42 % of it excess wavefronts.)

namespace attnjit::mla_decode_sparse {

inline constexpr int kRawScaleUnit = kValueDim / 2 / 16;  // 16: the raw scales follow the half's content
inline constexpr int kWarpRows = 16;                      // a warp's key rows of a fill (both maps)
inline constexpr int kCopyRowStep = 4;                    // copy map: a thread's keys are 4 rows apart
inline constexpr int kWidenKeys = 2;                      // widen map: a lane's keys per fill

// This thread's places in chunk 0's ring rows (buffer 0, the lo half), swizzled: buffer 1
// is 64 rows on, the hi half 4 chunks on, a widen key 8 rows on (constants; the ring is
// 1024-byte aligned, so address bits 4-6 are a row's 16-byte unit, which the swizzle XORs
// with the row: unit u + i for i below u's alignment is the address XOR 16·i). A copy key
// 4r rows on is + 512·r, and XOR 64 for odd r (4 rows on flips the swizzle's bit 2).
struct Fp8Places {
  u32 copy;   // copy map: raw unit l%8 of row 16w + l/8 (+ kChunkBytes: unit + 8; + 2
              // chunks: unit 16 + l%8; + the rope chunk's: the rope unit)
  u32 read;   // widen map: raw unit 4q of row 16w + l%8 (^ 16i: unit 4q + i)
  u32 out;    // widen map: bf16 unit 0 of chunk q (^ 16j: unit j)
  u32 scale;  // widen map: the f32 scale of block q/2 (+ 8 on the hi half)
};

// The copy map's first key row of warpgroup thread tid, and the widen map's.
ATTNJIT_DEVICE int fp8_copy_row(int tid) { return kWarpRows * (tid / 32) + tid % 32 / kGroupThreads; }
ATTNJIT_DEVICE int fp8_widen_row(int tid) { return kWarpRows * (tid / 32) + tid % kGroupThreads; }

// kRecompute (the producer's): computed where used, from an opaque thread index, a few
// integer ops a fill; held across its loop, the four registers spilled it. WG2 spilled the
// other way, recomputing them each step beside O: its places are hoisted.
template <auto P, bool kRecompute>
ATTNJIT_DEVICE Fp8Places fp8_places(const SharedStorage<P>& s) {
  u32 tid_bits = static_cast<u32>(thread_in_warpgroup());
  if constexpr (kRecompute) opaque(tid_bits);
  const int tid = static_cast<int>(tid_bits);
  static_assert(16 * kRawScaleUnit == 2 * 128, "the scales: unit 0 of the third chunk");
  static_assert(kWarpRows == kCopyRowStep * Consumers<P>::kKeysPerThread && kWarpRows == 8 * kWidenKeys &&
                    kWarpRows * kWarpgroupThreads / 32 == Consumers<P>::kBufKeys,
                "both maps cover a warp's 16 rows, the warpgroup a fill's 64");
  const u32 base = smem_u32(s.kv), q = static_cast<u32>(tid % 32 / kGroupThreads);
  const u32 copy_row = static_cast<u32>(fp8_copy_row(tid)), widen_row = static_cast<u32>(fp8_widen_row(tid));
  const auto at = [&](u32 row, u32 byte) { return base + KTile<P>::byte_offset(row, byte); };
  const u32 copy_unit = static_cast<u32>(tid % kGroupThreads);
  return Fp8Places{at(copy_row, 16 * copy_unit), at(widen_row, 64 * q), at(widen_row, 128 * q),
                   at(widen_row, 16 * kRawScaleUnit) + 4 * (q / 2)};
}

// The constant offset of buffer kBuf, half kHalf, key row `row` of the fill from a
// Fp8Places address (copy key r: row 4r, its place XOR 64 for odd r; widen key t: row 8t).
template <auto P, int kBuf, int kHalf>
ATTNJIT_DEVICE constexpr u32 fp8_offset(int row) {
  return static_cast<u32>(kHalf * kLoChunks) * KTile<P>::kChunkBytes +
         static_cast<u32>(kBuf * Consumers<P>::kBufKeys + row) * 128u;
}
ATTNJIT_DEVICE u32 copy_place(u32 copy, int r) { return r % 2 ? copy ^ 64u : copy; }

// cp_async_16 from src + kOff, the offset an immediate of the instruction (computed in C++,
// ptxas kept each key's four source offsets as 64-bit registers and spilled).
template <int kOff>
ATTNJIT_DEVICE void cp_async_16_at(u32 dst, const void* src, u32 src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1+%3], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes), "n"(kOff)
               : "memory");
}

ATTNJIT_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kPending>
ATTNJIT_DEVICE void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// The halves the consumers widen (consumer_widen): both hi halves; the producer widens the
// lo halves.
template <int kBuf, int kHalf>
inline constexpr bool kConsumerWidens = kHalf == kHi;

// issue (see the top); also stores the buffer's key validity with its first fill of the
// step, as bf16's fill() (its consumer's mask of the last step is done: it released).
template <auto P, int kBuf, int kHalf, class RowOf>
ATTNJIT_DEVICE void issue_fp8(SharedStorage<P>& s, const Args& a, const RowOf& row_of, int row0, int unit) {
  using C = Consumers<P>;
  const u32 copy = fp8_places<P, true>(s).copy;
#pragma unroll
  for (int r = 0; r < C::kKeysPerThread; ++r) {
    const u8* row = row_of(r);
    // One pointer per key, every source a constant from it (unit 0's is the row itself).
    const u8* src = (row != nullptr ? row : static_cast<const u8*>(a.main.rows)) + 16 * unit;
    const u32 bytes = row != nullptr ? 16u : 0u;
    const u32 dst = copy_place(copy, r), off = fp8_offset<P, kBuf, kHalf>(kCopyRowStep * r);
    if (kHalf == kBuf && unit == 0)
      st_shared_u32(smem_u32(&s.valid[kBuf * C::kBufKeys + row0 + kCopyRowStep * r]), row ? 1u : 0u);
    constexpr int kContent = kHalf * (kValueDim / 2);
    cp_async_16_at<kContent>(dst + off, src, bytes);
    cp_async_16_at<kContent + 16 * kGroupThreads>(dst + KTile<P>::kChunkBytes + off, src, bytes);
    // The scales: unit 0 copies them to raw unit 16; the other lanes zero-fill raw units
    // 17..23, unused bytes of their own row (unbranched: the branch spilled the producer).
    cp_async_16_at<kFp8ScaleOffset>(dst + 2 * KTile<P>::kChunkBytes + off, src, unit == 0 ? bytes : 0u);
    if constexpr (kHalf == kHi)
      cp_async_16_at<kFp8RopeOffset>(
          dst + C::kRopeChunk * KTile<P>::kChunkBytes + fp8_offset<P, kBuf, kLo>(kCopyRowStep * r), src, bytes);
  }
  cp_async_commit();
  if constexpr (kConsumerWidens<kBuf, kHalf>) {  // kv_full: the raw bytes landed (and the flags)
    cp_async_arrive(full_bar(s, kBuf, kHalf));
    mbarrier_arrive(full_bar(s, kBuf, kHalf));  // every thread's: its flags (markers), unbranched
  }
}

// widen (see the top) of this lane's keys, once every lane's copies landed: kBatch keys'
// reads before one __syncwarp and their writes after it, so their shared-memory latencies
// and conversion chains overlap (the producer's both at once; on the first map one key per
// __syncwarp took 578 µs on (128, 2, 128, 2048), H100, four 543 µs, H200). Ends with the
// stores fenced for wgmma.
template <auto P, int kBuf, int kHalf, int kBatch = kWidenKeys, bool kRecompute = true>
ATTNJIT_DEVICE void widen_rows(const SharedStorage<P>& s) {
#pragma unroll
  for (int t0 = 0; t0 < kWidenKeys; t0 += kBatch) {
    uint4 raw[kBatch][4];  // e4m3 values 16i .. 16i + 15 of the lane's 64
    float scale[kBatch];
    {
      const Fp8Places at = fp8_places<P, kRecompute>(s);
#pragma unroll
      for (int t = 0; t < kBatch; ++t) {
        const u32 off = fp8_offset<P, kBuf, kHalf>(8 * (t0 + t));
#pragma unroll
        for (int i = 0; i < 4; ++i) raw[t][i] = ld_shared_16((at.read ^ (16u * i)) + off);
        scale[t] = ld_shared_f32(at.scale + off + 8 * kHalf);  // block 2·half + q/2
      }
    }
    __syncwarp();  // these keys' raw bytes are read: their rows may be overwritten
    const Fp8Places at = fp8_places<P, kRecompute>(s);
#pragma unroll
    for (int t = 0; t < kBatch; ++t) {
      const u32 off = fp8_offset<P, kBuf, kHalf>(8 * (t0 + t));
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        uint4 lo, hi;
        widen16(raw[t][i], scale[t], lo, hi);
        st_shared_16((at.out ^ (32u * i)) + off, lo);
        st_shared_16((at.out ^ (32u * i + 16u)) + off, hi);
      }
    }
  }
  fence_proxy_async_smem();  // generic-proxy stores (and the landed cp.async), read by wgmma
}

// The producer's widen of a fill, once this thread's groups but the newest kPending landed.
template <auto P, int kBuf, int kHalf, int kPending>
ATTNJIT_DEVICE void widen_fp8(SharedStorage<P>& s) {
  cp_async_wait<kPending>();
  __syncwarp();  // the keys' other lanes' copies landed too (both maps keep a key in one warp)
  widen_rows<P, kBuf, kHalf>(s);
  mbarrier_arrive(full_bar(s, kBuf, kHalf));
}

// Buffer kBuf's hi half is widened by the consumer whose S reads it first (WG1: buffer 0,
// under its S over the lo half; WG2: buffer 1, before its S), once kv_full says its raw
// bytes landed: the producer was the kernel's limit, and the consumers wait for it most of
// the time. The barrier then tells the widening warpgroup's threads that all of the half
// is bf16 (the other consumer reads it after a ConsumerBar hand-off).
template <int kBuf>
inline constexpr u32 kWidenedBar = 10 + kBuf;  // after ConsumerBar's ids
template <auto P, int kBuf>
ATTNJIT_DEVICE void consumer_widen(SharedStorage<P>& s) {
  // One key (16 registers of raw bytes) per __syncwarp, beside O's 128.
  widen_rows<P, kBuf, kHi, 1, false>(s);
  named_barrier_sync(kWidenedBar<kBuf>, kWarpgroupThreads);
}

// One fill of the loop: wait for the half's release (step > 0) and issue it, widening the
// previous fill after it, or (buffer 0 lo's fill) before it when the half is not free yet.
// An empty group then keeps "all but the newest group" meaning the previous fill's; so
// does one in place of the issue after the last step (`issue` false), which only widens
// the last fill. kPrevHalf < 0: the previous fill is a consumer's to widen.
// Widening early pays on buffer 0 lo's fill: buffer 1 lo waits there on WG1's mid-step
// release otherwise (480 µs against 439 on (128, 2, 128, 2048), H200). On buffer 1 hi's it
// did not (441), and its second copy of the widen spilled the producer.
template <auto P, int kBuf, int kHalf, int kPrevBuf, int kPrevHalf, class RowOf>
ATTNJIT_DEVICE void fill_fp8(SharedStorage<P>& s, const Args& a, const RowOf& row_of, int step, bool has_prev,
                             bool issue, int row0, int unit) {
  constexpr bool kWidensPrev = kPrevHalf >= 0;
  static_assert(!kWidensPrev || !kConsumerWidens<kPrevBuf, kPrevHalf>, "the producer widens only the lo halves");
  bool widened = !(kWidensPrev && has_prev);
  if (issue && step > 0) {
    MBarrier* empty = empty_bar(s, kBuf, kHalf);
    const u32 phase = static_cast<u32>(step - 1) & 1u;
    // One choice per warp: its lanes then take one path to the __syncwarp()s of widen_fp8.
    if constexpr (kWidensPrev && kBuf == 0 && kHalf == kLo) {
      if (!widened && !__all_sync(0xffffffffu, mbarrier_test_wait(empty, phase))) {
        cp_async_commit();
        widen_fp8<P, kPrevBuf, kPrevHalf, 1>(s);
        widened = true;
      }
    }
    mbarrier_wait(empty, phase);
  }
  if (issue)
    issue_fp8<P, kBuf, kHalf>(s, a, row_of, row0, unit);
  else
    cp_async_commit();
  if constexpr (kWidensPrev)
    if (!widened) widen_fp8<P, kPrevBuf, kPrevHalf, 1>(s);
}

// The producer's loop: the four fills of a step in the order the consumers release them
// (buffer 0 lo, 1 hi, 0 hi, 1 lo), each widening the producer's previous half; a
// buffer's indices for the next step are loaded once its last fill of this step is issued.
// One more pass's first fill widens the last fill (the same code as every step's: apart,
// ptxas spilled there). key(step, b, r): the copy map's key r of buffer b (row0 + 4r).
template <auto P, class Key>
ATTNJIT_DEVICE void produce_fp8(SharedStorage<P>& s, const Args& a, const Work& w, int steps, const Key& key,
                                int row0, int unit) {
  using C = Consumers<P>;
  int idx[2][C::kKeysPerThread];  // the step's indices, as stored
  // Four main-list keys (the common case) from one pointer, constant offsets from it:
  // key_index's four 64-bit addresses at once spilled the producer.
  const auto load_indices = [&](int step, int b) {
    const int j0 = key(step, b, 0);
    if (j0 + kCopyRowStep * (C::kKeysPerThread - 1) < w.n_main) {
      const int* p = a.main.indices + w.token * static_cast<i64>(a.main.stride) + j0;
#pragma unroll
      for (int r = 0; r < C::kKeysPerThread; ++r) idx[b][r] = __ldg(p + kCopyRowStep * r);
    } else {
#pragma unroll
      for (int r = 0; r < C::kKeysPerThread; ++r) idx[b][r] = key_index<P>(a, w, key(step, b, r));
    }
  };
  load_indices(0, 0);
  load_indices(0, 1);
  for (int step = 0;; ++step) {
    const auto rows0 = [&](int r) { return key_row<P>(a, w, key(step, 0, r), idx[0][r]); };
    const auto rows1 = [&](int r) { return key_row<P>(a, w, key(step, 1, r), idx[1][r]); };
    const bool last = step == steps;
    fill_fp8<P, 0, kLo, 1, kLo>(s, a, rows0, step, step > 0, !last, row0, unit);
    if (last) break;
    const bool more = step + 1 < steps;
    fill_fp8<P, 1, kHi, 0, kLo>(s, a, rows1, step, true, true, row0, unit);
    fill_fp8<P, 0, kHi, 1, -1>(s, a, rows0, step, false, true, row0, unit);  // buffer 1 hi: WG2 widens it
    if (more) load_indices(step + 1, 0);
    fill_fp8<P, 1, kLo, 0, -1>(s, a, rows1, step, false, true, row0, unit);  // buffer 0 hi: WG1 widens it
    if (more) load_indices(step + 1, 1);
  }
}

}  // namespace attnjit::mla_decode_sparse
