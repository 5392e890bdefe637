// tma_copy argument checks without a GPU: every rule of a call, of a plan's shape and of the
// call against its plan, refused before anything is launched.
#include <cstdint>
#include <initializer_list>

#include "attnjit/ops/tma_copy.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"

using namespace attnjit;

namespace {

// Fake device addresses: the host checks look at the numbers only, never behind them.
void* fake(int slot, uintptr_t misalign = 0) {
  return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} +
                                 uintptr_t(slot) * (uintptr_t{1} << 28) + misalign);
}

constexpr int64_t R = 64, C = 64;

TensorView view(int slot, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(fake(slot), dtype, shape);
}

// A valid copy of a bf16 [64, 64] tensor.
TmaCopyArgs valid_args() { return {.dst = view(0, DType::kBF16, {R, C}), .src = view(1, DType::kBF16, {R, C})}; }

// A plan for valid_args() built by hand (tma_copy_plan loads the kernel on the device).
TmaCopyPlan valid_plan() {
  return {{DType::kBF16, R, C}, tma_copy_default_config(DType::kBF16), 0};
}

}  // namespace

TEST_CASE("tma_copy rejects bad arguments before launching", "[tma_copy][args]") {
  const auto bad = ErrorKind::kBadArgument;
  const DType bf16 = DType::kBF16;
  // The one-call form: every argument rule before the plan touches the device.
  auto call = [](const TmaCopyArgs& a, const TmaCopyConfig* c = nullptr) { tma_copy(a, nullptr, c); };
  auto with_src = [](const TensorView& v) { TmaCopyArgs a = valid_args(); a.src = v; return a; };
  auto with_dst = [](const TensorView& v) { TmaCopyArgs a = valid_args(); a.dst = v; return a; };

  SECTION("the valid call passes every host check") {
    // The schedule runs the run's checks and enqueues nothing, on any machine.
    REQUIRE_NOTHROW(tma_copy_schedule(valid_plan(), valid_args(), {}, nullptr));
  }
  SECTION("rank") {
    REQUIRE_REFUSED(call(with_dst(view(0, bf16, {4, R, C}))), bad, "dst: ", "must have rank 2");
    REQUIRE_REFUSED(call(with_src(view(1, bf16, {R * C}))), bad, "src: ", "must have rank 2");
  }
  SECTION("shape") {
    REQUIRE_REFUSED(call(with_dst(view(0, bf16, {R, C / 2}))), bad, "dst: ", "must have the shape of src");
    // The plan's shape: sizes are TMA coordinates.
    REQUIRE_REFUSED(tma_copy_plan({bf16, -1, C}), bad, "shape: ", "0..2^31");
    REQUIRE_REFUSED(tma_copy_plan({bf16, R, int64_t{1} << 32}), bad, "shape: ", "0..2^31");
    // A call its plan was not made for.
    TmaCopyPlan p = valid_plan();
    p.shape.cols = 2 * C;
    REQUIRE_REFUSED(tma_copy(valid_args(), p, {}, nullptr), bad, "src: ", "plan's bf16 [64, 128]");
  }
  SECTION("dtype") {
    REQUIRE_REFUSED(call(with_dst(view(0, DType::kF16, {R, C}))), bad, "dst: ", "must be bf16, got f16");
    // A config for 4-byte elements cannot move 2-byte ones (equal widths may: bits are bits).
    const TmaCopyConfig f32 = tma_copy_default_config(DType::kF32);
    REQUIRE_REFUSED(call(valid_args(), &f32), bad, "config: ", "dtype f32 does not match");
  }
  SECTION("alignment") {
    TmaCopyArgs a = valid_args();
    a.src.data = fake(1, 2);
    REQUIRE_REFUSED(call(a), bad, "tma map 'src'", "16-byte aligned");
    a = valid_args();
    a.dst.data = fake(0, 8);
    REQUIRE_REFUSED(call(a), bad, "tma map 'dst'", "16-byte aligned");
  }
  SECTION("stride") {
    // 60 bf16 columns in 120-byte rows: not a multiple of 16 bytes.
    const TmaCopyArgs rows120{.dst = TensorView::strided(fake(0), bf16, {R, 60}, {60, 1}),
                              .src = TensorView::strided(fake(1), bf16, {R, 60}, {60, 1})};
    REQUIRE_REFUSED(call(rows120), bad, "tma map 'src'", "not a multiple of 16 B");
    REQUIRE_REFUSED(call(with_src(TensorView::strided(fake(1), bf16, {R, C}, {1, R}))), bad,
                    "tma map 'src'", "innermost dim 1 must be contiguous");  // column-major
    REQUIRE_REFUSED(call(with_dst(TensorView::strided(fake(0), bf16, {R, C}, {-C, 1}))), bad,
                    "tma map 'dst'", "must be positive");  // rows in reverse
  }
  SECTION("missing pointer") {
    TmaCopyArgs a = valid_args();
    a.src.data = nullptr;
    REQUIRE_REFUSED(call(a), bad, "tma map 'src'", "data pointer is null");
    a = valid_args();
    a.dst.data = nullptr;
    REQUIRE_REFUSED(tma_copy(a, valid_plan(), {}, nullptr), bad, "tma map 'dst'", "data pointer is null");
  }
  SECTION("device") {
    TmaCopyArgs a = valid_args();
    a.dst.device = 1;
    REQUIRE_REFUSED(call(a), bad, "dst: ", "is on device 1 but src is on device 0");
  }
  SECTION("config out of range") {
    TmaCopyConfig c = tma_copy_default_config(bf16);
    c.stages = 99;
    REQUIRE_REFUSED(call(valid_args(), &c), ErrorKind::kUnsupportedConfig, "'stages'", "1..16");
    TmaCopyPlan p = valid_plan();
    p.config.block_m = 12;
    REQUIRE_REFUSED(tma_copy(valid_args(), p, {}, nullptr), ErrorKind::kUnsupportedConfig, "'block_m'",
                    "multiple of 8");
  }
}
