#pragma once
// Host-side input values for the GPU tests: a cheap N(0,1)-ish generator for 100M-value
// caches and a chunked upload of rounded floats (to_bits / from_bits: harness/device.hpp).
#include <cuda.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "attnjit/types.hpp"
#include "driver/driver.hpp"
#include "support/harness.hpp"

namespace attnjit::test {

// Irwin–Hall(4) rescaled to mean 0, variance 1: N(0,1)-ish, cheap enough for 100M values.
// Exact zeros are rare (and harmless): the point is that no buffer is left as all zeros.
class FastNormal {
 public:
  explicit FastNormal(uint64_t seed) : state_(seed) {}
  float operator()() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);  // splitmix64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float sum =
        static_cast<float>((z & 0xFFFF) + ((z >> 16) & 0xFFFF) + ((z >> 32) & 0xFFFF) + (z >> 48));
    return (sum / 65535.0f - 2.0f) * 1.7320508f;
  }

 private:
  uint64_t state_;
};

// Uploads floats (already representable in `dtype`) as 16-bit values, in chunks so that a
// long cache or sequence never needs a second full-size host copy.
inline void upload_rounded(const DeviceBuffer& dst, const std::vector<float>& src, DType dtype) {
  constexpr size_t kChunk = size_t{1} << 22;
  std::vector<uint16_t> bits(std::min(kChunk, src.size()));
  for (size_t off = 0; off < src.size(); off += kChunk) {
    const size_t n = std::min(kChunk, src.size() - off);
    for (size_t i = 0; i < n; ++i) bits[i] = to_bits(src[off + i], dtype);
    ATTNJIT_CU(cuMemcpyHtoD, dst.ptr() + off * 2, bits.data(), n * 2);
  }
}

}  // namespace attnjit::test
