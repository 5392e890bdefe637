#pragma once
// What every `attnjit bench` measurement shares: the harness's device buffer and CUDA-event
// timing (warm-up, then the median of per-call event pairs).
#include <cuda.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "attnjit/types.hpp"
#include "driver/driver.hpp"
#include "harness/device.hpp"

namespace attnjit::cli {

// The harness library's device buffer and conversions (harness/device.hpp): the benches
// build the inputs the float64 references see exactly, as the tests do.
using Buffer = harness::DeviceBuffer;
using harness::from_bits;
using harness::to_bits;

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
