#pragma once
// mla_decode_combine: merges split-KV partials. Each split s of a row left its output
// normalized by its own sum, O_s, and lse_s = log Σ exp(scores it saw); then
//   out = Σ_s w_s · O_s / Σ_s w_s,   w_s = exp(lse_s − max lse),   lse = max + log Σ w_s.
// A split that saw no key has lse_s = −inf and weight 0; a row no split saw stays 0 with
// lse −inf. Launched with programmatic dependent launch: it waits for the main kernel's
// memory (griddepcontrol.wait) before reading the partials.
#include "common/act_quant.cuh"
#include "common/arch.cuh"
#include "common/fence.cuh"
#include "common/numeric.cuh"
#include "common/types.cuh"
#include "mla_decode/common.cuh"

namespace attnjit::mla_decode {

// P: the combine table's fields (runtime/ops/mla_decode/config.cpp), declared by the
// generated translation unit: dtype, num_heads (packed row = q_idx · h + head).

// Merges one row's partials, slots [first_slot, first_slot + count). The lse pass is spread
// over the threads (one partial each) and the weights go through shared memory, so a
// sequence cut into many pieces costs one round trip for its lse and independent loads for
// its outputs, not a chain of dependent loads per partial.
template <auto P>
ATTNJIT_DEVICE void combine_row(const CombineArgs& a, int batch, const Seq& seq, int row,
                                i64 first_slot, int count, float* weight /* [kMaxCombineParts] */,
                                float* warp_max /* [kCombineThreads / 32] */) {
  const int rows_b = a.q.q_len * P.num_heads;  // a partial's rows
  const i64 base = first_slot * rows_b + row;  // the first partial's row
  const int tid = static_cast<int>(threadIdx.x);
  count = min(count, kMaxCombineParts);  // the plans keep within it (static 256, balanced < 2·slots)
  float m = neg_inf();
  for (int s = tid; s < count; s += kCombineThreads) {
    weight[s] = a.part_lse[base + static_cast<i64>(s) * rows_b];
    m = fmaxf(m, weight[s]);
  }
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (tid % 32 == 0) warp_max[tid / 32] = m;
  __syncthreads();
  m = warp_max[0];
  for (int w = 1; w < kCombineThreads / 32; ++w) m = fmaxf(m, warp_max[w]);
  // A split that saw no key has lse −inf: weight 0 (and no inf − inf when no split saw one).
  for (int s = tid; s < count; s += kCombineThreads)
    weight[s] = weight[s] == neg_inf() ? 0.0f : __expf(weight[s] - m);
  __syncthreads();
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  float sum = 0.0f;
#pragma unroll 4
  for (int s = 0; s < count; ++s) {
    const float w = weight[s];
    sum += w;
    if (w == 0.0f) continue;  // its partial was never meaningful (may hold anything)
    const float4 v = reinterpret_cast<const float4*>(
        a.part_out + (base + static_cast<i64>(s) * rows_b) * kValueDim)[threadIdx.x];
    acc[0] += w * v.x;
    acc[1] += w * v.y;
    acc[2] += w * v.z;
    acc[3] += w * v.w;
  }
  __syncthreads();  // `weight` and `warp_max` are free for the next row
  // The sink joins the denominator only (exp(sink − m) in the partials' units; +inf: 0 out).
  const float sink = a.sink != nullptr ? a.sink[row % P.num_heads] : neg_inf();
  const float denom = sum + (sum > 0.0f && sink != neg_inf() ? __expf(sink - m) : 0.0f);
  const float inv = sum > 0.0f ? 1.0f / denom : 0.0f;
  const i64 out_row = static_cast<i64>(seq.start) * P.num_heads + row;
  const u32 lo = pack2<P.dtype>(acc[0] * inv, acc[1] * inv), hi = pack2<P.dtype>(acc[2] * inv, acc[3] * inv);
  if (P.dtype == DType::kBF16 && a.out_scale != nullptr) {
    // e4m3 out (bf16 only): the codes of the bf16 row (common/act_quant.cuh), a warp a
    // 128-column group, σ from its first lane.
    u32 code;
    const float sigma = act_quantize4(lo, hi, code);
    reinterpret_cast<u32*>(static_cast<u8*>(a.out) + out_row * kValueDim)[threadIdx.x] = code;
    if (threadIdx.x % 32 == 0) a.out_scale[out_row * (kValueDim / 128) + threadIdx.x / 32] = sigma;
  } else {
    u32* out = reinterpret_cast<u32*>(static_cast<u8*>(a.out) + (out_row * kValueDim + 4 * threadIdx.x) *
                                                                    dtype_bytes(P.dtype));
    out[0] = lo;
    out[1] = hi;
  }
  if (a.lse != nullptr && threadIdx.x == 0)
    a.lse[lse_index(a.q, batch, seq, P.num_heads, row % P.num_heads, row / P.num_heads)] =
        sum > 0.0f ? m + __logf(sum) : neg_inf();
}

// kCombineThreads threads. Static split: grid (q_len·h, b), sequence blockIdx.y's partials
// are slots [batch·splits, + splits). Balanced: a 1-D grid striding over (cut sequence,
// row) pairs — as many as the schedule cut, each with its contiguous slots. A row past its
// (ragged) sequence's q_len·h has no output.
template <auto P>
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(const CombineArgs a) {
  __shared__ float weight[kMaxCombineParts];
  __shared__ float warp_max[kCombineThreads / 32];
  pdl_wait_prior_grids();
  if (a.split_seqs == nullptr) {
    const int batch = static_cast<int>(blockIdx.y), row = static_cast<int>(blockIdx.x);
    const Seq seq = sequence(a.q, batch);
    if (row < seq.q_len * P.num_heads)
      combine_row<P>(a, batch, seq, row, static_cast<i64>(batch) * a.num_splits, a.num_splits,
                     weight, warp_max);
    return;
  }
  const int rows_bound = a.q.q_len * P.num_heads;
  const int pairs = a.counts->split_seqs * rows_bound;
  for (int w = static_cast<int>(blockIdx.x); w < pairs; w += static_cast<int>(gridDim.x)) {
    const SplitSeq cut = a.split_seqs[w / rows_bound];
    const int row = w % rows_bound;
    const Seq seq = sequence(a.q, cut.batch);
    if (row < seq.q_len * P.num_heads)  // uniform over the CTA: the barriers inside hold
      combine_row<P>(a, cut.batch, seq, row, cut.first_slot, cut.count, weight, warp_max);
  }
}

}  // namespace attnjit::mla_decode
