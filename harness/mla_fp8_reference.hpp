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

#include "harness/mla_reference.hpp"

namespace attnjit::harness {

// The error model of each kernel, as limits against the float64 reference:
// - widening (fp8_mma 0): mla_decode's limits. The scores are f32 sums of exact products
//   scaled in f32 (~1e-6 of |score|), so the lse limit has a relative term: 1e-3 + 4e-6·m,
//   m = the largest finite |lse| (~7e3 at magnitude 30).
// - fp8 wgmma (fp8_mma 1): P′ is e4m3, each weight rounded by up to 2^-4 relative; a row
//   dominated by one key carries that onto its largest |v|, about 4 × the row's rms over 512
//   values (row limit 2^-4·4 = 0.25), and uniform rounding gives an rms of 2^-4/√3 ≈ 0.036
//   (rel_l2 4e-2). Q·Kᵀ's 17 k-steps each round to the fp8 accumulator's ~13 mantissa bits
//   before their f32 sum: √17·2^-13 ≈ 5e-4 of |score| (lse 1e-3 + 5e-4·m).
// - Q·Kᵀ in fp8 wgmma also moves the rows: the narrow kernel chains score_chain k32 steps
//   in the fp8 accumulator before each f32 add (the fp8_mma kernel: 1), and every chained
//   add truncates the running sum once more. Max lse error over 40 seeds at magnitude 30
//   (m ≈ 7e3): 0.47 at chain 1, 0.82 at 2, so δ ≈ 6e-5·chain·m. A score error δ moves a
//   row shared by two keys by up to δ·|v₁ − v₂| ≈ 2δ rms; the row limit gains
//   1e-4·chain·m ≈ 1.7δ: 0.4 + 0.7 at chain 1 and 0.4 + 1.4 at 2 there, against worst rows
//   of 0.55 and 0.70 over 70 seeds (0.4 alone failed 1 and 6 of the first 40). At unit
//   magnitude m ≈ 9 and the term is ~1e-3.
// Which kernel's error model: the widening kernels (exact inputs, bf16 P′ = p·σ: schedule 0
// with fp8_mma 0, and the seesaw, schedule 1) or the fp8 wgmma kernels (e4m3 P′, Q·Kᵀ in
// fresh fp8 accumulators: fp8_mma 1, and the narrow kernel, schedule 2).
enum class Fp8Kernel { kWidening, kFp8Mma, kSeesaw, kNarrow };
// score_chain: the narrow kernel's config field (the other kernels ignore it).
MlaCompareLimits mla_fp8_limits(const MlaReference& ref, Fp8Kernel kernel, int score_chain);
inline MlaCompareLimits mla_fp8_limits(const MlaReference& ref, bool fp8_mma) {
  return mla_fp8_limits(ref, fp8_mma ? Fp8Kernel::kFp8Mma : Fp8Kernel::kWidening, 1);
}
// The kernel a config's schedule and fp8_mma fields select.
inline Fp8Kernel fp8_kernel_of(int schedule, int fp8_mma) {
  return schedule == 2 ? Fp8Kernel::kNarrow
         : schedule == 1 ? Fp8Kernel::kSeesaw
         : fp8_mma == 1  ? Fp8Kernel::kFp8Mma
                         : Fp8Kernel::kWidening;
}

// Rows of 640 bytes (512 e4m3, 64 bf16) or 576 (all e4m3, the per-tensor form) → rows ×
// 576 floats, row r scaled by sigma[r / rows_per_sigma] (q per token: h; per token and
// head, cache rows: 1; one σ for all: rows). NaN codes decode as NaN: only rows a reference
// reads must be clean.
std::vector<float> mla_fp8_dequantize(std::span<const uint8_t> rows, std::span<const float> sigma,
                                      int64_t rows_per_sigma, int row_bytes = 640);

}  // namespace attnjit::harness
