#pragma once
// What every `attnjit bench` measurement shares: the harness's device buffer and CUDA-event
// timing (warm-up, then the median of per-call event pairs; and the same calls captured in
// a CUDA graph, as an engine's decode step runs them).
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

// The median milliseconds of `iters` event pairs recorded on `stream`, pair i around timed(i).
template <class Fn>
double median_event_ms(int iters, CUstream stream, Fn&& timed) {
  struct Events {  // destroyed on every way out
    std::vector<CUevent> v;
    ~Events() {
      for (CUevent e : v) driver::api().cuEventDestroy(e);
    }
  } ev;
  for (int i = 0; i < 2 * iters; ++i) {
    CUevent e;
    ATTNJIT_CU(cuEventCreate, &e, CU_EVENT_DEFAULT);
    ev.v.push_back(e);
  }
  for (int i = 0; i < iters; ++i) {
    ATTNJIT_CU(cuEventRecord, ev.v[2 * static_cast<size_t>(i)], stream);
    timed(i);
    ATTNJIT_CU(cuEventRecord, ev.v[2 * static_cast<size_t>(i) + 1], stream);
  }
  ATTNJIT_CU(cuEventSynchronize, ev.v.back());
  std::vector<float> ms(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i)
    ATTNJIT_CU(cuEventElapsedTime, &ms[static_cast<size_t>(i)], ev.v[2 * static_cast<size_t>(i)],
               ev.v[2 * static_cast<size_t>(i) + 1]);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Median milliseconds of `iters` event-timed calls of fn(i) on the null stream, after
// `warmup` calls.
template <class Fn>
double median_ms(int warmup, int iters, Fn&& fn) {
  for (int i = 0; i < warmup; ++i) fn(i);
  return median_event_ms(iters, nullptr, [&](int i) { fn(warmup + i); });
}

// Median milliseconds per call when `calls` consecutive calls enqueue(i, stream) are
// captured in one CUDA graph and the graph is replayed `iters` times (after `warmup`
// replays): what a call costs inside an engine's captured step. A lone call's event pair
// also times the GPU's launch of its first kernel and the gaps between its kernels; inside
// a graph the launches are prepared once and PDL edges let a kernel start under the one
// before. Inputs rotate as in median_ms (call i reads copy i % copies).
template <class Fn>
double graph_median_ms(int calls, int warmup, int iters, Fn&& enqueue) {
  struct Captured {  // the stream, its captured graph and the graph's executable
    CUstream stream = nullptr;
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    ~Captured() {
      const driver::Api& api = driver::api();
      if (exec) api.cuGraphExecDestroy(exec);
      if (graph) api.cuGraphDestroy(graph);
      if (stream) api.cuStreamDestroy(stream);
    }
  } g;
  ATTNJIT_CU(cuStreamCreate, &g.stream, CU_STREAM_NON_BLOCKING);
  ATTNJIT_CU(cuStreamBeginCapture, g.stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  try {
    for (int i = 0; i < calls; ++i) enqueue(i, g.stream);
  } catch (...) {
    driver::api().cuStreamEndCapture(g.stream, &g.graph);  // ends (discards) the capture
    throw;
  }
  ATTNJIT_CU(cuStreamEndCapture, g.stream, &g.graph);
  ATTNJIT_CU(cuGraphInstantiate, &g.exec, g.graph, 0);
  for (int i = 0; i < warmup; ++i) ATTNJIT_CU(cuGraphLaunch, g.exec, g.stream);
  return median_event_ms(iters, g.stream, [&](int) { ATTNJIT_CU(cuGraphLaunch, g.exec, g.stream); }) / calls;
}

}  // namespace attnjit::cli
