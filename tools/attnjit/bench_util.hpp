#pragma once
// What every `attnjit bench` measurement shares: an owning device buffer and CUDA-event
// timing (warm-up, then the median of per-call event pairs).
#include <cuda.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "attnjit/types.hpp"
#include "driver/driver.hpp"

namespace attnjit::cli {

struct Buffer {
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
  explicit Buffer(size_t n) : bytes(n) { ATTNJIT_CU(cuMemAlloc, &ptr, n == 0 ? 1 : n); }
  ~Buffer() {
    if (ptr) driver::api().cuMemFree(ptr);
  }
  Buffer(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : ptr(o.ptr), bytes(o.bytes) { o.ptr = 0; }
  void* data() const { return reinterpret_cast<void*>(ptr); }
};

// bf16 / f16 bits of a float (round to nearest even; inputs are finite) and back: how
// the benches build inputs the float64 references see exactly.
inline uint16_t to_bits(float x, DType dtype) {
  if (dtype == DType::kF16) return std::bit_cast<uint16_t>(static_cast<_Float16>(x));
  uint32_t u = std::bit_cast<uint32_t>(x);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
inline float from_bits(uint16_t b, DType dtype) {
  if (dtype == DType::kF16) return static_cast<float>(std::bit_cast<_Float16>(b));
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// Median milliseconds of `iters` event-timed calls of fn(i), after `warmup` calls.
template <class Fn>
double median_ms(int warmup, int iters, Fn&& fn) {
  const driver::Api& api = driver::api();
  for (int i = 0; i < warmup; ++i) fn(i);
  std::vector<CUevent> ev(static_cast<size_t>(2 * iters));
  for (auto& e : ev) ATTNJIT_CU(cuEventCreate, &e, CU_EVENT_DEFAULT);
  for (int i = 0; i < iters; ++i) {
    ATTNJIT_CU(cuEventRecord, ev[2 * static_cast<size_t>(i)], nullptr);
    fn(warmup + i);
    ATTNJIT_CU(cuEventRecord, ev[2 * static_cast<size_t>(i) + 1], nullptr);
  }
  ATTNJIT_CU(cuEventSynchronize, ev.back());
  std::vector<float> ms(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i)
    ATTNJIT_CU(cuEventElapsedTime, &ms[static_cast<size_t>(i)], ev[2 * static_cast<size_t>(i)],
               ev[2 * static_cast<size_t>(i) + 1]);
  for (auto& e : ev) api.cuEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace attnjit::cli
