// merge_states' config (validation names the field, JSON round-trips, the default set) and
// its argument rules, all refused before anything touches a GPU: the one-call form checks
// every argument first, and the schedule checks a call against a plan without a device.
#include <nlohmann/json.hpp>

#include "attnjit/ops/merge_states.hpp"
#include "ops/registry.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"

using namespace attnjit;

TEST_CASE("merge_states default configs are valid and round-trip", "[config]") {
  for (const nlohmann::json& j : ops::find_op("merge_states").default_set()) {
    const MergeStatesConfig c = MergeStatesConfig::from_json(j.dump());
    CHECK(c.to_json() == j.dump());
    CHECK(c == merge_states_default_config(c.dtype, c.head_dim));
  }
  MergeStatesConfig c = merge_states_default_config(DType::kBF16, 512);
  c.lse_log2 = true;
  CHECK(c.describe() == "bf16 d512 log2 t256");
  CHECK(MergeStatesConfig::from_json(c.to_json()) == c);
}

TEST_CASE("merge_states config validation names the field and the rule", "[config]") {
  MergeStatesConfig c = merge_states_default_config(DType::kBF16, 100);  // 200 B rows
  REQUIRE_ERROR(c.validate(), ErrorKind::kUnsupportedConfig, "'head_dim'", "16-byte");
  c = merge_states_default_config(DType::kF32, 4);  // one f32 vector: fine
  REQUIRE_NOTHROW(c.validate());
  c.threads = 96;
  REQUIRE_ERROR(c.validate(), ErrorKind::kUnsupportedConfig, "threads");
  c = {};
  c.dtype = DType::kE4M3;
  REQUIRE_ERROR(c.validate(), ErrorKind::kUnsupportedConfig, "dtype");
  REQUIRE_ERROR(MergeStatesConfig::from_json(R"({"dtype":"bf16","head_dim":128,"lanes":4})"),
                ErrorKind::kUnsupportedConfig, "lanes");
}

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

TEST_CASE("merge_states refuses bad arguments before any launch, naming them", "[config]") {
  REQUIRE_NOTHROW(merge_states_schedule(kPlan, good(), {}, nullptr));
  auto refused = [](MergeStatesArgs a, const char* name, const char* rule) {
    INFO(name << ": " << rule);
    REQUIRE_ERROR(merge_states(a, nullptr), ErrorKind::kBadArgument, name, rule);
    REQUIRE_ERROR(merge_states_schedule(kPlan, a, {}, nullptr), ErrorKind::kBadArgument, name, rule);
  };
  MergeStatesArgs a = good();
  a.v_a.data = nullptr;
  refused(a, "v_a", "not set");
  a = good();
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
  REQUIRE_ERROR(merge_states(a, nullptr), ErrorKind::kBadArgument, "lse_b", "leading dimensions");
  // The schedule holds the call to the plan's shape.
  MergeStatesPlan other = kPlan;
  other.shape.tokens = kN + 1;
  REQUIRE_ERROR(merge_states_schedule(other, good(), {}, nullptr), ErrorKind::kBadArgument, "v_a", "plan");
}
