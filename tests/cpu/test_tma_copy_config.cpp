// tma_copy's config: validation names the field, JSON round-trips, registry entry.
#include <nlohmann/json.hpp>

#include "attnjit/ops/tma_copy.hpp"
#include "ops/registry.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"

using attnjit::DType;
using attnjit::ErrorKind;
using attnjit::Swizzle;
using attnjit::TmaCopyConfig;

TEST_CASE("tma_copy default configs are valid for every dtype", "[config]") {
  for (DType d : {DType::kBF16, DType::kF16, DType::kF32, DType::kE4M3, DType::kE5M2, DType::kI32,
                  DType::kU8}) {
    TmaCopyConfig c = attnjit::tma_copy_default_config(d);
    REQUIRE_NOTHROW(c.validate());
    CHECK(c.block_n * attnjit::dtype_bytes(d) == 256);
  }
}

TEST_CASE("tma_copy config validation names the field and the rule", "[config]") {
  TmaCopyConfig c;
  c.block_m = 12;
  REQUIRE_ERROR(c.validate(), ErrorKind::kUnsupportedConfig, "'block_m'", "multiple of 8");
  c = {};
  c.block_m = 512;
  REQUIRE_ERROR(c.validate(), ErrorKind::kUnsupportedConfig, "'block_m'", "8..256");
  c = {};
  c.block_n = 4;  // 8 bytes
  REQUIRE_ERROR(c.validate(), ErrorKind::kUnsupportedConfig, "'block_n'", "16 bytes");
  c = {};
  c.swizzle = Swizzle::k128B;
  c.block_n = 96;  // 192 B is not whole 128 B spans
  REQUIRE_ERROR(c.validate(), ErrorKind::kUnsupportedConfig, "'block_n'", "128-byte spans");
  c = {};
  c.swizzle = Swizzle::kNone;
  c.block_n = 512;
  REQUIRE_ERROR(c.validate(), ErrorKind::kUnsupportedConfig, "'block_n'", "256 elements");
  c = {};
  c.stages = 0;
  REQUIRE_ERROR(c.validate(), ErrorKind::kUnsupportedConfig, "'stages'", "1..16");
  c = {};
  c.block_m = 256;
  c.block_n = 256;
  c.stages = 4;  // 4 × 128 KiB
  REQUIRE_ERROR(c.validate(), ErrorKind::kUnsupportedConfig, "'stages'", "shared memory");
}

TEST_CASE("tma_copy config JSON round-trips and rejects unknown or mistyped fields",
          "[config]") {
  TmaCopyConfig c;
  c.dtype = DType::kE4M3;
  c.block_m = 64;
  c.block_n = 256;
  c.stages = 3;
  c.swizzle = Swizzle::k64B;
  const std::string json = c.to_json();
  CHECK(json == R"({"dtype":"e4m3","block_m":64,"block_n":256,"stages":3,"swizzle":"64B"})");
  CHECK(TmaCopyConfig::from_json(json) == c);
  // Missing fields take defaults; the result is canonical.
  CHECK(TmaCopyConfig::from_json(R"({"stages":2})").stages == 2);
  REQUIRE_ERROR(TmaCopyConfig::from_json(R"({"stage":2})"), ErrorKind::kUnsupportedConfig,
                "'stage'", "unknown field");
  REQUIRE_ERROR(TmaCopyConfig::from_json(R"({"stages":"2"})"), ErrorKind::kUnsupportedConfig,
                "'stages'", "integer");
  REQUIRE_ERROR(TmaCopyConfig::from_json(R"({"swizzle":"16B"})"), ErrorKind::kUnsupportedConfig,
                "'swizzle'", "one of none, 32B, 64B, 128B");
  REQUIRE_ERROR(TmaCopyConfig::from_json(R"({"dtype":"bf17"})"), ErrorKind::kUnsupportedConfig,
                "'dtype'", "one of bf16, f16");
  REQUIRE_ERROR(TmaCopyConfig::from_json("[1,2]"), ErrorKind::kUnsupportedConfig, "JSON object");
  REQUIRE_ERROR(TmaCopyConfig::from_json("{"), ErrorKind::kUnsupportedConfig, "invalid JSON");
  REQUIRE_ERROR(TmaCopyConfig::from_json(R"({"block_m":7})"), ErrorKind::kUnsupportedConfig,
                "'block_m'");
}

TEST_CASE("the registry describes tma_copy and its default set", "[config][registry]") {
  const attnjit::ops::OpSpec& op = attnjit::ops::find_op("tma_copy");
  CHECK(op.supports(attnjit::kSm90a));
  CHECK(op.supports(attnjit::kSm100a));
  CHECK(op.fields.size() == 5);
  const auto set = op.default_set();
  CHECK(set.size() == 8);
  for (const auto& j : set) CHECK(op.canonicalize(j) == j);  // defaults are canonical
  REQUIRE_ERROR(attnjit::ops::find_op("tma_cpy"), ErrorKind::kUnsupportedConfig, "tma_cpy",
                "tma_copy");
}
