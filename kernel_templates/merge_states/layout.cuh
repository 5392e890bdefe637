#pragma once
// merge_states' layout, compiled by the host (runtime/ops/merge_states) and by NVRTC: the
// kernel's argument block and its launch arithmetic. Written once; the static_asserts pin
// the byte layout both sides pass through cuLaunchKernelEx.
#include "common/constants.cuh"

namespace attnjit::layout::merge_states {

// One attention state: values [n0, n1, h, d] and their lse [n0, n1, h] (a rank-3 / rank-2
// view has n0 = 1). Strides in elements, d contiguous; any lse strides, so mla_decode's
// [b, h, q_len] and mha_fwd's [h, total_q] lse are passed as they are.
struct State {
  void* v;
  float* lse;                  // the output's may be null: not wanted
  long long v_stride[3];       // n0, n1, head
  long long lse_stride[3];     // n0, n1, head
};

struct Args {
  State a, b, out;
  int n0, n1, heads, pad;  // rows = n0 · n1 · heads, each of head_dim values
};

// A row of head_dim values is read as 16-byte vectors by a group of kLanes lanes of one
// warp (the largest power of two ≤ 32 dividing the row's vectors), each lane taking every
// kLanes-th vector. Rows per CTA = threads / kLanes.
inline constexpr int kVectorBytes = 16;
ATTNJIT_PLAN int row_vectors(int head_dim, int elem_bytes) {
  return head_dim * elem_bytes / kVectorBytes;
}
ATTNJIT_PLAN int row_lanes(int head_dim, int elem_bytes) {
  int lanes = 32;
  while (lanes > 1 && row_vectors(head_dim, elem_bytes) % lanes != 0) lanes /= 2;
  return lanes;
}
ATTNJIT_PLAN int rows_per_cta(int threads, int head_dim, int elem_bytes) {
  return threads / row_lanes(head_dim, elem_bytes);
}

static_assert(sizeof(State) == 64 && sizeof(Args) == 208 && ATTNJIT_OFFSET_IS(Args, n0, 192),
              "merge_states::Args layout");

}  // namespace attnjit::layout::merge_states
