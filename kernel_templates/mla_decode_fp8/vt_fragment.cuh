#pragma once
// The fp8 P·V fragment of mla_decode_fp8's fp8 schedule (and of its test family,
// kernel_templates/testing/fp8_vt_fragment.cuh, which checks it exactly on integers):
// Oᵀ = Vᵀ·P′ᵀ with Vᵀ the register A operand of an RS e4m3 wgmma, built from key-major V
// [32 keys][128 B] (as the TMA ring holds it) by one ldmatrix.x4.trans.b16 and two PRMTs per
// register pair: A row g ↔ dim 2g, row g+8 ↔ dim 2g+1, A's k position 4t+j ↔ key
// {2t, 2t+1, 8+2t, 9+2t}[j] (+16 for registers 2 and 3). P′ is stored in that key order.
#include "common/arch.cuh"
#include "common/types.cuh"
#include "common/wgmma.cuh"
#include "mla_decode_fp8/layout.cuh"  // fp8_vt_key_of, fp8_p_slot

namespace attnjit::mla_decode_fp8 {

using layout::mla_decode_fp8::fp8_vt_key_of;
using layout::mla_decode_fp8::fp8_p_slot;

// P′'s B tile: [64 rows][32 bytes], K-major, no swizzle (core-matrix interleave).
using Fp8PTile = WgmmaKMajorTile<Swizzle::kNone, 64>;

// This thread's A fragment of Vᵀ for dims [dim0, dim0 + 64) (warp w: dims dim0 + 16w ..).
ATTNJIT_DEVICE void fp8_vt_fragment(u32 (&a)[4], u32 v_smem, int dim0, bool swizzled) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = (static_cast<int>(threadIdx.x) / 32) % 4;
  const u32 off = static_cast<u32>(lane * 128 + dim0 + 16 * warp);  // key = lane, 16-byte unit
  const u32 addr = v_smem + (swizzled ? swizzle_byte_offset<Swizzle::k128B>(off) : off);
  u32 r0, r1, r2, r3;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
  a[0] = __byte_perm(r0, r1, 0x6420);  // row g   (dim 2g),   keys 2t, 2t+1, 8+2t, 9+2t
  a[1] = __byte_perm(r0, r1, 0x7531);  // row g+8 (dim 2g+1), same keys
  a[2] = __byte_perm(r2, r3, 0x6420);  // the same for keys 16..31
  a[3] = __byte_perm(r2, r3, 0x7531);
}

}  // namespace attnjit::mla_decode_fp8
