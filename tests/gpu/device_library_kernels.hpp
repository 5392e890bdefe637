#pragma once
// The device-library test kernels (kernel_templates/testing/) as the host sees them,
// shared by test_device_library.cpp (runs them on the GPU) and
// test_device_library_sass.cpp (compiles them and reads their SASS): each family's
// host twin of its params, its cases, and its recipe.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "attnjit/tma.hpp"
#include "attnjit/types.hpp"
#include "driver/driver.hpp"
#include "jit/kernel_table.hpp"
#include "support/catch.hpp"
#include "support/gpu.hpp"
#include "support/sass.hpp"

namespace attnjit::test::device_lib {

// Test-family op ids for these kernels: >= 1100.
inline constexpr uint32_t kMulticastOpId = 1100;
inline constexpr uint32_t kWsPipelineOpId = 1101;
inline constexpr uint32_t kPvFragmentOpId = 1102;
inline constexpr uint32_t kPdlPrimaryOpId = 1103;
inline constexpr uint32_t kPdlDependentOpId = 1104;

inline uint32_t round_up(uint32_t x, uint32_t to) { return (x + to - 1) / to * to; }

// A recipe for a kernel template whose params struct has int fields only.
inline jit::KernelRecipe int_recipe(const char* op, const char* header, const char* kernel,
                             const char* params_type,
                             const std::vector<std::pair<const char*, int>>& fields,
                             unsigned dynamic_smem) {
  jit::KernelRecipe r;
  r.source.op = op;
  r.source.header = header;
  r.source.kernel = kernel;
  r.source.params_type = params_type;
  std::string json = "{";
  for (const auto& [name, value] : fields) {
    r.source.args.push_back({name, std::to_string(value)});
    json += fmt::format("{}\"{}\":{}", json.size() > 1 ? "," : "", name, value);
  }
  r.source.config_json = json + "}";
  r.options.arch = kSm90a;
  r.dynamic_smem_bytes = dynamic_smem;
  return r;
}

// Random bf16 bit patterns of values in [-1, 1].
inline std::vector<uint16_t> random_bf16(size_t count) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<uint16_t> v(count);
  for (auto& x : v) x = test::float_to_bf16(uniform(test::rng()));
  return v;
}

inline TmaDescriptor map_2d(const test::DeviceBuffer& buf, DType t, int64_t rows, int64_t cols,
                     uint32_t box_rows, uint32_t box_cols, Swizzle sw, const char* name) {
  TmaMapSpec spec;
  spec.tensor = TensorView::contiguous(buf.data(), t, {rows, cols});
  spec.box[0] = box_rows;
  spec.box[1] = box_cols;
  spec.swizzle = sw;
  return encode_tma(spec, name);
}

// =========================================================================================
// 1. TMA multicast in a 2-CTA cluster (testing/tma_multicast.cuh)
// =========================================================================================

// Host twin of attnjit::testing::TmaMulticastParams, field for field.
struct TmaMulticastParams {
  int32_t rank;          // 2 or 3: tensor-map rank / multicast load flavour
  int32_t rows;          // tile rows (each CTA loads half)
  int32_t cols;          // tile columns, bf16
  int32_t swizzle;       // 0, 32, 64, 128 (bytes)
  int32_t stages;        // ring depth
  int32_t split_expect;  // 1: expect_tx + arrive
};
static_assert(std::has_unique_object_representations_v<TmaMulticastParams>);

inline const std::vector<TmaMulticastParams>& multicast_cases() {
  static const std::vector<TmaMulticastParams> list = {
      {2, 128, 64, 128, 2, 0},  // 128B swizzle, one box per half
      {2, 64, 128, 64, 3, 1},   // 64B swizzle, 4 boxes per half, split expect-tx
      {3, 128, 64, 128, 4, 0},  // 3-D map
      {3, 32, 64, 32, 1, 1},    // 32B swizzle, one stage (every tile waits on the peer)
      {2, 256, 64, 0, 2, 0},    // no swizzle, 128-row halves
      {2, 16, 64, 128, 8, 0},   // 8-row halves (one swizzle atom), deep ring
      {3, 512, 64, 128, 2, 1},  // 256-row halves: the largest box
  };
  return list;
}

inline std::string describe(const TmaMulticastParams& p) {
  return fmt::format("multicast {}d tile {}x{} swizzle {} stages {}{}", p.rank, p.rows, p.cols,
                     p.swizzle, p.stages, p.split_expect ? " split-expect" : "");
}

inline uint32_t multicast_tile_bytes(const TmaMulticastParams& p) {
  return static_cast<uint32_t>(p.rows * p.cols * 2);
}

// Mirrors kTmaMulticastSmemBytes: tiles (1024-aligned, whole KiB) + 2·stages barriers,
// rounded to the struct's 1024 alignment, + 1024 realignment slack.
inline unsigned multicast_smem_bytes(const TmaMulticastParams& p) {
  const uint32_t s = static_cast<uint32_t>(p.stages);
  return round_up(s * multicast_tile_bytes(p) + 16u * s, 1024) + 1024;
}

inline jit::KernelRecipe multicast_recipe(const TmaMulticastParams& p) {
  return int_recipe("test_tma_multicast", "testing/tma_multicast.cuh",
                    "attnjit::testing::tma_multicast_kernel",
                    "attnjit::testing::TmaMulticastParams",
                    {{"rank", p.rank},
                     {"rows", p.rows},
                     {"cols", p.cols},
                     {"swizzle", p.swizzle},
                     {"stages", p.stages},
                     {"split_expect", p.split_expect}},
                    multicast_smem_bytes(p));
}

// =========================================================================================
// 2. Warp-specialized producer/consumer pipeline (testing/ws_pipeline.cuh)
// =========================================================================================

struct WsPipelineParams {
  int32_t n;         // C columns: 64 or 128
  int32_t stages;    // ring depth
  int32_t pingpong;  // consumers alternate through named barriers
};
static_assert(std::has_unique_object_representations_v<WsPipelineParams>);

inline const std::vector<WsPipelineParams>& ws_cases() {
  static const std::vector<WsPipelineParams> list = {
      {64, 1, 0},   // one stage: producer and consumers strictly alternate
      {64, 2, 1},   //
      {64, 3, 0},   //
      {64, 7, 1},   // deep ring, odd depth
      {128, 2, 0},  //
      {128, 3, 1},  //
      {128, 4, 1},  //
  };
  return list;
}

inline std::string describe(const WsPipelineParams& p) {
  return fmt::format("ws_pipeline n={} stages={}{}", p.n, p.stages, p.pingpong ? " pingpong" : "");
}

// Mirrors kWsPipelineSmemBytes: A ring, B ring, f32 C staging, 2·stages barriers.
inline unsigned ws_smem_bytes(const WsPipelineParams& p) {
  const uint32_t s = static_cast<uint32_t>(p.stages), n = static_cast<uint32_t>(p.n);
  const uint32_t used = s * 128u * 128u + s * n * 128u + 128u * n * 4u + 16u * s;
  return round_up(used, 1024) + 1024;
}

inline jit::KernelRecipe ws_recipe(const WsPipelineParams& p) {
  return int_recipe("test_ws_pipeline", "testing/ws_pipeline.cuh",
                    "attnjit::testing::ws_pipeline_kernel", "attnjit::testing::WsPipelineParams",
                    {{"n", p.n}, {"stages", p.stages}, {"pingpong", p.pingpong}},
                    ws_smem_bytes(p));
}

// =========================================================================================
// 3. Accumulators → RS A fragment: C2 = 16-bit(A·Bᵀ) · V (testing/pv_fragment.cuh)
// =========================================================================================

struct PvFragmentParams {
  int32_t k1;          // first GEMM reduction
  int32_t n1;          // S columns = second GEMM K
  int32_t n2;          // C2 columns
  int32_t v_mn_major;  // 1: V [N1, N2]; 0: Vᵀ [N2, N1]
  int32_t f16;         // 1: f16; 0: bf16
};
static_assert(std::has_unique_object_representations_v<PvFragmentParams>);

inline const std::vector<PvFragmentParams>& pv_cases() {
  static const std::vector<PvFragmentParams> list = {
      {64, 64, 64, 1, 0},     // the FA3 shape: V MN-major
      {128, 128, 128, 1, 0},  //
      {64, 128, 64, 0, 0},    // Vᵀ K-major
      {128, 64, 128, 1, 1},   // f16
      {64, 256, 64, 1, 0},    // 16 k-steps of P (the largest S)
      {64, 192, 128, 0, 1},   // N1 not a power of two, f16, Vᵀ
      {64, 64, 256, 1, 0},    // the widest output
  };
  return list;
}

inline std::string describe(const PvFragmentParams& p) {
  return fmt::format("pv_fragment {} k1={} n1={} n2={} V {}", p.f16 ? "f16" : "bf16", p.k1, p.n1,
                     p.n2, p.v_mn_major ? "[N1,N2] MN-major" : "T [N2,N1] K-major");
}

// Mirrors kPvFragmentSmemBytes: A, B, V (each whole KiB) + one barrier, + 1024 slack.
inline unsigned pv_smem_bytes(const PvFragmentParams& p) {
  const uint32_t used = static_cast<uint32_t>(64 * p.k1 * 2 + p.n1 * p.k1 * 2 + p.n1 * p.n2 * 2);
  return round_up(used + 8, 1024) + 1024;
}

inline jit::KernelRecipe pv_recipe(const PvFragmentParams& p) {
  return int_recipe("test_pv_fragment", "testing/pv_fragment.cuh",
                    "attnjit::testing::pv_fragment_kernel", "attnjit::testing::PvFragmentParams",
                    {{"k1", p.k1},
                     {"n1", p.n1},
                     {"n2", p.n2},
                     {"v_mn_major", p.v_mn_major},
                     {"f16", p.f16}},
                    pv_smem_bytes(p));
}

// =========================================================================================
// 4. Programmatic dependent launch (testing/pdl.cuh)
// =========================================================================================

struct PdlParams {
  int32_t delay_ns;          // primary: sleep between trigger and writes
  int32_t wait_prior_grids;  // dependent: 1 waits before reading
};
static_assert(std::has_unique_object_representations_v<PdlParams>);

inline constexpr int kPdlThreads = 256;
inline constexpr int kPdlBlocks = 32;
inline constexpr int kPdlElems = kPdlBlocks * kPdlThreads * 4;
inline constexpr int kPdlDelayNs = 20000;

inline uint32_t pdl_value(uint32_t i, uint32_t seed) { return (i * 2654435761u) ^ seed; }

inline jit::KernelRecipe pdl_recipe(bool primary, const PdlParams& p) {
  return int_recipe(primary ? "test_pdl_primary" : "test_pdl_dependent", "testing/pdl.cuh",
                    primary ? "attnjit::testing::pdl_primary_kernel"
                            : "attnjit::testing::pdl_dependent_kernel",
                    "attnjit::testing::PdlParams",
                    {{"delay_ns", p.delay_ns}, {"wait_prior_grids", p.wait_prior_grids}}, 0);
}

inline const jit::Kernel& pdl_kernel(bool primary, const PdlParams& p) {
  return jit::get_kernel(jit::make_key(primary ? kPdlPrimaryOpId : kPdlDependentOpId, kSm90a, p),
                         [&] { return pdl_recipe(primary, p); });
}

}  // namespace attnjit::test::device_lib
