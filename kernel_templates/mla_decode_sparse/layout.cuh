#pragma once
// mla_decode_sparse's layout, compiled by the host (runtime/ops/mla_decode_sparse) and by
// NVRTC: the cache row formats, the argument blocks of the main, quantize, remap and check
// kernels, and the shared-memory plan. Written once; the static_asserts pin the byte
// layout both sides pass through cuLaunchKernelEx.
//
// The partials and the combine are mla_decode's (layout::mla_decode: QRows, CombineArgs):
// a static split over the top-k writes slot batch·splits + split, row q_idx·h + head.
#include "common/constants.cuh"
#include "mla_decode/layout.cuh"

namespace attnjit::layout::mla_decode_sparse {

using mla_decode::QRows;

inline constexpr int kHeadDim = 576;   // latent 512 + rope 64
inline constexpr int kValueDim = 512;  // V = the first 512 dims of a row

// ---- the cache rows ----------------------------------------------------------------------
// fp8 (DeepSeek V3.2's 656-byte row): [0, 512) e4m3 content; [512, 528) four f32 scales,
// one per 128 content values (k = e4m3 · scale of its block); [528, 656) 64 bf16 rope
// dims, stored as they are (not scaled). bf16: 576 bf16 values (1152 bytes), as mla_decode.
inline constexpr int kFp8RowBytes = 656;
inline constexpr int kFp8ScaleOffset = 512;
inline constexpr int kFp8ScaleBlock = 128;                     // content values per scale
inline constexpr int kFp8Scales = kValueDim / kFp8ScaleBlock;  // 4
inline constexpr int kFp8RopeOffset = kFp8ScaleOffset + 4 * kFp8Scales;  // 528
inline constexpr int kRopeDims = kHeadDim - kValueDim;                 // 64
inline constexpr int kBf16RowBytes = 2 * kHeadDim;                     // 1152
inline constexpr float kE4M3Max = 448.0f;  // the quantizer's scale: block amax / 448
static_assert(kFp8RopeOffset + 2 * kRopeDims == kFp8RowBytes, "the 656-byte row");

// Bytes of one cache row in layout `fp8` (1) or bf16 (0).
ATTNJIT_PLAN int row_bytes(bool fp8) { return fp8 ? kFp8RowBytes : kBf16RowBytes; }

// ---- the main kernel ---------------------------------------------------------------------
// One of the two key sources of a query token (the main cache, or the extra always-attend
// cache). Token g's keys are indices[g·stride + j], j < n, where n = lens[g or batch]
// clamped to 0..topk (topk when lens is null); an index outside [0, num_rows) is skipped.
struct Pool {
  const void* rows;    // [num_rows, row bytes]; null: this source is absent (extra only)
  const int* indices;  // token g's row starts at g·stride
  const int* lens;     // null: every token reads topk
  int num_rows;        // physical rows in the pool (pages × page_size)
  int stride;          // elements between consecutive tokens' index rows
  int topk;            // indices per token
  int lens_per_token;  // 1: lens[g] (per query token); 0: lens[batch] (per sequence)
};

// The main kernel's grid: x = query token slot (batch·q_len + q_idx) · row_tiles + the
// 64-head tile, so a prefill's hundreds of thousands of tokens fit (x reaches 2^31 - 1;
// y and z stop at 65535); y = the split.
ATTNJIT_PLAN int row_tiles(int num_heads) { return (num_heads + 63) / 64; }

// The main kernel's argument block (after the q tensor map). Keys of a token are its main
// keys, then its extra keys, in one softmax; the split cuts that list into equal runs of
// block_n-key steps.
struct Args {
  Pool main, extra;
  const float* sink;  // [h] f32, or null (applied here when unsplit, else by the combine)
  void* out;          // [total_q, h, 512] bf16
  float* lse;         // mla_decode's lse layout, or null
  float* part_out;    // [b·splits, q_len·h, 512] f32 (q_len = the bound), or null
  float* part_lse;    // [b·splits, q_len·h]
  QRows q;
  int num_splits;     // grid y
  float scale_log2;   // softmax_scale · log2(e)
  float* max_logit;   // lse's layout: the largest softmax_scale · q·k of a row's valid keys
                      // (-inf: none), or null; written only when unsplit (the prefill)
  int merge_in_cluster;  // 1 (narrow only, splits 2, 4 or 8): a token's splits are one
                         // cluster (dims 1 × splits) and merge in it; part_out is unused
  int items;  // grid x's work, (batch·q_len)·row_tiles: a persistent CTA walks x = blockIdx.x,
              // + gridDim.x, … below it (persistent.cuh); the others are one item each
};

// The narrow kernel merges a token's splits in their cluster when they divide its 8 dim
// tiles (each CTA then owns 8 / splits of them; narrow_merge.cuh), else mla_decode's
// combine merges f32 partials.
ATTNJIT_PLAN bool narrow_merges_in_cluster(int splits) { return splits == 2 || splits == 4 || splits == 8; }

// The gather rings. softmax_wg: filled by the two P·V warpgroups, each the half of every
// row whose V columns it reads. bf16 rows go by 16-byte cp.async straight into the swizzled
// KV tiles, so the KV ring is `stages` deep. fp8 rows go raw (as stored) into a ring of
// `stages` staging tiles, rows kRawRowStride apart: 656 B padded so that two rows' 64-byte
// quarters fall in different banks, with room at kRawScaleCopy for the second half's own
// copy of the row's scales. Each P·V warpgroup then widens its half of a raw tile into a
// ring of two bf16 KV tiles, two tiles before S needs it. two_consumers: the producer
// fills 4 KV stages in both layouts (an fp8 row's raw bytes land in its own ring row and
// are widened there, fp8_producer.cuh), so it has no raw ring.
inline constexpr int kGatherKeys = 32;  // keys per gathered tile (one ring stage)
inline constexpr int kRawRowStride = 704;
inline constexpr int kRawScaleCopy = kFp8RowBytes;  // [656, 672): the scales again, for half 1
ATTNJIT_PLAN bool raw_ring(bool fp8, bool two_consumers) { return fp8 && !two_consumers; }
ATTNJIT_PLAN int kv_stages(bool fp8, int stages, bool two_consumers) {
  return raw_ring(fp8, two_consumers) ? 2 : stages;
}
ATTNJIT_PLAN int raw_tile_bytes(int block_n) { return (block_n * kRawRowStride + 1023) / 1024 * 1024; }

// Dynamic shared memory of the main kernel: Q, the KV tiles, P, the raw ring (fp8), each
// tile's key validity, row statistics, mbarriers, rounded to the 1024-byte tile alignment,
// plus 1024 to realign the dynamic base. The kernel's SharedStorage static_asserts it.
ATTNJIT_PLAN unsigned smem_bytes(bool fp8, int block_n, int stages, bool two_consumers) {
  const int kv = kv_stages(fp8, stages, two_consumers);
  const int q_tile = 64 * kHeadDim * 2;            // 72 KiB
  const int kv_tile = kGatherKeys * kHeadDim * 2;  // 36 KiB per ring stage
  const int p_tile = 64 * block_n * 2;             // block_n: keys per S step
  // The raw ring (tiles, their validity, an mbarrier per tile and half) comes first, padded to the
  // 1024-byte alignment of the Q tile after it.
  const int raw = raw_ring(fp8, two_consumers) ? (stages * (raw_tile_bytes(kGatherKeys) + kGatherKeys * 4 + 2 * 8) + 1023) / 1024 * 1024 : 0;
  const int valid = kv * kGatherKeys * 4;  // 1: the key's row is gathered
  const int stats = 3 * 64 * 4;        // row scale, max, sum
  const int barriers = (1 + kv) * 8;
  // two_consumers: the running row max (then each consumer's row sums), a release
  // mbarrier per buffer half (two_consumers.cuh), and the cluster pair's two per half
  // (pair.cuh; present, unused, when unpaired).
  const int exchange = two_consumers ? 2 * 64 * 4 + 3 * kv * 8 + 8 : 0;
  const int body = raw + q_tile + kv_tile * kv + p_tile + valid + stats + barriers + exchange;
  return static_cast<unsigned>((body + 1023) / 1024 * 1024 + 1024);
}

// The narrow schedule (narrow.cuh; fp8 rows, h = 8 or 16 heads on wgmma's N): q's 9
// chunks of [h][128 B], P′ᵀ of 4 scale blocks per consumer ([h][128 B] each), a ring of
// `stages` 64-row tiles of rows as stored (in core matrices, below), per ring row its
// validity, the column exchange (cq, red, umax, stats) and the mbarriers; rounded as
// smem_bytes.
inline constexpr int kNarrowKeys = 64;  // keys per tile: wgmma's M
// The ring holds rows as stored (one bulk copy each): 16-byte unit u of row r at
// (r/8)·kNarrowGroupStride + (r%8)·656 + 16·u. 656 ≡ 16 (mod 128) puts 8 consecutive rows'
// units in 8 bank groups (ldmatrix); the 64 bytes after each 8 rows put rows 8 apart 4
// bank groups apart (ldmatrix.trans reads such pairs).
inline constexpr int kNarrowGroupStride = 8 * kFp8RowBytes + 64;
ATTNJIT_PLAN unsigned narrow_smem_bytes(int num_heads, int stages) {
  const int chunk = num_heads * 128;
  const int q = 9 * chunk, p = 2 * 4 * chunk;
  const int ring = stages * (kNarrowKeys / 8) * kNarrowGroupStride;
  const int valid = stages * kNarrowKeys * 4;
  const int exchange = (num_heads + 2 * 4 * num_heads + 2 * 4 * 4 + 2 * 2 * num_heads) * 4;
  const int barriers = (1 + 2 * stages) * 8;
  const int body = q + p + ring + valid + exchange + barriers;
  return static_cast<unsigned>((body + 1023) / 1024 * 1024 + 1024);
}

// ---- helpers that ship with the op ------------------------------------------------------
// mla_sparse_quantize: bf16 rows [n, 576] → 656-byte rows written at pool rows dst_rows[i]
// (outside [0, num_rows): not written). One warp per row.
inline constexpr int kQuantThreads = 256;
struct QuantArgs {
  const unsigned short* src;  // [n, 576] bf16
  const int* dst_rows;        // [n] physical rows, or null: row i
  unsigned char* pool;        // [num_rows, 656]
  long long n;
  int num_rows;
  int pad;
};

// mla_sparse_remap: logical token positions → physical rows through a block table.
// pos outside [0, max_pages·page_size), or a table entry outside [0, num_pages): -1.
// Grid: min(tokens, 65535) CTAs striding over tokens.
inline constexpr int kRemapThreads = 256;
struct RemapArgs {
  const int* logical;      // [tokens, topk] with row stride `stride`
  const int* block_table;  // [b, max_pages]
  const int* token_batch;  // [tokens] the sequence of each token, or null: token / per_batch
  int* physical;           // [tokens, topk] contiguous
  long long tokens;
  int topk, stride, max_pages, page_size, num_pages, per_batch, pad;
};

// mla_decode_sparse_check (ATTNJIT_CHECK=1): grid (total_q), kCheckThreads threads.
inline constexpr int kCheckThreads = 256;
struct CheckArgs {
  Pool main, extra;
  unsigned long long* first_bad;  // (token << 32) | what; ~0 when nothing was found
  QRows q;
  int batch;
  int pad;
};
inline constexpr unsigned kBadIndex = 0;       // main index outside the pool, not -1
inline constexpr unsigned kBadLength = 1;      // main length > topk (or < 0)
inline constexpr unsigned kBadExtraIndex = 2;
inline constexpr unsigned kBadExtraLength = 3;
inline constexpr unsigned kBadQOffsets = 4;

static_assert(sizeof(Pool) == 40 && ATTNJIT_OFFSET_IS(Pool, num_rows, 24), "Pool layout");
static_assert(sizeof(Args) == 160 && ATTNJIT_OFFSET_IS(Args, sink, 80) &&
                  ATTNJIT_OFFSET_IS(Args, q, 120) && ATTNJIT_OFFSET_IS(Args, scale_log2, 140) &&
                  ATTNJIT_OFFSET_IS(Args, max_logit, 144) && ATTNJIT_OFFSET_IS(Args, merge_in_cluster, 152),
              "mla_decode_sparse::Args layout");
static_assert(sizeof(QuantArgs) == 40 && sizeof(RemapArgs) == 72, "helper args layout");
static_assert(sizeof(CheckArgs) == 112 && ATTNJIT_OFFSET_IS(CheckArgs, q, 88), "CheckArgs layout");

}  // namespace attnjit::layout::mla_decode_sparse
