#pragma once
// The "narrow" kernels' (keys on wgmma's M, a CTA's query rows on N) accumulator columns and
// their two-warpgroup merge: mla_decode_fp8's and mla_decode_sparse's narrow kernels each
// run two warpgroups over alternate key tiles, each holding the whole Oᵀ [512 dims × N] as
// 8 tiles of [64 × N] fragments, and end by merging halves: warpgroup k keeps dims
// [256k, 256k + 256) and hands the other its tiles of the other half through shared memory.
#include "common/arch.cuh"
#include "common/constants.cuh"
#include "common/numeric.cuh"
#include "common/types.cuh"
#include "common/warpgroup.cuh"

namespace attnjit {

// This thread's column c (0 .. N/4 − 1) of an [64 × N] accumulator fragment, and the column
// index c of its fragment entry i (entries i and i + 2 are rows g and g + 8 of one column).
ATTNJIT_DEVICE int acc_column(int tid, int c) { return 8 * (c / 2) + 2 * (tid % 4) + c % 2; }
ATTNJIT_HOST_DEVICE constexpr int acc_col_of(int i) { return 2 * (i / 4) + i % 2; }

// The exchange area, [source half][4 tiles][kAcc][128 threads] floats: warpgroup kHalf
// writes the tiles of the other's half. kHalf is a template argument so the tile indices
// are immediates (a run-time index would put Oᵀ in local memory).
template <int kAcc, int kHalf>
ATTNJIT_DEVICE void hand_over_half(float* x, const float (&o)[8][kAcc]) {
  constexpr int kTheirs = 4 * (1 - kHalf);
  const int tid = thread_in_warpgroup();
#pragma unroll
  for (int b = 0; b < 4; ++b)
#pragma unroll
    for (int i = 0; i < kAcc; ++i) x[((kHalf * 4 + b) * kAcc + i) * kWarpgroupThreads + tid] = o[kTheirs + b][i];
}

// After both hand-overs: per column, this warpgroup's (m, l) merged with the other's
// (m_other[n], l_other[n] by column n), and warpgroup kHalf's own tiles rescaled and summed
// with the other's from x. m_all, l_all: the merged statistics per column.
template <int kAcc, int kHalf>
ATTNJIT_DEVICE void merge_half(const float* x, float (&o)[8][kAcc], const float (&m)[kAcc / 2],
                               const float (&l)[kAcc / 2], const float* m_other, const float* l_other,
                               float (&m_all)[kAcc / 2], float (&l_all)[kAcc / 2]) {
  constexpr int kCols = kAcc / 2, kMine = 4 * kHalf;
  const int tid = thread_in_warpgroup();
  float a_me[kCols], a_other[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const int n = acc_column(tid, c);
    const SoftmaxMerge mg = merge_softmax(m[c], l[c], m_other[n], l_other[n]);
    a_me[c] = mg.self, a_other[c] = mg.other, m_all[c] = mg.m, l_all[c] = mg.l;
  }
#pragma unroll
  for (int b = 0; b < 4; ++b)
#pragma unroll
    for (int i = 0; i < kAcc; ++i)
      o[kMine + b][i] = a_me[acc_col_of(i)] * o[kMine + b][i] +
                        a_other[acc_col_of(i)] * x[(((1 - kHalf) * 4 + b) * kAcc + i) * kWarpgroupThreads + tid];
}

}  // namespace attnjit
