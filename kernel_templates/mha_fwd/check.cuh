#pragma once
// mha_fwd_check (ATTNJIT_CHECK=1 only): validates the values that live on the GPU — row
// offsets, KV lengths and the block-table entries they make visible — and reports the
// first bad one. The main kernel stays in bounds without it (it clamps offsets and
// lengths, and TMA fills out-of-range pages with zeros); this turns garbage into an error.
#include "common/arch.cuh"
#include "mha_fwd/layout.cuh"

namespace attnjit::mha_fwd {

using namespace attnjit::layout::mha_fwd;

// P: the check table's fields (runtime/ops/mha_fwd/config.cpp), declared by the
// generated translation unit: ragged, paged, page_size.

ATTNJIT_DEVICE void report(const CheckArgs& a, int b, CheckKind kind, int slot) {
  atomicMin(a.first_bad, (static_cast<unsigned long long>(b) << 32) |
                             (static_cast<unsigned long long>(kind) << 24) |
                             static_cast<unsigned>(slot));
}

// An offsets array is good for sequence b when 0 ≤ off[b] ≤ off[b+1] ≤ total and
// off[b+1] − off[b] ≤ bound.
ATTNJIT_DEVICE bool offsets_ok(const int* off, int b, int total, int bound) {
  const int lo = off[b], hi = off[b + 1];
  return lo >= 0 && lo <= hi && hi <= total && hi - lo <= bound;
}

// grid (b), kCheckThreads threads. atomicMin keeps the lowest (batch, kind, slot): a deterministic report.
template <auto P>
__global__ void __launch_bounds__(kCheckThreads) check_kernel(const CheckArgs a) {
  const int b = static_cast<int>(blockIdx.x);
  if constexpr (P.ragged) {
    if (threadIdx.x == 0 && !offsets_ok(a.q_offsets, b, a.total_q, a.max_seqlen_q))
      report(a, b, CheckKind::kQOffsets, 0);
    if constexpr (!P.paged)
      if (threadIdx.x == 0 && !offsets_ok(a.k_offsets, b, a.total_k, a.total_k))
        report(a, b, CheckKind::kKOffsets, 0);
  }
  if constexpr (P.paged) {
    const int len = a.kv_lens[b];
    if (len < 0 || len > a.max_pages * P.page_size) {
      if (threadIdx.x == 0) report(a, b, CheckKind::kKvLens, 0);
      return;
    }
    const int used = (len + P.page_size - 1) / P.page_size;
    for (int slot = static_cast<int>(threadIdx.x); slot < used; slot += blockDim.x) {
      const int page = a.block_table[static_cast<i64>(b) * a.max_pages + slot];
      if (page < 0 || page >= a.num_pages) report(a, b, CheckKind::kBlockTable, slot);
    }
  }
}

}  // namespace attnjit::mha_fwd
