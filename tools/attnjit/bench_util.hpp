#pragma once
// What every `attnjit bench` measurement shares: the harness's device buffer and CUDA-event
// timing (warm-up, then the median of per-call event pairs; and the same calls captured in
// a CUDA graph, as an engine's decode step runs them).
#include <cuda.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
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

// Median milliseconds per call when `calls` consecutive calls enqueue(i, stream) are
// captured in one CUDA graph and the graph is replayed `iters` times (after `warmup`
// replays): what a call costs inside an engine's captured step. A lone call's event pair
// also times the GPU's launch of its first kernel and the gaps between its kernels; inside
// a graph the launches are prepared once and PDL edges let a kernel start under the one
// before. Inputs rotate as in median_ms (call i reads copy i % copies).
template <class Fn>
double graph_median_ms(int calls, int warmup, int iters, Fn&& enqueue) {
  const driver::Api& api = driver::api();
  CUstream stream;
  ATTNJIT_CU(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
  CUgraph graph = nullptr;
  ATTNJIT_CU(cuStreamBeginCapture, stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  try {
    for (int i = 0; i < calls; ++i) enqueue(i, stream);
  } catch (...) {
    // End the capture (discarding it) so the stream can be destroyed, then report.
    if (api.cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS && graph) api.cuGraphDestroy(graph);
    api.cuStreamDestroy(stream);
    throw;
  }
  ATTNJIT_CU(cuStreamEndCapture, stream, &graph);
  CUgraphExec exec;
  ATTNJIT_CU(cuGraphInstantiate, &exec, graph, 0);
  for (int i = 0; i < warmup; ++i) ATTNJIT_CU(cuGraphLaunch, exec, stream);
  std::vector<CUevent> ev(static_cast<size_t>(2 * iters));
  for (auto& e : ev) ATTNJIT_CU(cuEventCreate, &e, CU_EVENT_DEFAULT);
  for (int i = 0; i < iters; ++i) {
    ATTNJIT_CU(cuEventRecord, ev[2 * static_cast<size_t>(i)], stream);
    ATTNJIT_CU(cuGraphLaunch, exec, stream);
    ATTNJIT_CU(cuEventRecord, ev[2 * static_cast<size_t>(i) + 1], stream);
  }
  ATTNJIT_CU(cuEventSynchronize, ev.back());
  std::vector<float> ms(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i)
    ATTNJIT_CU(cuEventElapsedTime, &ms[static_cast<size_t>(i)], ev[2 * static_cast<size_t>(i)],
               ev[2 * static_cast<size_t>(i) + 1]);
  for (auto& e : ev) api.cuEventDestroy(e);
  api.cuGraphExecDestroy(exec);
  api.cuGraphDestroy(graph);
  api.cuStreamDestroy(stream);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] / calls;
}

}  // namespace attnjit::cli
