#pragma once
// TMA (cp.async.bulk.tensor) loads into shared memory completing on an mbarrier, the
// cluster-multicast form, and stores from shared memory tracked by bulk groups.
// Coordinates are in elements, innermost (contiguous) dimension first — TMA's order,
// the reverse of TensorView::shape. Out-of-bounds boxes are filled on load (per the
// tensor map's fill mode) and clipped on store.
#include "common/arch.cuh"
#include "common/mbarrier.cuh"
#include "common/tensor_map.cuh"

namespace attnjit {

// L2 eviction hints for the .L2::cache_hint forms (createpolicy.fractional encodings).
enum class CacheHint : u64 {
  kEvictNormal = 0x1000000000000000ull,
  kEvictFirst = 0x12F0000000000000ull,
  kEvictLast = 0x14F0000000000000ull,
};

// ---- loads: global → shared, complete_tx on `bar` --------------------------------

ATTNJIT_DEVICE void tma_load_2d(const TmaDesc& desc, MBarrier* bar, void* smem_dst, int c0,
                                int c1, CacheHint hint = CacheHint::kEvictNormal) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_u32(smem_dst)),
      "l"(tma_desc_addr(desc)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "l"(static_cast<u64>(hint))
      : "memory");
}

ATTNJIT_DEVICE void tma_load_3d(const TmaDesc& desc, MBarrier* bar, void* smem_dst, int c0,
                                int c1, int c2, CacheHint hint = CacheHint::kEvictNormal) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4, %5}], [%2], %6;" ::"r"(smem_u32(smem_dst)),
      "l"(tma_desc_addr(desc)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2),
      "l"(static_cast<u64>(hint))
      : "memory");
}

ATTNJIT_DEVICE void tma_load_4d(const TmaDesc& desc, MBarrier* bar, void* smem_dst, int c0,
                                int c1, int c2, int c3, CacheHint hint = CacheHint::kEvictNormal) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4, %5, %6}], [%2], %7;" ::"r"(smem_u32(smem_dst)),
      "l"(tma_desc_addr(desc)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
      "l"(static_cast<u64>(hint))
      : "memory");
}

ATTNJIT_DEVICE void tma_load_5d(const TmaDesc& desc, MBarrier* bar, void* smem_dst, int c0,
                                int c1, int c2, int c3, int c4,
                                CacheHint hint = CacheHint::kEvictNormal) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4, %5, %6, %7}], [%2], %8;" ::"r"(smem_u32(smem_dst)),
      "l"(tma_desc_addr(desc)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4),
      "l"(static_cast<u64>(hint))
      : "memory");
}

// A plain (1-D) bulk copy of `bytes` contiguous bytes, no tensor map: src, smem_dst and
// bytes multiples of 16. What a gather of whole rows issues per row (one instruction, the
// TMA engine's rate, not the LSU's).
ATTNJIT_DEVICE void bulk_load(MBarrier* bar, void* smem_dst, const void* src, u32 bytes) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_u32(smem_dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}

// A bulk copy of `bytes` contiguous bytes from this CTA's shared memory (src) into another
// CTA of the cluster (dst and bar: shared::cluster addresses, cluster_smem_addr), completing
// on that CTA's barrier. src, dst and bytes multiples of 16; src written by the generic
// proxy needs fence_proxy_async_smem() in the issuing thread first.
ATTNJIT_DEVICE void bulk_copy_to_cluster(u32 dst, u32 src, u32 bytes, u32 bar) {
  asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   dst),
               "r"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// Multicast: the box lands at the same smem offset in every CTA of `cta_mask` (bit i =
// cluster rank i), each completing on its own barrier at `bar`'s offset.
ATTNJIT_DEVICE void tma_load_2d_multicast(const TmaDesc& desc, MBarrier* bar, void* smem_dst,
                                          int c0, int c1, u16 cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_u32(smem_dst)),
      "l"(tma_desc_addr(desc)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "h"(cta_mask)
      : "memory");
}

ATTNJIT_DEVICE void tma_load_3d_multicast(const TmaDesc& desc, MBarrier* bar, void* smem_dst,
                                          int c0, int c1, int c2, u16 cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%3, %4, %5}], [%2], %6;" ::"r"(smem_u32(smem_dst)),
      "l"(tma_desc_addr(desc)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "h"(cta_mask)
      : "memory");
}

// ---- stores: shared → global, tracked by bulk groups ------------------------------

ATTNJIT_DEVICE void tma_store_2d(const TmaDesc& desc, const void* smem_src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   tma_desc_addr(desc)),
               "r"(smem_u32(smem_src)), "r"(c0), "r"(c1)
               : "memory");
}

ATTNJIT_DEVICE void tma_store_3d(const TmaDesc& desc, const void* smem_src, int c0, int c1,
                                 int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(
          tma_desc_addr(desc)),
      "r"(smem_u32(smem_src)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

ATTNJIT_DEVICE void tma_store_4d(const TmaDesc& desc, const void* smem_src, int c0, int c1,
                                 int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(
          tma_desc_addr(desc)),
      "r"(smem_u32(smem_src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// Closes the group of stores issued so far by this thread.
ATTNJIT_DEVICE void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// Waits until at most N committed store groups still *read* shared memory (their
// sources may be overwritten), or — without _read — have fully completed.
template <int N>
ATTNJIT_DEVICE void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
template <int N>
ATTNJIT_DEVICE void tma_store_wait() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}

}  // namespace attnjit
