#pragma once
// mha_fwd: FlashAttention forward (seed: SM100MHA2Q / FlashAttention-4; Hopper design after
// FlashAttention-3). out = softmax(mod(scale · Q·Kᵀ) masked) · V per query head, with
// GQA/MQA (query head hq reads KV head hq / (h_q / h_kv)).
//
// Layouts (last dim contiguous, 16-byte aligned; d = head_dim, dv = head_dim_v):
//   padded   q [b, s_q, h_q, d]      k [b, s_k, h_kv, d]      v [b, s_k, h_kv, dv]
//   ragged   q [total_q, h_q, d]     k [total_k, h_kv, d]     v [total_k, h_kv, dv]
//            q_offsets [b+1] i32, k_offsets [b+1] i32 (sequence i = rows off[i] .. off[i+1])
//   paged KV k [pages, page_size, h_kv, d]  v [pages, page_size, h_kv, dv]
//            block_table [b, max_pages] i32, kv_lens [b] i32 (q padded or ragged as above)
//   out      like q with dv: [b, s_q, h_q, dv] or [total_q, h_q, dv], q's dtype
//   lse      [h_q, total_q] f32 (total_q = b·s_q when padded), optional
//
// Masks align query i of a sequence bottom-right: i' = i + s_k − s_q (DESIGN.md).
//   causal: j ≤ i';  window (left, right): i' − left ≤ j ≤ i' + right (−1 = unbounded);
//   causal_window: window with right = 0;  chunked (c): ⌊j/c⌋ = ⌊i'/c⌋ and j ≤ i'.
// Score mods on the scaled score, before masking: softcap s = cap·tanh(s/cap);
// ALiBi s += −slope_h·(i' − j). Sink: one f32 logit per query head, added to the
// denominator only; lse is returned without it. A row that sees no key: out = 0, lse = −inf.
// Lengths, offsets and table entries live on the GPU and are never read by the host; the
// kernels stay in bounds whatever they hold (ATTNJIT_CHECK=1 validates them on the device).
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "attnjit/tensor.hpp"
#include "attnjit/types.hpp"

namespace attnjit {

enum class MaskKind : uint8_t { kNone, kCausal, kWindow, kCausalWindow, kChunked };
enum class ScoreMod : uint8_t { kNone, kSoftcap, kAlibi };
enum class KvLayout : uint8_t { kContiguous, kPaged };  // contiguous: padded or ragged like q

std::string_view to_string(MaskKind m) noexcept;  // "none", "causal", "window", ...
std::string_view to_string(ScoreMod s) noexcept;  // "none", "softcap", "alibi"
std::string_view to_string(KvLayout l) noexcept;  // "contiguous", "paged"

// Compile-time shape and features of the kernel (template arguments). Values — window
// sizes, chunk, cap, slopes, sink logits, scale, lengths, the split count — are run-time.
struct MhaFwdConfig {
  DType dtype = DType::kBF16;          // q, k, v and out: bf16 or f16
  int head_dim = 128;                  // d (q·k): 64, 128, 192, 256
  int head_dim_v = 128;                // dv: = head_dim, or 128 with head_dim 192
  int block_m = 128;                   // query rows per CTA: 128 (two consumer warpgroups
                                       // × 64 rows) or 192 (three, each capped at 168
                                       // registers: dv/2 + 3·block_n/4 ≤ 128)
  int block_n = 128;                   // keys per KV tile: multiple of 16 in 16..256
  int stages = 2;                      // K/V ring depth (fit checked against 227 KiB)
  Swizzle swizzle = Swizzle::k128B;    // Q/K/V tile layout
  MaskKind mask = MaskKind::kNone;
  ScoreMod score_mod = ScoreMod::kNone;
  bool ragged = false;                 // q (and contiguous k/v) as [total, h, d] + offsets
  KvLayout kv_layout = KvLayout::kContiguous;
  int page_size = 0;                   // paged: 16..256, power of two; else 0
  int group = 0;                       // 0: any h_q/h_kv, one query head per CTA;
                                       // g ∈ {2,4,8,16}: pack g query heads of one KV head
                                       // into the rows of a CTA (h_q = g·h_kv, decode/GQA)
  bool sink = false;                   // per-head attention sink logits
  bool persistent = false;             // one CTA per SM walking a static list of row blocks
                                       // (causal: long and short paired), a producer
                                       // warpgroup loading the next one's Q and K/V under
                                       // the current one's tail; block_m 128 only, consumers
                                       // at 232 registers (dv/2 + 3·block_n/4 ≤ 192)

  void validate() const;  // throws Error(kUnsupportedConfig) naming the field and the rule
  unsigned dynamic_smem_bytes() const;
  int q_buffers() const;  // Q tiles in shared memory: 2 when persistent and they fit, else 1
  std::string to_json() const;  // canonical: fixed key order
  static MhaFwdConfig from_json(std::string_view json);
  std::string describe() const;  // "bf16 d128 128x128 s2 causal ragged"
  friend bool operator==(const MhaFwdConfig&, const MhaFwdConfig&) = default;
};

struct MhaFwdArgs {
  TensorView q, k, v, out;
  TensorView lse;            // data == nullptr: not wanted
  TensorView q_offsets;      // ragged: [b+1] i32
  TensorView k_offsets;      // ragged with contiguous KV: [b+1] i32
  TensorView block_table;    // paged: [b, max_pages] i32
  TensorView kv_lens;        // paged: [b] i32 (keys of each sequence)
  TensorView sink;           // config.sink: [h_q] f32 logits (scaled-score units; ±inf allowed)
  TensorView alibi_slopes;   // score_mod alibi: [h_q] f32
  int batch = 0;             // ragged: number of sequences (offsets have batch + 1 entries)
  int max_seqlen_q = 0;      // ragged: bound on every q length (sizes the grid)
  int max_seqlen_k = 0;      // ragged/paged: bound on every k length (0: capacity); split heuristic
  float softmax_scale = 0.0f;
  float softcap = 0.0f;      // score_mod softcap: cap > 0
  int window_left = -1;      // window / causal_window: ≥ -1 (-1 = unbounded)
  int window_right = -1;     // window: ≥ -1
  int chunk = 0;             // chunked: chunk size > 0
  int num_splits = 0;        // split-KV partitions; 0 = heuristic (host-visible numbers only)
  void* workspace = nullptr; // split partials (mha_fwd_workspace_bytes)
  size_t workspace_bytes = 0;
};

// The config the runtime picks for these shapes and features (before any tuning database);
// score_mod is carried into it (a default argument keeps the common call short).
MhaFwdConfig mha_fwd_default_config(DType dtype, int head_dim, int head_dim_v, MaskKind mask,
                                    bool ragged, KvLayout kv_layout, int page_size,
                                    ScoreMod score_mod = ScoreMod::kNone);

// The config to call with for these shapes: `base` (e.g. mha_fwd_default_config plus the
// call's group, sink, score mod) with the key tile and ring depth (block_n, stages) of the
// tuning database's winner for the shapes' bucket on this GPU (attnjit/tuning.hpp,
// docs/tuning.md) when it has one and it validates with base's features. Packed query heads
// (group > 0) run the grid launch (persistent = false, its default tile). Without a tuned
// entry, short calls get a smaller key tile where the key count makes it pay (d64 causal:
// 128 keys up to 2k when persistent, 64 up to 4k on the grid launch; d128 up to 2k: 128 —
// see docs/bench-notes.md); else `base`. Every other
// field of `base` is kept. Masks other than none and causal: `base`.
MhaFwdConfig mha_fwd_selected_config(const MhaFwdArgs& args, MhaFwdConfig base);

// The split count a call with `args` and `config` will use: args.num_splits when set, else
// the tuning database's for the shapes' bucket when it has one (decode-like shapes), else
// the heuristic's — a function of batch, heads, the length bounds and the SM count only.
int mha_fwd_num_splits(const MhaFwdArgs& args, const MhaFwdConfig& config);

// Workspace bytes for total_q query rows × h_q heads × dv split num_splits ways (0 unsplit).
size_t mha_fwd_workspace_bytes(int64_t total_q, int h_q, int head_dim_v, int num_splits);

// Compiles/loads the kernels of `config` on the current device (e.g. before graph capture).
void mha_fwd_prepare(const MhaFwdConfig& config);

// Runs the forward pass on `stream`. Every argument is checked before anything is launched.
void mha_fwd(const MhaFwdArgs& args, const MhaFwdConfig& config, CUstream stream);

}  // namespace attnjit
