// mha_fwd without a GPU: config validation and JSON, the short-call tile rule and the
// registry entry. Argument checks: test_mha_fwd_args.cpp; the float64 reference's own
// sanity: test_mha_fwd_reference.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attnjit/ops/mha_fwd.hpp"
#include "ops/mha_fwd/config.hpp"
#include "ops/registry.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/harness.hpp"
#include "cpu/mha_fwd_sweep.hpp"

using namespace attnjit;
using test::kAllMasks;
using test::kHeadDims;

// ---- config --------------------------------------------------------------------------

TEST_CASE("mha_fwd default configs are valid for every head dim, mask and layout",
          "[config][mha_fwd]") {
  REQUIRE_NOTHROW(MhaFwdConfig{}.validate());
  for (DType dtype : {DType::kBF16, DType::kF16})
    for (auto [d, dv] : kHeadDims)
      for (MaskKind mask : kAllMasks)
        for (bool ragged : {false, true})
          for (auto [layout, page] : {std::pair{KvLayout::kContiguous, 0}, {KvLayout::kPaged, 16},
                                      {KvLayout::kPaged, 64}, {KvLayout::kPaged, 256}}) {
            INFO(to_string(dtype) << " d " << d << " dv " << dv << " mask " << int(mask)
                                  << " ragged " << ragged << " paged " << page);
            const MhaFwdConfig c = mha_fwd_default_config({.dtype = dtype, .head_dim = d, .head_dim_v = dv, .mask = mask, .ragged = ragged, .kv_layout = layout, .page_size = page});
            REQUIRE_NOTHROW(c.validate());
            CHECK(c.dtype == dtype);
            CHECK(c.head_dim == d);
            CHECK(c.head_dim_v == dv);
            CHECK(c.mask == mask);
            CHECK(c.ragged == ragged);
            CHECK(c.kv_layout == layout);
            CHECK(c.page_size == page);
            CHECK(c.score_mod == ScoreMod::kNone);
            CHECK(c.group == 0);
            CHECK(!c.sink);
            CHECK(c.dynamic_smem_bytes() > 0);
            CHECK(c.dynamic_smem_bytes() <= 232448u);  // opt-in limit per block on H100
            // The features added on top of a default stay valid (what the GPU tests do).
            MhaFwdConfig f = c;
            f.score_mod = ScoreMod::kSoftcap;
            f.sink = true;
            CHECK_NOTHROW(f.validate());
            f.score_mod = ScoreMod::kAlibi;
            CHECK_NOTHROW(f.validate());
            for (int g : {2, 4, 8, 16}) {
              MhaFwdConfig gq = c;
              gq.group = g;
              INFO("group " << g);
              CHECK_NOTHROW(gq.validate());
            }
          }
}

TEST_CASE("mha_fwd config validation names the field", "[config][mha_fwd]") {
  auto with = [](auto&& edit) {
    MhaFwdConfig c;
    edit(c);
    return c;
  };
  const auto unsupported = ErrorKind::kUnsupportedConfig;
  for (DType d : {DType::kF32, DType::kE4M3, DType::kI32})
    REQUIRE_ERROR(with([&](auto& c) { c.dtype = d; }).validate(), unsupported, "'dtype'");
  for (int d : {0, -64, 32, 96, 160, 512})  // 64, 128, 192, 256
    REQUIRE_ERROR(with([&](auto& c) { c.head_dim = c.head_dim_v = d; }).validate(), unsupported,
                  "'head_dim");
  // dv = d, or 128 with d = 192.
  for (auto [d, dv] : {std::pair{128, 64}, {64, 128}, {256, 128}, {192, 64}})
    REQUIRE_ERROR(with([&](auto& c) {
                    c.head_dim = d;
                    c.head_dim_v = dv;
                  }).validate(),
                  unsupported, "'head_dim_v'");
  for (int m : {0, -128, 100, 64, 256})  // 128 or 192
    REQUIRE_ERROR(with([&](auto& c) { c.block_m = m; }).validate(), unsupported, "'block_m'");
  // Three warpgroups cap registers at 168: d64 takes up to 128 keys, d128 up to 85.
  with([](auto& c) {
    c.block_m = 192;
    c.head_dim = c.head_dim_v = 64;
    c.block_n = 128;
  }).validate();
  REQUIRE_ERROR(with([](auto& c) {
                  c.block_m = 192;
                  c.head_dim = c.head_dim_v = 64;
                  c.block_n = 144;
                }).validate(),
                unsupported, "'block_n'");
  REQUIRE_ERROR(with([](auto& c) {
                  c.block_m = 192;
                  c.block_n = 96;
                }).validate(),
                unsupported, "'block_n'");
  // Persistent: two consumer warpgroups next to the producer, at 232 registers each.
  REQUIRE_ERROR(with([](auto& c) {
                  c.persistent = true;
                  c.block_m = 192;
                  c.head_dim = c.head_dim_v = 64;
                  c.block_n = 64;
                }).validate(),
                unsupported, "'persistent'");
  with([](auto& c) {
    c.persistent = true;
    c.head_dim = c.head_dim_v = 64;
    c.block_n = 208;
  }).validate();
  REQUIRE_ERROR(with([](auto& c) {
                  c.persistent = true;
                  c.head_dim = c.head_dim_v = 64;
                  c.block_n = 224;
                }).validate(),
                unsupported, "'block_n'");
  REQUIRE_ERROR(with([](auto& c) {
                  c.persistent = true;
                  c.block_n = 176;
                }).validate(),
                unsupported, "'block_n'");
  for (int n : {0, -16, 8, 100, 272, 512})  // multiple of 16 in 16..256
    REQUIRE_ERROR(with([&](auto& c) { c.block_n = n; }).validate(), unsupported, "'block_n'");
  for (int s : {0, -1})
    REQUIRE_ERROR(with([&](auto& c) { c.stages = s; }).validate(), unsupported, "'stages'");
  // Four stages of 64-key K and V tiles at d 256 (64 KiB each) next to a 64 KiB Q tile
  // cannot fit in 227 KiB.
  REQUIRE_ERROR(with([](auto& c) {
                  c.head_dim = c.head_dim_v = 256;
                  c.block_n = 64;
                  c.stages = 4;
                }).validate(),
                unsupported, "'stages'");
  for (int p : {0, 8, 48, 100, 512})  // paged: power of two in 16..256
    REQUIRE_ERROR(with([&](auto& c) {
                    c.kv_layout = KvLayout::kPaged;
                    c.page_size = p;
                  }).validate(),
                  unsupported, "'page_size'");
  REQUIRE_ERROR(with([](auto& c) { c.page_size = 64; }).validate(), unsupported,
                "'page_size'");  // contiguous K/V: 0
  for (int g : {-1, 1, 3, 6, 32})  // 0 or 2, 4, 8, 16
    REQUIRE_ERROR(with([&](auto& c) { c.group = g; }).validate(), unsupported, "'group'");
  REQUIRE_ERROR(with([](auto& c) { c.mask = static_cast<MaskKind>(9); }).validate(), unsupported,
                "'mask'");
  REQUIRE_ERROR(with([](auto& c) { c.score_mod = static_cast<ScoreMod>(9); }).validate(),
                unsupported, "'score_mod'");
  REQUIRE_ERROR(with([](auto& c) { c.kv_layout = static_cast<KvLayout>(9); }).validate(),
                unsupported, "'kv_layout'");
}

TEST_CASE("mha_fwd config JSON round-trips and rejects unknown or mistyped fields",
          "[config][mha_fwd]") {
  MhaFwdConfig c;
  c.dtype = DType::kF16;
  c.head_dim = 192;
  c.head_dim_v = 128;
  c.mask = MaskKind::kChunked;
  c.score_mod = ScoreMod::kSoftcap;
  c.ragged = true;
  c.kv_layout = KvLayout::kPaged;
  c.page_size = 64;
  c.group = 4;
  c.sink = true;
  c.persistent = true;
  REQUIRE_NOTHROW(c.validate());
  const std::string json = c.to_json();
  INFO(json);
  CHECK(json.find("\"persistent\":true") != std::string::npos);
  CHECK(json.find("\"head_dim\":192") != std::string::npos);
  CHECK(json.find("\"dtype\":\"f16\"") != std::string::npos);
  CHECK(json.find("\"mask\":\"chunked\"") != std::string::npos);
  CHECK(json.find(' ') == std::string::npos);  // canonical: no spaces
  CHECK(MhaFwdConfig::from_json(json) == c);
  CHECK(MhaFwdConfig::from_json(json).to_json() == json);
  CHECK(MhaFwdConfig::from_json("{}") == MhaFwdConfig{});  // missing fields: defaults
  CHECK(MhaFwdConfig::from_json(R"({"mask":"causal_window"})").mask == MaskKind::kCausalWindow);
  // Every default survives the trip, and enum names are the to_string names.
  for (DType dtype : {DType::kBF16, DType::kF16})
    for (auto [d, dv] : kHeadDims)
      for (MaskKind mask : kAllMasks)
        for (auto [layout, page] : {std::pair{KvLayout::kContiguous, 0}, {KvLayout::kPaged, 64}}) {
          const MhaFwdConfig x = mha_fwd_default_config({.dtype = dtype, .head_dim = d, .head_dim_v = dv, .mask = mask, .ragged = true, .kv_layout = layout, .page_size = page});
          CHECK(MhaFwdConfig::from_json(x.to_json()) == x);
          CHECK(x.to_json().find(std::string("\"") + std::string(to_string(mask)) + "\"") !=
                std::string::npos);
        }
  CHECK(to_string(MaskKind::kNone) == "none");
  CHECK(to_string(MaskKind::kCausal) == "causal");
  CHECK(to_string(MaskKind::kWindow) == "window");
  CHECK(to_string(MaskKind::kCausalWindow) == "causal_window");
  CHECK(to_string(MaskKind::kChunked) == "chunked");
  CHECK(to_string(ScoreMod::kSoftcap) == "softcap");
  CHECK(to_string(ScoreMod::kAlibi) == "alibi");
  CHECK(to_string(KvLayout::kPaged) == "paged");
  CHECK(to_string(KvLayout::kContiguous) == "contiguous");
  CHECK(!c.describe().empty());
  CHECK(c.describe() != MhaFwdConfig{}.describe());

  REQUIRE_ERROR(MhaFwdConfig::from_json(R"({"head_dims":128})"), ErrorKind::kUnsupportedConfig,
                "'head_dims'", "unknown field");
  REQUIRE_ERROR(MhaFwdConfig::from_json(R"({"head_dim":"128"})"), ErrorKind::kUnsupportedConfig,
                "'head_dim'", "integer");
  REQUIRE_ERROR(MhaFwdConfig::from_json(R"({"head_dim":96,"head_dim_v":96})"),
                ErrorKind::kUnsupportedConfig, "'head_dim");  // parsed configs are validated
  REQUIRE_ERROR(MhaFwdConfig::from_json(R"({"mask":"diagonal"})"), ErrorKind::kUnsupportedConfig,
                "'mask'");
  REQUIRE_ERROR(MhaFwdConfig::from_json(R"({"score_mod":"relu"})"), ErrorKind::kUnsupportedConfig,
                "'score_mod'");
  REQUIRE_ERROR(MhaFwdConfig::from_json(R"({"kv_layout":"blocked"})"),
                ErrorKind::kUnsupportedConfig, "'kv_layout'");
  REQUIRE_ERROR(MhaFwdConfig::from_json(R"({"dtype":"bf17"})"), ErrorKind::kUnsupportedConfig,
                "'dtype'");
  REQUIRE_ERROR(MhaFwdConfig::from_json("[1,2]"), ErrorKind::kUnsupportedConfig, "JSON object");
  REQUIRE_ERROR(MhaFwdConfig::from_json("{"), ErrorKind::kUnsupportedConfig, "invalid JSON");
}

TEST_CASE("mha_fwd short calls take a smaller key tile only where it pays",
          "[config][mha_fwd]") {
  auto tile = [](int d, MaskKind m, int64_t s_k, KvLayout l = KvLayout::kContiguous) {
    const MhaFwdConfig base = mha_fwd_default_config({.head_dim = d, .head_dim_v = d, .mask = m, .kv_layout = l, .page_size = l == KvLayout::kPaged ? 64 : 0});
    const int n = ops::mha_short_call_block_n(base, s_k);
    if (n > 0) {  // whatever it picks is a valid config of the same features
      MhaFwdConfig c = base;
      c.block_n = n;
      CHECK_NOTHROW(c.validate());
    }
    return n;
  };
  // Persistent d64 causal: 128 keys up to 2k (the diagonal tile's masked half), then 192.
  CHECK(tile(64, MaskKind::kCausal, 1024) == 128);
  CHECK(tile(64, MaskKind::kCausal, 2048) == 128);
  CHECK(tile(64, MaskKind::kCausal, 4096) == 0);
  CHECK(tile(64, MaskKind::kNone, 1024) == 0);  // 208 keys, unmasked, at every length
  // Persistent d128 (160 keys): 128 up to 2k when causal, and unmasked where 160's last
  // tile pads over 5 % more keys than 128's.
  CHECK(tile(128, MaskKind::kCausal, 1024) == 128);
  CHECK(tile(128, MaskKind::kCausal, 4096) == 0);
  CHECK(tile(128, MaskKind::kNone, 1024) == 128);  // 6.4 tiles of 160: 9 % padding
  CHECK(tile(128, MaskKind::kNone, 1536) == 0);    // 4 % padding
  CHECK(tile(128, MaskKind::kNone, 4096) == 0);    // 1.6 % padding
  // The grid launch (what packed groups run): d64 causal 64 keys up to 4k; d128 128 keys up
  // to 2k when causal, and unmasked where 192-key tiles leave a wasteful partial last tile.
  auto grid_tile = [](int d, MaskKind m, int64_t s_k) {
    MhaFwdConfig base = mha_fwd_default_config({.head_dim = d, .head_dim_v = d, .mask = m});
    base.group = 8;
    base = ops::mha_grid_for_packed_groups(base);
    REQUIRE_FALSE(base.persistent);
    return ops::mha_short_call_block_n(base, s_k);
  };
  CHECK(grid_tile(64, MaskKind::kCausal, 4096) == 64);
  CHECK(grid_tile(64, MaskKind::kCausal, 8192) == 0);
  CHECK(grid_tile(64, MaskKind::kNone, 1024) == 0);
  CHECK(grid_tile(128, MaskKind::kCausal, 1024) == 128);
  CHECK(grid_tile(128, MaskKind::kCausal, 4096) == 0);
  CHECK(grid_tile(128, MaskKind::kNone, 1024) == 128);  // 5⅓ tiles of 192: 12.5 % padding
  CHECK(grid_tile(128, MaskKind::kNone, 1536) == 0);    // 8 whole tiles
  CHECK(grid_tile(128, MaskKind::kNone, 2048) == 0);    // 3 % padding
  // Other head dims, masks and layouts keep the default; so does an unknown length.
  CHECK(tile(256, MaskKind::kCausal, 1024) == 0);
  CHECK(tile(128, MaskKind::kWindow, 1024) == 0);
  CHECK(tile(128, MaskKind::kCausal, 1024, KvLayout::kPaged) == 0);
  CHECK(tile(128, MaskKind::kCausal, 0) == 0);
}

TEST_CASE("the registry describes mha_fwd and its default set", "[config][registry][mha_fwd]") {
  const ops::OpSpec& op = ops::find_op("mha_fwd");
  CHECK(op.supports(kSm90a));
  const std::vector<nlohmann::json> set = op.default_set();
  REQUIRE(!set.empty());
  std::set<std::tuple<int, int, std::string>> dims_dtypes;
  for (const nlohmann::json& j : set) {
    INFO(j.dump());
    const MhaFwdConfig c = MhaFwdConfig::from_json(j.dump());
    REQUIRE_NOTHROW(c.validate());
    CHECK(op.canonicalize(j) == j);  // the set is already canonical
    dims_dtypes.insert({c.head_dim, c.head_dim_v, std::string(to_string(c.dtype))});
  }
  for (auto [d, dv] : kHeadDims) {  // every head dim the op serves is precompiled in bf16
    INFO("d " << d << " dv " << dv);
    CHECK(dims_dtypes.count({d, dv, "bf16"}) == 1);
  }
}
