#pragma once
// mla_decode_balance: the balanced schedule of one decode step (mla_decode_schedule), built
// from the lengths on the GPU, never read back. One CTA of kBalanceThreads threads; two
// forms (layout.cuh), the first that fits:
// Pieces (one per CTA):
//   C = ⌈1.1 · total tiles / slots⌉ (at least kMinPieceTiles), or the plan's fixed C
//   (batch-invariant: a sequence's pieces then depend on its own length only); sequence i
//   is cut into n_i = max(1, ⌈tiles_i / C⌉) pieces of ⌈tiles_i / n_i⌉ tiles or one fewer,
//   listed by size, longest first (ties: lower sequence first): the hardware's in-order
//   dispatch packs them like longest-processing-time-first. Exact when the pieces fit one
//   wave (Σ n_i ≤ slots), and the form for shapes of several row tiles, whose pieces are
//   compute-bound and pay more per cut. The ranking is O(b²/kBalanceThreads) per thread, a
//   few microseconds up to b = 1024.
// Packed (FlashMLA's equal share; memory-bound shapes whose pieces need a second wave,
// where LPT leaves a tail of up to a piece per SM):
//   1. cost_i = tiles_i + kSeqCostTiles; pos_i = Σ_{j<i} cost_j; share = ⌈Σ cost / slots⌉:
//      CTA k owns positions [k·share, (k+1)·share)
//   2. sequence i's tiles lie at [pos_i + kSeqCostTiles, + tiles_i) (its fixed cost goes
//      with its first tile); it is cut at every CTA boundary among them: pieces f_i … l_i,
//      one per CTA, listed in sequence order, which is also CTA order
//   3. cut sequences get partial slots in sequence order and a SplitSeq record;
//      cta_first[k] = the first item of CTA k (a CTA whose run holds no tile starts where
//      the next one does)
// Once per step (every layer reuses the schedule). The bounds in layout.cuh (BalanceBounds)
// hold for any lengths; the stores are guarded all the same, so the kernel never writes
// past the workspace the plan sized.
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

// Exclusive prefix sum over the CTA of one value per thread, plus the running total of
// earlier rounds (`carry`, updated to include this round). Every thread must call it.
ATTNJIT_DEVICE long long block_scan(long long v, long long& carry,
                                    long long* partial /* [kBalanceThreads / 32] */) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  long long x = v;  // inclusive within the warp
  for (int o = 1; o < 32; o *= 2) {
    const long long y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  __syncthreads();  // `partial` may still be read by a previous call
  if (lane == 31) partial[warp] = x;
  __syncthreads();
  long long before = carry, round_total = 0;
  for (int w = 0; w < kBalanceThreads / 32; ++w) {
    if (w < warp) before += partial[w];
    round_total += partial[w];
  }
  carry += round_total;
  return before + x - v;
}

// The pieces form: pieces of at most `cap` tiles, longest first, one CTA each.
ATTNJIT_DEVICE void piece_schedule(const BalanceArgs& a, const int* tiles, int* pieces, int cap,
                                   long long num_items, long long* partial, int* chunk_key,
                                   int* chunk_pieces) {
  const int b = a.batch, tid = static_cast<int>(threadIdx.x);
  long long my_cut = 0;
  for (int i = tid; i < b; i += kBalanceThreads) {
    const int n = max(1, ceil_div(tiles[i], cap));
    pieces[i] = n;
    my_cut += n > 1;
  }
  const long long num_cut = block_sum(my_cut, partial);  // its __syncthreads publish `pieces`

  // Where sequence i's pieces go: after every sequence ranked before it (bigger pieces, or
  // equal pieces and a lower index); its slots after every cut sequence before it.
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
  const int items = static_cast<int>(min(num_items, static_cast<long long>(a.max_items)));
  for (int k = tid; k <= a.ctas; k += kBalanceThreads) a.cta_first[k] = min(k, items);
  if (tid == 0) {
    a.counts->items = items;
    a.counts->split_seqs = static_cast<int>(min(num_cut, static_cast<long long>(a.max_cuts)));
  }
}

// The packed form: an equal share of the concatenated work per CTA. cta_first is gathered
// in shared memory first (kMaxPackedCtas ≥ the plan's slots: SMs / row tiles ≤ 256).
inline constexpr int kMaxPackedCtas = kBalanceThreads - 1;
inline constexpr int kNoItem = 0x7fffffff;
ATTNJIT_DEVICE void packed_schedule(const BalanceArgs& a, const int* tiles, int* first_pos,
                                    long long* partial, int* cta_first_s /* [kMaxPackedCtas + 1] */) {
  const int b = a.batch, tid = static_cast<int>(threadIdx.x);
  const int ctas = min(a.slots, kMaxPackedCtas);
  for (int k = tid; k <= ctas; k += kBalanceThreads) cta_first_s[k] = kNoItem;
  // 1. Each sequence's first position on the cost axis.
  long long carry = 0;
  for (int r0 = 0; r0 < b; r0 += kBalanceThreads) {
    const int i = r0 + tid;
    const long long cost = i < b ? tiles[i] + kSeqCostTiles : 0;
    const long long pos = block_scan(cost, carry, partial);
    if (i < b) first_pos[i] = static_cast<int>(min(pos, static_cast<long long>(kNoItem)));
  }
  const long long share = max(1ll, (carry + ctas - 1) / ctas);

  // 2 + 3. Sequence i's pieces: one per CTA its tiles reach.
  long long item_carry = 0, slot_carry = 0, cut_carry = 0;
  for (int r0 = 0; r0 < b; r0 += kBalanceThreads) {
    const int i = r0 + tid;
    const bool mine = i < b;
    long long t0 = 0, f = 0, l = 0;
    int n = 0;
    if (mine) {
      t0 = static_cast<long long>(first_pos[i]) + kSeqCostTiles;  // position of tile 0
      const long long start = tiles[i] > 0 ? t0 : first_pos[i];
      f = min(start / share, static_cast<long long>(ctas - 1));
      l = tiles[i] > 0 ? min((t0 + tiles[i] - 1) / share, static_cast<long long>(ctas - 1)) : f;
      n = static_cast<int>(l - f + 1);
    }
    const bool cut = n > 1;
    const long long first_item = block_scan(n, item_carry, partial);
    const long long first_slot = block_scan(cut ? n : 0, slot_carry, partial);
    const long long cut_index = block_scan(cut ? 1 : 0, cut_carry, partial);
    if (!mine) continue;
    const bool slots_fit = first_slot + n <= a.max_slots;
    for (int k = 0; k < n; ++k) {
      const long long item = first_item + k;
      if (item >= a.max_items) break;  // unreachable (layout.cuh's bound)
      const long long cta = f + k;
      const int begin = k == 0 ? 0 : static_cast<int>(cta * share - t0);
      const int end = k == n - 1 ? tiles[i] : static_cast<int>((cta + 1) * share - t0);
      const int slot = cut && slots_fit ? static_cast<int>(first_slot + k) : -1;
      reinterpret_cast<int4*>(a.items)[item] = make_int4(i, begin, end, slot);
      if (k == 0)
        atomicMin(&cta_first_s[cta], static_cast<int>(item));
      else
        cta_first_s[cta] = static_cast<int>(item);  // the CTA's run starts inside sequence i
    }
    if (cut && cut_index < a.max_cuts && slots_fit)
      reinterpret_cast<int4*>(a.split_seqs)[cut_index] =
          make_int4(i, static_cast<int>(first_slot), n, 0);
  }
  __syncthreads();
  if (tid == 0) {
    const int items = static_cast<int>(min(item_carry, static_cast<long long>(a.max_items)));
    int next = items;  // a CTA with no item of its own starts (and ends) where the next starts
    for (int k = a.ctas; k >= 0; --k) {
      if (k <= ctas) next = min(next, cta_first_s[k]);
      a.cta_first[k] = next;
    }
    a.counts->items = items;
    a.counts->split_seqs = static_cast<int>(min(cut_carry, static_cast<long long>(a.max_cuts)));
  }
}

template <auto P>
__global__ void __launch_bounds__(kBalanceThreads) balance_kernel(const BalanceArgs a) {
  __shared__ long long partial[kBalanceThreads / 32];
  __shared__ int chunk_key[kBalanceThreads], chunk_pieces[kBalanceThreads];
  const int b = a.batch;
  int* tiles = a.scratch;          // [b]
  int* second = a.scratch + b;     // [b]: pieces (invariant) or first position (packed)
  long long my_tiles = 0;
  for (int i = static_cast<int>(threadIdx.x); i < b; i += kBalanceThreads) {
    const int len = min(max(a.cache_lens[i], 0), a.capacity);
    tiles[i] = ceil_div(len, P.block_n);
    my_tiles += tiles[i];
  }
  const long long total = block_sum(my_tiles, partial);
  // The pieces form's size bound: 1.1 × total / slots, rounded up. Fast float division:
  // neither 64-bit nor IEEE division (both are called subroutines, whose register saves
  // ptxas counts as spills); the bounds hold with room to spare for its rounding.
  const float share = ceilf(__fdividef(1.1f * static_cast<float>(total), static_cast<float>(a.slots)));
  const int cap = a.fixed_cap > 0
                      ? a.fixed_cap
                      : static_cast<int>(fmaxf(fminf(share, 1.0e9f), static_cast<float>(kMinPieceTiles)));
  long long my_items = 0;
  for (int i = static_cast<int>(threadIdx.x); i < b; i += kBalanceThreads)
    my_items += max(1, ceil_div(tiles[i], cap));
  const long long num_items = block_sum(my_items, partial);
  if (a.fixed_cap == 0 && a.packed_ok && num_items > a.slots)
    packed_schedule(a, tiles, second, partial, chunk_key);  // chunk_key holds cta_first
  else
    piece_schedule(a, tiles, second, cap, num_items, partial, chunk_key, chunk_pieces);
}

}  // namespace attnjit::mla_decode
