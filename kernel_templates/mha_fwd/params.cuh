#pragma once
// mha_fwd: the device enums of the config's fields, the shapes derived from the config
// (Traits) and the shared-memory layout. The argument blocks and the plan's sizes are in layout.cuh.
#include "common/arch.cuh"
#include "common/mbarrier.cuh"
#include "common/types.cuh"
#include "mha_fwd/layout.cuh"

namespace attnjit::mha_fwd {

using namespace attnjit::layout::mha_fwd;  // argument blocks and plan, shared with the host

// Enumerator names are the contract with the host's generated instantiations.
enum class Mask : int { kNone, kCausal, kWindow, kCausalWindow, kChunked };
enum class Mod : int { kNone, kSoftcap, kAlibi };
enum class Layout : int { kContiguous, kPaged };

// A kernel's P is the config's template fields — the rows of
// runtime/include/attnjit/ops/mha_fwd_config.def — as a struct the generated translation
// unit declares (attnjit_generated::Params): P.head_dim, P.block_n, P.mask, ...

template <auto P>
struct Traits {
  static constexpr int kConsumers = P.block_m / kWgmmaM;             // math warpgroups: 2, 3
  // Persistent launch (mha_fwd/schedule.cuh): warpgroup 0 is a producer — one thread issues
  // every TMA load, running ahead across units — and the consumers are warpgroups 1..2.
  static constexpr bool kProducer = P.persistent;
  static constexpr int kThreads = (kConsumers + (kProducer ? 1 : 0)) * kWarpgroupThreads;
  // Consumer warps that release a stage (one arrive per warp, after its wgmma_wait).
  static constexpr u32 kReleaseArrivals = kConsumers * 4;
  // Register budget. Grid launch: one CTA per SM and 8 warps = 2 per SM sub-partition, whose
  // 16K registers then allow 255 per thread — room for O[64 × 256] f32 (128) next to S and
  // P. Three warpgroups (block_m 192) put 3 warps on each and cap every thread at 168: d64
  // with up to 128 keys (config.cpp checks the accumulators against either cap). With no
  // producer warp, one consumer thread issues the TMA loads (Q and the first `stages` tiles
  // up front, then each freed stage's refill while its own warpgroup's S = Q·Kᵀ runs).
  // Persistent launch: 384 threads enter at 168; setmaxnreg moves the producer down to
  // kProducerRegs and the consumers up to kConsumerRegs. The consumers can only take what
  // the producer frees: 128·32 + 256·232 ≤ 384·168 (FA3's 24/240 left the producer one
  // register short for packed or paged loads, which spilled). ptxas allocates each role's
  // branch under its own limit (the roles are the two arms of one if/else at the kernel's
  // top level).
  static constexpr int kProducerRegs = 32;
  static constexpr int kConsumerRegs = 232;
  // Small tiles (O + S + P ≤ 80 registers: d64 with 64 keys) fit 128 registers per thread:
  // two CTAs per SM, whose GEMMs and softmax interleave (the short causal d64 calls). Bound
  // explicitly: ptxas, left alone, put a variant of this loop at 129, which halves residency.
  static constexpr int kMinCtasPerSm =
      !kProducer && kConsumers == 2 && P.head_dim_v / 2 + 3 * P.block_n / 4 <= 80 ? 2 : 1;
  static constexpr int kElem = dtype_bytes(P.dtype);
  static constexpr int kSpan = 128;                                  // bytes per 128B row
  static constexpr int kSpanCols = kSpan / kElem;                    // 64 columns per box
  static constexpr int kQkChunks = P.head_dim / kSpanCols;           // column boxes of Q/K
  static constexpr int kVChunks = P.head_dim_v / kSpanCols;          // column boxes of V
  static constexpr int kQChunkBytes = P.block_m * kSpan;
  static constexpr int kKChunkBytes = P.block_n * kSpan;
  static constexpr int kQBytes = kQkChunks * kQChunkBytes;           // Q [block_m][d]
  static constexpr int kKBytes = kQkChunks * kKChunkBytes;           // K [block_n][d]
  static constexpr int kVBytes = kVChunks * kKChunkBytes;            // V [block_n][dv]
  // Q buffers: a persistent CTA loads the next unit's Q while the current unit runs where
  // two fit next to the K/V ring (d64, d128; config.cpp's q_buffers() mirrors this); else the
  // next Q waits for the current unit's last S.
  static constexpr int kQBuffers = q_buffers(kElem, P.head_dim, P.head_dim_v, P.block_m, P.block_n,
                                             P.stages, P.persistent);
  static constexpr int kGroup = P.group > 0 ? P.group : 1;           // query heads per row block
  static constexpr bool kPacked = P.group > 0;
  static constexpr int kQBoxRows = P.block_m / kGroup;               // query positions per tile
  static constexpr int kPageRows = P.kv_layout != Layout::kPaged ? P.block_n
                                   : (P.page_size < P.block_n ? P.page_size : P.block_n);
  static constexpr int kPiecesPerTile = P.block_n / kPageRows;       // TMA boxes along keys
  static constexpr bool kCausalLike = P.mask != Mask::kNone;         // bounded key range per row

  static_assert(P.dtype == DType::kBF16 || P.dtype == DType::kF16, "q/k/v are bf16 or f16");
  static_assert(P.swizzle == Swizzle::k128B, "tiles are 128B-swizzled (d is a multiple of 64)");
  static_assert(P.block_m == 128 || P.block_m == 192,
                "one 64-row wgmma tile per consumer warpgroup, 2 or 3 of them");
  static_assert(P.block_n % 16 == 0 && P.block_n >= 16 && P.block_n <= 256,
                "keys per tile: a multiple of 16 (one k16 step of P·V) up to a TMA box");
  static_assert(P.head_dim % 64 == 0 && P.head_dim <= 256, "d: whole 128-byte spans");
  static_assert(P.head_dim_v % 64 == 0 && P.head_dim_v <= 256, "dv: one wgmma N ≤ 256");
  static_assert(P.stages >= 2 && P.stages <= 4, "K/V ring depth (refills run one tile ahead)");
  static_assert(P.kv_layout != Layout::kPaged || (P.page_size >= 16 && P.page_size <= 256 &&
                             (P.page_size & (P.page_size - 1)) == 0 &&
                             (P.block_n % P.page_size == 0 || P.page_size % P.block_n == 0)),
                "pages are powers of two that tile the KV block (or the other way round)");
  static_assert(!P.persistent || kConsumers == 2,
                "persistent: a producer and two consumer warpgroups (the 232-register split)");
  static_assert(P.group == 0 || (P.group >= 2 && P.group <= 16 && P.block_m % P.group == 0),
                "packed GQA: 2..16 query heads per KV head dividing the row block");
};

// Named barriers (id 0 is __syncthreads), one of each kind per consumer warpgroup w:
// kTailZeroed + w (128 threads): warpgroup w zeroed the stale V rows of its last tile;
// kTurn + w (256 threads: w and the warpgroup before it): w may issue its GEMMs.
enum class Bar : u32 { kTailZeroed = 1, kTurn = 4 };
ATTNJIT_DEVICE u32 bar_of(Bar kind, int wg) { return static_cast<u32>(kind) + static_cast<u32>(wg); }

// The shared-memory plan. Tiles first, each 1024-aligned (the 128B swizzle repeat).
template <auto P>
struct SharedStorage {
  using T = Traits<P>;
  alignas(1024) u8 q[T::kQBuffers][T::kQBytes];  // Q [block_m rows][d] as kQkChunks boxes
  alignas(1024) u8 k[P.stages][T::kKBytes];    // K [block_n keys][d]   (K-major B of Q·Kᵀ)
  alignas(1024) u8 v[P.stages][T::kVBytes];    // V [block_n keys][dv]  (MN-major B of P·V)
  MBarrier q_full[T::kQBuffers];   // TMA of a Q buffer landed
  MBarrier q_empty[T::kQBuffers];  // every consumer warp has finished its unit's last S (persistent)
  MBarrier k_full[P.stages];   // TMA of a K stage landed (S may start)
  MBarrier v_full[P.stages];   // TMA of a V stage landed (P·V may start)
  MBarrier k_empty[P.stages];  // every consumer warp has finished S of a K stage
  MBarrier v_empty[P.stages];  // every consumer warp has finished P·V of a V stage
};

template <auto P>
inline constexpr unsigned kDynamicSmemBytes = sizeof(SharedStorage<P>) + 1024;

// The host launches with the plan in mha_fwd/layout.cuh: it must be this layout's.
template <auto P>
inline constexpr bool kPlanMatches =
    kDynamicSmemBytes<P> == smem_bytes(dtype_bytes(P.dtype), P.head_dim, P.head_dim_v, P.block_m,
                                       P.block_n, P.stages, P.persistent);

}  // namespace attnjit::mha_fwd
