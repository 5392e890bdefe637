#pragma once
// mla_decode_fp8's layout, compiled by the host (runtime/ops/mla_decode_fp8) and by NVRTC:
// the main kernel's argument block, the shared-memory plan, the row geometry and the
// quantizer's argument block. The split schedule, combine and check kernels and their
// argument blocks are mla_decode's (mla_decode/layout.cuh).
#include "common/constants.cuh"
#include "mla_decode/layout.cuh"

namespace attnjit::layout::mla_decode_fp8 {

// A 640-byte row: 512 e4m3 content bytes, then 64 bf16 rope dims (128 bytes).
inline constexpr int kRowBytes = 640;
inline constexpr int kContentBytes = 512;
inline constexpr int kRopeBytes = 128;
inline constexpr int kBoxBytes = 128;                     // one TMA box column span
inline constexpr int kRowBoxes = kRowBytes / kBoxBytes;   // 5: 4 content + 1 rope
inline constexpr int kContentBoxes = kContentBytes / kBoxBytes;
inline constexpr int kValueDim = 512;

// The main kernel's argument block (after the q, kv and rope tensor maps). `base` is
// mla_decode's block: the schedule, the outputs and the partials are the same.
//
// Two row forms, chosen per call (no template field): 640-byte rows (512 e4m3 + 64 bf16
// rope; per-token scales) and the per-tensor form's 576-byte rows (all e4m3; one σ_Q and
// one σ_KV). Both land in the same staging boxes: the rope box is 128 bytes wide either
// way, a 576-byte row's box being half out of bounds (TMA fills zeros).
enum QScaleMode : int { kQScalePerToken = 0, kQScalePerHead = 1, kQScalePerTensor = 2 };
struct Args {
  layout::mla_decode::Args base;
  const float* q_scale;   // σ_Q: [tokens], [tokens, h] or [1] (q_scale_mode)
  const float* kv_scale;  // σ_KV: [pages · page_size] (kv_scale_per_row) or [1]
  int q_scale_mode;
  int num_pages;          // σ_KV reads of a table entry outside 0..num_pages-1 read 0
  int rope_col;           // byte column of the rope box in the rope map: 512 (640- and
                          // 576-byte rows: the rope map is the kv map) or 0 (three tensors)
  int kv_scale_per_row;   // 1: σ_KV per cache row; 0: one for the whole cache
  int rope_e4m3;          // 1: rope is 64 e4m3 bytes (576-byte rows); 0: 64 bf16
  int pad;
};

// Which σ_Q a query row (token, head) reads: per token, per token and head, or the one.
ATTNJIT_PLAN long long q_scale_index(int mode, long long token, int head, int num_heads) {
  return mode == kQScalePerHead ? token * num_heads + head : mode == kQScalePerTensor ? 0 : token;
}

// Dynamic shared memory of the main kernel (SharedStorage<P> of each schedule
// static_asserts against it), rounded to 1024 plus 1024 to realign the dynamic base.
//   widening (fp8_mma 0): Q widened to bf16 (9 chunks of [64][128 B]), two bf16 K/V tiles
//     (the fp8 Q staging overlays them before the first tile), the fp8 ring, σ_KV per bf16
//     tile, P (bf16), the row statistics, the mbarriers.
//   fp8 (fp8_mma 1): Q content e4m3 (4 × [64][128 B]) and Q rope bf16 ([64][128 B]), the
//     fp8 ring (the only K/V copy), P′ (e4m3 [64][32]), σ_KV per stage, the statistics and
//     the running σ max, the mbarriers.
//   seesaw (schedule 1): mla_decode's seesaw plan at bf16 (Q, two 64-key K/V tiles, P);
//     the fp8 boxes are staged inside the bf16 tiles they widen into (no ring).
//   narrow (schedule 2): Q content e4m3 (4 × [N][128 B]) and rope ([N][128 B]), the fp8 ring
//     of 64-key stages (the only K/V copy; the warpgroups' merge reuses it), P′ per consumer
//     warpgroup (e4m3 [N][64]), its columns' σ_Q factors, the per-warp column exchange,
//     each warpgroup's final m and l, the epilogue's slot, the mbarriers. N = block_m query rows.
inline constexpr int kNarrowConsumers = 2;  // schedule 2's warpgroups, each its own tiles
ATTNJIT_PLAN unsigned smem_bytes(int block_m, int block_n, int stages, int fp8_mma = 0, int schedule = 0) {
  if (schedule == 1) return layout::mla_decode::smem_bytes(2, block_m, block_n, stages, /*seesaw=*/true);
  const int ring = stages * block_n * kRowBytes;
  const int stats = 3 * block_m * 4;
  const int barriers = (1 + stages) * 8;
  int body;
  if (schedule == 2) {
    body = block_m * kRowBytes + ring +
           kNarrowConsumers * (block_m * block_n + block_m * 4 + 4 * block_m * 4 + 2 * block_m * 4) + 4 + barriers;
  } else if (fp8_mma) {
    body = block_m * kContentBytes + block_m * kRopeBytes + ring + block_m * block_n +
           stages * block_n * 4 + stats + 16 + barriers;
  } else {
    body = block_m * 576 * 2 + 2 * block_n * 576 * 2 + ring + 2 * block_n * 4 + block_m * block_n * 2 +
           stats + barriers;
  }
  return static_cast<unsigned>((body + 1023) / 1024 * 1024 + 1024);
}

// ---- the fp8 P·V operand order (fp8_mma 1; vt_fragment.cuh) -------------------------
// The Vᵀ register fragment built by ldmatrix.trans + PRMT takes the keys of a 32-key tile
// in this order: k position k holds key fp8_vt_key_of(k), i.e. within each 16 keys the
// positions 4t..4t+3 hold keys {2t, 2t+1, 8+2t, 9+2t}. P′ is stored in the same order.
ATTNJIT_PLAN int fp8_vt_key_of(int k) {
  const int t = (k % 16) / 4, j = k % 4;
  return 16 * (k / 16) + (j < 2 ? 2 * t + j : 8 + 2 * t + (j - 2));
}

// Where the softmax warpgroup puts S accumulator i (0..15 of an m64n32 fragment) of thread
// `tid` (0..127) in P′ [64 rows][32 k positions]: wgmma's accumulator layout gives row
// 16w + l/4 + 8·((i/2) % 2) and key 8·(i/4) + 2·(l % 4) + i % 2 (w = tid/32, l = tid%32);
// accumulators 8G+2r+{0,1} and 8G+4+2r+{0,1} are one 32-bit word at k position
// 16G + 4·(l % 4), bytes in that order.
struct P8Slot {
  int row, kpos;
};
ATTNJIT_PLAN P8Slot fp8_p_slot(int tid, int i) {
  const int l = tid % 32;
  const int byte = 2 * ((i % 8) / 4) + i % 2;  // which 8-key half, then the column parity
  return {16 * (tid / 32) + l / 4 + 8 * ((i / 2) % 2), 16 * (i / 8) + 4 * (l % 4) + byte};
}

// ---- the quantizer --------------------------------------------------------------------
// One CTA of kQuantThreads threads per group of rows (kRow: 1 row, kToken: h rows); the
// per-tensor form runs an amax pass (grid over rows, atomicMax on the f32 bits) first.
inline constexpr int kQuantThreads = 128;  // 64 threads × 8 values cover a row's 512 + 64
// Per tensor: kQuantAmax (atomicMax into scale[0], zeroed first), kQuantTensor (rows with
// σ from that amax), kQuantFinish (scale[0] = σ).
enum QuantMode : int { kQuantGroups = 0, kQuantAmax = 1, kQuantTensor = 2, kQuantFinish = 3 };
struct QuantArgs {
  const unsigned short* in;  // bf16 [rows, 576]
  unsigned char* out;        // [rows, out_stride] (640: with the rope; 512: content only)
  unsigned short* out_rope;  // bf16 [rows, 64] (three-tensor form) or null
  float* scale;              // [groups] (kQuantTensor: [1], also the amax pass's target)
  long long rows;
  int rows_per_group;
  int out_stride;          // 640, 512 (content only, rope to out_rope) or 576 (rope in e4m3)
  int mode;
  int pad;
};

static_assert(sizeof(Args) == 112 + 40 && ATTNJIT_OFFSET_IS(Args, q_scale, 112) &&
                  ATTNJIT_OFFSET_IS(Args, rope_col, 136) && ATTNJIT_OFFSET_IS(Args, rope_e4m3, 144),
              "mla_decode_fp8::Args layout");
static_assert(sizeof(QuantArgs) == 56 && ATTNJIT_OFFSET_IS(QuantArgs, rows, 32) &&
                  ATTNJIT_OFFSET_IS(QuantArgs, mode, 48),
              "mla_decode_fp8::QuantArgs layout");

}  // namespace attnjit::layout::mla_decode_fp8
