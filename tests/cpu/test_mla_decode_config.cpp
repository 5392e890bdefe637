// mla_decode without a GPU: config validation and JSON, and the registry entry. Argument
// checks: test_mla_decode_args.cpp; the float64 reference's own sanity:
// test_mla_decode_reference.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "attnjit/ops/mla_decode.hpp"
#include "ops/registry.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/harness.hpp"

using namespace attnjit;

// ---- config --------------------------------------------------------------------------

TEST_CASE("mla_decode default configs are valid for every supported shape",
          "[config][mla_decode]") {
  REQUIRE_NOTHROW(MlaDecodeConfig{}.validate());
  for (DType dtype : {DType::kBF16, DType::kF16})
    for (int h : {16, 32, 64, 128})
      for (int q_len = 1; q_len <= 8; ++q_len)
        for (int page : {16, 32, 64, 128, 256}) {
          INFO("dtype " << to_string(dtype) << " h " << h << " q_len " << q_len << " page "
                        << page);
          const MlaDecodeConfig c = mla_decode_default_config(dtype, h, q_len, page);
          REQUIRE_NOTHROW(c.validate());
          CHECK(c.dtype == dtype);
          CHECK(c.num_heads == h);
          CHECK(c.max_q_len >= q_len);
          CHECK(c.max_q_len <= 8);
          CHECK(c.page_size == page);
        }
}

TEST_CASE("mla_decode config validation names the field", "[config][mla_decode]") {
  auto with = [](auto&& edit) {
    MlaDecodeConfig c;
    edit(c);
    return c;
  };
  for (DType d : {DType::kF32, DType::kE4M3, DType::kI32})
    REQUIRE_ERROR(with([&](auto& c) { c.dtype = d; }).validate(), ErrorKind::kUnsupportedConfig,
                  "'dtype'");
  for (int h : {0, -16, 129, 144, 256})  // 1..128
    REQUIRE_ERROR(with([&](auto& c) { c.num_heads = h; }).validate(), ErrorKind::kUnsupportedConfig,
                  "'num_heads'");
  for (int q : {0, -1, 9, 16})  // 1..8
    REQUIRE_ERROR(with([&](auto& c) { c.max_q_len = q; }).validate(), ErrorKind::kUnsupportedConfig,
                  "'max_q_len'");
  for (int p : {0, 8, 48, 100, 512, 1024})  // 16, 32, 64, 128, 256
    REQUIRE_ERROR(with([&](auto& c) { c.page_size = p; }).validate(), ErrorKind::kUnsupportedConfig,
                  "'page_size'");
  for (int m : {0, 100})
    REQUIRE_ERROR(with([&](auto& c) { c.block_m = m; }).validate(), ErrorKind::kUnsupportedConfig,
                  "'block_m'");
  for (int n : {0, 100})
    REQUIRE_ERROR(with([&](auto& c) { c.block_n = n; }).validate(), ErrorKind::kUnsupportedConfig,
                  "'block_n'");
  for (int s : {0, 3})  // a third 72 KiB KV stage does not fit in shared memory
    REQUIRE_ERROR(with([&](auto& c) {
                    c.schedule = MlaSchedule::kSoftmaxWarpgroup;
                    c.stages = s;
                  }).validate(),
                  ErrorKind::kUnsupportedConfig, "'stages'");
  // seesaw runs 64-key tiles in exactly two buffers; softmax_wg takes the 32-key ring.
  REQUIRE_ERROR(with([](auto& c) {
                  c.block_n = 32;
                  c.stages = 4;
                }).validate(),
                ErrorKind::kUnsupportedConfig, "'schedule'", "softmax_wg");
  CHECK_NOTHROW(with([](auto& c) {
                  c.schedule = MlaSchedule::kSoftmaxWarpgroup;
                  c.block_n = 32;
                  c.stages = 4;
                }).validate());
  REQUIRE_ERROR(with([](auto& c) { c.swizzle = Swizzle::kNone; }).validate(),
                ErrorKind::kUnsupportedConfig, "'swizzle'");
}

TEST_CASE("mla_decode config JSON round-trips and rejects unknown or mistyped fields",
          "[config][mla_decode]") {
  MlaDecodeConfig c;
  c.dtype = DType::kF16;
  c.num_heads = 32;
  c.max_q_len = 8;
  c.page_size = 128;
  c.schedule = MlaSchedule::kSoftmaxWarpgroup;
  const std::string json = c.to_json();
  INFO(json);
  CHECK(json.find("\"num_heads\":32") != std::string::npos);
  CHECK(json.find("\"dtype\":\"f16\"") != std::string::npos);
  CHECK(json.find("\"schedule\":\"softmax_wg\"") != std::string::npos);
  CHECK(MlaDecodeConfig::from_json(R"({"schedule":"seesaw"})").schedule == MlaSchedule::kSeesaw);
  CHECK(json.find(' ') == std::string::npos);  // canonical: no spaces
  CHECK(MlaDecodeConfig::from_json(json) == c);
  CHECK(MlaDecodeConfig::from_json(json).to_json() == json);
  CHECK(MlaDecodeConfig::from_json("{}") == MlaDecodeConfig{});  // missing fields: defaults
  CHECK(MlaDecodeConfig::from_json(R"({"page_size":32})").page_size == 32);
  // Every config a default produces survives the trip (what precompile manifests rely on).
  for (int h : {16, 64, 128})
    for (int q : {1, 2, 8}) {
      const MlaDecodeConfig d = mla_decode_default_config(DType::kBF16, h, q, 64);
      CHECK(MlaDecodeConfig::from_json(d.to_json()) == d);
    }
  CHECK(!c.describe().empty());
  CHECK(c.describe() != MlaDecodeConfig{}.describe());

  REQUIRE_ERROR(MlaDecodeConfig::from_json(R"({"num_head":32})"), ErrorKind::kUnsupportedConfig,
                "'num_head'", "unknown field");
  REQUIRE_ERROR(MlaDecodeConfig::from_json(R"({"num_heads":"32"})"), ErrorKind::kUnsupportedConfig,
                "'num_heads'", "integer");
  REQUIRE_ERROR(MlaDecodeConfig::from_json(R"({"num_heads":200})"), ErrorKind::kUnsupportedConfig,
                "'num_heads'");  // parsed configs are validated
  REQUIRE_ERROR(MlaDecodeConfig::from_json(R"({"dtype":"bf17"})"), ErrorKind::kUnsupportedConfig,
                "'dtype'");
  REQUIRE_ERROR(MlaDecodeConfig::from_json(R"({"swizzle":"16B"})"), ErrorKind::kUnsupportedConfig,
                "'swizzle'");
  REQUIRE_ERROR(MlaDecodeConfig::from_json(R"({"schedule":"pingpong"})"),
                ErrorKind::kUnsupportedConfig, "'schedule'", "seesaw, softmax_wg");
  REQUIRE_ERROR(MlaDecodeConfig::from_json("[1,2]"), ErrorKind::kUnsupportedConfig, "JSON object");
  REQUIRE_ERROR(MlaDecodeConfig::from_json("{"), ErrorKind::kUnsupportedConfig, "invalid JSON");
}

TEST_CASE("the registry describes mla_decode and its default set",
          "[config][registry][mla_decode]") {
  const ops::OpSpec& op = ops::find_op("mla_decode");
  CHECK(op.supports(kSm90a));
  CHECK(!op.supports(kSm100a));  // wgmma: Hopper only
  const std::vector<nlohmann::json> set = op.default_set();
  CHECK(set.size() >= 20);   // h {8,16,32,64,128} × bf16/f16 × two q_len bounds, at least
  CHECK(set.size() <= 100);  // "tens of variants, not hundreds"
  std::set<std::pair<int, std::string>> heads_dtypes;
  for (const nlohmann::json& j : set) {
    INFO(j.dump());
    const MlaDecodeConfig c = MlaDecodeConfig::from_json(j.dump());
    REQUIRE_NOTHROW(c.validate());
    CHECK(op.canonicalize(j) == j);  // the set is already canonical
    heads_dtypes.insert({c.num_heads, std::string(to_string(c.dtype))});
  }
  for (int h : {8, 16, 32, 64, 128})
    for (const char* d : {"bf16", "f16"}) {
      INFO("h " << h << " " << d);
      CHECK(heads_dtypes.count({h, d}) == 1);
    }
}
