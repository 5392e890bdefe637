#pragma once
// Host references for mla_decode_branch_fp8 (kernel_templates/mla_decode_branch_fp8/layout.cuh):
// the fp8 block-scale projection, the bit-exact RoPE, the RMSNorm, the three cache-row
// layouts with a comparison for each, and the whole branch (absorb, cache write, attention,
// output projection) unfused in float64. Pure C++ (no Catch2, no driver), like
// mla_reference.hpp, so the benchmark can link it too.
//
// Three levels of exactness, each as strict as the device math allows:
//   - bit-exact: the RoPE (f32 products and sum in a fixed order, then bf16 RN) and every
//     byte that depends only on it (bf16 rope columns, the 656-byte row's copied rope);
//   - bounded: the RMSNorm (the device sums in its own order and uses rsqrtf, so its bf16
//     result may be the neighbour of the correctly rounded one) and every fp8 value that
//     depends on it (σ and all codes of a row move with one value's ulp);
//   - float64 ideal: the projection and the whole branch, judged by cosine and rel-L2.
#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace attnjit::harness {

// The branch's dimensions (the .cpp checks them against layout.cuh's).
inline constexpr int kMlaBranchNope = 128;    // q's non-rope part per head
inline constexpr int kMlaBranchRope = 64;     // the rope part of q and of a cache row
inline constexpr int kMlaBranchQDim = 192;    // q as the caller gives it
inline constexpr int kMlaBranchLatent = 512;  // kv_lora_rank
inline constexpr int kMlaBranchRow = 576;     // a cache row / the absorbed q
inline constexpr int kMlaBranchVDim = 128;    // the output per head
inline constexpr int kMlaBranchBlock = 128;   // the fp8 block-scale granularity

// ---- 1. the fp8 block-scale projection ---------------------------------------------------

// An e4m3 weight with one f32 scale per 128 × 128 block.
struct MlaBranchWeightFp8 {
  int heads = 0, n_dim = 0, k_dim = 0;
  std::vector<uint8_t> codes;  // e4m3 [heads, N, K], K contiguous
  std::vector<float> scale;    // f32 [heads, N / 128, K / 128]
};

// Test-input generation: w [heads, N, K] → codes = e4m3(w / σ_W) (f32 division, RN-even,
// saturating) with σ_W = amax of the 128 × 128 block / 448 (f32), 1 for an all-zero block.
// N and K must be multiples of 128.
MlaBranchWeightFp8 mla_branch_quantize_weight(std::span<const float> w, int heads, int n_dim,
                                              int k_dim);
// codes · σ_W as doubles [heads, N, K] (exact): W_UK / W_UV for mla_branch_reference.
std::vector<double> mla_branch_dequantize_weight(const MlaBranchWeightFp8& w);

// One 128-value activation group quantized as the projection kernels do it (layout.cuh):
// σ_A = RN(m / 448) and codes e4m3(x · RN(448 / m)), m = min(amax, 1200), in f32; a group
// with m < 2^-60 scales x and m by 2^64 first (the same product, ρ kept finite), amax 0
// gives σ_A 0 and codes 0.
struct MlaBranchActScale {
  float sigma = 0.0f, rho = 0.0f, pre = 1.0f;
  bool zero = false;
  float scaled(float x) const { return zero ? 0.0f : x * pre * rho; }  // the code's argument
};
MlaBranchActScale mla_branch_act_scale(float amax);

// An e4m3 output (codes and σ per 128 columns, as mla_decode's out_scale writes them)
// against the host quantization of the same op's bf16 output `rows` (row-major, k_dim values
// a row): σ bit for bit, codes by value (±0 equal; a NaN code, the tests' poison, never).
// zero_rows: rows whose first group is all zero (σ 0, codes 0).
struct MlaActCodesCheck {
  int64_t bad_sigma = 0, bad_codes = 0, zero_rows = 0;
};
MlaActCodesCheck mla_branch_check_act_codes(std::span<const float> rows, std::span<const uint8_t> codes,
                                            std::span<const float> sigma, int k_dim);

struct MlaBranchProjection {
  int tokens = 0, heads = 0, n_dim = 0;
  // [tokens, heads, N]: Σ_g σ_A·σ_W·Σ_k A8·W with the activations quantized as the kernel
  // does (mla_branch_act_scale). The e4m3 products and
  // their 128-term sums are exact in double, so this is the kernel's result before its own
  // accumulation and bf16 store.
  std::vector<double> out;
  // [tokens, heads, N]: Σ_k a · (W·σ_W), the activations unquantized: what the branch
  // would compute without the on-the-fly fp8 step (bounds the whole branch's error).
  std::vector<double> ideal;
  // [tokens, heads, N]: Σ_g σ_A·σ_W·Σ_k |A8·W|, the size of the terms `out` sums. The
  // device's f32 (or narrower wgmma) accumulation error is a multiple of it, its bf16
  // store 2^-8·|out|: a sound limit is 2^-8·|out| + c·magnitude (c = 4 · 2^-13 for Hopper's
  // fp8 wgmma, whose accumulator keeps ~13 mantissa bits through a group's four k-steps).
  std::vector<double> magnitude;
};

// a: floats holding bf16 values [tokens, heads, K] contiguous (for the absorption: q's
// first 128 columns, copied out); w: e4m3 [heads, N, K]; w_scale: [heads, N/128, K/128].
// K and N multiples of 128 (the branch: K 128, N 512 and K 512, N 128). (t, h) rows are
// spread over threads.
MlaBranchProjection mla_branch_project_reference(std::span<const float> a,
                                                 std::span<const uint8_t> w,
                                                 std::span<const float> w_scale, int tokens,
                                                 int heads, int k_dim, int n_dim);

// ---- 2. RoPE, RMSNorm and the cache row ----------------------------------------------------

// Bit-exact RoPE of 64 bf16 values x at the position whose freqs_cis row is `freqs`
// (cos θ_j at [2j], sin θ_j at [2j + 1]): y_2j = x_2j·c − x_2j+1·s, y_2j+1 = x_2j·s +
// x_2j+1·c, each product and the sum rounded to f32 (no FMA: the kernel must use
// __fmul_rn / __fadd_rn, as NVRTC fuses a*b ± c*d by default), then bf16 RN-even. Used for
// the cache row's rope (kv_input[t, 512..575]) and q_out's (q[t, h, 128..191]).
void mla_branch_rope_row(const uint16_t* x /* [64] bf16 */, const float* freqs /* [64] */,
                         uint16_t* y /* [64] bf16 */);

// x · (1 / sqrt(mean(x²) + ε)) · gamma over 512 bf16 values, in double, unrounded. The
// device's bf16 result (f32 sum in its own order, rsqrtf) is within 1 bf16 rounding of this
// value plus ~2^-15 relative: see mla_branch_compare_cache_row.
void mla_branch_rmsnorm_reference(const uint16_t* x /* [512] bf16 */,
                                  const uint16_t* gamma /* [512] bf16 */, float epsilon,
                                  double* out /* [512] */);

// The reference of one new cache row, from kv_input[t] and freqs_cis[p].
struct MlaBranchCacheRowRef {
  std::array<double, kMlaBranchLatent> latent{};  // the exact RMSNorm · gamma
  std::array<uint16_t, kMlaBranchRow> bf16{};     // R: latent RN to bf16, then the rope (exact)
};
MlaBranchCacheRowRef mla_branch_cache_row_reference(const uint16_t* kv /* [576] bf16 */,
                                                    const float* freqs /* [64]: row p */,
                                                    const uint16_t* gamma /* [512] bf16 */,
                                                    float epsilon);

// layout.cuh's CacheLayout (the .cpp checks the values).
enum class MlaBranchCacheLayout : int {
  kBf16 = 0,      // 576 bf16 (1152 bytes)
  kFp8Token = 1,  // 640 bytes: 512 e4m3 + 64 bf16 rope ÷ σ, σ per row beside the cache
  kFp8Block = 2,  // 656 bytes: 512 e4m3, four f32 block scales, 64 bf16 rope (unscaled)
};
int mla_branch_cache_row_bytes(MlaBranchCacheLayout layout);

// A bf16 row R [576] in `layout`, by the runtime's host quantizers (bit-exact against the
// device quantizers given the same R): mla_fp8_quantize_host (one row, σ into *sigma) and
// mla_sparse_quantize_row_host. `sigma` may be null except for kFp8Token.
std::vector<uint8_t> mla_branch_encode_cache_row(MlaBranchCacheLayout layout,
                                                 const uint16_t* row /* [576] bf16 */,
                                                 float* sigma);
// A row back to 576 doubles: bf16 as is; 640: e4m3·σ and bf16·σ; 656: e4m3 · its block's
// scale, rope as stored. `sigma` is read for kFp8Token only. NaN codes decode as NaN.
void mla_branch_decode_cache_row(MlaBranchCacheLayout layout, const uint8_t* row, float sigma,
                                 double* out /* [576] */);

// One GPU cache row judged against the reference. Limits, per value with exact latent
// value x (β = the allowed relative distance of the device's bf16 R from x: 2^-8 for one
// bf16 rounding plus 2^-12 for its f32 math, or 2^-7 when only the reference's bf16 row is
// known, since the device's R may then be its neighbour, 1 ulp ≤ 2^-7 relative):
//   bf16:  latent |gpu − x| ≤ β·|x| (+2^-133, bf16's subnormal step); rope bits exact;
//   σ:     |σ − max(amax x, 1e-8)/448| ≤ (β + 2^-20)·that (656: amax per block, 1 when 0);
//   e4m3:  |σ·e4m3(R/σ) − x| ≤ (2^-4·(1+β) + β + 2^-20)·|x| + 2^-10·σ: e4m3 rounds by at most
//          2^-4 relative above 2^-6 (3 mantissa bits) and by 2^-10 absolute in its
//          subnormal range, in σ units; R/σ is one f32 division (2^-24);
//   640 rope: |σ·bf16(R/σ) − R| ≤ (2^-8 + 2^-20)·|R| + 2^-133·σ (R's rope is exact);
//   656 rope: bits exact (copied).
struct MlaBranchRowComparison {
  bool passed = true;
  int64_t rows = 0;
  double worst_ratio = 0.0;    // max |gpu − ref| / limit over the values (≤ 1 passes)
  double worst_abs_err = 0.0;  // |gpu − ref| there
  int worst_index = -1;        // the value (0..575) with worst_ratio
  int64_t worst_row = -1;      // the caller's row id passed to merge()
  double sigma_rel_err = 0.0;  // max over the rows' scales
  double sigma_limit = 0.0;
  int64_t rope_mismatches = 0;  // bit-exact rope values that differ
  int64_t nonfinite = 0;        // NaN/inf decoded values or scales
  // Folds `o` (of the caller's row `row_id`) into this running total.
  void merge(const MlaBranchRowComparison& o, int64_t row_id);
  std::string summary() const;
};
MlaBranchRowComparison mla_branch_compare_cache_row(MlaBranchCacheLayout layout,
                                                    const uint8_t* gpu_row, float gpu_sigma,
                                                    const MlaBranchCacheRowRef& ref);
// The same with only the reference's bf16 row R (β = 2^-7: looser, see above).
MlaBranchRowComparison mla_branch_compare_cache_row(MlaBranchCacheLayout layout,
                                                    const uint8_t* gpu_row, float gpu_sigma,
                                                    const uint16_t* ref_bf16_row /* [576] */);

// ---- 3. the whole branch, unfused, in float64 ------------------------------------------------

// Token t of sequence b (input_row_offsets[b] <= t < input_row_offsets[b + 1]) is at
// position p = cache_lens_before[b] + i, i = t − input_row_offsets[b]; it sees keys
// 0 .. p (inclusive): the old rows (pos < before[b], from old_row) and its sequence's new
// rows up to itself.
struct MlaBranchProblem {
  int tokens = 0, heads = 0, batch = 0, max_pos = 0;
  std::span<const float> q;          // [tokens, heads, 192] (bf16 values)
  std::span<const float> kv_input;   // [tokens, 576] (bf16 values)
  std::span<const float> freqs_cis;  // [max_pos, 64]: (cos θ_j, sin θ_j) pairs
  std::span<const float> gamma;      // [512]
  double epsilon = 1e-6;
  std::span<const double> w_uk;      // [heads, 512, 128]: q_latent[n] = Σ_k q_nope[k]·W_UK[h, n, k]
  std::span<const double> w_uv;      // [heads, 128, 512]: out[n] = Σ_k raw[k]·W_UV[h, n, k]
  // Writes the cache row of sequence b at pos (< cache_lens_before[b]) as it was before the
  // step, dequantized, into row [576]. Called from several threads at once.
  std::function<void(int b, int pos, double* row)> old_row;
  std::span<const int32_t> input_row_offsets;  // [batch + 1]
  std::span<const int32_t> cache_lens_before;  // [batch]
  double softmax_scale = 0.0;
  // Sparse attention (DeepSeek V3.2), when set: token t attends the positions
  // sparse_positions(t) returns instead of 0 .. p — each in 0 .. p (its sequence's rows,
  // this step's new ones included), duplicates counted as often as they appear — in one
  // softmax whose denominator also holds exp(sink[h]) (sink empty: none). An empty list
  // gives out 0. Called from several threads at once.
  std::function<std::vector<int>(int t)> sparse_positions;
  // With sparse_positions, optional: the extra cache's keys token t also attends in the same
  // softmax, appended to `rows` as 576 dequantized values each (duplicates repeated).
  std::function<void(int t, std::vector<double>& rows)> sparse_extra_rows;
  std::span<const float> sink;  // [heads] or empty
};

struct MlaBranchRow {
  int t = 0, h = 0;
  friend bool operator==(const MlaBranchRow&, const MlaBranchRow&) = default;
};

struct MlaBranchReference {
  int heads = 0;
  std::vector<MlaBranchRow> rows;
  std::vector<double> out;   // [rows.size(), 128]: the ideal chain
  // [rows.size(), 128]: the quantized twin — q_nope and the attention output quantized per
  // 128-value group as the projection kernels do (mla_branch_act_scale), the
  // absorbed q and the attention output rounded to bf16; the cache and the softmax exact.
  // The distance from `out` to it is the fp8 error model of the projections, evaluated on
  // these inputs.
  std::vector<double> twin;
  std::vector<int> keys;    // [rows.size()]: keys each row attends (p + 1, or its list's size)
};

// The reference for `rows` (empty: every (t, h) of every token that belongs to a sequence).
// Math per row, all double, nothing rounded: q_latent = W_UK[h]·q_nope, q_rope = rope(q[t,
// h, 128..191], p); new rows: (RMSNorm(kv[0..511])·gamma, rope(kv[512..575], p));
// scores = softmax_scale·(q_latent, q_rope)·k over all 576 dims; raw = softmax-weighted sum
// of the keys' first 512 dims; out = W_UV[h]·raw. Throws std::invalid_argument for a row
// outside the problem or of a token in no sequence, and for a position outside
// [0, max_pos) (a broken test, not a kernel bug). Each row is computed by one thread in a
// fixed order: the result does not depend on the thread count.
MlaBranchReference mla_branch_reference(const MlaBranchProblem& p,
                                        std::span<const MlaBranchRow> rows = {});

// Over the reference's rows of gpu [tokens, heads, 128] (the GPU output as floats): the
// cosine Σ g·r / (‖g‖·‖r‖) and ‖g − r‖ / ‖r‖. A NaN in gpu gives NaN (which fails any `>=`
// or `<=` limit). A zero-norm side gives cosine 1 when both are zero, else 0.
// ‖twin − out‖ / ‖out‖ over the reference's rows: the projections' fp8 error on its inputs.
double mla_branch_twin_rel_l2(const MlaBranchReference& ref);
enum class MlaBranchChain { kIdeal, kTwin };  // MlaBranchReference::out or ::twin
double mla_branch_cosine(std::span<const float> gpu, const MlaBranchReference& ref,
                         MlaBranchChain chain = MlaBranchChain::kIdeal);
double mla_branch_rel_l2(std::span<const float> gpu, const MlaBranchReference& ref,
                         MlaBranchChain chain = MlaBranchChain::kIdeal);

}  // namespace attnjit::harness
