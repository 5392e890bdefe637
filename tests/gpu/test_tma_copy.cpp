// tma_copy on the GPU: bit-exact for every swizzle mode and dtype size, shapes that are
// not multiples of the tile, strided rows, bytes outside the view untouched, and a CUDA
// graph replay. Argument errors need no GPU: tests/cpu/test_tma_copy_args.cpp.
#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "attnjit/ops/tma_copy.hpp"
#include "driver/driver.hpp"
#include "jit/launch_count.hpp"
#include "support/catch.hpp"
#include "support/gpu.hpp"

using namespace attnjit;
using test::DeviceBuffer;

namespace {

std::vector<uint8_t> random_bytes(size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(test::rng()());
  return v;
}

// Copies a rows × cols view whose rows are `ld` elements apart in both tensors and
// checks the view bit for bit and the padding between rows untouched.
void check_copy(const TmaCopyConfig& config, int64_t rows, int64_t cols, int64_t ld) {
  INFO(fmt::format("config {} shape {}x{} ld {}", config.describe(), rows, cols, ld));
  const int64_t eb = dtype_bytes(config.dtype);
  const size_t bytes = static_cast<size_t>(rows * ld * eb);
  const std::vector<uint8_t> src_host = random_bytes(bytes);
  DeviceBuffer src(bytes), dst(bytes);
  src.upload(src_host);
  dst.fill_byte(0xA5);  // poison: every byte of the view must be overwritten
  const TensorView s = TensorView::strided(src.data(), config.dtype, {rows, cols}, {ld, 1});
  const TensorView d = TensorView::strided(dst.data(), config.dtype, {rows, cols}, {ld, 1});
  const uint64_t launches = jit::launch_count();
  tma_copy({.dst = d, .src = s}, nullptr, &config);
  // One copy, one kernel: the counter REQUIRE_REFUSED reads sees real launches.
  CHECK(jit::launch_count() == launches + 1);
  test::synchronize();
  const std::vector<uint8_t> out = dst.download_as<uint8_t>(bytes);
  size_t wrong = 0, padding_touched = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < ld * eb; ++c) {
      const size_t i = static_cast<size_t>(r * ld * eb + c);
      if (c < cols * eb) wrong += out[i] != src_host[i];
      else padding_touched += out[i] != 0xA5;
    }
  CHECK(wrong == 0);
  CHECK(padding_touched == 0);
}

}  // namespace

TEST_CASE("tma_copy is bit-exact for every swizzle mode and odd shapes", "[gpu][tma_copy]") {
  if (!test::gpu_or_skip()) return;
  for (DType dtype : {DType::kBF16, DType::kE4M3}) {
    for (Swizzle sw : {Swizzle::kNone, Swizzle::k32B, Swizzle::k64B, Swizzle::k128B}) {
      TmaCopyConfig c = tma_copy_default_config(dtype);
      c.swizzle = sw;
      const int64_t align = 16 / dtype_bytes(dtype);  // row strides are 16-byte multiples
      check_copy(c, 1, align, align);                     // a single short row
      check_copy(c, 37, 3 * align, 3 * align);            // smaller than one tile
      check_copy(c, 1000, 125 * align, 125 * align);      // not a multiple of the tile
      check_copy(c, 513, 97 * align, 128 * align);        // strided rows (padding kept)
      check_copy(c, 4096, 4096, 4096);                    // many tiles per CTA
    }
  }
}

TEST_CASE("tma_copy tile shapes and stage counts", "[gpu][tma_copy]") {
  if (!test::gpu_or_skip()) return;
  const std::vector<TmaCopyConfig> configs = {
      {DType::kBF16, 8, 64, 1, Swizzle::k128B},     // one stage: load/store serialized
      {DType::kBF16, 64, 16, 2, Swizzle::k32B},     // one 32B span per row
      {DType::kBF16, 256, 128, 2, Swizzle::k128B},  // two boxes per tile, 64 KiB stages
      {DType::kF32, 32, 64, 8, Swizzle::kNone},     // 256 B unswizzled rows, deep ring
      {DType::kE4M3, 128, 512, 3, Swizzle::k64B},   // eight 64B boxes per row
  };
  for (const TmaCopyConfig& c : configs) check_copy(c, 777, 2048 / dtype_bytes(c.dtype) - 16 / dtype_bytes(c.dtype), 2048 / dtype_bytes(c.dtype));
}

TEST_CASE("tma_copy replays from a CUDA graph after its plan", "[gpu][tma_copy][graph]") {
  if (!test::gpu_or_skip()) return;
  const driver::Api& api = driver::api();
  const int64_t rows = 300, cols = 512;
  const size_t bytes = rows * cols * 2;
  DeviceBuffer src(bytes), dst(bytes);
  const TmaCopyConfig c = tma_copy_default_config(DType::kBF16);
  CUstream stream;
  ATTNJIT_CU(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
  const TmaCopyArgs a{.dst = TensorView::contiguous(dst.data(), DType::kBF16, {rows, cols}),
                      .src = TensorView::contiguous(src.data(), DType::kBF16, {rows, cols})};
  const TmaCopyPlan plan = tma_copy_plan(tma_copy_shape(a), &c);  // compiles and loads: not in the capture
  CHECK(plan.workspace_bytes == 0);
  ATTNJIT_CU(cuStreamBeginCapture, stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
  tma_copy_schedule(plan, a, {}, stream);
  tma_copy(a, plan, {}, stream);
  CUgraph graph;
  ATTNJIT_CU(cuStreamEndCapture, stream, &graph);
  CUgraphExec exec;
  ATTNJIT_CU(cuGraphInstantiate, &exec, graph, 0);
  for (int round = 0; round < 3; ++round) {  // new data each replay, same graph
    const std::vector<uint8_t> host = random_bytes(bytes);
    src.upload(host);
    dst.fill_byte(0);
    ATTNJIT_CU(cuGraphLaunch, exec, stream);
    ATTNJIT_CU(cuStreamSynchronize, stream);
    CHECK(dst.download_as<uint8_t>(bytes) == host);
  }
  api.cuGraphExecDestroy(exec);
  api.cuGraphDestroy(graph);
  api.cuStreamDestroy(stream);
}
