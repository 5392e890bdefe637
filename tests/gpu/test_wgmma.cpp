// wgmma on the GPU: the test family kernel_templates/testing/wgmma_tile.cuh computes one
// C[64 × N] = A[64 × K] · B tile with TMA-loaded operands and wgmma (SS or RS, B K-major
// or MN-major, every swizzle mode, bf16/f16/e4m3/e5m2), checked against a float64 GEMM.
// A wrong descriptor bit, swizzle or fragment mapping shows up as O(1) relative error;
// rounding alone stays orders of magnitude below the tolerances.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "attnjit/tma.hpp"
#include "attnjit/types.hpp"
#include "jit/kernel_table.hpp"
#include "support/catch.hpp"
#include "support/gpu.hpp"
#include "support/sass.hpp"

using namespace attnjit;

namespace {

constexpr uint32_t kWgmmaTileOpId = 1001;  // test families use ids >= 1000

// Host twin of attnjit::testing::WgmmaTileParams, field for field: int32 only, so the
// struct has no padding and can be the kernel table key.
struct WgmmaTileParams {
  int32_t dtype;             // attnjit::DType value
  int32_t n;                 // C columns
  int32_t k;                 // reduction length
  int32_t swizzle;           // attnjit::Swizzle value (span bytes)
  int32_t a_from_registers;  // 1: RS form
  int32_t b_mn_major;        // 1: B stored [K, N]
};
static_assert(std::has_unique_object_representations_v<WgmmaTileParams>);

WgmmaTileParams tile(DType t, int n, int k, Swizzle s, int rs, int mn) {
  return {static_cast<int32_t>(t), n, k, static_cast<int32_t>(s), rs, mn};
}
DType dtype_of(const WgmmaTileParams& p) { return static_cast<DType>(p.dtype); }
Swizzle swizzle_of(const WgmmaTileParams& p) { return static_cast<Swizzle>(p.swizzle); }
bool is_fp8(const WgmmaTileParams& p) {
  return dtype_of(p) == DType::kE4M3 || dtype_of(p) == DType::kE5M2;
}

// The combinations the kernel supports that this test covers. K spans several swizzle
// spans (so chunk-to-chunk descriptor steps are exercised) and 8+ instructions.
const std::vector<WgmmaTileParams>& cases() {
  using enum Swizzle;
  static const std::vector<WgmmaTileParams> list = {
      // bf16/f16 SS, K-major: every swizzle, N from 8 to 256 (176: not a power of two)
      tile(DType::kBF16, 64, 128, k128B, 0, 0),
      tile(DType::kBF16, 64, 128, k64B, 0, 0),
      tile(DType::kBF16, 64, 128, k32B, 0, 0),
      tile(DType::kBF16, 64, 128, kNone, 0, 0),
      tile(DType::kBF16, 8, 128, k32B, 0, 0),
      tile(DType::kBF16, 16, 128, k128B, 0, 0),
      tile(DType::kBF16, 32, 128, kNone, 0, 0),
      tile(DType::kBF16, 128, 128, k128B, 0, 0),
      tile(DType::kBF16, 176, 128, k64B, 0, 0),
      tile(DType::kBF16, 256, 128, k128B, 0, 0),
      tile(DType::kBF16, 128, 256, k128B, 0, 0),
      tile(DType::kF16, 64, 128, k128B, 0, 0),
      tile(DType::kF16, 32, 128, kNone, 0, 0),
      // RS: A fragments read from the swizzled tile by ordinary loads
      tile(DType::kBF16, 64, 128, k128B, 1, 0),
      tile(DType::kBF16, 128, 128, k64B, 1, 0),
      tile(DType::kBF16, 32, 128, k32B, 1, 0),
      tile(DType::kBF16, 256, 128, kNone, 1, 0),
      tile(DType::kF16, 64, 128, k64B, 1, 0),
      // B MN-major (the PV shape of attention: V is [keys, head_dim])
      tile(DType::kBF16, 64, 128, k128B, 0, 1),
      tile(DType::kBF16, 256, 128, k128B, 0, 1),
      tile(DType::kBF16, 64, 256, k128B, 0, 1),
      tile(DType::kBF16, 64, 128, k64B, 0, 1),
      tile(DType::kBF16, 32, 128, k32B, 0, 1),
      tile(DType::kBF16, 64, 128, kNone, 0, 1),
      tile(DType::kBF16, 128, 128, k128B, 1, 1),
      tile(DType::kF16, 128, 128, k64B, 1, 1),
      // fp8 (K-major only), k32 instructions
      tile(DType::kE4M3, 64, 256, k128B, 0, 0),
      tile(DType::kE4M3, 128, 256, k64B, 0, 0),
      tile(DType::kE4M3, 256, 256, k32B, 0, 0),
      tile(DType::kE4M3, 64, 256, kNone, 0, 0),
      tile(DType::kE4M3, 128, 256, k128B, 1, 0),
      tile(DType::kE4M3, 32, 256, k32B, 1, 0),
      tile(DType::kE5M2, 64, 256, k128B, 0, 0),
      tile(DType::kE5M2, 64, 256, k64B, 1, 0),
  };
  return list;
}

std::string describe(const WgmmaTileParams& p) {
  return fmt::format("{} n={} k={} swizzle {} {} B {}-major", to_string(dtype_of(p)), p.n, p.k,
                     to_string(swizzle_of(p)), p.a_from_registers ? "RS" : "SS",
                     p.b_mn_major ? "MN" : "K");
}

std::string cxx_dtype(DType t) {
  switch (t) {
    case DType::kBF16: return "attnjit::DType::kBF16";
    case DType::kF16: return "attnjit::DType::kF16";
    case DType::kE4M3: return "attnjit::DType::kE4M3";
    case DType::kE5M2: return "attnjit::DType::kE5M2";
    default: return "?";
  }
}
std::string cxx_swizzle(Swizzle s) {
  switch (s) {
    case Swizzle::kNone: return "attnjit::Swizzle::kNone";
    case Swizzle::k32B: return "attnjit::Swizzle::k32B";
    case Swizzle::k64B: return "attnjit::Swizzle::k64B";
    case Swizzle::k128B: return "attnjit::Swizzle::k128B";
  }
  return "?";
}

// Bytes per TMA box row: the swizzle span, or one 16-byte core-matrix row without swizzle.
uint32_t span_bytes(const WgmmaTileParams& p) {
  return swizzle_of(p) == Swizzle::kNone ? 16u : static_cast<uint32_t>(p.swizzle);
}

// Mirrors WgmmaTilePlan<P>::kDynamicSmemBytes (the kernel traps if given less).
unsigned dynamic_smem_bytes(const WgmmaTileParams& p) {
  const uint32_t elem = static_cast<uint32_t>(dtype_bytes(dtype_of(p)));
  auto round_up = [](uint32_t x) { return (x + 1023u) / 1024u * 1024u; };
  const uint32_t a = 64u * static_cast<uint32_t>(p.k) * elem;
  const uint32_t b = static_cast<uint32_t>(p.n * p.k) * elem;
  return round_up(a) + round_up(b) + 16u + 1024u;
}

jit::KernelRecipe recipe_of(const WgmmaTileParams& p) {
  jit::KernelRecipe r;
  r.source.op = "test_wgmma_tile";
  r.source.header = "testing/wgmma_tile.cuh";
  r.source.kernel = "attnjit::testing::wgmma_tile_kernel";
  r.source.params_type = "attnjit::testing::WgmmaTileParams";
  r.source.args = {
      {"dtype", cxx_dtype(dtype_of(p))},
      {"n", std::to_string(p.n)},
      {"k", std::to_string(p.k)},
      {"swizzle", cxx_swizzle(swizzle_of(p))},
      {"a_from_registers", std::to_string(p.a_from_registers)},
      {"b_mn_major", std::to_string(p.b_mn_major)},
  };
  r.source.config_json = fmt::format(
      R"({{"dtype":"{}","n":{},"k":{},"swizzle":"{}","a_from_registers":{},"b_mn_major":{}}})",
      to_string(dtype_of(p)), p.n, p.k, to_string(swizzle_of(p)), p.a_from_registers,
      p.b_mn_major);
  r.options.arch = kSm90a;
  r.dynamic_smem_bytes = dynamic_smem_bytes(p);
  return r;
}

// Random values exactly representable in `t`: their bit patterns for upload and their
// values for the reference. Magnitudes stay small (|x| <= 16) so products are tame.
struct Operand {
  std::vector<uint8_t> bytes;
  std::vector<double> values;
};
Operand random_operand(DType t, size_t count) {
  Operand o;
  const size_t eb = static_cast<size_t>(dtype_bytes(t));
  o.bytes.resize(count * eb);
  o.values.resize(count);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (size_t i = 0; i < count; ++i) {
    if (t == DType::kBF16 || t == DType::kF16) {
      const float f = uniform(test::rng());
      const uint16_t h = t == DType::kBF16 ? test::float_to_bf16(f) : test::float_to_f16(f);
      std::memcpy(&o.bytes[2 * i], &h, 2);
      o.values[i] = t == DType::kBF16 ? test::bf16_to_float(h) : test::f16_to_float(h);
    } else {
      float v;
      uint8_t b;
      do {  // a random finite byte pattern; e5m2 is the high byte of an f16
        b = static_cast<uint8_t>(test::rng()());
        v = t == DType::kE4M3 ? test::e4m3_to_float(b)
                              : test::f16_to_float(static_cast<uint16_t>(b << 8));
      } while (!std::isfinite(v) || std::fabs(v) > 16.0f);
      o.bytes[i] = b;
      o.values[i] = v;
    }
  }
  return o;
}

// A 2-D row-major tensor map with box {box_rows, span / elem} (outermost first).
TmaDescriptor tile_map(const test::DeviceBuffer& buf, const WgmmaTileParams& p, int64_t rows,
                       int64_t cols, uint32_t box_rows, const char* name) {
  TmaMapSpec spec;
  spec.tensor = TensorView::contiguous(buf.data(), dtype_of(p), {rows, cols});
  spec.box[0] = box_rows;
  spec.box[1] = span_bytes(p) / static_cast<uint32_t>(dtype_bytes(dtype_of(p)));
  spec.swizzle = swizzle_of(p);
  return encode_tma(spec, name);
}

void run_case(const WgmmaTileParams& p) {
  const DType t = dtype_of(p);
  const int64_t m = 64, n = p.n, k = p.k;
  const Operand a = random_operand(t, static_cast<size_t>(m * k));  // A [64, K]
  const Operand b = random_operand(t, static_cast<size_t>(n * k));  // B [N, K] or [K, N]

  test::DeviceBuffer a_buf(a.bytes.size()), b_buf(b.bytes.size());
  test::DeviceBuffer c_buf(static_cast<size_t>(m * n) * sizeof(float));  // C [64, N] f32
  a_buf.upload(a.bytes);
  b_buf.upload(b.bytes);
  c_buf.fill_byte(0xFF);  // NaN everywhere: an element the kernel does not write fails

  // Boxes: A {64, span}; B {K, span} when MN-major, else {N, span} (span in elements).
  TmaDescriptor a_map = tile_map(a_buf, p, m, k, 64, "A");
  TmaDescriptor b_map = p.b_mn_major ? tile_map(b_buf, p, k, n, static_cast<uint32_t>(k), "B")
                                     : tile_map(b_buf, p, n, k, static_cast<uint32_t>(n), "B");

  const jit::Kernel& kernel = jit::get_kernel(jit::make_key(kWgmmaTileOpId, kSm90a, p),
                                              [&] { return recipe_of(p); });
  CHECK(kernel.compiled().ptxas.spill_store_bytes == 0);
  CHECK(kernel.compiled().ptxas.spill_load_bytes == 0);
  CUdeviceptr c_ptr = c_buf.ptr();
  void* args[] = {&a_map, &b_map, &c_ptr};
  jit::LaunchShape shape;
  shape.block[0] = 128;  // one warpgroup
  shape.dynamic_smem = dynamic_smem_bytes(p);
  kernel.launch(shape, nullptr, args);
  test::synchronize();
  const std::vector<float> c = c_buf.download_as<float>(static_cast<size_t>(m * n));

  // float64 reference; per element also Σ|a·b|, the scale that bounds rounding error.
  // fp8 wgmma accumulates with ~14-bit precision inside the tensor core (DeepGEMM's note),
  // 16-bit inputs in full f32: both far below the O(0.1..1) error of a layout mistake.
  const double tol_l2 = is_fp8(p) ? 5e-3 : 1e-4;
  const double tol_elem = is_fp8(p) ? 1e-2 : 1e-4;
  std::vector<double> ref(static_cast<size_t>(m * n)), rel(static_cast<size_t>(m * n));
  double err2 = 0, ref2 = 0, worst = 0;
  int64_t non_finite = 0, over = 0, worst_at = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, scale = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double av = a.values[static_cast<size_t>(i * k + kk)];
        const double bv = p.b_mn_major ? b.values[static_cast<size_t>(kk * n + j)]
                                       : b.values[static_cast<size_t>(j * k + kk)];
        sum += av * bv;
        scale += std::fabs(av * bv);
      }
      const size_t at = static_cast<size_t>(i * n + j);
      ref[at] = sum;
      const double got = c[at];
      const double e = std::isfinite(got) ? std::fabs(got - sum) : INFINITY;
      rel[at] = e / (scale + 1e-30);
      non_finite += !std::isfinite(got);
      over += rel[at] > tol_elem;
      if (std::isfinite(got)) {
        err2 += e * e;
        ref2 += sum * sum;
      }
      if (rel[at] > worst) {
        worst = rel[at];
        worst_at = i * n + j;
      }
    }
  }
  const double rel_l2 = std::sqrt(err2 / (ref2 + 1e-300));
  fmt::print("wgmma_tile {:<40} rel_l2 {:.2e}  worst elem {:.2e} at ({}, {})  regs {}\n",
             describe(p), rel_l2, worst, worst_at / n, worst_at % n,
             kernel.compiled().ptxas.registers);
  if (!kernel.compiled().ptxas.parsed)
    fmt::print("  (ptxas report not parsed; entry {}; log starts: {})\n", kernel.compiled().lowered_name,
               kernel.compiled().log.substr(0, 400));
  if (over > 0 || rel_l2 > tol_l2) {
    // Where it goes wrong tells which piece is off: one char per 8×8 block of C ('.' all
    // good, '#' all bad, '+' mixed), so a swizzle, descriptor stride or fragment-mapping
    // mistake shows its period; then the first bad elements with their values.
    std::string map;
    for (int64_t bi = 0; bi < m / 8; ++bi) {
      map += "    ";
      for (int64_t bj = 0; bj < n / 8; ++bj) {
        int bad = 0;
        for (int64_t i = 8 * bi; i < 8 * bi + 8; ++i)
          for (int64_t j = 8 * bj; j < 8 * bj + 8; ++j)
            bad += rel[static_cast<size_t>(i * n + j)] > tol_elem;
        map += bad == 0 ? '.' : bad == 64 ? '#' : '+';
      }
      map += '\n';
    }
    fmt::print("  bad elements by 8x8 block of C [64 x {}]:\n{}", n, map);
    int shown = 0;
    for (size_t at = 0; at < rel.size() && shown < 8; ++at) {
      if (rel[at] <= tol_elem) continue;
      fmt::print("  C[{}, {}] = {} (reference {})\n", at / static_cast<size_t>(n),
                 at % static_cast<size_t>(n), c[at], ref[at]);
      ++shown;
    }
  }
  INFO("rel_l2 " << rel_l2 << ", worst element error / sum|a*b| " << worst << " at flat index "
                 << worst_at);
  CHECK(non_finite == 0);
  CHECK(over == 0);
  CHECK(rel_l2 <= tol_l2);
}

}  // namespace

TEST_CASE("wgmma tile GEMMs match a float64 reference", "[gpu][wgmma]") {
  if (!test::gpu_or_skip()) return;
  for (const WgmmaTileParams& p : cases()) {
    DYNAMIC_SECTION(describe(p)) { run_case(p); }
  }
}

// No GPU needed: every variant compiles with NVRTC without spills, and its SASS holds the
// instructions it was written for (one HGMMA/QGMMA per k-step, TMA loads, no local memory).
TEST_CASE("wgmma tile variants compile to HGMMA/QGMMA without spills", "[wgmma][nvrtc]") {
  for (const WgmmaTileParams& p : cases()) {
    INFO(describe(p));
    const jit::CompiledKernel k = jit::compile_recipe(recipe_of(p));
    REQUIRE(k.ptxas.parsed);
    CHECK(k.ptxas.spill_store_bytes == 0);
    CHECK(k.ptxas.spill_load_bytes == 0);
    CHECK(k.ptxas.stack_frame_bytes == 0);
    if (auto sass = test::disassemble(k.cubin)) {
      const int steps = p.k / (32 / dtype_bytes(dtype_of(p)));
      CHECK(test::count_opcode(*sass, is_fp8(p) ? "QGMMA" : "HGMMA") == steps);
      CHECK(test::count_opcode(*sass, "UTMALDG") > 0);
      CHECK(test::count_opcode(*sass, "LDL") == 0);
      CHECK(test::count_opcode(*sass, "STL") == 0);
    }
  }
}
