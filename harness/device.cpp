#include "harness/device.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "attnjit/error.hpp"
#include "driver/driver.hpp"

namespace attnjit::harness {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  ATTNJIT_CU(cuMemAlloc, &ptr_, bytes == 0 ? 1 : bytes);
}
DeviceBuffer::~DeviceBuffer() {
  if (ptr_) driver::api().cuMemFree(ptr_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
  o.ptr_ = 0;
  o.bytes_ = 0;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  std::swap(ptr_, o.ptr_);
  std::swap(bytes_, o.bytes_);
  return *this;
}
void DeviceBuffer::upload(const void* host, size_t n) {
  if (n > bytes_) fail_arg("n", fmt::format("{} B do not fit a {} B buffer", n, bytes_));
  ATTNJIT_CU(cuMemcpyHtoD, ptr_, host, n);
}
void DeviceBuffer::download(void* host, size_t n) const {
  if (n > bytes_) fail_arg("n", fmt::format("{} B are more than the {} B buffer holds", n, bytes_));
  ATTNJIT_CU(cuMemcpyDtoH, host, ptr_, n);
}
void DeviceBuffer::fill_byte(uint8_t value) {
  ATTNJIT_CU(cuMemsetD8Async, ptr_, value, bytes_, nullptr);
  synchronize();
}

void synchronize() { ATTNJIT_CU(cuCtxSynchronize); }

uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7FC0;
  u += 0x7FFF + ((u >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}
float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_f16(float f) {
  // Via the exact bit manipulation of IEEE binary16 with round-to-nearest-even.
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t abs = x & 0x7FFFFFFF;
  if (abs > 0x7F800000) return static_cast<uint16_t>(sign | 0x7E00);  // NaN
  if (abs >= 0x477FF000) return static_cast<uint16_t>(sign | 0x7C00);  // overflow → inf
  if (abs < 0x38800000) {  // subnormal half (or zero)
    const float a = std::fabs(f) * 16777216.0f;  // / 2^-24
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a)));
  }
  uint32_t mant = abs & 0x7FFFFF;
  uint32_t exp = (abs >> 23) - 112;
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}
float f16_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  float out;
  if (exp == 0) {
    out = std::ldexp(static_cast<float>(mant), -24);
    if (sign) out = -out;
    return out;
  }
  if (exp == 31) {
    uint32_t u = sign | 0x7F800000 | (mant << 13);
    std::memcpy(&out, &u, 4);
    return out;
  }
  uint32_t u = sign | ((exp + 112) << 23) | (mant << 13);
  std::memcpy(&out, &u, 4);
  return out;
}

float e4m3_to_float(uint8_t v) {
  const int sign = v >> 7, exp = (v >> 3) & 0xF, mant = v & 7;
  if (exp == 15 && mant == 7) return NAN;
  float mag = exp == 0 ? std::ldexp(static_cast<float>(mant), -9)
                       : std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
  return sign ? -mag : mag;
}
uint8_t float_to_e4m3(float f) {
  // Nearest representable value by search: slow but exact, fine for test inputs.
  if (std::isnan(f)) return 0x7F;
  uint8_t best = 0;
  float best_err = INFINITY;
  for (int v = 0; v < 256; ++v) {
    if ((v & 0x7F) == 0x7F) continue;
    float e = std::fabs(e4m3_to_float(static_cast<uint8_t>(v)) - f);
    if (e < best_err) {
      best_err = e;
      best = static_cast<uint8_t>(v);
    }
  }
  return best;
}

int copies_out_of_l2(size_t bytes_per_copy, size_t l2_bytes, int max_copies) {
  const size_t want = 4 * l2_bytes;
  return static_cast<int>(std::clamp<size_t>((want + bytes_per_copy - 1) / std::max<size_t>(1, bytes_per_copy), 1,
                                             static_cast<size_t>(std::max(1, max_copies))));
}

}  // namespace attnjit::harness
