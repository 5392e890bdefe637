#pragma once
// mla_decode_combine: merges split-KV partials. Each split s of a row left its output
// normalized by its own sum, O_s, and lse_s = log Σ exp(scores it saw); then
//   out = Σ_s w_s · O_s / Σ_s w_s,   w_s = exp(lse_s − max lse),   lse = max + log Σ w_s.
// A split that saw no key has lse_s = −inf and weight 0; a row no split saw stays 0 with
// lse −inf. Launched with programmatic dependent launch: it waits for the main kernel's
// memory (griddepcontrol.wait) before reading the partials.
#include "common/arch.cuh"
#include "common/fence.cuh"
#include "common/numeric.cuh"
#include "common/types.cuh"
#include "mla_decode/common.cuh"

namespace attnjit::mla_decode {

// P: the combine table's fields (runtime/ops/mla_decode/config.cpp), declared by the
// generated translation unit: dtype, num_heads (packed row = q_idx · h + head).

// Merges one row's partials, slots [first_slot, first_slot + count).
template <auto P>
ATTNJIT_DEVICE void combine_row(const CombineArgs& a, int batch, const Seq& seq, int row,
                                i64 first_slot, int count) {
  const int rows_b = a.q.q_len * P.num_heads;  // a partial's rows
  const i64 base = first_slot * rows_b + row;  // the first partial's row
  const i64 step = rows_b;
  float m = neg_inf();
  for (int s = 0; s < count; ++s) m = fmaxf(m, a.part_lse[base + s * step]);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  float sum = 0.0f;
  if (m != neg_inf()) {
    for (int s = 0; s < count; ++s) {
      const i64 prow = base + s * step;
      const float lse_s = a.part_lse[prow];
      if (lse_s == neg_inf()) continue;  // empty split: its partial was never meaningful
      const float w = __expf(lse_s - m);
      sum += w;
      const float4 v = reinterpret_cast<const float4*>(a.part_out + prow * kValueDim)[threadIdx.x];
      acc[0] += w * v.x;
      acc[1] += w * v.y;
      acc[2] += w * v.z;
      acc[3] += w * v.w;
    }
  }
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  u32* out = reinterpret_cast<u32*>(static_cast<u8*>(a.out) +
                                    ((static_cast<i64>(seq.start) * P.num_heads + row) * kValueDim +
                                     4 * threadIdx.x) * dtype_bytes(P.dtype));
  out[0] = pack2<P.dtype>(acc[0] * inv, acc[1] * inv);
  out[1] = pack2<P.dtype>(acc[2] * inv, acc[3] * inv);
  if (a.lse != nullptr && threadIdx.x == 0)
    a.lse[lse_index(a.q, batch, seq, P.num_heads, row % P.num_heads, row / P.num_heads)] =
        sum > 0.0f ? m + __logf(sum) : neg_inf();
}

// kCombineThreads threads. Static split: grid (q_len·h, b), sequence blockIdx.y's partials
// are slots [batch·splits, + splits). Balanced: grid (kCombineRowBlocks, bound on cut sequences),
// cut sequence blockIdx.y (past the schedule's count: nothing to do) with its contiguous
// slots. A row past its (ragged) sequence's q_len·h has no output.
template <auto P>
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(const CombineArgs a) {
  pdl_wait_prior_grids();
  int batch = static_cast<int>(blockIdx.y), count = a.num_splits;
  i64 first_slot = static_cast<i64>(batch) * a.num_splits;
  if (a.split_seqs != nullptr) {
    if (static_cast<int>(blockIdx.y) >= a.counts->split_seqs) return;
    const SplitSeq cut = a.split_seqs[blockIdx.y];
    batch = cut.batch;
    first_slot = cut.first_slot;
    count = cut.count;
  }
  const Seq seq = sequence(a.q, batch);
  for (int row = static_cast<int>(blockIdx.x); row < seq.q_len * P.num_heads;
       row += static_cast<int>(gridDim.x))
    combine_row<P>(a, batch, seq, row, first_slot, count);
}

}  // namespace attnjit::mla_decode
