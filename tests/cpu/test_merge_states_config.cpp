// merge_states' config: validation names the field, JSON round-trips, the default set.
// Its argument rules: test_merge_states_args.cpp.
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
