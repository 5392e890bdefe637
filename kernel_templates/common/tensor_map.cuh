#pragma once
// The device side of a TMA tensor map. cuda.h cannot be included under NVRTC, so this
// is a layout twin of CUtensorMap (128 bytes, 64-byte aligned) — the host encodes an
// attnjit::TmaDescriptor and passes it by value as `const __grid_constant__ TmaDesc`.
#include "common/arch.cuh"

namespace attnjit {

struct alignas(64) TmaDesc {
  u64 opaque[16];
};
static_assert(sizeof(TmaDesc) == 128, "TmaDesc must match CUtensorMap");

// Generic address of a __grid_constant__ descriptor, as the TMA instructions take it.
ATTNJIT_DEVICE u64 tma_desc_addr(const TmaDesc& desc) { return reinterpret_cast<u64>(&desc); }

// Pulls the descriptor into the TMA unit's cache ahead of the first copy. One thread.
ATTNJIT_DEVICE void prefetch_tma_desc(const TmaDesc& desc) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(tma_desc_addr(desc)) : "memory");
}

}  // namespace attnjit
