#pragma once
// tma_copy: dst[rows, cols] = src[rows, cols] through shared memory, the smallest real
// kernel that exercises the whole device path — TMA loads completing on mbarriers, a
// multi-stage ring, and TMA stores tracked by bulk groups.
//
// One warp per CTA, one elected thread issues everything: a copy has no math, so the
// copy engine is the only worker and more threads would only wait. CTAs are
// persistent: CTA c handles tiles c, c + gridDim.x, ... in row-major tile order.
//
// Tile = block_m rows × block_n columns, moved as `kBoxesPerTile` TMA boxes side by side
// (a swizzled box is at most one swizzle span wide, so wider tiles take several boxes).
// Partial tiles at the right/bottom edge need no special case: loads fill the overhang
// (zeros), stores clip it.
#include "common/arch.cuh"
#include "common/mbarrier.cuh"
#include "common/tma.cuh"
#include "common/types.cuh"

namespace attnjit::tma_copy {

// P is the config's fields — the rows of runtime/include/attnjit/ops/tma_copy_config.def —
// as a struct the generated translation unit declares: dtype (only its size matters to a
// copy), block_m, block_n, stages (ring depth: up to stages-1 loads ahead of the store),
// swizzle.

template <auto P>
struct Traits {
  static constexpr int kElemBytes = dtype_bytes(P.dtype);
  static constexpr int kRowBytes = P.block_n * kElemBytes;  // one tile row
  // A swizzled box is exactly one span wide; an unswizzled one spans the whole row.
  static constexpr int kBoxInnerBytes =
      P.swizzle == Swizzle::kNone ? kRowBytes : swizzle_bytes(P.swizzle);
  static constexpr int kBoxInner = kBoxInnerBytes / kElemBytes;  // elements
  static constexpr int kBoxesPerTile = kRowBytes / kBoxInnerBytes;
  static constexpr int kBoxBytes = P.block_m * kBoxInnerBytes;
  static constexpr int kTileBytes = kBoxBytes * kBoxesPerTile;
  // Swizzle patterns are computed from smem address bits, so every box starts on a
  // multiple of its pattern's repeat (8 rows × span; TMA's own minimum is 128 B). The
  // ring itself starts 1024-aligned, the largest repeat.
  static constexpr int kSmemAlign = 1024;
  static constexpr int kBoxAlign = P.swizzle == Swizzle::kNone ? 128 : 8 * swizzle_bytes(P.swizzle);

  static_assert(kElemBytes > 0, "unsupported dtype");
  static_assert(P.block_m >= 8 && P.block_m <= 256 && P.block_m % 8 == 0,
                "block_m must be a multiple of 8 in 8..256 (TMA box limit)");
  static_assert(P.stages >= 1 && P.stages <= 16, "stages must be 1..16");
  static_assert(kRowBytes % 16 == 0, "a tile row must be a multiple of 16 bytes");
  static_assert(kRowBytes % kBoxInnerBytes == 0, "tile row must be whole swizzle spans");
  static_assert(kBoxInner <= 256, "a box is at most 256 elements wide");
  static_assert(kBoxBytes % kBoxAlign == 0, "each box must start on its swizzle repeat");
};

// The shared-memory plan: the tile ring, then one 'full' barrier per stage.
template <auto P>
struct SharedStorage {
  alignas(Traits<P>::kSmemAlign) u8 tiles[P.stages][Traits<P>::kTileBytes];
  MBarrier full[P.stages];  // TMA load of stage s complete (tx-counted)
};

// Dynamic smem requested by the host: the plan plus slack to realign the base.
template <auto P>
inline constexpr unsigned kDynamicSmemBytes = sizeof(SharedStorage<P>) + Traits<P>::kSmemAlign;

template <auto P>
__global__ void __launch_bounds__(32, 1)
    kernel(const __grid_constant__ TmaDesc src,  // [rows, cols], box [block_m, kBoxInner]
           const __grid_constant__ TmaDesc dst,  // [rows, cols], same box
           int rows, int cols) {
  using T = Traits<P>;
  extern __shared__ u8 smem_raw[];
  // The dynamic window is only 16-byte aligned by contract; realign (slack requested).
  auto* smem = reinterpret_cast<SharedStorage<P>*>(
      (reinterpret_cast<u64>(smem_raw) + T::kSmemAlign - 1) & ~u64(T::kSmemAlign - 1));

  if (!elect_one_sync()) return;  // the other 31 lanes have nothing to do

  u32 dyn_smem;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn_smem));
  if (dyn_smem < kDynamicSmemBytes<P>) __trap();  // host/device disagree on the plan

  prefetch_tma_desc(src);
  prefetch_tma_desc(dst);
  for (int s = 0; s < P.stages; ++s) mbarrier_init(&smem->full[s], 1);
  fence_mbarrier_init();

  const int tiles_n = ceil_div(cols, P.block_n);
  const int tiles = ceil_div(rows, P.block_m) * tiles_n;
  const int my_tiles = tiles > static_cast<int>(blockIdx.x)
                           ? ceil_div(tiles - static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x))
                           : 0;
  auto tile_origin = [&](int k, int& row0, int& col0) {
    const int t = static_cast<int>(blockIdx.x) + k * static_cast<int>(gridDim.x);
    row0 = (t / tiles_n) * P.block_m;
    col0 = (t % tiles_n) * P.block_n;
  };
  auto issue_load = [&](int k) {
    const int s = k % P.stages;
    int row0, col0;
    tile_origin(k, row0, col0);
    mbarrier_arrive_expect_tx(&smem->full[s], T::kTileBytes);  // overhang counts too
    for (int b = 0; b < T::kBoxesPerTile; ++b)
      tma_load_2d(src, &smem->full[s], smem->tiles[s] + b * T::kBoxBytes, col0 + b * T::kBoxInner,
                  row0, CacheHint::kEvictFirst);  // streamed once
  };

  // Loads run `kLookahead` tiles ahead of the store. With ≥2 stages the load of tile
  // k + stages-1 goes into stage (k-1) % stages, whose store was issued one iteration
  // earlier, so it waits only for that older store to finish reading. With one stage the
  // next load reuses the stage being stored and must wait for the current store.
  constexpr int kLookahead = P.stages > 1 ? P.stages - 1 : 1;
  const int prologue = my_tiles < kLookahead ? my_tiles : kLookahead;
  for (int k = 0; k < prologue; ++k) issue_load(k);

  for (int k = 0; k < my_tiles; ++k) {
    const int s = k % P.stages;
    mbarrier_wait(&smem->full[s], static_cast<u32>(k / P.stages) & 1u);
    int row0, col0;
    tile_origin(k, row0, col0);
    for (int b = 0; b < T::kBoxesPerTile; ++b)
      tma_store_2d(dst, smem->tiles[s] + b * T::kBoxBytes, col0 + b * T::kBoxInner, row0);
    tma_store_commit();
    const int next = k + kLookahead;
    if (next < my_tiles) {
      if constexpr (P.stages > 1) tma_store_wait_read<1>();  // store k-1 done reading
      else tma_store_wait_read<0>();                         // store k done reading
      issue_load(next);
    }
  }
  tma_store_wait<0>();  // stores finish before the CTA (and its smem) goes away
}

}  // namespace attnjit::tma_copy
