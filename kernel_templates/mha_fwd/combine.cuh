#pragma once
// mha_fwd_combine: merges split-KV partials. Split s of a row left O_s normalized by its
// own sum and lse_s = log Σ exp(scores it saw); then
//   out = Σ_s w_s·O_s / (Σ_s w_s + sink term),  w_s = exp(lse_s − max lse),
//   lse = max + log Σ_s w_s   (the sink joins the denominator only, as in the unsplit path).
// A split that saw no key has lse_s = −inf and weight 0; a row no split saw stays 0 with
// lse −inf whatever the sink. Launched with programmatic dependent launch: it waits for
// the main kernel's memory (griddepcontrol.wait) before reading the partials.
#include "common/arch.cuh"
#include "common/fence.cuh"
#include "common/numeric.cuh"
#include "common/types.cuh"
#include "mha_fwd/layout.cuh"

namespace attnjit::mha_fwd {

using namespace attnjit::layout::mha_fwd;

// P: the combine table's fields (runtime/ops/mha_fwd/config.cpp), declared by the
// generated translation unit: dtype, head_dim_v, ragged, sink.

// grid (ceil(max s_q / 4), h_q, batch), 128 threads.
template <auto P>
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(const CombineArgs a) {
  constexpr int kPerLane = P.head_dim_v / kWarpSize;  // 2, 4 or 8 columns per lane
  static_assert(P.head_dim_v % (2 * kWarpSize) == 0, "whole column pairs per lane");
  pdl_wait_prior_grids();
  const int batch = static_cast<int>(blockIdx.z), head = static_cast<int>(blockIdx.y);
  const int pos = static_cast<int>(blockIdx.x) * kCombineWarps + static_cast<int>(threadIdx.x) / kWarpSize;
  int q_row0 = 0, s_q = 0;
  if constexpr (P.ragged) {
    const int b0 = a.q_offsets[batch], b1 = a.q_offsets[batch + 1];
    q_row0 = b0 < 0 ? 0 : (b0 > a.total_q ? a.total_q : b0);
    s_q = (b1 < q_row0 ? q_row0 : (b1 > a.total_q ? a.total_q : b1)) - q_row0;
  } else {
    q_row0 = batch * a.s_q;
    s_q = a.s_q;
  }
  if (pos >= s_q) return;
  const int q_row = q_row0 + pos;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;

  float m = neg_inf();
  for (int s = 0; s < a.num_splits; ++s)
    m = fmaxf(m, a.part_lse[(static_cast<i64>(s) * a.h_q + head) * a.total_q + q_row]);
  float acc[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) acc[j] = 0.0f;
  float sum = 0.0f;
  if (m != neg_inf()) {
    for (int s = 0; s < a.num_splits; ++s) {
      const float lse_s = a.part_lse[(static_cast<i64>(s) * a.h_q + head) * a.total_q + q_row];
      if (lse_s == neg_inf()) continue;  // an empty split's partial means nothing
      const float w = __expf(lse_s - m);
      sum += w;
      const float* src =
          a.part_out + ((static_cast<i64>(s) * a.total_q + q_row) * a.h_q + head) * P.head_dim_v;
#pragma unroll
      for (int j = 0; j < kPerLane; j += 2) {
        const float2 v = *reinterpret_cast<const float2*>(src + 2 * lane + j * kWarpSize);
        acc[j] += w * v.x;
        acc[j + 1] += w * v.y;
      }
    }
  }
  float denom = sum;
  if constexpr (P.sink) {
    if (sum > 0.0f) denom += __expf(a.sink[head] - m);
  }
  const float inv = sum > 0.0f ? 1.0f / denom : 0.0f;
  u8* out = static_cast<u8*>(a.out) +
            (static_cast<i64>(q_row) * a.h_q + head) * P.head_dim_v * dtype_bytes(P.dtype);
#pragma unroll
  for (int j = 0; j < kPerLane; j += 2)
    *reinterpret_cast<u32*>(out + (2 * lane + j * kWarpSize) * dtype_bytes(P.dtype)) =
        pack2<P.dtype>(acc[j] * inv, acc[j + 1] * inv);
  if (a.lse != nullptr && lane == 0)
    a.lse[static_cast<i64>(head) * a.total_q + q_row] = sum > 0.0f ? m + __logf(sum) : neg_inf();
}

}  // namespace attnjit::mha_fwd
