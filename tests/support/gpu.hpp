#pragma once
// Shared helpers for [gpu] tests: device selection with the skip/fail rule, RAII device
// buffers, and host-side float conversions for reference computations.
#include <cuda.h>

#include <cstdint>
#include <random>
#include <vector>

namespace attnjit::test {

// True when a GPU is usable (and makes device 0 current). Otherwise: when
// ATTNJIT_REQUIRE_GPU=1 (the GPU machine script) the test FAILS; elsewhere it prints a
// visible "SKIPPED (no GPU)" warning and returns false. Use as:
//   if (!attnjit::test::gpu_or_skip()) return;
bool gpu_or_skip();

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
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

// Round-to-nearest-even conversions (host side, for references and inputs).
uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t h);
uint16_t float_to_f16(float f);
float f16_to_float(uint16_t h);
uint8_t float_to_e4m3(float f);  // saturating to ±448
float e4m3_to_float(uint8_t v);

// A generator seeded from ATTNJIT_TEST_SEED or the clock; the seed is printed so a
// failure can be replayed.
std::mt19937_64& rng();

}  // namespace attnjit::test
