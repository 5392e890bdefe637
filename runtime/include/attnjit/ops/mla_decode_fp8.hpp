#pragma once
// mla_decode_fp8: absorbed-MLA decode over an fp8 latent cache with one f32 scale per cache
// row and per query token (or token and head), rope kept in bf16 (seed:
// launch_mla_sm100_decode_fp8_per_token_scale_rope_aware, the SnapMLA scheme).
//
// A row (of q or of the cache) is 640 bytes: bytes 0..511 the 512 latent dims in e4m3,
// bytes 512..639 the 64 rope dims in bf16. The caller (or mla_fp8_quantize) has divided each
// row's rope by that row's scale, so both parts are in the same "dot" units.
//
//   q          [b, q_len, h, 640]        u8 rows (padded form); 576 in the per-tensor form
//              [total_q, h, 640]         ragged form, with q_offsets [b + 1] and max_q_len
//   q_scale    [tokens] or [tokens, h]   f32 σ_Q per query token (or token and head);
//                                        tokens = b·q_len (padded) or total_q (ragged)
//   kv_cache   [pages, page_size, 640]   u8 rows, page_size >= 64 (the 640-byte form)
//              [pages, page_size, 512]   u8 content only, with kv_rope (the three-tensor form)
//   kv_rope    [pages, page_size, 64]    bf16; data == nullptr: the 640-byte form
//   kv_scale   [pages, page_size]        f32 σ_KV, one per cache row, shared by K and V
//   block_table[b, max_pages] i32, cache_lens [b] i32 (each includes the q_len new tokens)
//   out        [b, q_len, h, 512]        bf16; ragged [total_q, h, 512]
//   lse        [b, h, q_len]             f32, optional; ragged [h, total_q]
//
// With dot = q_c·k_c (e4m3 values) + q_r·k_r (bf16 values):
//   score_t = dot_t · σ_Q · σ_KV[t] · softmax_scale,  p = softmax over the visible keys,
//   out = Σ_t p_t · σ_KV[t] · k_c,t                    (V = the content, dequantized).
// The per-tensor form (what engines store today with an fp8 KV cache on Hopper): q and
// cache rows of 576 bytes, all e4m3 (the rope too, divided by the same σ as the content),
// q_scale [1] and kv_scale [1]: the same formulas with the scales broadcast. Chosen by the shapes (576-byte q and cache rows); q must be
// quantized already (mla_fp8_quantize with out [rows, 576] and MlaFp8Group::kTensor).
//
// Masking, causal MTP (q_len up to 8), empty rows (out 0, lse -inf), rows past a length
// (anything there, NaN codes and any σ, never reaches the output) and the split-KV schedules
// are mla_decode's (attnjit/ops/mla_decode.hpp); the combine, balance and check kernels are
// mla_decode's own.
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attnjit/ops/mla_decode.hpp"
#include "attnjit/tensor.hpp"
#include "attnjit/types.hpp"

namespace attnjit {

inline constexpr int kMlaFp8RowBytes = 640;      // 512 e4m3 + 64 bf16
inline constexpr int kMlaFp8ContentBytes = 512;  // the e4m3 latent part
inline constexpr int kMlaFp8RopeDims = 64;       // the bf16 rope part
inline constexpr float kE4M3Max = 448.0f;

// Compile-time shape of the kernel (template arguments): rows of mla_decode_fp8_config.def.
struct MlaDecodeFp8Config {
#define ATTNJIT_FIELD ATTNJIT_CONFIG_MEMBER
#include "attnjit/ops/mla_decode_fp8_config.def"
#undef ATTNJIT_FIELD

  void validate() const;  // throws Error(kUnsupportedConfig) naming the field
  std::string to_json() const;
  static MlaDecodeFp8Config from_json(std::string_view json);
  std::string describe() const;
  friend bool operator==(const MlaDecodeFp8Config&, const MlaDecodeFp8Config&) = default;
};

struct MlaDecodeFp8Args {
  TensorView q;            // u8 (or e4m3) rows of 640 bytes, rank 4, or rank 3 with q_offsets
  TensorView q_offsets;    // ragged: [b + 1] i32; data == nullptr: padded
  int max_q_len = 0;       // ragged: the bound on every sequence's q_len (1..8)
  TensorView q_scale;      // f32 [tokens] or [tokens, h]; per-tensor form: [1]
  TensorView kv_cache;     // u8 rows of 640 bytes, of 512 with kv_rope, or of 576 (per tensor)
  TensorView kv_rope;      // bf16 [pages, page_size, 64]; data == nullptr: 640-byte rows
  TensorView kv_scale;     // f32 [pages, page_size]; per-tensor form: [1]
  TensorView block_table;
  TensorView cache_lens;
  TensorView out;          // bf16
  TensorView lse;          // data == nullptr: not wanted
  float softmax_scale = 0.0f;
};

MlaDecodeFp8Config mla_decode_fp8_default_config(int num_heads, int q_len, int page_size);

// Host-visible sizes and bounds of a batch shape (as MlaDecodeShape; no dtype).
struct MlaDecodeFp8Shape {
  int batch = 0;
  int q_len = 1;
  int num_heads = 128;
  int page_size = 64;
  int max_pages = 1;
  bool ragged = false;
  int max_len = 0;     // bound on every cache_lens entry; 0: max_pages × page_size
  int num_splits = 0;  // a static split (1..256); 0: the balanced schedule
};
MlaDecodeFp8Shape mla_decode_fp8_shape(const MlaDecodeFp8Args& args);

struct MlaDecodeFp8Plan {
  MlaDecodeFp8Shape shape;
  MlaDecodeFp8Config config;
  bool balanced = false;
  int num_splits = 1;
  int sm_slots = 0;
  size_t workspace_bytes = 0;
};

MlaDecodeFp8Plan mla_decode_fp8_plan(const MlaDecodeFp8Shape& shape,
                                     const MlaDecodeFp8Config* config = nullptr);
void mla_decode_fp8_schedule(const MlaDecodeFp8Plan& plan, const MlaDecodeFp8Args& args,
                             Workspace workspace, CUstream stream);
void mla_decode_fp8(const MlaDecodeFp8Args& args, const MlaDecodeFp8Plan& plan,
                    Workspace workspace, CUstream stream);
void mla_decode_fp8(const MlaDecodeFp8Args& args, CUstream stream,
                    const MlaDecodeFp8Config* config = nullptr);

// ---- the quantizer (mla_fp8_quantize.hpp's device kernel and its host reference) -------
//
// Per row of 576 bf16 values (512 content + 64 rope):
//   σ = max(amax of the 512 content values, ε) / 448,
//   content = e4m3(x / σ) (round to nearest even, saturating to ±448),
//   rope    = bf16(x / σ),
// written as one 640-byte row (or the three-tensor form's 512 + 128 bytes) and σ (f32).
// 576-byte rows (the per-tensor form): all 576 values in e4m3, amax over all 576.
// Per-token q (MlaFp8Group::kToken): one σ over the token's h × 512 content values, shared
// by its h rows; per token and head (kRow): one per row. Per tensor: one σ for all rows.
inline constexpr float kMlaFp8Epsilon = 1e-8f;  // σ's floor (before / 448): all-zero rows
enum class MlaFp8Group : uint8_t { kRow, kToken, kTensor };

struct MlaFp8QuantizeArgs {
  TensorView in;        // bf16 [rows, 576] (rows = tokens·h for q, pages·page_size for a cache)
  int rows_per_group = 1;  // kToken: h rows share one σ; kRow: 1; kTensor: ignored
  MlaFp8Group group = MlaFp8Group::kRow;
  TensorView out;       // u8 [rows, 640], or [rows, 512] with out_rope, or [rows, 576]
                        // (the per-tensor form: the rope in e4m3 too)
  TensorView out_rope;  // bf16 [rows, 64]; data == nullptr: the 640-byte form
  TensorView scale;     // f32 [rows / rows_per_group] (kTensor: [1])
};
// The device quantizer on `stream` (one kernel; kTensor first reduces the amax).
void mla_fp8_quantize(const MlaFp8QuantizeArgs& args, CUstream stream);

// Host references (exact: the same formulas in f32, RN-even e4m3 with saturation).
uint8_t e4m3_from_float(float x);   // RN-even, saturating to ±448, NaN → 0x7F
float e4m3_to_float(uint8_t code);  // exact; 0x7F / 0xFF → NaN
// Quantizes `rows` rows of 576 bf16 (as uint16 bits) with σ per group of `rows_per_group`
// rows (rows_per_group = rows: one σ for all): out [rows × row_bytes] (640: bf16 rope; 576:
// e4m3 rope, amax over all 576), scale [groups].
void mla_fp8_quantize_host(const uint16_t* in, int64_t rows, int64_t rows_per_group,
                           uint8_t* out, float* scale, int row_bytes = 640);

}  // namespace attnjit
