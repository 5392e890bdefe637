#include "harness/mla_fp8_reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "attnjit/ops/mla_decode_fp8.hpp"

namespace attnjit::harness {

std::vector<float> mla_fp8_dequantize(std::span<const uint8_t> data, std::span<const float> sigma,
                                      int64_t rows_per_sigma, int row_bytes) {
  if ((row_bytes != 640 && row_bytes != 576) || data.size() % static_cast<size_t>(row_bytes) != 0 ||
      rows_per_sigma < 1)
    throw std::invalid_argument("mla_fp8_dequantize: rows of 640 or 576 bytes, rows_per_sigma >= 1");
  const size_t rows = data.size() / static_cast<size_t>(row_bytes);
  if (sigma.size() * static_cast<size_t>(rows_per_sigma) < rows)
    throw std::invalid_argument("mla_fp8_dequantize: one sigma per rows_per_sigma rows");
  std::vector<float> out(rows * 576);
  for (size_t r = 0; r < rows; ++r) {
    const uint8_t* row = data.data() + r * static_cast<size_t>(row_bytes);
    const float s = sigma[r / static_cast<size_t>(rows_per_sigma)];
    float* dst = out.data() + r * 576;
    if (row_bytes == 576) {
      for (int k = 0; k < 576; ++k) dst[k] = e4m3_to_float(row[k]) * s;
      continue;
    }
    for (int k = 0; k < 512; ++k) dst[k] = e4m3_to_float(row[k]) * s;
    for (int k = 0; k < 64; ++k) {
      uint16_t b;
      std::memcpy(&b, row + 512 + 2 * k, 2);
      const uint32_t u = uint32_t{b} << 16;
      float f;
      std::memcpy(&f, &u, 4);
      dst[512 + k] = f * s;
    }
  }
  return out;
}

MlaCompareLimits mla_fp8_limits(const MlaReference& ref, Fp8Kernel kernel, int score_chain) {
  MlaCompareLimits limits;  // mla_decode's rel_l2 and row limits for the widening kernel
  const bool fp8_mma = kernel == Fp8Kernel::kFp8Mma || kernel == Fp8Kernel::kNarrow;
  if (fp8_mma) {
    // e4m3 keeps 3 mantissa bits: P' and q's content carry relative errors up to 2^-4.
    // In a peaked row (score magnitude 30: one key holds most of the weight) the output
    // is that key's V, whose largest |v| reaches ~4x the row's RMS, so P' alone moves an
    // element by 2^-4 * 4 = 0.25 RMS; q's rounding shifts the scores of the few keys that
    // share the weight on top of that (seed 419634390315 measured 0.281). The rel L2 over
    // all rows stays the tight check.
    // Q·Kᵀ's truncations on top, growing with the scores (the header's term; m = the
    // largest finite |lse|).
    const int chain = kernel == Fp8Kernel::kNarrow ? score_chain : 1;
    limits.rel_l2 = 4e-2;
    limits.row_max_err = 0.4 + 1e-4 * chain * (mla_lse_limit(ref.lse, 1.0) - 1e-3);
  }
  limits.lse_abs = mla_lse_limit(ref.lse, fp8_mma ? 5e-4 : 4e-6);
  return limits;
}

}  // namespace attnjit::harness
