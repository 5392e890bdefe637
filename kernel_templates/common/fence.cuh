#pragma once
// Proxy and cluster fences. Shared memory written by ordinary stores (st.shared,
// stmatrix) and then read by the async proxy (TMA store, wgmma operand fetch) needs
// fence_proxy_async_smem() in each writing thread before the barrier that publishes it.
#include "common/arch.cuh"

namespace attnjit {

ATTNJIT_DEVICE void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

ATTNJIT_DEVICE void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

// Cluster-wide barrier (all threads of all CTAs of the cluster).
ATTNJIT_DEVICE void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

ATTNJIT_DEVICE u32 cluster_cta_rank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// The shared::cluster address of `smem_addr` (this CTA's shared::cta address) in CTA
// `cta_rank` of the cluster: same offset, the other CTA's shared memory.
ATTNJIT_DEVICE u32 cluster_smem_addr(u32 smem_addr, u32 cta_rank) {
  u32 r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_addr), "r"(cta_rank));
  return r;
}

// Programmatic dependent launch (griddepcontrol): let the next kernel in the stream
// start its prologue, and wait for the previous kernel's memory to be visible.
ATTNJIT_DEVICE void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
ATTNJIT_DEVICE void pdl_wait_prior_grids() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

}  // namespace attnjit
