// merge_states argument checks without a GPU: every rule of a call, of a config against the
// states and of a call against its plan, refused before anything is launched. The one-call
// form checks every argument first; the schedule checks a call against a plan and enqueues
// nothing, so neither needs a device.
#include <cstdint>
#include <string>
#include <utility>

#include "attnjit/ops/merge_states.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"

using namespace attnjit;

namespace {

// Fake, well-aligned device addresses: the rules are checked before any dereference.
void* at(uintptr_t offset) { return reinterpret_cast<void*>(uintptr_t{1} << 40 | offset); }
constexpr int64_t kN = 10, kH = 4, kD = 64;
constexpr uintptr_t kVBytes = kN * kH * kD * 2, kLseBytes = kN * kH * 4;

TensorView values(uintptr_t offset) { return TensorView::contiguous(at(offset), DType::kBF16, {kN, kH, kD}); }
TensorView lses(uintptr_t offset) { return TensorView::contiguous(at(offset), DType::kF32, {kN, kH}); }

// Disjoint buffers: a, b, out, then the three lse.
MergeStatesArgs good() {
  return {values(0),           lses(3 * kVBytes),   values(kVBytes), lses(3 * kVBytes + kLseBytes),
          values(2 * kVBytes), lses(3 * kVBytes + 2 * kLseBytes)};
}

const MergeStatesPlan kPlan{{DType::kBF16, kN, kH, kD}, merge_states_default_config(DType::kBF16, kD), 0};

}  // namespace

TEST_CASE("merge_states refuses bad arguments before any launch, naming them", "[merge_states][args]") {
  REQUIRE_NOTHROW(merge_states_schedule(kPlan, good(), {}, nullptr));
  auto refused = [](MergeStatesArgs a, const char* name, const char* rule) {
    const std::string named = std::string(name) + ": ";  // "bad argument: NAME: rule"
    INFO(named << rule);
    REQUIRE_REFUSED(merge_states(a, nullptr), ErrorKind::kBadArgument, named.c_str(), rule);
    REQUIRE_REFUSED(merge_states_schedule(kPlan, a, {}, nullptr), ErrorKind::kBadArgument,
                    named.c_str(), rule);
  };
  using A = MergeStatesArgs;
  for (auto [field, name] : {std::pair{&A::v_a, "v_a"}, {&A::v_b, "v_b"}, {&A::v_out, "v_out"},
                             {&A::lse_a, "lse_a"}, {&A::lse_b, "lse_b"}}) {
    MergeStatesArgs a = good();
    (a.*field).data = nullptr;  // the right shape, no memory (lse_out alone is optional)
    refused(a, name, "is not set (data == nullptr)");
  }
  MergeStatesArgs a = good();
  a.v_b = TensorView::contiguous(a.v_b.data, DType::kBF16, {kN, kH + 1, kD});
  refused(a, "v_b", "shape");
  a = good();
  a.v_out.dtype = DType::kF16;
  refused(a, "v_out", "f16");
  a = good();
  a.v_a = TensorView::contiguous(at(0), DType::kBF16, {kN * kH, kD});
  refused(a, "v_a", "rank 3");
  a = good();
  a.lse_a = TensorView::contiguous(a.lse_a.data, DType::kF32, {kN, kH, 1});
  refused(a, "lse_a", "leading dimensions");
  a = good();
  a.lse_b.dtype = DType::kBF16;
  refused(a, "lse_b", "f32");
  a = good();
  a.v_a = TensorView::strided(at(0), DType::kBF16, {kN, kH, kD}, {kH * kD * 2, kD * 2, 2});
  refused(a, "v_a", "contiguous");
  a = good();
  a.v_a = TensorView::contiguous(at(0), DType::kBF16, {kN, kH, 12});  // 24-byte rows
  refused(a, "v_a", "16-byte vectors");
  a = good();
  a.v_b.data = at(kVBytes + 8);
  refused(a, "v_b", "16-byte aligned");
  a = good();
  a.v_out = TensorView::strided(at(2 * kVBytes), DType::kBF16, {kN, kH, kD}, {kH * kD + 4, kD, 1});
  refused(a, "v_out", "multiple of 16 bytes");
  a = good();
  a.lse_a = TensorView::strided(a.lse_a.data, DType::kF32, {kN, kH}, {-kH, 1});
  refused(a, "lse_a", "non-negative");
  a = good();
  a.v_out.data = at(kVBytes / 2);  // half over v_a
  refused(a, "v_out", "overlaps v_a");
  a = good();
  a.lse_out = TensorView::strided(a.lse_a.data, DType::kF32, {kN, kH}, {1, kN});  // v_a's bytes, another order
  refused(a, "lse_out", "same view");
  a = good();
  a.lse_out.data = a.v_b.data;
  refused(a, "lse_out", "overlaps v_b");
  a = good();
  a.v_b.device = 1;
  refused(a, "v_b", "is on device 1 but v_a is on device 0");
  a = good();
  a.lse_out.device = 1;
  refused(a, "lse_out", "is on device 1");
  // In place is the same view of an input: allowed.
  a = good();
  a.v_out = a.v_a;
  a.lse_out = a.lse_b;
  REQUIRE_NOTHROW(merge_states_schedule(kPlan, a, {}, nullptr));
  // No rows: every rule still checked, then nothing to launch (no device touched here).
  a = good();
  for (TensorView* t : {&a.v_a, &a.v_b, &a.v_out}) *t = TensorView::contiguous(t->data, DType::kBF16, {0, kH, kD});
  for (TensorView* t : {&a.lse_a, &a.lse_b, &a.lse_out}) *t = TensorView::contiguous(t->data, DType::kF32, {0, kH});
  REQUIRE_NOTHROW(merge_states(a, nullptr));
  a.lse_b = TensorView::contiguous(a.lse_b.data, DType::kF32, {1, kH});
  REQUIRE_REFUSED(merge_states(a, nullptr), ErrorKind::kBadArgument, "lse_b", "leading dimensions");
  // The schedule holds the call to the plan's shape.
  MergeStatesPlan other = kPlan;
  other.shape.tokens = kN + 1;
  REQUIRE_REFUSED(merge_states_schedule(other, good(), {}, nullptr), ErrorKind::kBadArgument, "v_a", "plan");
}

TEST_CASE("merge_states refuses a config or a plan shape out of range", "[merge_states][args]") {
  // A config for other states than the call's (the one-call form and a run's plan).
  const MergeStatesConfig wide = merge_states_default_config(DType::kBF16, 2 * kD);
  REQUIRE_REFUSED(merge_states(good(), nullptr, &wide), ErrorKind::kBadArgument, "config: ",
                  "bf16 d128 does not match the states' bf16 d64");
  MergeStatesPlan p = kPlan;
  p.config = wide;
  REQUIRE_REFUSED(merge_states(good(), p, {}, nullptr), ErrorKind::kBadArgument, "config: ",
                  "does not match");
  // A config breaking its own rules is refused as a config, naming the field.
  MergeStatesConfig odd = merge_states_default_config(DType::kBF16, kD);
  odd.threads = 96;
  REQUIRE_REFUSED(merge_states(good(), nullptr, &odd), ErrorKind::kUnsupportedConfig, "'threads'");
  // A plan's shape: row counts are int32 on the device.
  REQUIRE_REFUSED(merge_states_plan({DType::kBF16, -1, kH, kD}), ErrorKind::kBadArgument, "shape: ",
                  "0..2^31 - 1");
  REQUIRE_REFUSED(merge_states_plan({DType::kBF16, int64_t{1} << 31, kH, kD}), ErrorKind::kBadArgument,
                  "shape: ", "0..2^31 - 1");
}
