#pragma once
// Shared-memory stores and loads by 32-bit shared address. A kernel that realigns its
// dynamic shared memory through integer arithmetic loses the pointer's address space, and
// the compiler then keeps 64-bit generic addresses — for an unrolled fragment store, one
// register pair per element, hoisted out of the loop and spilled. These take the address
// as a u32 (smem_u32 of the base plus an offset) and emit st.shared / ld.shared directly.
#include "common/arch.cuh"

namespace attnjit {

ATTNJIT_DEVICE void st_shared_u32(u32 addr, u32 v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

ATTNJIT_DEVICE void st_shared_f32(u32 addr, float v) {
  asm volatile("st.shared.f32 [%0], %1;" ::"r"(addr), "f"(v) : "memory");
}

ATTNJIT_DEVICE void st_shared_zero16(u32 addr) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};" ::"r"(addr), "r"(0u) : "memory");
}

ATTNJIT_DEVICE void st_shared_f32x2(u32 addr, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(x), "f"(y) : "memory");
}

ATTNJIT_DEVICE void st_shared_16(u32 addr, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}

// Four 8 × 8 16-bit matrices (one warp): register q of lane l holds row l / 4, columns
// 2·(l % 4) and +1 of matrix q — the wgmma accumulator's layout of an 8 × 8 block; lane
// 8q + r gives the address of matrix q's row r (16 contiguous bytes).
ATTNJIT_DEVICE void stmatrix_x4(u32 addr, u32 r0, u32 r1, u32 r2, u32 r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// The same four (x4) or two (x2) matrices stored transposed: stored row c of matrix q (its
// column c) goes to the address lane 8q + c gives.
ATTNJIT_DEVICE void stmatrix_x4_trans(u32 addr, u32 r0, u32 r1, u32 r2, u32 r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}
ATTNJIT_DEVICE void stmatrix_x2_trans(u32 addr, u32 r0, u32 r1) {
  asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};" ::"r"(addr), "r"(r0), "r"(r1)
               : "memory");
}

// Stores into another CTA's shared memory: addr is a shared::cluster address
// (cluster_smem_addr of this CTA's address and the target's rank).
ATTNJIT_DEVICE void st_cluster_f32(u32 addr, float x) {
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(addr), "f"(x) : "memory");
}
ATTNJIT_DEVICE void st_cluster_f32x2(u32 addr, float x, float y) {
  asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(x), "f"(y) : "memory");
}

ATTNJIT_DEVICE u32 ld_shared_u32(u32 addr) {
  u32 v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
}

ATTNJIT_DEVICE uint4 ld_shared_16(u32 addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

ATTNJIT_DEVICE float ld_shared_f32(u32 addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

}  // namespace attnjit
