#pragma once
// What the tests, `attnjit bench` and the tune worker share to build a problem on the GPU
// and judge it on the host: one owning device buffer, and the host-side conversions
// between float and the kernels' 16- and 8-bit input types (round to nearest even), so a
// float64 reference sees exactly the values the GPU reads.
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "attnjit/types.hpp"

namespace attnjit::harness {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);  // cuMemAlloc on the current context
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr ptr() const { return ptr_; }
  void* data() const { return reinterpret_cast<void*>(ptr_); }
  size_t bytes() const { return bytes_; }

  void upload(const void* host, size_t n);  // n ≤ bytes()
  void download(void* host, size_t n) const;
  void fill_byte(uint8_t value);            // e.g. 0xFF poisons floats as NaN

  template <class T>
  void upload(const std::vector<T>& v) { upload(v.data(), v.size() * sizeof(T)); }
  template <class T>
  std::vector<T> download_as(size_t count) const {
    std::vector<T> out(count);
    download(out.data(), count * sizeof(T));
    return out;
  }

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

void synchronize();  // cuCtxSynchronize, checked

// Input copies so that consecutive calls never find theirs in L2 (4 × L2 in all), 1..max:
// the benchmarks rotate over them.
int copies_out_of_l2(size_t bytes_per_copy, size_t l2_bytes, int max_copies);

uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t h);
uint16_t float_to_f16(float f);
float f16_to_float(uint16_t h);
uint8_t float_to_e4m3(float f);  // saturating to ±448
float e4m3_to_float(uint8_t v);

// The bits of x in `dtype` (bf16 or f16) and back.
inline uint16_t to_bits(float x, DType dtype) {
  return dtype == DType::kF16 ? float_to_f16(x) : float_to_bf16(x);
}
inline float from_bits(uint16_t b, DType dtype) {
  return dtype == DType::kF16 ? f16_to_float(b) : bf16_to_float(b);
}

}  // namespace attnjit::harness
