#pragma once
// mla_decode_check (ATTNJIT_CHECK=1 only): validates the values that live on the GPU —
// ragged q offsets, cache lengths and the block-table entries they make visible — and
// reports the first bad one. The main kernel stays in bounds without it (it clamps offsets
// and lengths, and TMA fills out-of-range pages with zeros); this turns silent garbage into
// an error.
#include "common/arch.cuh"
#include "mla_decode/layout.cuh"

namespace attnjit::mla_decode {

using namespace attnjit::layout::mla_decode;

// P: the check table's fields (runtime/ops/mla_decode/config.cpp), declared by the
// generated translation unit: page_size.

// grid (b), kCheckThreads threads. atomicMin keeps the lowest (batch, what): a deterministic report.
template <auto P>
__global__ void __launch_bounds__(kCheckThreads) check_kernel(const CheckArgs a) {
  const int b = static_cast<int>(blockIdx.x);
  const unsigned long long row = static_cast<unsigned long long>(b) << 32;
  if (a.q_offsets != nullptr && threadIdx.x == 0) {
    const int start = a.q_offsets[b], end = a.q_offsets[b + 1];
    if (start < 0 || end < start || end > a.total_q || end - start > a.max_q_len)
      atomicMin(a.first_bad, row | kBadQOffsets);
  }
  const int len = a.cache_lens[b];
  if (len < 0 || len > a.max_pages * P.page_size) {
    if (threadIdx.x == 0) atomicMin(a.first_bad, row | kBadLength);
    return;
  }
  const int used = (len + P.page_size - 1) / P.page_size;
  for (int slot = static_cast<int>(threadIdx.x); slot < used; slot += blockDim.x) {
    const int page = a.block_table[static_cast<i64>(b) * a.max_pages + slot];
    if (page < 0 || page >= a.num_pages)
      atomicMin(a.first_bad, row | (kBadSlot0 + static_cast<unsigned>(slot)));
  }
}

}  // namespace attnjit::mla_decode
