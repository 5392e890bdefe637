// mla_fp8_quantize: the device quantizer's launches and its host reference. The formulas
// are in attnjit/ops/mla_decode_fp8.hpp; the host reference computes the same f32 values
// (x / σ correctly rounded, RN-even e4m3 with saturation, RN-even bf16), so it is exact
// against the device.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "attnjit/error.hpp"
#include "driver/driver.hpp"
#include "mla_decode_fp8/layout.cuh"
#include "ops/launch_support.hpp"
#include "ops/mla_decode_fp8/internal.hpp"

namespace attnjit {
namespace {

namespace dev = layout::mla_decode_fp8;

float bf16_to_float(uint16_t b) {
  const uint32_t u = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t bf16_from_float(float f) {  // RN-even, as cvt.rn.bf16
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace

uint8_t e4m3_from_float(float x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(x));
  // The grid step at a's binade: 2^(e-3) for normals (e >= -6), 2^-9 below (subnormals).
  int e = 0;
  std::frexp(a, &e);  // a = f · 2^e, f in [0.5, 1)
  const int binade = std::max(e - 1, -6);
  const double step = std::ldexp(1.0, binade - 3);
  double v = std::nearbyint(a / step) * step;  // ties to even: the code's low bit
  if (v >= 448.0 || std::isinf(a)) return static_cast<uint8_t>(sign | 0x7e);  // satfinite
  if (v < std::ldexp(1.0, -6)) return static_cast<uint8_t>(sign | static_cast<int>(v * 512.0));
  int ve = 0;
  const double f = std::frexp(v, &ve);  // v = f · 2^ve
  const int exp_field = ve - 1 + 7;
  const int mant = static_cast<int>(f * 16.0) - 8;  // (2f - 1) · 8
  return static_cast<uint8_t>(sign | exp_field << 3 | mant);
}

float e4m3_to_float(uint8_t code) {
  if ((code & 0x7f) == 0x7f) return std::nanf("");
  const int e = (code >> 3) & 15, m = code & 7;
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -9)
                         : std::ldexp(static_cast<float>(8 + m), e - 10);
  return code & 0x80 ? -v : v;
}

void mla_fp8_quantize_host(const uint16_t* in, int64_t rows, int64_t rows_per_group,
                           uint8_t* out, float* scale, int row_bytes) {
  if (rows_per_group < 1) fail_arg("rows_per_group", "must be >= 1");
  if (row_bytes != kMlaFp8RowBytes && row_bytes != 576)
    fail_arg("row_bytes", fmt::format("must be 640 (bf16 rope) or 576 (e4m3 rope), got {}", row_bytes));
  for (int64_t g0 = 0; g0 < rows; g0 += rows_per_group) {
    const int64_t g1 = std::min(rows, g0 + rows_per_group);
    float amax = 0.0f;
    for (int64_t r = g0; r < g1; ++r)
      for (int k = 0; k < (row_bytes == 576 ? 576 : kMlaFp8ContentBytes); ++k)
        amax = std::fmax(amax, std::fabs(bf16_to_float(in[r * 576 + k])));
    const float sigma = std::fmax(amax, kMlaFp8Epsilon) / kE4M3Max;
    scale[g0 / rows_per_group] = sigma;
    for (int64_t r = g0; r < g1; ++r) {
      uint8_t* row = out + r * row_bytes;
      for (int k = 0; k < (row_bytes == 576 ? 576 : kMlaFp8ContentBytes); ++k)
        row[k] = e4m3_from_float(bf16_to_float(in[r * 576 + k]) / sigma);
      for (int k = 0; k < (row_bytes == 576 ? 0 : kMlaFp8RopeDims); ++k) {
        const uint16_t b = bf16_from_float(bf16_to_float(in[r * 576 + 512 + k]) / sigma);
        std::memcpy(row + kMlaFp8ContentBytes + 2 * k, &b, 2);
      }
    }
  }
}

void mla_fp8_quantize(const MlaFp8QuantizeArgs& a, CUstream stream) {
  if (a.in.rank != 2 || a.in.shape[1] != 576)
    fail_arg("in", fmt::format("must be rank 2 [rows, 576] bf16, got {}", a.in.describe()));
  ops::check_tensor(a.in, "in", DType::kBF16, 16);
  const int64_t rows = a.in.shape[0];
  const bool three = a.out_rope.data != nullptr;
  const int64_t stride = three ? kMlaFp8ContentBytes : a.out.rank == 2 && a.out.shape[1] == 576 ? 576 : kMlaFp8RowBytes;
  if (a.out.rank != 2 || a.out.shape[0] != rows || a.out.shape[1] != stride)
    fail_arg("out", fmt::format("must be rank 2 [rows = {}, {}] bytes (640: bf16 rope; 576: e4m3 "
                                "rope; 512 with out_rope), got {}",
                                rows, stride, a.out.describe()));
  if (a.out.dtype != DType::kU8 && a.out.dtype != DType::kE4M3)
    fail_arg("out", "must hold bytes (u8 or e4m3)");
  ops::check_tensor(a.out, "out", a.out.dtype, 16);
  if (three) {
    ops::check_dims(a.out_rope, "out_rope", {rows, kMlaFp8RopeDims}, "rank 2 [rows, 64] bf16");
    ops::check_tensor(a.out_rope, "out_rope", DType::kBF16, 16);
  }
  const int rpg = a.group == MlaFp8Group::kToken ? a.rows_per_group : 1;
  if (a.group == MlaFp8Group::kToken && (rpg < 1 || rows % rpg != 0))
    fail_arg("rows_per_group", fmt::format("must divide rows = {} (h rows per token), got {}",
                                           rows, a.rows_per_group));
  const int64_t groups = a.group == MlaFp8Group::kTensor ? 1 : rows / rpg;
  ops::check_dims(a.scale, "scale", {groups}, "rank 1 [groups] f32 (per tensor: [1])");
  ops::check_tensor(a.scale, "scale", DType::kF32, 4);
  if (rows == 0) return;
  if (rows > INT32_MAX) fail_arg("in", "more than 2^31 rows");

  const Arch arch = ops::device_arch(driver::cached_device_info(driver::current_device()));
  const jit::Kernel& k = ops::mla_fp8_quantize_kernel({}, arch);
  dev::QuantArgs qa{static_cast<const unsigned short*>(a.in.data),
                    static_cast<unsigned char*>(a.out.data),
                    static_cast<unsigned short*>(a.out_rope.data),
                    static_cast<float*>(a.scale.data),
                    rows,
                    rpg,
                    static_cast<int>(stride),
                    dev::kQuantGroups,
                    0};
  jit::LaunchShape shape;
  shape.block[0] = dev::kQuantThreads;
  void* args[] = {&qa};
  auto launch = [&](int mode, int64_t grid) {
    qa.mode = mode;
    shape.grid[0] = static_cast<unsigned>(grid);
    k.launch(shape, stream, args);
  };
  if (a.group != MlaFp8Group::kTensor) {
    launch(dev::kQuantGroups, groups);
    return;
  }
  // Per tensor: the amax into scale[0] (zeroed first), the rows with σ from it, then σ.
  driver::check(driver::api().cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(a.scale.data), 0, 1, stream),
                "cuMemsetD32Async");
  launch(dev::kQuantAmax, rows);
  launch(dev::kQuantTensor, rows);
  launch(dev::kQuantFinish, 1);
}

}  // namespace attnjit
