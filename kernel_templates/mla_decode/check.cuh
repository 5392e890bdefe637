#pragma once
// mla_decode_check (ATTNJIT_CHECK=1 only): validates the values that live on the GPU —
// cache lengths and the block-table entries they make visible — and reports the first
// bad one. The main kernel stays in bounds without it (it clamps lengths, and TMA fills
// out-of-range pages with zeros); this turns silent garbage into an error.
#include "common/arch.cuh"

namespace attnjit::mla_decode {

struct CheckParams {
  int page_size;
};

struct CheckArgs {
  const int* block_table;        // [b, max_pages]
  const int* cache_lens;         // [b]
  unsigned long long* first_bad; // (batch << 32) | (slot + 1); slot -1 = the length. Host
                                 // sets it to ~0 (nothing found) before the launch.
  int max_pages;
  int num_pages;
};

// grid (b), 128 threads. atomicMin keeps the lowest (batch, slot): a deterministic report.
template <CheckParams P>
__global__ void __launch_bounds__(128) check_kernel(const CheckArgs a) {
  const int b = static_cast<int>(blockIdx.x);
  const int len = a.cache_lens[b];
  const unsigned long long row = static_cast<unsigned long long>(b) << 32;
  if (len < 0 || len > a.max_pages * P.page_size) {
    if (threadIdx.x == 0) atomicMin(a.first_bad, row);  // slot -1 + 1 = 0: the length
    return;
  }
  const int used = (len + P.page_size - 1) / P.page_size;
  for (int slot = static_cast<int>(threadIdx.x); slot < used; slot += blockDim.x) {
    const int page = a.block_table[static_cast<i64>(b) * a.max_pages + slot];
    if (page < 0 || page >= a.num_pages) atomicMin(a.first_bad, row | static_cast<unsigned>(slot + 1));
  }
}

}  // namespace attnjit::mla_decode
