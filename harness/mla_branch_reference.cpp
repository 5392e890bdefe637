// Host references for mla_decode_branch_fp8 (mla_branch_reference.hpp).
#include "mla_branch_reference.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "attnjit/ops/mla_decode_fp8.hpp"
#include "attnjit/ops/mla_decode_sparse.hpp"
#include "mla_decode_branch_fp8/layout.cuh"

// GCC ignores (and warns about) the standard pragma; mla_branch_rope_row does not rely on it
// (volatile f32 temporaries), it only keeps clang from contracting anything else here.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

namespace attnjit::harness {
namespace {

namespace br = attnjit::layout::mla_decode_branch_fp8;
static_assert(br::kNopeDim == kMlaBranchNope && br::kRopeDim == kMlaBranchRope &&
              br::kQDim == kMlaBranchQDim && br::kLatentDim == kMlaBranchLatent &&
              br::kCacheDim == kMlaBranchRow && br::kVDim == kMlaBranchVDim &&
              br::kScaleBlock == kMlaBranchBlock);
static_assert(static_cast<int>(MlaBranchCacheLayout::kBf16) == br::kCacheBf16 &&
              static_cast<int>(MlaBranchCacheLayout::kFp8Token) == br::kCacheFp8Token &&
              static_cast<int>(MlaBranchCacheLayout::kFp8Block) == br::kCacheFp8Block);

using std::size_t;
constexpr int kLat = kMlaBranchLatent, kRope = kMlaBranchRope, kRow = kMlaBranchRow, kBlk = kMlaBranchBlock;
constexpr double kInf = std::numeric_limits<double>::infinity();

float bf16_value(uint16_t b) { return std::bit_cast<float>(uint32_t{b} << 16); }

uint16_t bf16_round(float f) {  // RN-even, as cvt.rn.bf16.f32
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

template <class T>
T load(const uint8_t* p) {  // an unaligned field of a cache row
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Every e4m3 code's value; products and 128-term sums of these are exact in double.
const std::array<double, 256>& e4m3_table() {
  static const std::array<double, 256> t = [] {
    std::array<double, 256> v{};
    for (int c = 0; c < 256; ++c) v[size_t(c)] = attnjit::e4m3_to_float(static_cast<uint8_t>(c));
    return v;
  }();
  return t;
}

// f(i) for i in [0, n) on up to 32 threads, each i on one thread (results do not depend on
// the thread count); the first exception stops the others and is rethrown.
template <class F>
void parallel_for(size_t n, F&& f) {
  const size_t n_threads = std::min<size_t>({std::max(1u, std::thread::hardware_concurrency()), 32, n});
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    try {
      for (size_t i; (i = next.fetch_add(1)) < n;) f(i);
    } catch (...) {
      std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
      next = n;
    }
  };
  std::vector<std::thread> pool;
  for (size_t i = 1; i < n_threads; ++i) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

// x [K] (K a multiple of 128) as a projection kernel sees it: each 128-value group
// quantized on the fly (mla_branch_act_scale), then dequantized exactly: the values its fp8
// wgmma multiplies.
void quantize_activations(const double* x, int k_dim, double* out) {
  const auto& e4m3 = e4m3_table();
  for (int g = 0; g < k_dim; g += kBlk) {
    float amax = 0.0f;
    for (int k = g; k < g + kBlk; ++k) amax = std::fmax(amax, std::fabs(static_cast<float>(x[k])));
    const MlaBranchActScale s = mla_branch_act_scale(amax);
    for (int k = g; k < g + kBlk; ++k)
      out[k] = double(s.sigma) * e4m3[attnjit::e4m3_from_float(s.scaled(static_cast<float>(x[k])))];
  }
}

void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(what);
}

// The 128 × 128 block of element i of a [heads, N, K] weight, as an index of its scales.
size_t block_of(size_t i, int n_dim, int k_dim) {
  const size_t N = size_t(n_dim), K = size_t(k_dim);
  return (i / (N * K) * (N / kBlk) + i / K % N / kBlk) * (K / kBlk) + i % K / kBlk;
}

double dot(const double* a, const double* b, int n) {
  double s = 0.0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// The float64 RMSNorm and RoPE, shared by the row helpers and the whole branch.
void rmsnorm(const double* x, const double* gamma, double epsilon, double* out) {
  const double rinv = 1.0 / std::sqrt(dot(x, x, kLat) / kLat + epsilon);
  for (int k = 0; k < kLat; ++k) out[k] = x[k] * rinv * gamma[k];
}

void rope(const double* x, const float* freqs, double* y) {
  for (int j = 0; j < kRope / 2; ++j) {
    const double c = freqs[2 * j], s = freqs[2 * j + 1], x0 = x[2 * j], x1 = x[2 * j + 1];
    y[2 * j] = x0 * c - x1 * s;
    y[2 * j + 1] = x0 * s + x1 * c;
  }
}

}  // namespace

// ---- 1. the projection ----------------------------------------------------------------------

MlaBranchActScale mla_branch_act_scale(float amax) {
  MlaBranchActScale s;
  const float m = std::fmin(amax, br::kActAmaxCap);
  s.sigma = m / br::kE4M3Max;
  s.zero = amax == 0.0f;
  s.pre = m < 0x1p-60f ? 0x1p64f : 1.0f;
  s.rho = s.zero ? 0.0f : br::kE4M3Max / (m * s.pre);
  return s;
}

MlaActCodesCheck mla_branch_check_act_codes(std::span<const float> rows, std::span<const uint8_t> codes,
                                            std::span<const float> sigma, int k_dim) {
  require(k_dim % kBlk == 0 && rows.size() % size_t(k_dim) == 0 && codes.size() == rows.size() &&
              sigma.size() == rows.size() / kBlk,
          "mla_branch_check_act_codes: rows, codes [n, K] and sigma [n, K / 128]");
  const auto& e4m3 = e4m3_table();
  MlaActCodesCheck c;
  for (size_t g = 0; g < sigma.size(); ++g) {
    const float* x = rows.data() + g * kBlk;
    float amax = 0.0f;
    for (int k = 0; k < kBlk; ++k) amax = std::fmax(amax, std::fabs(x[k]));
    c.zero_rows += amax == 0.0f && g % size_t(k_dim / kBlk) == 0;
    const MlaBranchActScale s = mla_branch_act_scale(amax);
    c.bad_sigma += std::memcmp(&sigma[g], &s.sigma, 4) != 0;
    for (int k = 0; k < kBlk; ++k)
      c.bad_codes += !(e4m3[codes[g * kBlk + size_t(k)]] == e4m3[attnjit::e4m3_from_float(s.scaled(x[k]))]);
  }
  return c;
}

MlaBranchWeightFp8 mla_branch_quantize_weight(std::span<const float> w, int heads, int n_dim, int k_dim) {
  require(heads > 0 && n_dim > 0 && k_dim > 0 && n_dim % kBlk == 0 && k_dim % kBlk == 0 &&
              w.size() == size_t(heads) * n_dim * k_dim,
          "mla_branch_quantize_weight: w must be [heads, N, K] with N, K multiples of 128");
  MlaBranchWeightFp8 q{heads, n_dim, k_dim, std::vector<uint8_t>(w.size()),
                       std::vector<float>(w.size() / (kBlk * kBlk), 0.0f)};
  // The blocks' amax first, then σ_W = amax / 448 (f32), then the codes.
  for (size_t i = 0; i < w.size(); ++i) {
    float& s = q.scale[block_of(i, n_dim, k_dim)];
    s = std::fmax(s, std::fabs(w[i]));
  }
  for (float& s : q.scale) s = s > 0.0f ? s / br::kE4M3Max : 1.0f;
  for (size_t i = 0; i < w.size(); ++i)
    q.codes[i] = attnjit::e4m3_from_float(w[i] / q.scale[block_of(i, n_dim, k_dim)]);
  return q;
}

std::vector<double> mla_branch_dequantize_weight(const MlaBranchWeightFp8& w) {
  require(w.n_dim % kBlk == 0 && w.k_dim % kBlk == 0 && w.codes.size() == size_t(w.heads) * w.n_dim * w.k_dim &&
              w.scale.size() == w.codes.size() / (kBlk * kBlk),
          "mla_branch_dequantize_weight: codes or scales do not match the shape");
  const auto& e4m3 = e4m3_table();
  std::vector<double> out(w.codes.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = e4m3[w.codes[i]] * w.scale[block_of(i, w.n_dim, w.k_dim)];
  return out;  // 4 × 24 mantissa bits: exact
}

MlaBranchProjection mla_branch_project_reference(std::span<const float> a, std::span<const uint8_t> w,
                                                 std::span<const float> w_scale, int tokens, int heads,
                                                 int k_dim, int n_dim) {
  require(tokens >= 0 && heads > 0 && k_dim > 0 && n_dim > 0 && k_dim % kBlk == 0 && n_dim % kBlk == 0,
          "mla_branch_project_reference: K and N must be positive multiples of 128");
  const size_t kb = size_t(k_dim / kBlk), nb = size_t(n_dim / kBlk), K = size_t(k_dim), N = size_t(n_dim);
  require(a.size() == size_t(tokens) * heads * K && w.size() == size_t(heads) * N * K &&
              w_scale.size() == size_t(heads) * nb * kb,
          "mla_branch_project_reference: a [tokens, heads, K], w [heads, N, K], w_scale [heads, N/128, K/128]");
  const size_t n_out = size_t(tokens) * heads * N;
  MlaBranchProjection r{tokens, heads, n_dim, std::vector<double>(n_out), std::vector<double>(n_out),
                        std::vector<double>(n_out)};
  const auto& e4m3 = e4m3_table();

  parallel_for(size_t(tokens) * heads, [&](size_t row) {
    const size_t h = row % size_t(heads);
    const float* x = a.data() + row * K;
    // The kernel's on-the-fly quantization per 128-column group, all in f32.
    std::vector<double> a8(K);
    std::vector<float> sigma(kb);
    for (size_t g = 0; g < kb; ++g) {
      float amax = 0.0f;
      for (size_t k = g * kBlk; k < (g + 1) * kBlk; ++k) amax = std::fmax(amax, std::fabs(x[k]));
      const MlaBranchActScale s = mla_branch_act_scale(amax);
      sigma[g] = s.sigma;
      for (size_t k = g * kBlk; k < (g + 1) * kBlk; ++k) a8[k] = e4m3[attnjit::e4m3_from_float(s.scaled(x[k]))];
    }
    for (size_t n = 0; n < N; ++n) {
      const uint8_t* wr = w.data() + (h * N + n) * K;
      const float* ws = w_scale.data() + (h * nb + n / kBlk) * kb;
      double &out = r.out[row * N + n], &ideal = r.ideal[row * N + n], &mag = r.magnitude[row * N + n];
      for (size_t g = 0; g < kb; ++g) {
        double dot = 0.0, abs_dot = 0.0, ideal_dot = 0.0;
        for (size_t k = g * kBlk; k < (g + 1) * kBlk; ++k) {
          const double wv = e4m3[wr[k]];
          dot += a8[k] * wv;
          abs_dot += std::abs(a8[k] * wv);
          ideal_dot += double(x[k]) * wv;
        }
        out += double(sigma[g]) * ws[g] * dot;
        mag += double(sigma[g]) * ws[g] * abs_dot;
        ideal += ws[g] * ideal_dot;
      }
    }
  });
  return r;
}

// ---- 2. RoPE, RMSNorm and the cache row -----------------------------------------------------

void mla_branch_rope_row(const uint16_t* x, const float* freqs, uint16_t* y) {
  for (int j = 0; j < kRope / 2; ++j) {
    const float x0 = bf16_value(x[2 * j]), x1 = bf16_value(x[2 * j + 1]);
    const float c = freqs[2 * j], s = freqs[2 * j + 1];
    // Each product goes through a volatile f32, so it is rounded to f32 and no compiler can
    // fuse it with the sum (GCC contracts a*b - c*d into an FMA by default on targets that
    // have one, and ignores the FP_CONTRACT pragma).
    volatile float x0c = x0 * c, x1s = x1 * s, x0s = x0 * s, x1c = x1 * c;
    y[2 * j] = bf16_round(x0c - x1s);
    y[2 * j + 1] = bf16_round(x0s + x1c);
  }
}

void mla_branch_rmsnorm_reference(const uint16_t* x, const uint16_t* gamma, float epsilon, double* out) {
  double xd[kLat], gd[kLat];
  for (int k = 0; k < kLat; ++k) xd[k] = bf16_value(x[k]), gd[k] = bf16_value(gamma[k]);
  rmsnorm(xd, gd, epsilon, out);
}

MlaBranchCacheRowRef mla_branch_cache_row_reference(const uint16_t* kv, const float* freqs,
                                                    const uint16_t* gamma, float epsilon) {
  MlaBranchCacheRowRef r;
  mla_branch_rmsnorm_reference(kv, gamma, epsilon, r.latent.data());
  // double → f32 → bf16 may round twice at a tie; R feeds only the encoders (and the
  // R-only comparison), the comparison against this struct uses the exact latent.
  for (int k = 0; k < kLat; ++k) r.bf16[size_t(k)] = bf16_round(static_cast<float>(r.latent[size_t(k)]));
  mla_branch_rope_row(kv + kLat, freqs, r.bf16.data() + kLat);
  return r;
}

int mla_branch_cache_row_bytes(MlaBranchCacheLayout l) { return br::cache_row_bytes(static_cast<int>(l)); }

std::vector<uint8_t> mla_branch_encode_cache_row(MlaBranchCacheLayout layout, const uint16_t* row, float* sigma) {
  std::vector<uint8_t> out(size_t(mla_branch_cache_row_bytes(layout)));
  if (layout == MlaBranchCacheLayout::kBf16) {
    std::memcpy(out.data(), row, out.size());
  } else if (layout == MlaBranchCacheLayout::kFp8Token) {
    require(sigma != nullptr, "mla_branch_encode_cache_row: kFp8Token needs sigma");
    attnjit::mla_fp8_quantize_host(row, 1, 1, out.data(), sigma, kMlaFp8RowBytes);
  } else {
    attnjit::mla_sparse_quantize_row_host(row, out.data());
  }
  return out;
}

void mla_branch_decode_cache_row(MlaBranchCacheLayout layout, const uint8_t* row, float sigma, double* out) {
  const auto& e4m3 = e4m3_table();
  if (layout == MlaBranchCacheLayout::kBf16) {
    for (int k = 0; k < kRow; ++k) out[k] = bf16_value(load<uint16_t>(row + 2 * k));
  } else if (layout == MlaBranchCacheLayout::kFp8Token) {
    for (int k = 0; k < kLat; ++k) out[k] = e4m3[row[k]] * sigma;
    for (int k = 0; k < kRope; ++k) out[kLat + k] = double(bf16_value(load<uint16_t>(row + kLat + 2 * k))) * sigma;
  } else {
    for (int k = 0; k < kLat; ++k) out[k] = e4m3[row[k]] * load<float>(row + kLat + 4 * (k / kBlk));
    for (int k = 0; k < kRope; ++k) out[kLat + k] = bf16_value(load<uint16_t>(row + kLat + 16 + 2 * k));
  }
}

namespace {

// mla_branch_compare_cache_row (the header derives each limit): x [512] the latent
// reference, R [576] the reference's bf16 row (its rope exact), beta the allowed relative
// distance of the device's bf16 latent value from x.
MlaBranchRowComparison compare_row(MlaBranchCacheLayout layout, const uint8_t* gpu, float gpu_sigma,
                                   const double* x, const uint16_t* R, double beta) {
  constexpr double kSub = 0x1p-133;  // bf16's (f32's) smallest subnormal
  const double e4m3_rel = 0x1p-4 * (1.0 + beta) + beta + 0x1p-20;
  MlaBranchRowComparison c;
  c.rows = 1;
  c.sigma_limit = beta + 0x1p-20;
  double d[kRow];
  mla_branch_decode_cache_row(layout, gpu, gpu_sigma, d);
  for (double v : d) c.nonfinite += std::isfinite(v) ? 0 : 1;
  auto check = [&](int i, double want, double limit) {
    const double err = std::abs(d[i] - want);
    const double ratio = std::isnan(err) || (err > 0 && limit == 0) ? kInf : limit > 0 ? err / limit : 0.0;
    if (ratio > c.worst_ratio || c.worst_index < 0) c.worst_ratio = ratio, c.worst_abs_err = err, c.worst_index = i;
  };
  // σ against amax/448 of the exact values (640: floored at ε; 656: 1 for an all-zero block);
  // returns the largest σ the limits admit, which scales the absolute limit.
  auto check_sigma = [&](float got, int k0, int k1, bool floor) {
    double amax = 0.0;
    for (int k = k0; k < k1; ++k) amax = std::max(amax, std::abs(x[k]));
    const double want = floor ? std::max(amax, double(br::kCacheEpsilon)) / br::kE4M3Max
                        : amax > 0 ? amax / br::kE4M3Max : 1.0;
    if (!std::isfinite(got) || !(got > 0.0f)) ++c.nonfinite;
    const double rel = std::abs(got - want) / want;
    c.sigma_rel_err = std::max(c.sigma_rel_err, std::isnan(rel) ? kInf : rel);
    return want * (1.0 + c.sigma_limit);
  };
  auto check_rope_bits = [&](const uint8_t* p) {
    for (int k = 0; k < kRope; ++k) c.rope_mismatches += load<uint16_t>(p + 2 * k) != R[kLat + k] ? 1 : 0;
  };

  if (layout == MlaBranchCacheLayout::kBf16) {
    for (int k = 0; k < kLat; ++k) check(k, x[k], beta * std::abs(x[k]) + kSub);
    check_rope_bits(gpu + 2 * kLat);
  } else if (layout == MlaBranchCacheLayout::kFp8Token) {
    const double s = check_sigma(gpu_sigma, 0, kLat, true);
    for (int k = 0; k < kLat; ++k) check(k, x[k], e4m3_rel * std::abs(x[k]) + 0x1p-10 * s);
    for (int k = kLat; k < kRow; ++k) {
      const double r = bf16_value(R[k]);
      check(k, r, (0x1p-8 + 0x1p-20) * std::abs(r) + kSub * s);  // bf16 RN + the f32 division
    }
  } else {
    for (int b = 0; b < kLat / kBlk; ++b) {
      const double s = check_sigma(load<float>(gpu + kLat + 4 * b), b * kBlk, (b + 1) * kBlk, false);
      for (int k = b * kBlk; k < (b + 1) * kBlk; ++k) check(k, x[k], e4m3_rel * std::abs(x[k]) + 0x1p-10 * s);
    }
    check_rope_bits(gpu + kLat + 16);
  }
  c.passed = c.nonfinite == 0 && c.worst_ratio <= 1.0 && c.sigma_rel_err <= c.sigma_limit && c.rope_mismatches == 0;
  return c;
}

}  // namespace

MlaBranchRowComparison mla_branch_compare_cache_row(MlaBranchCacheLayout layout, const uint8_t* gpu_row,
                                                    float gpu_sigma, const MlaBranchCacheRowRef& ref) {
  // One bf16 rounding (2^-8) plus the device's f32 math: a sum of 512 squares in any order
  // (≤ 512·2^-24 = 2^-15 of the mean, half that on its root), rsqrtf (2 ulp) and two f32
  // products. 2^-12 covers them with room.
  return compare_row(layout, gpu_row, gpu_sigma, ref.latent.data(), ref.bf16.data(), 0x1p-8 + 0x1p-12);
}

MlaBranchRowComparison mla_branch_compare_cache_row(MlaBranchCacheLayout layout, const uint8_t* gpu_row,
                                                    float gpu_sigma, const uint16_t* ref_bf16_row) {
  double x[kLat];
  for (int k = 0; k < kLat; ++k) x[k] = bf16_value(ref_bf16_row[k]);
  return compare_row(layout, gpu_row, gpu_sigma, x, ref_bf16_row, 0x1p-7);
}

void MlaBranchRowComparison::merge(const MlaBranchRowComparison& o, int64_t row_id) {
  if (o.worst_ratio > worst_ratio || (worst_row < 0 && o.worst_index >= 0))
    worst_ratio = o.worst_ratio, worst_abs_err = o.worst_abs_err, worst_index = o.worst_index, worst_row = row_id;
  passed = passed && o.passed;
  rows += o.rows;
  sigma_rel_err = std::max(sigma_rel_err, o.sigma_rel_err);
  sigma_limit = std::max(sigma_limit, o.sigma_limit);
  rope_mismatches += o.rope_mismatches;
  nonfinite += o.nonfinite;
}

std::string MlaBranchRowComparison::summary() const {
  return fmt::format(
      "{}: {} cache rows, worst |err|/limit {:.3g} (|err| {:.3g}) at value {} of row {}, sigma rel err "
      "{:.3g} (limit {:.3g}), rope bit mismatches {}, non-finite {}",
      passed ? "ok" : "FAILED", rows, worst_ratio, worst_abs_err, worst_index, worst_row, sigma_rel_err,
      sigma_limit, rope_mismatches, nonfinite);
}

// ---- 3. the whole branch --------------------------------------------------------------------

namespace {

// Requested rows of one sequence; `last` is the largest token index i among them.
struct Task {
  int b = 0, last = 0;
  std::vector<size_t> slots;
};

void compute_task(const MlaBranchProblem& p, const Task& task, MlaBranchReference& r) {
  const int b = task.b, t0 = p.input_row_offsets[size_t(b)], before = p.cache_lens_before[size_t(b)];
  // keys [before + last + 1, 576]: the old rows, then the sequence's new rows up to `last`.
  std::vector<double> keys(size_t(before + task.last + 1) * kRow);
  for (int pos = 0; pos < before; ++pos) p.old_row(b, pos, keys.data() + size_t(pos) * kRow);
  double gamma[kLat], in[kRow];
  for (int d = 0; d < kLat; ++d) gamma[d] = p.gamma[size_t(d)];
  for (int i = 0; i <= task.last; ++i) {
    for (int d = 0; d < kRow; ++d) in[d] = p.kv_input[size_t(t0 + i) * kRow + size_t(d)];
    double* k = keys.data() + size_t(before + i) * kRow;
    rmsnorm(in, gamma, p.epsilon, k);
    rope(in + kLat, p.freqs_cis.data() + size_t(before + i) * kRope, k + kLat);
  }
  std::vector<double> scores(size_t(before + task.last + 1));
  std::vector<int> positions;  // the keys a row attends: 0 .. visible - 1, or its sparse list
  std::vector<double> extra;   // sparse: the extra cache's keys, [n_extra, 576]
  double q[kRow], raw[kLat];
  for (size_t slot : task.slots) {
    const MlaBranchRow row = r.rows[slot];
    const int visible = before + (row.t - t0) + 1;
    if (p.sparse_positions) {
      positions = p.sparse_positions(row.t);
      for (int pos : positions)
        if (pos < 0 || pos >= visible)
          throw std::invalid_argument(fmt::format(
              "mla_branch_reference: token {} lists position {}, outside its sequence's 0 .. {}", row.t, pos,
              visible - 1));
    } else {
      positions.resize(size_t(visible));
      for (int j = 0; j < visible; ++j) positions[size_t(j)] = j;
    }
    extra.clear();
    if (p.sparse_positions && p.sparse_extra_rows) p.sparse_extra_rows(row.t, extra);
    const size_t n_extra = extra.size() / kRow;
    scores.resize(positions.size() + n_extra);
    const float* qs = p.q.data() + (size_t(row.t) * size_t(p.heads) + size_t(row.h)) * kMlaBranchQDim;
    for (int d = 0; d < kMlaBranchQDim; ++d) in[d] = qs[d];
    const double* wuk = p.w_uk.data() + size_t(row.h) * kLat * kMlaBranchNope;  // [512, 128]
    const double* wuv = p.w_uv.data() + size_t(row.h) * kMlaBranchVDim * kLat;  // [128, 512]
    const size_t n_keys = positions.size() + n_extra;
    auto key = [&](size_t j) {  // the main list's rows, then the extra cache's
      return j < positions.size() ? keys.data() + size_t(positions[j]) * kRow
                                  : extra.data() + (j - positions.size()) * kRow;
    };
    const double sink = p.sink.empty() ? -kInf : double(p.sink[size_t(row.h)]);
    // raw [512] = the softmax-weighted sum of the keys' first 512 dims for the absorbed q
    // [576]: all 0 without keys.
    auto attend = [&](const double* qv, double* raw) {
      double m = -kInf, sum = 0.0;
      for (size_t j = 0; j < n_keys; ++j) {
        scores[j] = dot(qv, key(j), kRow) * p.softmax_scale;
        m = std::max(m, scores[j]);
      }
      m = std::max(m, sink);
      std::fill(raw, raw + kLat, 0.0);
      for (size_t j = 0; j < n_keys; ++j) {
        const double w = std::exp(scores[j] - m);
        const double* k = key(j);
        sum += w;
        for (int d = 0; d < kLat; ++d) raw[d] += w * k[d];
      }
      if (sink > -kInf) sum += std::exp(sink - m);  // the denominator only
      for (int d = 0; d < kLat && n_keys > 0; ++d) raw[d] /= sum;
    };
    auto bf16 = [](double x) { return double(bf16_value(bf16_round(static_cast<float>(x)))); };
    // The ideal chain: nothing quantized or rounded.
    for (int n = 0; n < kLat; ++n) q[n] = dot(in, wuk + size_t(n) * kMlaBranchNope, kMlaBranchNope);
    rope(in + kMlaBranchNope, p.freqs_cis.data() + size_t(visible - 1) * kRope, q + kLat);
    attend(q, raw);
    for (int n = 0; n < kMlaBranchVDim; ++n) r.out[slot * kMlaBranchVDim + size_t(n)] = dot(raw, wuv + size_t(n) * kLat, kLat);
    // The quantized twin: each projection's activations quantized as its kernel does, the
    // absorbed q and the attention output rounded to bf16 where the branch stores them.
    double q8[kLat];
    quantize_activations(in, kMlaBranchNope, q8);
    for (int n = 0; n < kLat; ++n) q[n] = bf16(dot(q8, wuk + size_t(n) * kMlaBranchNope, kMlaBranchNope));
    for (int d = kLat; d < kRow; ++d) q[d] = bf16(q[d]);
    attend(q, raw);
    for (int d = 0; d < kLat; ++d) raw[d] = bf16(raw[d]);
    quantize_activations(raw, kLat, q8);
    for (int n = 0; n < kMlaBranchVDim; ++n) r.twin[slot * kMlaBranchVDim + size_t(n)] = dot(q8, wuv + size_t(n) * kLat, kLat);
    r.keys[slot] = static_cast<int>(n_keys);
  }
}

}  // namespace

MlaBranchReference mla_branch_reference(const MlaBranchProblem& p, std::span<const MlaBranchRow> rows) {
  const char* shape_error =
      "mla_branch_reference: needs q [tokens, h, 192], kv_input [tokens, 576], freqs_cis [max_pos, 64], gamma "
      "[512], w_uk [h, 512, 128], w_uv [h, 128, 512], offsets [batch + 1] rising in [0, tokens], lens [batch] >= 0";
  require(p.tokens >= 0 && p.heads > 0 && p.batch >= 0 && p.max_pos >= 0 &&
              p.q.size() == size_t(p.tokens) * size_t(p.heads) * kMlaBranchQDim &&
              p.kv_input.size() == size_t(p.tokens) * kRow && p.freqs_cis.size() == size_t(p.max_pos) * kRope &&
              p.gamma.size() == size_t(kLat) && p.w_uk.size() == size_t(p.heads) * kLat * kMlaBranchNope &&
              p.w_uv.size() == size_t(p.heads) * kMlaBranchVDim * kLat &&
              p.input_row_offsets.size() == size_t(p.batch) + 1 && p.cache_lens_before.size() == size_t(p.batch),
          shape_error);
  require(p.sink.empty() || p.sink.size() == size_t(p.heads), "mla_branch_reference: sink must be [heads] or empty");
  std::vector<int> seq_of(size_t(p.tokens), -1);
  for (int b = 0; b < p.batch; ++b) {
    const int t0 = p.input_row_offsets[size_t(b)], t1 = p.input_row_offsets[size_t(b) + 1];
    require(t0 >= 0 && t0 <= t1 && t1 <= p.tokens && p.cache_lens_before[size_t(b)] >= 0, shape_error);
    require(p.cache_lens_before[size_t(b)] == 0 || bool(p.old_row),
            "mla_branch_reference: old_row is needed for a sequence with cached rows");
    for (int t = t0; t < t1; ++t) seq_of[size_t(t)] = b;
  }

  MlaBranchReference r;
  r.heads = p.heads;
  if (rows.empty()) {
    for (int t = 0; t < p.tokens; ++t)
      for (int h = 0; h < p.heads && seq_of[size_t(t)] >= 0; ++h) r.rows.push_back({t, h});
  } else {
    r.rows.assign(rows.begin(), rows.end());
  }
  r.out.assign(r.rows.size() * kMlaBranchVDim, std::numeric_limits<double>::quiet_NaN());
  r.twin.assign(r.rows.size() * kMlaBranchVDim, std::numeric_limits<double>::quiet_NaN());
  r.keys.assign(r.rows.size(), 0);

  std::vector<std::vector<size_t>> by_seq(size_t(p.batch));  // row slots per sequence
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const MlaBranchRow row = r.rows[i];
    if (row.t < 0 || row.t >= p.tokens || row.h < 0 || row.h >= p.heads || seq_of[size_t(row.t)] < 0)
      throw std::invalid_argument(fmt::format(
          "mla_branch_reference: row (t {}, h {}) is outside the problem or its token in no sequence", row.t, row.h));
    const int b = seq_of[size_t(row.t)];
    const int64_t pos = int64_t{p.cache_lens_before[size_t(b)]} + row.t - p.input_row_offsets[size_t(b)];
    if (pos >= p.max_pos)
      throw std::invalid_argument(
          fmt::format("mla_branch_reference: token {} is at position {}, past max_pos {}", row.t, pos, p.max_pos));
    by_seq[size_t(b)].push_back(i);
  }
  // Up to 16 rows of one sequence per task, so a few sampled sequences still keep the
  // threads busy; each task reads its keys again, ~2% of 16 rows' dot products.
  constexpr size_t chunk = 16;
  std::vector<Task> tasks;
  for (int b = 0; b < p.batch; ++b) {
    const auto& s = by_seq[size_t(b)];
    for (size_t i = 0; i < s.size(); i += chunk) {
      Task task{b, 0, {s.begin() + ptrdiff_t(i), s.begin() + ptrdiff_t(std::min(i + chunk, s.size()))}};
      for (size_t slot : task.slots) task.last = std::max(task.last, r.rows[slot].t - p.input_row_offsets[size_t(b)]);
      tasks.push_back(std::move(task));
    }
  }
  parallel_for(tasks.size(), [&](size_t i) { compute_task(p, tasks[i], r); });
  return r;
}

namespace {

// Σ g², Σ r², Σ g·r and Σ (g − r)² over the reference's rows.
std::array<double, 4> sums(std::span<const float> gpu, const MlaBranchReference& ref, MlaBranchChain chain) {
  const std::vector<double>& want = chain == MlaBranchChain::kIdeal ? ref.out : ref.twin;
  double gg = 0.0, rr = 0.0, gr = 0.0, diff = 0.0;
  for (size_t i = 0; i < ref.rows.size(); ++i) {
    const size_t at = (size_t(ref.rows[i].t) * size_t(ref.heads) + size_t(ref.rows[i].h)) * kMlaBranchVDim;
    require(at + kMlaBranchVDim <= gpu.size(), "mla_branch_cosine / rel_l2: gpu is smaller than [tokens, heads, 128]");
    for (size_t n = 0; n < kMlaBranchVDim; ++n) {
      const double g = gpu[at + n], r = want[i * kMlaBranchVDim + n];
      gg += g * g, rr += r * r, gr += g * r, diff += (g - r) * (g - r);
    }
  }
  return {gg, rr, gr, diff};
}

}  // namespace

double mla_branch_cosine(std::span<const float> gpu, const MlaBranchReference& ref, MlaBranchChain chain) {
  const auto [gg, rr, gr, diff] = sums(gpu, ref, chain);
  if (std::isnan(gr) || gg == 0.0 || rr == 0.0) return std::isnan(gr) ? gr : gg == 0.0 && rr == 0.0 ? 1.0 : 0.0;
  return gr / std::sqrt(gg * rr);
}

double mla_branch_rel_l2(std::span<const float> gpu, const MlaBranchReference& ref, MlaBranchChain chain) {
  const auto [gg, rr, gr, diff] = sums(gpu, ref, chain);
  if (rr == 0.0) return diff == 0.0 ? 0.0 : std::isnan(diff) ? diff : kInf;
  return std::sqrt(diff / rr);
}

double mla_branch_twin_rel_l2(const MlaBranchReference& ref) {
  double diff = 0.0, rr = 0.0;
  for (size_t i = 0; i < ref.out.size(); ++i) {
    diff += (ref.twin[i] - ref.out[i]) * (ref.twin[i] - ref.out[i]);
    rr += ref.out[i] * ref.out[i];
  }
  return rr == 0.0 ? std::sqrt(diff) : std::sqrt(diff / rr);
}

}  // namespace attnjit::harness
