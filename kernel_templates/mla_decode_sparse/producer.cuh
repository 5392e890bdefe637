#pragma once
// two_consumers' producer warpgroup (WG0), included by two_consumers.cuh after the roles'
// hand-offs: the bf16 gather (each column half of a buffer refilled by 16-byte cp.async
// once its last reader released it, in the order two_consumers.cuh gives) and the role's
// entry, which hands fp8 rows to fp8_producer.cuh.
#include "mla_decode_sparse/layout.cuh"

namespace attnjit::mla_decode_sparse {
// This thread's first destination in the ring: key row `group`, 16-byte unit `unit` of
// chunk 0, swizzled. Every other row it fills is 16·k rows on (the same row mod 8, so the
// same swizzle) and every chunk 16 KiB on: a constant added to this one register.
template <auto P>
ATTNJIT_DEVICE u32 fill_base(const SharedStorage<P>& s, int group, int unit) {
  static_assert(kGroups % 8 == 0 && KTile<P>::kChunkBytes % 1024 == 0, "constant offsets keep the swizzle");
  return smem_u32(s.kv) + KTile<P>::byte_offset(static_cast<u32>(group), static_cast<u32>(unit * 16));
}

// Keys a producer thread gathers per buffer: 4 (group + 16r), or paired 2 (its CTA's rows).
template <auto P>
inline constexpr int kOwnKeys = Traits<P>::kPaired ? Consumers<P>::kKeysPerThread / 2 : Consumers<P>::kKeysPerThread;

// Half kHalf of buffer kBuf: this thread's keys (code_of(r), r < kOwnKeys: the key's
// key_code; dst: its first, 16·r rows on), unit `unit` of every chunk of the half; a
// skipped key is zero-filled (src-size 0 reads nothing).
template <auto P, int kBuf, int kHalf, class CodeOf>
ATTNJIT_DEVICE void fill_half(SharedStorage<P>& s, const Args& a, const CodeOf& code_of, u32 dst, int unit) {
  using C = Consumers<P>;
  constexpr int kC0 = HalfChunks<kHalf>::kBegin, kC1 = HalfChunks<kHalf>::kEnd;
#pragma unroll
  for (int r = 0; r < kOwnKeys<P>; ++r) {
    const u32 code = code_of(r);
    const u8* src = code_row<P>(a, code) + unit * 16;
    const u32 bytes = code != kSkipped ? 16u : 0u;
    constexpr u32 kRowBytes = 128;  // one chunk row
#pragma unroll
    for (int c = kC0; c < kC1; ++c)
      cp_async_16(dst + c * KTile<P>::kChunkBytes + (kBuf * C::kBufKeys + kGroups * r) * kRowBytes, src + c * 128,
                  bytes);
  }
  cp_async_arrive(full_bar(s, kBuf, kHalf));
}

// One fill: waits for the half's release by the previous step (g > 0), stores buffer
// kBuf's validity flags with its first fill of the step (kHalf == kBuf, marking threads;
// key_of(r): the key_code of key group + 16r, r < 4, all of them), gathers this thread's
// keys (own_of) and arrives on the half's full barrier (the markers' release: the flags;
// paired, marker 0 also announces the other CTA's copy).
template <auto P, int kBuf, int kHalf, class KeyOf, class OwnOf>
ATTNJIT_DEVICE void fill(SharedStorage<P>& s, const Args& a, const KeyOf& key_of, const OwnOf& own_of, int g,
                         int group, int unit, u32 dst) {
  using C = Consumers<P>;
  constexpr int kI = 2 * kBuf + kHalf;
  const bool marks = unit == 0;
  if (g > 0) {
    mbarrier_wait(empty_bar(s, kBuf, kHalf), static_cast<u32>(g - 1) & 1u);
    // Paired: the other CTA holds this half's last copy from here (pair.cuh).
    if constexpr (Traits<P>::kPaired) mbarrier_wait(&s.x.peer_free[kI], static_cast<u32>(g - 1) & 1u);
  }
  if (kHalf == kBuf && marks) {
#pragma unroll
    for (int r = 0; r < C::kKeysPerThread; ++r)
      st_shared_u32(smem_u32(&s.valid[kBuf * C::kBufKeys + group + kGroups * r]), key_of(r) != kSkipped ? 1u : 0u);
  }
  fill_half<P, kBuf, kHalf>(s, a, own_of, dst, unit);
  if constexpr (Traits<P>::kPaired) cp_async_arrive(&s.x.landed[kI]);
  if (marks) {
    if (Traits<P>::kPaired && group == 0)
      mbarrier_arrive_expect_tx(full_bar(s, kBuf, kHalf), kPairCopyBytes<kHalf>);
    else
      mbarrier_arrive(full_bar(s, kBuf, kHalf));
  }
}

}  // namespace attnjit::mla_decode_sparse

#include "mla_decode_sparse/fp8_producer.cuh"

namespace attnjit::mla_decode_sparse {

// The CTA's work item w; g0: the ring's steps before it (persistent.cuh), whose parity the
// barriers' phases continue.
template <auto P>
ATTNJIT_DEVICE void producer_warpgroup(SharedStorage<P>& s, const Args& a, const Work& w, int g0 = 0) {
  using C = Consumers<P>;
  const int tid = thread_in_warpgroup();
  const int group = tid / kGroupThreads, unit = tid % kGroupThreads;
  const int steps = (w.tile_end - w.tile_begin) / Traits<P>::kStepTiles;
  // Buffer b's key row `row` in step `step`: its place in the token's list.
  const auto list_pos = [&](int step, int b, int row) {
    return (w.tile_begin + step * Traits<P>::kStepTiles) * kGatherKeys + b * C::kBufKeys + row;
  };
  if constexpr (Traits<P>::kFp8) {  // fp8_producer.cuh's copy map: rows row0 + 4r
    const int row0 = fp8_copy_row(tid);
    const auto key = [&](int step, int b, int r) { return list_pos(step, b, row0 + kCopyRowStep * r); };
    if (steps > 0) produce_fp8<P>(s, a, w, steps, key, row0, unit);
    return;
  }
  const auto key = [&](int step, int b, int r) { return list_pos(step, b, group + kGroups * r); };
  // Paired: this CTA's keys are r in [2·rank, +2) (rows [32·rank, +32) of each buffer).
  const int own0 = Traits<P>::kPaired ? static_cast<int>(cluster_cta_rank()) * kOwnKeys<P> : 0;
  const u32 dst = fill_base(s, group, unit) + static_cast<u32>(own0 * kGroups * 128);
  // The indices are loaded a step ahead: their latency (a dependent global load before
  // any row can be gathered) then hides behind the step before.
  int next[2][C::kKeysPerThread];
  // A step whose 128 keys all lie in the main list (every step of a prefill but a partial
  // last one; warp-uniform): its indices are 8 loads at constant offsets from one pointer,
  // and each is checked against the main pool alone.
  const auto main_only = [&](int step) { return list_pos(step, 1, C::kBufKeys - 1) < w.n_main; };
  const int* const main_list = a.main.indices + w.token * a.main.stride;
  const auto load_indices = [&](int step) {
    if (main_only(step)) {
      const int* list = main_list + list_pos(step, 0, group);
#pragma unroll
      for (int b = 0; b < 2; ++b)
#pragma unroll
        for (int r = 0; r < C::kKeysPerThread; ++r) next[b][r] = list[b * C::kBufKeys + kGroups * r];
    } else {
#pragma unroll
      for (int b = 0; b < 2; ++b)
#pragma unroll
        for (int r = 0; r < C::kKeysPerThread; ++r) next[b][r] = key_index<P>(a, w, key(step, b, r));
    }
  };
  if (steps > 0) load_indices(0);
  for (int step = 0; step < steps; ++step) {
    // This step's keys, checked once (key_code): each is gathered by two fills. 32-bit
    // codes, not 8 live 64-bit pointers beside the next step's indices (those spilled).
    u32 code[2][C::kKeysPerThread];
    const bool main_step = main_only(step);
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int r = 0; r < C::kKeysPerThread; ++r)
        code[b][r] = main_step ? main_code(a, next[b][r]) : key_code<P>(a, w, key(step, b, r), next[b][r]);
    if (step + 1 < steps) load_indices(step + 1);
    const auto codes0 = [&](int r) { return code[0][r]; };
    const auto codes1 = [&](int r) { return code[1][r]; };
    // This CTA's keys: a select between two registers, not an indexed (local) array.
    const auto own0_codes = [&](int r) { return own0 != 0 ? code[0][kOwnKeys<P> + r] : code[0][r]; };
    const auto own1_codes = [&](int r) { return own0 != 0 ? code[1][kOwnKeys<P> + r] : code[1][r]; };
    // The order the consumers release the halves in, except that the step's first two
    // (WG1's buffer 0 lo, WG2's buffer 1 hi, each mid-step) go in the order they come: in
    // program order buffer 1 hi waited behind buffer 0 lo's release (ncu, prefill: WG2
    // waited on it 10 % of all samples, the producer on buffer 0 lo 6.5 %). One choice per
    // warp (its lanes then fill alike); the fills' own waits then return at once. (The
    // step's last two in release order as well measured 1 % slower, session 38.)
    const int g = g0 + step;
    bool hi_first = false;
    if (g > 0) {
      const u32 phase = static_cast<u32>(g - 1) & 1u;
      for (;;) {
        if (__all_sync(0xffffffffu, mbarrier_test_wait(empty_bar(s, 0, kLo), phase))) break;
        if (__all_sync(0xffffffffu, mbarrier_test_wait(empty_bar(s, 1, kHi), phase))) {
          hi_first = true;
          break;
        }
      }
    }
    for (int k = 0; k < 2; ++k) {
      if (hi_first == (k == 0))
        fill<P, 1, kHi>(s, a, codes1, own1_codes, g, group, unit, dst);
      else
        fill<P, 0, kLo>(s, a, codes0, own0_codes, g, group, unit, dst);
    }
    fill<P, 0, kHi>(s, a, codes0, own0_codes, g, group, unit, dst);
    fill<P, 1, kLo>(s, a, codes1, own1_codes, g, group, unit, dst);
  }
}

}  // namespace attnjit::mla_decode_sparse
