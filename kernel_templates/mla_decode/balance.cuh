#pragma once
// mla_decode_balance: the balanced schedule of one decode step (mla_decode_schedule), built
// from the lengths on the GPU, never read back. One CTA of kBalanceThreads threads:
//   1. tiles_i = ⌈clamp(L_i, 0, capacity) / block_n⌉; total = Σ tiles_i
//   2. C = max(kMinPieceTiles, ⌈1.1 · total / slots⌉), or the plan's fixed C (batch-invariant:
//      a sequence's pieces then depend on its own length only); sequence i is cut into
//      n_i = max(1, ⌈tiles_i / C⌉) pieces of ⌈tiles_i / n_i⌉ tiles or one fewer
//   3. the pieces are listed by size, longest first (ties: lower sequence first), a
//      sequence's pieces side by side: the main kernel's CTAs are dispatched in that order,
//      which packs the SMs like longest-processing-time-first scheduling
//   4. cut sequences (n_i > 1) get partial slots in sequence order and a SplitSeq record
// Step 3 ranks every sequence against every other: O(b²/kBalanceThreads) per thread, a few
// microseconds up to b = 1024, once per step (every layer reuses the schedule).
// The bounds in layout.cuh (BalanceBounds) hold for any lengths; the stores are guarded all
// the same, so the kernel never writes past the workspace the plan sized.
#include "common/arch.cuh"
#include "common/types.cuh"
#include "mla_decode/layout.cuh"

namespace attnjit::mla_decode {

using namespace attnjit::layout::mla_decode;

// P: the balance table's fields (runtime/ops/mla_decode/balance_config.def), declared by
// the generated translation unit: block_n.

// Sum over the CTA of one value per thread (every thread gets the total).
ATTNJIT_DEVICE long long block_sum(long long v, long long* partial /* [kBalanceThreads / 32] */) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();  // `partial` may still be read by a previous call
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  long long total = 0;
  for (int w = 0; w < kBalanceThreads / 32; ++w) total += partial[w];
  return total;
}

// First tile of piece k when `tiles` are cut into n pieces whose sizes differ by at most one
// (the first tiles % n pieces get the extra tile).
ATTNJIT_DEVICE int piece_begin(int tiles, int n, int k) {
  return k * (tiles / n) + min(k, tiles % n);
}

template <auto P>
__global__ void __launch_bounds__(kBalanceThreads) balance_kernel(const BalanceArgs a) {
  __shared__ long long partial[kBalanceThreads / 32];
  __shared__ int chunk_key[kBalanceThreads], chunk_pieces[kBalanceThreads];
  const int b = a.batch;
  int* tiles = a.scratch;          // [b]
  int* pieces = a.scratch + b;     // [b]
  const int tid = static_cast<int>(threadIdx.x);

  // 1. Tiles per sequence, as the main kernel will walk them.
  long long my_tiles = 0;
  for (int i = tid; i < b; i += kBalanceThreads) {
    const int len = min(max(a.cache_lens[i], 0), a.capacity);
    tiles[i] = ceil_div(len, P.block_n);
    my_tiles += tiles[i];
  }
  const long long total = block_sum(my_tiles, partial);

  // 2. The piece size bound and each sequence's pieces.
  // 1.1 × total / slots, rounded up. Fast float division: neither 64-bit nor IEEE division
  // (both are called subroutines, whose register saves ptxas counts as spills); the bounds
  // hold with room to spare for its rounding.
  const float share = ceilf(__fdividef(1.1f * static_cast<float>(total), static_cast<float>(a.slots)));
  const int cap = a.fixed_cap > 0  // batch-invariant: a sequence's pieces depend on its length only
                      ? a.fixed_cap
                      : static_cast<int>(fmaxf(fminf(share, 1.0e9f), static_cast<float>(kMinPieceTiles)));
  long long my_items = 0, my_cut = 0;
  for (int i = tid; i < b; i += kBalanceThreads) {
    const int n = max(1, ceil_div(tiles[i], cap));
    pieces[i] = n;
    my_items += n;
    my_cut += n > 1;
  }
  const long long num_items = block_sum(my_items, partial);
  const long long num_cut = block_sum(my_cut, partial);  // its __syncthreads publish `pieces`

  // 3 + 4. Where sequence i's pieces go: after every sequence ranked before it (bigger
  // pieces, or equal pieces and a lower index); its slots after every cut sequence before it.
  for (int round = 0; round * kBalanceThreads < b; ++round) {
    const int i = round * kBalanceThreads + tid;
    const bool mine = i < b;
    const int n_i = mine ? pieces[i] : 0;
    const int key_i = mine ? ceil_div(tiles[i], n_i) : 0;
    long long first_item = 0, first_slot = 0, cut_index = 0;
    for (int c0 = 0; c0 < b; c0 += kBalanceThreads) {
      __syncthreads();  // the previous chunk is read by everyone
      if (c0 + tid < b) {
        chunk_pieces[tid] = pieces[c0 + tid];
        chunk_key[tid] = ceil_div(tiles[c0 + tid], chunk_pieces[tid]);
      }
      __syncthreads();
      const int chunk = min(kBalanceThreads, b - c0);
      if (!mine) continue;
      for (int k = 0; k < chunk; ++k) {
        const int j = c0 + k, n_j = chunk_pieces[k], key_j = chunk_key[k];
        if (key_j > key_i || (key_j == key_i && j < i)) first_item += n_j;
        if (j < i && n_j > 1) {
          first_slot += n_j;
          ++cut_index;
        }
      }
    }
    if (!mine) continue;
    const bool cut = n_i > 1;
    for (int k = 0; k < n_i; ++k) {
      const long long item = first_item + k;
      if (item >= a.max_items) break;  // unreachable (layout.cuh's bound); keeps the stores in
                                       // the workspace whatever happens
      const int slot = cut && first_slot + n_i <= a.max_slots ? static_cast<int>(first_slot + k) : -1;
      // One 16-byte store per WorkItem {batch, tile_begin, tile_end, slot}.
      reinterpret_cast<int4*>(a.items)[item] = make_int4(i, piece_begin(tiles[i], n_i, k),
                                                         piece_begin(tiles[i], n_i, k + 1), slot);
    }
    if (cut && cut_index < a.max_cuts && first_slot + n_i <= a.max_slots)  // SplitSeq
      reinterpret_cast<int4*>(a.split_seqs)[cut_index] = make_int4(i, static_cast<int>(first_slot), n_i, 0);
  }
  if (tid == 0) {
    a.counts->items = static_cast<int>(min(num_items, static_cast<long long>(a.max_items)));
    a.counts->split_seqs = static_cast<int>(min(num_cut, static_cast<long long>(a.max_cuts)));
  }
}

}  // namespace attnjit::mla_decode
