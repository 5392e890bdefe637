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
//   widen   once that group landed: the 8 threads of each key (one warp's lanes) read
//           their 32 e4m3 and the scale, sync the warp (every read before any write over
//           the raw bytes), write e4m3 · scale (f32, rounded once) as bf16 where wgmma reads
//           it; then each thread arrives on kv_full.
// Buffer 1's hi half is widened by its only reader, WG2, before its S (consumer_widen):
// the producer is the limit, and the consumers wait for it most of the time.
// Like bf16's cp.async, several fills are in flight: a fill is issued as soon as its half
// is free, and the previous fill widened after it (before it, when the half is not free
// yet, so the consumers never wait on a release that waits on them). The first version
// loaded each fill into registers and widened it before loading the next: one fill in
// flight, 695 µs on (128, 2, 128, 2048) against softmax_wg's 659 (H100).
//
// Thread (group, unit): keys group + 16r (r < 4) of the fill, as bf16's producer. It copies
// the key's raw units unit and unit + 8 (and unit 16 + unit: unit 0's is the scales, the
// others zero-fill unused bytes of the row), and widens
// content bytes [32·unit, +32) of the half (raw units 2·unit, 2·unit + 1) into bf16 bytes
// 64·unit + 16k (k < 4) of the row.

namespace attnjit::mla_decode_sparse {

inline constexpr int kRawScaleUnit = kValueDim / 2 / 16;  // 16: the raw scales follow the half's content

// This thread's places in ring row `group` of chunk 0 (buffer 0, the lo half), swizzled:
// other keys are 16 rows on, buffer 1 64 rows on and the hi half 4 chunks on (constants).
// Three registers for ten places: the ring is 1024-byte aligned, so address bits 4-6 are a
// row's 16-byte unit, and the swizzle XORs them with the row: unit u + i for i below u's
// alignment is the address XOR 16·i, and one chunk on is + kChunkBytes.
struct Fp8Places {
  u32 copy;  // raw unit `unit` (+ kChunkBytes: unit + 8; + the rope chunk's: the rope unit;
             // ^ 16·unit, + 2 chunks: raw unit 16, the scales)
  u32 read;  // raw unit 2·unit (^ 16: 2·unit + 1)
  u32 out;   // bf16 bytes 64·unit (^ 16k: + 16k, k < 4)
};

template <auto P>
ATTNJIT_DEVICE Fp8Places fp8_places(const SharedStorage<P>& s, int group, int unit) {
  static_assert(16 * kRawScaleUnit == 2 * 128, "the scales: unit 0 of the third chunk");
  const u32 base = smem_u32(s.kv), row = static_cast<u32>(group), u = static_cast<u32>(unit);
  const auto at = [&](u32 byte) { return base + KTile<P>::byte_offset(row, byte); };
  return Fp8Places{at(16 * u), at(32 * u), at(64 * u)};
}
template <auto P>
ATTNJIT_DEVICE u32 scales_place(const Fp8Places& at, int unit) {
  return (at.copy ^ (16u * static_cast<u32>(unit))) + 2 * KTile<P>::kChunkBytes;
}

// The constant offset of key r of buffer kBuf, half kHalf, from a Fp8Places address.
template <auto P, int kBuf, int kHalf>
ATTNJIT_DEVICE constexpr u32 fp8_offset(int r) {
  return static_cast<u32>(kHalf * kLoChunks) * KTile<P>::kChunkBytes +
         static_cast<u32>(kBuf * Consumers<P>::kBufKeys + kGroups * r) * 128u;
}

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

// The half the odd consumer widens (consumer_widen); the producer widens the other three.
template <int kBuf, int kHalf>
inline constexpr bool kConsumerWidens = kBuf == 1 && kHalf == kHi;

// issue (see the top); also stores the buffer's key validity with its first fill of the
// step, as bf16's fill() (its consumer's mask of the last step is done: it released).
template <auto P, int kBuf, int kHalf, class RowOf>
ATTNJIT_DEVICE void issue_fp8(SharedStorage<P>& s, const Args& a, const RowOf& row_of, int group, int unit,
                              const Fp8Places& at) {
  using C = Consumers<P>;
#pragma unroll
  for (int r = 0; r < C::kKeysPerThread; ++r) {
    const u8* row = row_of(r);
    // One pointer per key, every source a constant from it (unit 0's is the row itself).
    const u8* src = (row != nullptr ? row : static_cast<const u8*>(a.main.rows)) + 16 * unit;
    const u32 bytes = row != nullptr ? 16u : 0u;
    const u32 off = fp8_offset<P, kBuf, kHalf>(r);
    if (kHalf == kBuf && unit == 0)
      st_shared_u32(smem_u32(&s.valid[kBuf * C::kBufKeys + group + kGroups * r]), row ? 1u : 0u);
    constexpr int kContent = kHalf * (kValueDim / 2);
    cp_async_16_at<kContent>(at.copy + off, src, bytes);
    cp_async_16_at<kContent + 16 * kGroupThreads>(at.copy + KTile<P>::kChunkBytes + off, src, bytes);
    // The scales: unit 0 copies them to raw unit 16; the other lanes zero-fill raw units
    // 17..23, unused bytes of their own row (unbranched: the branch spilled the producer).
    cp_async_16_at<kFp8ScaleOffset>(at.copy + 2 * KTile<P>::kChunkBytes + off, src, unit == 0 ? bytes : 0u);
    if constexpr (kHalf == kHi)
      cp_async_16_at<kFp8RopeOffset>(at.copy + C::kRopeChunk * KTile<P>::kChunkBytes + fp8_offset<P, kBuf, kLo>(r),
                                     src, bytes);
  }
  cp_async_commit();
  if constexpr (kConsumerWidens<kBuf, kHalf>) {  // kv_full: the raw bytes landed (and the flags)
    cp_async_arrive(full_bar(s, kBuf, kHalf));
    mbarrier_arrive(full_bar(s, kBuf, kHalf));  // every thread's: its flags (markers), unbranched
  }
}

// 16 e4m3 (one uint4) · sc → 16 bf16 (two uint4), each product rounded once
// (e4m3x2_to_f32: the main kernel file's exact widening through f16).
ATTNJIT_DEVICE void widen16(const uint4& raw, float sc, uint4& lo, uint4& hi) {
  const u32 words[4] = {raw.x, raw.y, raw.z, raw.w};
  u32 out[8];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    float f0, f1, f2, f3;
    e4m3x2_to_f32(static_cast<unsigned short>(words[q] & 0xffffu), f0, f1);
    e4m3x2_to_f32(static_cast<unsigned short>(words[q] >> 16), f2, f3);
    out[2 * q] = pack2<DType::kBF16>(f0 * sc, f1 * sc);
    out[2 * q + 1] = pack2<DType::kBF16>(f2 * sc, f3 * sc);
  }
  lo = make_uint4(out[0], out[1], out[2], out[3]);
  hi = make_uint4(out[4], out[5], out[6], out[7]);
}

// widen (see the top) of this thread's keys, once every lane's copies landed: kBatch keys'
// reads before one __syncwarp and their writes after it, so their shared-memory latencies
// and conversion chains overlap (the producer's four at a time: one key per __syncwarp took
// 578 µs on (128, 2, 128, 2048), H100; four 543 µs, H200). Ends with the stores fenced for
// wgmma.
template <auto P, int kBuf, int kHalf, int kBatch = Consumers<P>::kKeysPerThread>
ATTNJIT_DEVICE void widen_rows(int unit, const Fp8Places& at) {
#pragma unroll
  for (int r0 = 0; r0 < Consumers<P>::kKeysPerThread; r0 += kBatch) {
    uint4 raw[kBatch][2];
    float scale[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const u32 off = fp8_offset<P, kBuf, kHalf>(r0 + i);
      raw[i][0] = ld_shared_16(at.read + off);
      raw[i][1] = ld_shared_16((at.read ^ 16u) + off);
      // The scale of content bytes [32·unit, +32) of the half: block 2·half + unit / 4.
      scale[i] = ld_shared_f32(scales_place<P>(at, unit) + off + 4 * (2 * kHalf + unit / 4));
    }
    __syncwarp();  // these keys' raw bytes are read: their rows may be overwritten
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const u32 off = fp8_offset<P, kBuf, kHalf>(r0 + i);
      uint4 w[4];
      widen16(raw[i][0], scale[i], w[0], w[1]);
      widen16(raw[i][1], scale[i], w[2], w[3]);
#pragma unroll
      for (int k = 0; k < 4; ++k) st_shared_16((at.out ^ (16u * k)) + off, w[k]);
    }
  }
  fence_proxy_async_smem();  // generic-proxy stores (and the landed cp.async), read by wgmma
}

// The producer's widen of a fill, once this thread's groups but the newest kPending landed.
template <auto P, int kBuf, int kHalf, int kPending>
ATTNJIT_DEVICE void widen_fp8(SharedStorage<P>& s, int unit, const Fp8Places& at) {
  cp_async_wait<kPending>();
  __syncwarp();  // the keys' other lanes' copies landed too (a key's 8 lanes are this warp's)
  widen_rows<P, kBuf, kHalf>(unit, at);
  mbarrier_arrive(full_bar(s, kBuf, kHalf));
}

// Buffer 1's hi half is widened by its only reader, the odd consumer (WG2), once kv_full
// says its raw bytes landed: the producer was the kernel's limit, the consumers wait for
// it most of the time, and WG2 holds no S yet when it starts a step. kWidened then tells
// WG2's threads that all of the half is bf16.
inline constexpr u32 kWidenedBar = 10;  // after ConsumerBar's ids
template <auto P>
ATTNJIT_DEVICE void consumer_widen(SharedStorage<P>& s) {
  const int tid = thread_in_warpgroup();
  const int unit = tid % kGroupThreads;
  // Two keys per __syncwarp: beside O's 128 registers, four spilled.
  widen_rows<P, 1, kHi, 2>(unit, fp8_places(s, tid / kGroupThreads, unit));
  named_barrier_sync(kWidenedBar, kWarpgroupThreads);
}

// One fill of the loop: wait for the half's release (step > 0) and issue it, widening the
// previous fill after it, or before it when the half is not free yet. An empty group then
// keeps "all but the newest group" meaning the previous fill's; so does one in place of
// the issue after the last step (`issue` false), which only widens the last fill.
template <auto P, int kBuf, int kHalf, int kPrevBuf, int kPrevHalf, class RowOf>
ATTNJIT_DEVICE void fill_fp8(SharedStorage<P>& s, const Args& a, const RowOf& row_of, int step, bool has_prev,
                             bool issue, int group, int unit, const Fp8Places& at) {
  static_assert(!kConsumerWidens<kPrevBuf, kPrevHalf>, "the producer widens only its own three halves");
  bool widened = !has_prev;
  if (issue && step > 0) {
    MBarrier* empty = empty_bar(s, kBuf, kHalf);
    const u32 phase = static_cast<u32>(step - 1) & 1u;
    // One choice per warp: its lanes then take one path to the __syncwarp()s of widen_fp8.
    if (!widened && !__all_sync(0xffffffffu, mbarrier_test_wait(empty, phase))) {
      cp_async_commit();
      widen_fp8<P, kPrevBuf, kPrevHalf, 1>(s, unit, at);
      widened = true;
    }
    mbarrier_wait(empty, phase);
  }
  if (issue)
    issue_fp8<P, kBuf, kHalf>(s, a, row_of, group, unit, at);
  else
    cp_async_commit();
  if (!widened) widen_fp8<P, kPrevBuf, kPrevHalf, 1>(s, unit, at);
}

// The producer's loop: the four fills of a step in the order the consumers release them
// (buffer 0 lo, 1 hi, 0 hi, 1 lo), each widening the producer's previous half; a buffer's indices for the next step are loaded once
// its last fill of this step is issued. One more pass's first fill widens the last fill
// (the same code as every step's: apart, ptxas spilled there).
template <auto P, class Key>
ATTNJIT_DEVICE void produce_fp8(SharedStorage<P>& s, const Args& a, const Work& w, int steps, const Key& key,
                                int group, int unit) {
  using C = Consumers<P>;
  const Fp8Places at = fp8_places(s, group, unit);
  int idx[2][C::kKeysPerThread];  // the step's indices, as stored
  // Four main-list keys (the common case) from one pointer, constant offsets from it:
  // key_index's four 64-bit addresses at once spilled the producer.
  const auto load_indices = [&](int step, int b) {
    const int j0 = key(step, b, 0);
    if (j0 + kGroups * (C::kKeysPerThread - 1) < w.n_main) {
      const int* p = a.main.indices + w.token * static_cast<i64>(a.main.stride) + j0;
#pragma unroll
      for (int r = 0; r < C::kKeysPerThread; ++r) idx[b][r] = __ldg(p + kGroups * r);
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
    fill_fp8<P, 0, kLo, 1, kLo>(s, a, rows0, step, step > 0, !last, group, unit, at);
    if (last) break;
    const bool more = step + 1 < steps;
    fill_fp8<P, 1, kHi, 0, kLo>(s, a, rows1, step, true, true, group, unit, at);
    fill_fp8<P, 0, kHi, 0, kLo>(s, a, rows0, step, false, true, group, unit, at);  // F2: WG2 widens it
    if (more) load_indices(step + 1, 0);
    fill_fp8<P, 1, kLo, 0, kHi>(s, a, rows1, step, true, true, group, unit, at);
    if (more) load_indices(step + 1, 1);
  }
}

}  // namespace attnjit::mla_decode_sparse
