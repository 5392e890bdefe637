#pragma once
// The float64 reference of mla_decode_fp8 is mla_decode's (harness/mla_reference.hpp) on the
// dequantized rows: with q′ = σ_Q · (q_c, q_r) and k′ = σ_KV · (k_c, k_r),
//   q′·k′ = (q_c·k_c + q_r·k_r) · σ_Q · σ_KV = dot · σ_Q · σ_KV   and   V′ = σ_KV · k_c,
// which are the formulas (score = dot · σ_Q · σ_KV · scale, out = Σ p σ_KV k_c).
// The dequantized values are exact decodes times σ in f32 (one rounding, 2^-24 relative);
// everything after is float64.
#include <cstdint>
#include <span>
#include <vector>

namespace attnjit::harness {

// Rows of 640 bytes (512 e4m3, 64 bf16) or 576 (all e4m3, the per-tensor form) → rows ×
// 576 floats, row r scaled by sigma[r / rows_per_sigma] (q per token: h; per token and
// head, cache rows: 1; one σ for all: rows). NaN codes decode as NaN: only rows a reference
// reads must be clean.
std::vector<float> mla_fp8_dequantize(std::span<const uint8_t> rows, std::span<const float> sigma,
                                      int64_t rows_per_sigma, int row_bytes = 640);

}  // namespace attnjit::harness
