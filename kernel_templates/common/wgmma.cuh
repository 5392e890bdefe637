#pragma once
// wgmma (sm_90a warpgroup MMA): shared-memory matrix descriptors for the layouts TMA
// writes, the register fragment layouts, and the mma_async wrappers.
//
//   D[64 × N] (f32, registers) (+)= A[64 × K] · B[K × N]   per instruction K = 32 bytes:
//   k16 for bf16/f16, k32 for e4m3/e5m2. N = 8, 16, ..., 256.
//
// A comes from shared memory (SS form, a descriptor) or from registers (RS form, 4 × u32
// per thread); B always from shared memory. fp8 operands must be K-major; bf16/f16 may be
// K-major or MN-major (the transpose immediates). Every thread of the warpgroup passes the
// same descriptors. Ordering (fence / commit / wait) lives in common/warpgroup.cuh.
//
// ---- Shared-memory layouts (PTX ISA "Shared Memory Matrix Layout", "Matrix Descriptor") --
// Units: a core matrix is 8 rows × 16 bytes. A swizzle atom is 8 rows × S bytes, S = 32,
// 64 or 128 (S = 16: no swizzle). Swizzling (TMA's and wgmma's alike) XORs the 16-byte
// unit index, address bits [4, 4 + log2(S/16)), with the bits just above the 128-byte
// line, [7, ...): unit u of row r lands at u ^ (r mod 8) for 128B, u ^ (r/2 mod 4) for 64B,
// u ^ (r/4 mod 2) for 32B. It is a function of the address, so tiles start on an 8·S-byte
// boundary (1024 B for 128B) and the descriptor's base-offset field stays 0.
//
// K-major operand (A [rows=M × K] or B [rows=N × K], K contiguous in memory): the tile is
// K cut into chunks of S bytes; chunk j is one TMA box {rows, S/elem} (outermost first)
// with the same swizzle, stored densely as [rows][S bytes] at j·rows·S.
//   swizzled: SBO = 8·S (next 8-row group along M/N); LBO unused (set to 16, as PTX
//             "assumes 1"); one instruction reads 32 bytes of K inside a chunk, so the
//             k-step advances the start address by 32 B inside the chunk and by rows·S
//             across chunks.
//   none:     core matrices: 8 rows × 16 B contiguous (128 B); box {rows, 16 B}; SBO = 128
//             (next 8 rows), LBO = rows·16 (next 16 B of K: the next box). A k-step spans two
//             boxes and advances the start address by 2·rows·16.
// MN-major operand (B stored [K × N], or A [K × M], MN contiguous; 16-bit types only):
// the tile is MN cut into chunks of S bytes; chunk j is one TMA box {K, S/elem} stored
// [K rows][S bytes] at j·K·S.
//   swizzled: atom = 8 K-rows × S bytes of MN; LBO = K·S (next atom along MN: next box),
//             SBO = 8·S (next 8 K-rows); a k16 step advances the start by 16·S bytes.
//   none:     core matrix = 8 K-rows × 16 B of MN, contiguous; LBO = 128 (next 8 K-rows),
//             SBO = K·16 (next 16 B of MN: next box); a k16 step advances by 256 B.
// Note the MN-major asymmetry: swizzled puts the MN stride in LBO, no-swizzle in SBO
// (CUTLASS make_gmma_desc and DeepGEMM agree; PTX's tcgen05 stride table says the same).
//
// ---- Descriptor bits (64-bit) ---------------------------------------------------------
//   [0,14) start address >> 4   [16,30) LBO >> 4   [32,46) SBO >> 4   [49,52) base offset
//   [62,64) layout: 0 none (interleave), 1 = 128B, 2 = 64B, 3 = 32B swizzle.
// Worked example (checked by static_assert below): bf16 A, 64 × 64, 128B swizzle at smem
// 0x400: one box {64, 64} = 8 KiB; SBO = 8·128 = 1024 → 64; LBO = 16 → 1; start 0x400 → 0x40;
// layout 1 → bit 62:  desc = 0x4000'0040'0001'0040. Its third k16 step starts 64 B in:
// start (0x400 + 64) >> 4 = 0x44 → 0x4000'0040'0001'0044.
#include "common/arch.cuh"
#include "common/types.cuh"

namespace attnjit {

// Which dimension is contiguous in shared memory; the value is wgmma's transpose immediate.
enum class WgmmaMajor : int { kK = 0, kMN = 1 };

// Elements of K one instruction consumes (always 32 bytes).
template <DType kType>
inline constexpr int kWgmmaK = 32 / dtype_bytes(kType);

ATTNJIT_HOST_DEVICE constexpr u64 wgmma_layout_bits(Swizzle s) {
  return s == Swizzle::k128B ? 1ull : s == Swizzle::k64B ? 2ull : s == Swizzle::k32B ? 3ull : 0ull;
}

// Packs a descriptor; addresses and offsets in bytes, multiples of 16 (the low 4 bits drop).
ATTNJIT_HOST_DEVICE constexpr u64 wgmma_desc_encode(u32 start, u32 lbo, u32 sbo, Swizzle s) {
  return static_cast<u64>((start & 0x3FFFFu) >> 4) |
         (static_cast<u64>((lbo & 0x3FFFFu) >> 4) << 16) |
         (static_cast<u64>((sbo & 0x3FFFFu) >> 4) << 32) | (wgmma_layout_bits(s) << 62);
}

// The descriptor of `base` moved `offset` bytes on (a k-step or row block inside a tile):
// one 32-bit add on the start field. It cannot carry into LBO: shared memory ends below
// 256 KiB, so start + offset stays under 2^14 units of 16 B. Computing a tile's k-step
// descriptors this way costs one uniform add each, where encoding every address afresh
// (mask, shift, or) put a four-instruction chain in front of each wgmma.
ATTNJIT_HOST_DEVICE constexpr u64 wgmma_desc_offset(u64 base, u32 offset) {
  return (base & ~0xFFFFFFFFull) | static_cast<u32>(static_cast<u32>(base) + (offset >> 4));
}

// TMA's swizzle on a byte offset from an atom-aligned tile base: the 16-byte unit index
// (bits 4..) is XORed with the 128-byte row index (bits 7..), as many bits as the span has
// units. Use it to address swizzled tiles with ordinary loads and stores.
template <Swizzle kSwizzle>
ATTNJIT_HOST_DEVICE constexpr u32 swizzle_byte_offset(u32 offset) {
  if constexpr (kSwizzle == Swizzle::k128B) return offset ^ ((offset >> 3) & 0x70u);
  if constexpr (kSwizzle == Swizzle::k64B) return offset ^ ((offset >> 3) & 0x30u);
  if constexpr (kSwizzle == Swizzle::k32B) return offset ^ ((offset >> 3) & 0x10u);
  return offset;
}

// Bytes per TMA box row (S above): the swizzle span, or one 16-byte core-matrix row.
ATTNJIT_HOST_DEVICE constexpr u32 wgmma_span_bytes(Swizzle s) {
  return s == Swizzle::kNone ? 16u : static_cast<u32>(swizzle_bytes(s));
}

// Alignment a tile's base needs: one swizzle pattern (8 rows × span), at least TMA's 128 B.
ATTNJIT_HOST_DEVICE constexpr u32 wgmma_tile_align(Swizzle s) {
  return s == Swizzle::kNone ? 128u : 8u * wgmma_span_bytes(s);
}

// A K-major operand tile: kRows rows (M or N) × K, as K-chunks of kSpan bytes.
//   smem: chunk j (K bytes [j·S, (j+1)·S)) = [kRows][S] at j · kChunkBytes, swizzled
//   TMA:  one box per chunk, box {kRows, S / elem_bytes}, coordinates {j·S/elem, row0}
template <Swizzle kSwizzle, int kRows>
struct WgmmaKMajorTile {
  static_assert(kRows % 8 == 0 && kRows <= 256, "rows come in 8-row core matrices; TMA box <= 256");
  static constexpr u32 kSpan = wgmma_span_bytes(kSwizzle);
  static constexpr u32 kChunkBytes = kRows * kSpan;
  static constexpr u32 kAlign = wgmma_tile_align(kSwizzle);
  static constexpr u32 kLbo = kSwizzle == Swizzle::kNone ? kChunkBytes : 16u;
  static constexpr u32 kSbo = 8u * kSpan;

  // Physical byte offset of (row, k_byte) from the tile base.
  ATTNJIT_HOST_DEVICE static constexpr u32 byte_offset(u32 row, u32 k_byte) {
    return swizzle_byte_offset<kSwizzle>((k_byte / kSpan) * kChunkBytes + row * kSpan +
                                         k_byte % kSpan);
  }
  // Descriptor of the instruction reading K bytes [k_byte, k_byte + 32) of rows
  // [row0, row0 + 64 or N). k_byte % 32 == 0, row0 % 8 == 0.
  ATTNJIT_HOST_DEVICE static constexpr u64 desc(u32 tile_smem_addr, u32 k_byte, u32 row0 = 0) {
    return wgmma_desc_offset(wgmma_desc_encode(tile_smem_addr, kLbo, kSbo, kSwizzle),
                             (k_byte / kSpan) * kChunkBytes + row0 * kSpan + k_byte % kSpan);
  }
};

// An MN-major operand tile (16-bit types): kKRows rows of K × MN, as MN-chunks of kSpan bytes.
//   smem: chunk j (MN bytes [j·S, (j+1)·S)) = [kKRows][S] at j · kChunkBytes, swizzled
//   TMA:  one box per chunk, box {kKRows, S / elem_bytes}, coordinates {j·S/elem, k0}
template <Swizzle kSwizzle, int kKRows>
struct WgmmaMNMajorTile {
  static_assert(kKRows % 16 == 0 && kKRows <= 256, "K rows come in k16 steps; TMA box <= 256");
  static constexpr u32 kSpan = wgmma_span_bytes(kSwizzle);
  static constexpr u32 kChunkBytes = kKRows * kSpan;
  static constexpr u32 kAlign = wgmma_tile_align(kSwizzle);
  static constexpr u32 kLbo = kSwizzle == Swizzle::kNone ? 128u : kChunkBytes;
  static constexpr u32 kSbo = kSwizzle == Swizzle::kNone ? kChunkBytes : 8u * kSpan;

  ATTNJIT_HOST_DEVICE static constexpr u32 byte_offset(u32 k_row, u32 mn_byte) {
    return swizzle_byte_offset<kSwizzle>((mn_byte / kSpan) * kChunkBytes + k_row * kSpan +
                                         mn_byte % kSpan);
  }
  // Descriptor of the instruction reading K rows [k_row, k_row + 16) and MN bytes from
  // mn_byte0 on. k_row % 16 == 0, mn_byte0 % kSpan == 0.
  ATTNJIT_HOST_DEVICE static constexpr u64 desc(u32 tile_smem_addr, u32 k_row, u32 mn_byte0 = 0) {
    return wgmma_desc_offset(wgmma_desc_encode(tile_smem_addr, kLbo, kSbo, kSwizzle),
                             (mn_byte0 / kSpan) * kChunkBytes + k_row * kSpan);
  }
};

// Hides a value from the optimizer (no instruction): descriptors computed from it stay
// next to their wgmma instead of being hoisted out of the loop into (spilled) registers.
ATTNJIT_DEVICE void opaque(u32& x) { asm volatile("" : "+r"(x)); }

// A descriptor's start address is its low 14 bits (address / 16); shared addresses stay
// below 256 KiB, so stepping through a tile is one 64-bit add of a compile-time constant:
// desc(base + offset) == desc(base) + step(offset). The per-instruction descriptor then
// costs one add instead of the mask/shift/or chain of a full encode.
template <class Tile, class... Where>
ATTNJIT_HOST_DEVICE constexpr u64 desc_step(Where... where) {
  return Tile::desc(0, where...) - Tile::desc(0, 0);
}

// The worked example of the header comment, and one of each other mode.
static_assert(WgmmaKMajorTile<Swizzle::k128B, 64>::desc(0x400, 0) == 0x4000004000010040ull);
static_assert(WgmmaKMajorTile<Swizzle::k128B, 64>::desc(0x400, 64) == 0x4000004000010044ull);
// bf16 B K-major, N = 128, no swizzle, at 0x2000: LBO = 128·16 = 2048 → 0x80, SBO = 128 →
// 8; k-step 1 (K bytes 32..63) starts two boxes on: 0x2000 + 2·2048 = 0x3000 → 0x300.
static_assert(WgmmaKMajorTile<Swizzle::kNone, 128>::desc(0x2000, 32) == 0x0000000800800300ull);
// bf16 B MN-major [64 K × N], 128B swizzle, at 0x4000: LBO = 64·128 = 8192 → 0x200,
// SBO = 1024 → 0x40; k16 step 1 starts 16 rows on: 0x4000 + 2048 = 0x4800 → 0x480.
static_assert(WgmmaMNMajorTile<Swizzle::k128B, 64>::desc(0x4000, 16) == 0x4000004002000480ull);
static_assert(swizzle_byte_offset<Swizzle::k128B>(3 * 128 + 16) == 3 * 128 + 32);
static_assert(swizzle_byte_offset<Swizzle::k64B>(3 * 64 + 16) == 3 * 64 + 0);

// ---- Register fragments (PTX ISA "wgmma .m64nNk16 register fragment layout") -------------
// Thread t (0..127) of the warpgroup: warp w = t/32 owns rows [16w, 16w + 16); lane l.

struct WgmmaCoord {
  int row;
  int col;  // accumulators: column of D; A fragments: byte offset along K in the k-step
};

// Accumulator float i (0 .. N/2 - 1) of thread t → (row, col) of D[64 × N]:
//   row = 16w + l/4 + 8·((i/2) % 2),   col = 8·(i/4) + 2·(l % 4) + i % 2
// so floats (i, i+1) for even i are two adjacent columns of one row.
ATTNJIT_HOST_DEVICE constexpr WgmmaCoord wgmma_acc_coord(int t, int i) {
  return {16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2), 8 * (i / 4) + 2 * (t % 4) + i % 2};
}

// RS A operand: u32 r (0..3) of thread t holds 4 consecutive bytes of A[64 × 32 bytes]
// (2 bf16/f16 or 4 e4m3/e5m2, lower K in the lower bits) starting at
//   row = 16w + l/4 + 8·(r % 2),   k_byte = 16·(r/2) + 4·(l % 4)
// — the accumulator pattern at 4-byte granularity, identical in bytes for k16 and k32.
ATTNJIT_HOST_DEVICE constexpr WgmmaCoord wgmma_a_frag_coord(int t, int r) {
  return {16 * (t / 32) + (t % 32) / 4 + 8 * (r % 2), 16 * (r / 2) + 4 * (t % 4)};
}

// Loads this thread's RS A fragment of the k-step at `k_byte` (multiple of 32) from a
// K-major tile (Tile = WgmmaKMajorTile<swizzle, 64 or more rows>), rows from row0 on.
// Ordinary 32-bit shared loads; a 4-byte piece never straddles a 16-byte swizzle unit.
template <class Tile>
ATTNJIT_DEVICE void wgmma_load_a_fragment(u32 (&a)[4], const void* tile, u32 k_byte,
                                          u32 row0 = 0) {
  const int t = static_cast<int>(threadIdx.x) % kWarpgroupThreads;
  const u8* base = static_cast<const u8*>(tile);
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const WgmmaCoord c = wgmma_a_frag_coord(t, r);
    a[r] = *reinterpret_cast<const u32*>(
        base + Tile::byte_offset(row0 + static_cast<u32>(c.row), k_byte + static_cast<u32>(c.col)));
  }
}

// Accumulators → RS A fragment of the next GEMM (FA3's P in registers): for D[64 × N] used
// as A[64 × K=N], k16 step s needs columns [16s, 16s + 16), which are acc[8s .. 8s + 8):
// a[r] = pack(acc[8s + 2r], acc[8s + 2r + 1]), rounded to bf16 / f16 (lower K in low half).
template <DType kType, int kAccCount>
ATTNJIT_DEVICE void wgmma_acc_to_a_fragment(const float (&acc)[kAccCount], int s, u32 (&a)[4]) {
  static_assert(kType == DType::kBF16 || kType == DType::kF16, "16-bit A fragments only");
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const float lo = acc[8 * s + 2 * r];
    const float hi = acc[8 * s + 2 * r + 1];
    if constexpr (kType == DType::kBF16) {
      asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(a[r]) : "f"(hi), "f"(lo));
    } else {
      asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(a[r]) : "f"(hi), "f"(lo));
    }
  }
}

// ---- mma_async wrappers ---------------------------------------------------------------
// The inline PTX lists N/2 accumulator operands (%0 .. %(N/2-1)) followed by the inputs.
// The preprocessor writes both lists from one table of operand numbers in blocks of four,
// so no number is typed twice; static_asserts re-parse the generated strings.

namespace wgmma_detail {

// True when s is exactly "%first, %first+1, ..., %first+count-1".
ATTNJIT_HOST_DEVICE constexpr bool is_operand_run(const char* s, int first, int count) {
  int i = 0;
  for (int n = 0; n < count; ++n) {
    if (n > 0) {
      if (s[i] != ',' || s[i + 1] != ' ') return false;
      i += 2;
    }
    if (s[i] != '%' || s[i + 1] < '0' || s[i + 1] > '9') return false;
    ++i;
    int v = 0;
    while (s[i] >= '0' && s[i] <= '9') v = 10 * v + (s[i++] - '0');
    if (v != first + n) return false;
  }
  return s[i] == '\0';
}

template <int N>
struct Op;  // specialized for N = 8, 16, ..., 256 below

}  // namespace wgmma_detail

// Operand numbers, block j = 4j .. 4j+3. Blocks 0..31 hold up to 128 accumulators; the
// inputs of an N = 8g instruction are blocks g and g+1.
#define ATTNJIT_WG_BLOCK_0(F) F(0, 1, 2, 3)
#define ATTNJIT_WG_BLOCK_1(F) F(4, 5, 6, 7)
#define ATTNJIT_WG_BLOCK_2(F) F(8, 9, 10, 11)
#define ATTNJIT_WG_BLOCK_3(F) F(12, 13, 14, 15)
#define ATTNJIT_WG_BLOCK_4(F) F(16, 17, 18, 19)
#define ATTNJIT_WG_BLOCK_5(F) F(20, 21, 22, 23)
#define ATTNJIT_WG_BLOCK_6(F) F(24, 25, 26, 27)
#define ATTNJIT_WG_BLOCK_7(F) F(28, 29, 30, 31)
#define ATTNJIT_WG_BLOCK_8(F) F(32, 33, 34, 35)
#define ATTNJIT_WG_BLOCK_9(F) F(36, 37, 38, 39)
#define ATTNJIT_WG_BLOCK_10(F) F(40, 41, 42, 43)
#define ATTNJIT_WG_BLOCK_11(F) F(44, 45, 46, 47)
#define ATTNJIT_WG_BLOCK_12(F) F(48, 49, 50, 51)
#define ATTNJIT_WG_BLOCK_13(F) F(52, 53, 54, 55)
#define ATTNJIT_WG_BLOCK_14(F) F(56, 57, 58, 59)
#define ATTNJIT_WG_BLOCK_15(F) F(60, 61, 62, 63)
#define ATTNJIT_WG_BLOCK_16(F) F(64, 65, 66, 67)
#define ATTNJIT_WG_BLOCK_17(F) F(68, 69, 70, 71)
#define ATTNJIT_WG_BLOCK_18(F) F(72, 73, 74, 75)
#define ATTNJIT_WG_BLOCK_19(F) F(76, 77, 78, 79)
#define ATTNJIT_WG_BLOCK_20(F) F(80, 81, 82, 83)
#define ATTNJIT_WG_BLOCK_21(F) F(84, 85, 86, 87)
#define ATTNJIT_WG_BLOCK_22(F) F(88, 89, 90, 91)
#define ATTNJIT_WG_BLOCK_23(F) F(92, 93, 94, 95)
#define ATTNJIT_WG_BLOCK_24(F) F(96, 97, 98, 99)
#define ATTNJIT_WG_BLOCK_25(F) F(100, 101, 102, 103)
#define ATTNJIT_WG_BLOCK_26(F) F(104, 105, 106, 107)
#define ATTNJIT_WG_BLOCK_27(F) F(108, 109, 110, 111)
#define ATTNJIT_WG_BLOCK_28(F) F(112, 113, 114, 115)
#define ATTNJIT_WG_BLOCK_29(F) F(116, 117, 118, 119)
#define ATTNJIT_WG_BLOCK_30(F) F(120, 121, 122, 123)
#define ATTNJIT_WG_BLOCK_31(F) F(124, 125, 126, 127)
#define ATTNJIT_WG_BLOCK_32(F) F(128, 129, 130, 131)
#define ATTNJIT_WG_BLOCK_33(F) F(132, 133, 134, 135)

// Views of a block: as asm text, as accumulator constraints, or one operand of it.
#define ATTNJIT_WG_TEXT4(a, b, c, d) "%" #a ", %" #b ", %" #c ", %" #d
#define ATTNJIT_WG_ACC4(a, b, c, d) "+f"(acc[a]), "+f"(acc[b]), "+f"(acc[c]), "+f"(acc[d])
#define ATTNJIT_WG_ARG0(a, b, c, d) "%" #a
#define ATTNJIT_WG_ARG1(a, b, c, d) "%" #b
#define ATTNJIT_WG_ARG2(a, b, c, d) "%" #c
#define ATTNJIT_WG_ARG3(a, b, c, d) "%" #d
#define ATTNJIT_WG_COMMA() ,
#define ATTNJIT_WG_TEXT_SEP() ", "

// Blocks 0 .. g-1 viewed through F and joined by SEP(): the accumulators of N = 8g.
#define ATTNJIT_WG_ACC_1(F, SEP) ATTNJIT_WG_BLOCK_0(F)
#define ATTNJIT_WG_ACC_2(F, SEP) ATTNJIT_WG_ACC_1(F, SEP) SEP() ATTNJIT_WG_BLOCK_1(F)
#define ATTNJIT_WG_ACC_3(F, SEP) ATTNJIT_WG_ACC_2(F, SEP) SEP() ATTNJIT_WG_BLOCK_2(F)
#define ATTNJIT_WG_ACC_4(F, SEP) ATTNJIT_WG_ACC_3(F, SEP) SEP() ATTNJIT_WG_BLOCK_3(F)
#define ATTNJIT_WG_ACC_5(F, SEP) ATTNJIT_WG_ACC_4(F, SEP) SEP() ATTNJIT_WG_BLOCK_4(F)
#define ATTNJIT_WG_ACC_6(F, SEP) ATTNJIT_WG_ACC_5(F, SEP) SEP() ATTNJIT_WG_BLOCK_5(F)
#define ATTNJIT_WG_ACC_7(F, SEP) ATTNJIT_WG_ACC_6(F, SEP) SEP() ATTNJIT_WG_BLOCK_6(F)
#define ATTNJIT_WG_ACC_8(F, SEP) ATTNJIT_WG_ACC_7(F, SEP) SEP() ATTNJIT_WG_BLOCK_7(F)
#define ATTNJIT_WG_ACC_9(F, SEP) ATTNJIT_WG_ACC_8(F, SEP) SEP() ATTNJIT_WG_BLOCK_8(F)
#define ATTNJIT_WG_ACC_10(F, SEP) ATTNJIT_WG_ACC_9(F, SEP) SEP() ATTNJIT_WG_BLOCK_9(F)
#define ATTNJIT_WG_ACC_11(F, SEP) ATTNJIT_WG_ACC_10(F, SEP) SEP() ATTNJIT_WG_BLOCK_10(F)
#define ATTNJIT_WG_ACC_12(F, SEP) ATTNJIT_WG_ACC_11(F, SEP) SEP() ATTNJIT_WG_BLOCK_11(F)
#define ATTNJIT_WG_ACC_13(F, SEP) ATTNJIT_WG_ACC_12(F, SEP) SEP() ATTNJIT_WG_BLOCK_12(F)
#define ATTNJIT_WG_ACC_14(F, SEP) ATTNJIT_WG_ACC_13(F, SEP) SEP() ATTNJIT_WG_BLOCK_13(F)
#define ATTNJIT_WG_ACC_15(F, SEP) ATTNJIT_WG_ACC_14(F, SEP) SEP() ATTNJIT_WG_BLOCK_14(F)
#define ATTNJIT_WG_ACC_16(F, SEP) ATTNJIT_WG_ACC_15(F, SEP) SEP() ATTNJIT_WG_BLOCK_15(F)
#define ATTNJIT_WG_ACC_17(F, SEP) ATTNJIT_WG_ACC_16(F, SEP) SEP() ATTNJIT_WG_BLOCK_16(F)
#define ATTNJIT_WG_ACC_18(F, SEP) ATTNJIT_WG_ACC_17(F, SEP) SEP() ATTNJIT_WG_BLOCK_17(F)
#define ATTNJIT_WG_ACC_19(F, SEP) ATTNJIT_WG_ACC_18(F, SEP) SEP() ATTNJIT_WG_BLOCK_18(F)
#define ATTNJIT_WG_ACC_20(F, SEP) ATTNJIT_WG_ACC_19(F, SEP) SEP() ATTNJIT_WG_BLOCK_19(F)
#define ATTNJIT_WG_ACC_21(F, SEP) ATTNJIT_WG_ACC_20(F, SEP) SEP() ATTNJIT_WG_BLOCK_20(F)
#define ATTNJIT_WG_ACC_22(F, SEP) ATTNJIT_WG_ACC_21(F, SEP) SEP() ATTNJIT_WG_BLOCK_21(F)
#define ATTNJIT_WG_ACC_23(F, SEP) ATTNJIT_WG_ACC_22(F, SEP) SEP() ATTNJIT_WG_BLOCK_22(F)
#define ATTNJIT_WG_ACC_24(F, SEP) ATTNJIT_WG_ACC_23(F, SEP) SEP() ATTNJIT_WG_BLOCK_23(F)
#define ATTNJIT_WG_ACC_25(F, SEP) ATTNJIT_WG_ACC_24(F, SEP) SEP() ATTNJIT_WG_BLOCK_24(F)
#define ATTNJIT_WG_ACC_26(F, SEP) ATTNJIT_WG_ACC_25(F, SEP) SEP() ATTNJIT_WG_BLOCK_25(F)
#define ATTNJIT_WG_ACC_27(F, SEP) ATTNJIT_WG_ACC_26(F, SEP) SEP() ATTNJIT_WG_BLOCK_26(F)
#define ATTNJIT_WG_ACC_28(F, SEP) ATTNJIT_WG_ACC_27(F, SEP) SEP() ATTNJIT_WG_BLOCK_27(F)
#define ATTNJIT_WG_ACC_29(F, SEP) ATTNJIT_WG_ACC_28(F, SEP) SEP() ATTNJIT_WG_BLOCK_28(F)
#define ATTNJIT_WG_ACC_30(F, SEP) ATTNJIT_WG_ACC_29(F, SEP) SEP() ATTNJIT_WG_BLOCK_29(F)
#define ATTNJIT_WG_ACC_31(F, SEP) ATTNJIT_WG_ACC_30(F, SEP) SEP() ATTNJIT_WG_BLOCK_30(F)
#define ATTNJIT_WG_ACC_32(F, SEP) ATTNJIT_WG_ACC_31(F, SEP) SEP() ATTNJIT_WG_BLOCK_31(F)

#define ATTNJIT_WG_ACC_TEXT(g) ATTNJIT_WG_ACC_##g(ATTNJIT_WG_TEXT4, ATTNJIT_WG_TEXT_SEP)
#define ATTNJIT_WG_ACC_OPERANDS(g) ATTNJIT_WG_ACC_##g(ATTNJIT_WG_ACC4, ATTNJIT_WG_COMMA)
#define ATTNJIT_WG_IN(b, k) ATTNJIT_WG_BLOCK_##b(ATTNJIT_WG_ARG##k)
#define ATTNJIT_WG_SCALE_D(b, k)                                                                   \
  "{\n.reg .pred p;\nsetp.ne.b32 p, " ATTNJIT_WG_IN(b, k) ", 0;\n"
#define ATTNJIT_WG_OPCODE(n, k, t)                                                                 \
  "wgmma.mma_async.sync.aligned.m64n" #n "k" #k ".f32." #t "." #t " {"

// 16-bit SS: inputs a-desc, b-desc, scale-d, trans-a, trans-b = g.0 g.1 g.2 g.3 gn.0
#define ATTNJIT_WG_SS16(n, g, gn, t)                                                               \
  template <int kTransA, int kTransB>                                                              \
  ATTNJIT_DEVICE static void ss_##t(float(&acc)[n / 2], u64 a, u64 b, u32 scale_d) {               \
    asm volatile(ATTNJIT_WG_SCALE_D(g, 2) ATTNJIT_WG_OPCODE(n, 16, t)                              \
                 ATTNJIT_WG_ACC_TEXT(g) "}, " ATTNJIT_WG_IN(g, 0) ", " ATTNJIT_WG_IN(g, 1)         \
                 ", p, 1, 1, " ATTNJIT_WG_IN(g, 3) ", " ATTNJIT_WG_IN(gn, 0) ";\n}\n"              \
                 : ATTNJIT_WG_ACC_OPERANDS(g)                                                      \
                 : "l"(a), "l"(b), "r"(scale_d), "n"(kTransA), "n"(kTransB));                      \
  }

// 16-bit RS: inputs a0..a3, b-desc, scale-d, trans-b = g.0-3 gn.0 gn.1 gn.2
#define ATTNJIT_WG_RS16(n, g, gn, t)                                                               \
  template <int kTransB>                                                                           \
  ATTNJIT_DEVICE static void rs_##t(float(&acc)[n / 2], const u32(&a)[4], u64 b,                   \
                                    u32 scale_d) {                                                 \
    asm volatile(ATTNJIT_WG_SCALE_D(gn, 1) ATTNJIT_WG_OPCODE(n, 16, t)                             \
                 ATTNJIT_WG_ACC_TEXT(g) "}, {" ATTNJIT_WG_BLOCK_##g(ATTNJIT_WG_TEXT4) "}, "        \
                 ATTNJIT_WG_IN(gn, 0) ", p, 1, 1, " ATTNJIT_WG_IN(gn, 2) ";\n}\n"                  \
                 : ATTNJIT_WG_ACC_OPERANDS(g)                                                      \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d),               \
                   "n"(kTransB));                                                                  \
  }

// 8-bit SS (K-major only, no transpose immediates): a-desc, b-desc, scale-d = g.0 g.1 g.2
#define ATTNJIT_WG_SS8(n, g, gn, t)                                                                \
  ATTNJIT_DEVICE static void ss_##t(float(&acc)[n / 2], u64 a, u64 b, u32 scale_d) {               \
    asm volatile(ATTNJIT_WG_SCALE_D(g, 2) ATTNJIT_WG_OPCODE(n, 32, t)                              \
                 ATTNJIT_WG_ACC_TEXT(g) "}, " ATTNJIT_WG_IN(g, 0) ", " ATTNJIT_WG_IN(g, 1)         \
                 ", p, 1, 1;\n}\n"                                                                 \
                 : ATTNJIT_WG_ACC_OPERANDS(g)                                                      \
                 : "l"(a), "l"(b), "r"(scale_d));                                                  \
  }

// 8-bit RS: a0..a3, b-desc, scale-d = g.0-3 gn.0 gn.1
#define ATTNJIT_WG_RS8(n, g, gn, t)                                                                \
  ATTNJIT_DEVICE static void rs_##t(float(&acc)[n / 2], const u32(&a)[4], u64 b,                   \
                                    u32 scale_d) {                                                 \
    asm volatile(ATTNJIT_WG_SCALE_D(gn, 1) ATTNJIT_WG_OPCODE(n, 32, t)                             \
                 ATTNJIT_WG_ACC_TEXT(g) "}, {" ATTNJIT_WG_BLOCK_##g(ATTNJIT_WG_TEXT4) "}, "        \
                 ATTNJIT_WG_IN(gn, 0) ", p, 1, 1;\n}\n"                                            \
                 : ATTNJIT_WG_ACC_OPERANDS(g)                                                      \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d));              \
  }

#define ATTNJIT_WG_DEFINE_N(n, g, gn)                                                              \
  template <>                                                                                      \
  struct wgmma_detail::Op<n> {                                                                     \
    static_assert(n == 8 * g && gn == g + 1, "table row out of step");                             \
    static_assert(wgmma_detail::is_operand_run(ATTNJIT_WG_ACC_TEXT(g), 0, 4 * g), "acc list");     \
    static_assert(wgmma_detail::is_operand_run(ATTNJIT_WG_BLOCK_##g(ATTNJIT_WG_TEXT4) ", "         \
                                     ATTNJIT_WG_BLOCK_##gn(ATTNJIT_WG_TEXT4),                      \
                                 4 * g, 8),                                                        \
                  "input operand numbers");                                                        \
    ATTNJIT_WG_SS16(n, g, gn, bf16)                                                                \
    ATTNJIT_WG_SS16(n, g, gn, f16)                                                                 \
    ATTNJIT_WG_RS16(n, g, gn, bf16)                                                                \
    ATTNJIT_WG_RS16(n, g, gn, f16)                                                                 \
    ATTNJIT_WG_SS8(n, g, gn, e4m3)                                                                 \
    ATTNJIT_WG_SS8(n, g, gn, e5m2)                                                                 \
    ATTNJIT_WG_RS8(n, g, gn, e4m3)                                                                 \
    ATTNJIT_WG_RS8(n, g, gn, e5m2)                                                                 \
  };

ATTNJIT_WG_DEFINE_N(8, 1, 2)
ATTNJIT_WG_DEFINE_N(16, 2, 3)
ATTNJIT_WG_DEFINE_N(24, 3, 4)
ATTNJIT_WG_DEFINE_N(32, 4, 5)
ATTNJIT_WG_DEFINE_N(40, 5, 6)
ATTNJIT_WG_DEFINE_N(48, 6, 7)
ATTNJIT_WG_DEFINE_N(56, 7, 8)
ATTNJIT_WG_DEFINE_N(64, 8, 9)
ATTNJIT_WG_DEFINE_N(72, 9, 10)
ATTNJIT_WG_DEFINE_N(80, 10, 11)
ATTNJIT_WG_DEFINE_N(88, 11, 12)
ATTNJIT_WG_DEFINE_N(96, 12, 13)
ATTNJIT_WG_DEFINE_N(104, 13, 14)
ATTNJIT_WG_DEFINE_N(112, 14, 15)
ATTNJIT_WG_DEFINE_N(120, 15, 16)
ATTNJIT_WG_DEFINE_N(128, 16, 17)
ATTNJIT_WG_DEFINE_N(136, 17, 18)
ATTNJIT_WG_DEFINE_N(144, 18, 19)
ATTNJIT_WG_DEFINE_N(152, 19, 20)
ATTNJIT_WG_DEFINE_N(160, 20, 21)
ATTNJIT_WG_DEFINE_N(168, 21, 22)
ATTNJIT_WG_DEFINE_N(176, 22, 23)
ATTNJIT_WG_DEFINE_N(184, 23, 24)
ATTNJIT_WG_DEFINE_N(192, 24, 25)
ATTNJIT_WG_DEFINE_N(200, 25, 26)
ATTNJIT_WG_DEFINE_N(208, 26, 27)
ATTNJIT_WG_DEFINE_N(216, 27, 28)
ATTNJIT_WG_DEFINE_N(224, 28, 29)
ATTNJIT_WG_DEFINE_N(232, 29, 30)
ATTNJIT_WG_DEFINE_N(240, 30, 31)
ATTNJIT_WG_DEFINE_N(248, 31, 32)
ATTNJIT_WG_DEFINE_N(256, 32, 33)

// ---- public entry points ----------------------------------------------------------------

// acc[64 × N] (+)= A · B, A and B from shared memory. accumulate = false overwrites acc
// (scale-d = 0), e.g. on the first k-step. Asynchronous: see common/warpgroup.cuh.
template <DType kType, int N, WgmmaMajor kMajorA = WgmmaMajor::kK,
          WgmmaMajor kMajorB = WgmmaMajor::kK>
ATTNJIT_DEVICE void wgmma_ss(float (&acc)[N / 2], u64 desc_a, u64 desc_b, bool accumulate) {
  static_assert(N % 8 == 0 && N >= 8 && N <= 256, "wgmma N is a multiple of 8 in [8, 256]");
  using Op = wgmma_detail::Op<N>;
  constexpr int kTA = static_cast<int>(kMajorA);
  constexpr int kTB = static_cast<int>(kMajorB);
  const u32 scale_d = accumulate ? 1u : 0u;
  if constexpr (kType == DType::kBF16) {
    Op::template ss_bf16<kTA, kTB>(acc, desc_a, desc_b, scale_d);
  } else if constexpr (kType == DType::kF16) {
    Op::template ss_f16<kTA, kTB>(acc, desc_a, desc_b, scale_d);
  } else {
    static_assert(kType == DType::kE4M3 || kType == DType::kE5M2, "wgmma takes bf16/f16/fp8");
    static_assert(kTA == 0 && kTB == 0, "fp8 wgmma takes K-major operands only");
    if constexpr (kType == DType::kE4M3) Op::ss_e4m3(acc, desc_a, desc_b, scale_d);
    if constexpr (kType == DType::kE5M2) Op::ss_e5m2(acc, desc_a, desc_b, scale_d);
  }
}

// acc[64 × N] (+)= A · B with A from registers (a: this thread's fragment, layout
// wgmma_a_frag_coord). The registers are read asynchronously: do not write them before
// the wgmma_wait that retires this instruction.
template <DType kType, int N, WgmmaMajor kMajorB = WgmmaMajor::kK>
ATTNJIT_DEVICE void wgmma_rs(float (&acc)[N / 2], const u32 (&a)[4], u64 desc_b,
                             bool accumulate) {
  static_assert(N % 8 == 0 && N >= 8 && N <= 256, "wgmma N is a multiple of 8 in [8, 256]");
  using Op = wgmma_detail::Op<N>;
  constexpr int kTB = static_cast<int>(kMajorB);
  const u32 scale_d = accumulate ? 1u : 0u;
  if constexpr (kType == DType::kBF16) {
    Op::template rs_bf16<kTB>(acc, a, desc_b, scale_d);
  } else if constexpr (kType == DType::kF16) {
    Op::template rs_f16<kTB>(acc, a, desc_b, scale_d);
  } else {
    static_assert(kType == DType::kE4M3 || kType == DType::kE5M2, "wgmma takes bf16/f16/fp8");
    static_assert(kTB == 0, "fp8 wgmma takes K-major operands only");
    if constexpr (kType == DType::kE4M3) Op::rs_e4m3(acc, a, desc_b, scale_d);
    if constexpr (kType == DType::kE5M2) Op::rs_e5m2(acc, a, desc_b, scale_d);
  }
}

}  // namespace attnjit
