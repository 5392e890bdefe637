// mha_fwd without a GPU: config validation and JSON, the registry entry, argument checks
// (all of which run before the driver is touched), and the float64 reference's own sanity
// (hand-computed rows, every mask rule, score mods, sinks, GQA, paging) so that the GPU
// tests judge against something known to be right.
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

using namespace attnjit;

namespace {

constexpr MaskKind kAllMasks[] = {MaskKind::kNone, MaskKind::kCausal, MaskKind::kWindow,
                                  MaskKind::kCausalWindow, MaskKind::kChunked};
constexpr std::pair<int, int> kHeadDims[] = {{64, 64}, {128, 128}, {256, 256}, {192, 128}};

// Runs `call`, which must throw attnjit::Error(kind) whose message names one of `names` as
// an argument ("bad argument: NAME: rule", what fail_arg writes). Several names: a rule
// between two tensors (e.g. h_q vs h_kv) may be reported on either of them.
template <class F>
void require_names(F&& call, ErrorKind kind, std::initializer_list<const char*> names) {
  bool threw = false;
  try {
    call();
  } catch (const Error& e) {
    threw = true;
    const std::string msg = e.what();
    INFO("message: " << msg);
    CHECK(e.kind() == kind);
    bool named = false;
    for (const char* n : names)
      named = named || msg.find(std::string(": ") + n + ":") != std::string::npos ||
              msg.find(std::string("'") + n + "'") != std::string::npos;
    std::string expected;
    for (const char* n : names) expected += std::string(expected.empty() ? "" : " or ") + n;
    INFO("expected the message to name " << expected);
    CHECK(named);
  }
  if (!threw) FAIL("expected attnjit::Error naming " << *names.begin());
}

}  // namespace

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

// ---- argument checks (no GPU: every one runs before the driver is touched) ----------

namespace {

// Fake device addresses: the host checks look at the numbers only, never behind them.
void* fake(int slot, uintptr_t misalign = 0) {
  return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} +
                                 uintptr_t(slot) * (uintptr_t{1} << 28) + misalign);
}

constexpr int64_t B = 2, SQ = 64, SK = 96, HQ = 8, HKV = 2, D = 128;
constexpr int64_t TQ = 100, TK = 150;           // ragged totals
constexpr int64_t PAGES = 10, PAGE = 64, MAXP = 4;  // paged pool: capacity 256 per sequence

TensorView view(int slot, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(fake(slot), dtype, shape);
}

// A valid padded call: q [2, 64, 8, 128], k/v [2, 96, 2, 128], out like q, lse [8, 128].
MhaFwdArgs padded_args() {
  MhaFwdArgs a;
  a.q = view(0, DType::kBF16, {B, SQ, HQ, D});
  a.k = view(1, DType::kBF16, {B, SK, HKV, D});
  a.v = view(2, DType::kBF16, {B, SK, HKV, D});
  a.out = view(3, DType::kBF16, {B, SQ, HQ, D});
  a.lse = view(4, DType::kF32, {HQ, B * SQ});
  a.batch = static_cast<int>(B);
  a.softmax_scale = 0.088f;
  return a;
}

// A valid ragged call: q [100, 8, 128], k/v [150, 2, 128], offsets [3], lse [8, 100].
MhaFwdArgs ragged_args() {
  MhaFwdArgs a;
  a.q = view(0, DType::kBF16, {TQ, HQ, D});
  a.k = view(1, DType::kBF16, {TK, HKV, D});
  a.v = view(2, DType::kBF16, {TK, HKV, D});
  a.out = view(3, DType::kBF16, {TQ, HQ, D});
  a.lse = view(4, DType::kF32, {HQ, TQ});
  a.q_offsets = view(5, DType::kI32, {B + 1});
  a.k_offsets = view(6, DType::kI32, {B + 1});
  a.batch = static_cast<int>(B);
  a.max_seqlen_q = 64;
  a.max_seqlen_k = 96;
  a.softmax_scale = 0.088f;
  return a;
}

// A valid paged call with padded q: k/v pools [10, 64, 2, 128], table [2, 4], kv_lens [2].
MhaFwdArgs paged_args() {
  MhaFwdArgs a = padded_args();
  a.k = view(1, DType::kBF16, {PAGES, PAGE, HKV, D});
  a.v = view(2, DType::kBF16, {PAGES, PAGE, HKV, D});
  a.block_table = view(7, DType::kI32, {B, MAXP});
  a.kv_lens = view(8, DType::kI32, {B});
  return a;
}

MhaFwdConfig config(bool ragged = false, KvLayout layout = KvLayout::kContiguous,
                    MaskKind mask = MaskKind::kNone) {
  return mha_fwd_default_config({.head_dim = static_cast<int>(D),
                                 .head_dim_v = static_cast<int>(D),
                                 .mask = mask,
                                 .ragged = ragged,
                                 .kv_layout = layout,
                                 .page_size = layout == KvLayout::kPaged ? static_cast<int>(PAGE) : 0});
}

// A plan for `a` built by hand (mha_fwd_plan would need the device's SM count and loads
// kernels): the run checks the call against it before touching the device.
MhaFwdPlan plan_of(const MhaFwdArgs& a, const MhaFwdConfig& c, int num_splits) {
  MhaFwdPlan p;
  p.shape = mha_fwd_shape(a, mha_fwd_features(c));
  p.config = c;
  p.num_splits = num_splits;
  p.workspace_bytes = mha_fwd_workspace_bytes(p.shape, num_splits);
  return p;
}

}  // namespace

TEST_CASE("mha_fwd rejects bad arguments before launching", "[config][mha_fwd][args]") {
  const auto bad = ErrorKind::kBadArgument;
  const DType bf16 = DType::kBF16, f16 = DType::kF16, f32 = DType::kF32, i32 = DType::kI32;
  const MhaFwdConfig padded = config();
  const MhaFwdConfig ragged = config(true);
  const MhaFwdConfig paged = config(false, KvLayout::kPaged);
  auto run = [](const MhaFwdArgs& a, const MhaFwdConfig& c) { return [a, c] { mha_fwd(a, nullptr, c); }; };

  SECTION("the valid calls every other section breaks pass the host checks") {
    // The plan of a call's shape runs the host checks and then asks the device for its SM
    // count: a bad argument here would make every "bad" case below prove nothing. Without
    // a GPU the driver refuses afterwards (kDriver); with one, nothing is launched.
    for (auto [a, c] : {std::pair{padded_args(), padded}, {ragged_args(), ragged}, {paged_args(), paged}}) {
      try {
        const int splits = mha_fwd_plan(mha_fwd_shape(a, mha_fwd_features(c)), &c).num_splits;
        CHECK(splits >= 1);  // outside CHECK above, which catches
      } catch (const Error& e) {
        INFO(e.what());
        CHECK(e.kind() != bad);
      }
    }
  }
  SECTION("rank") {
    MhaFwdArgs a = padded_args();
    a.q = view(0, bf16, {B * SQ, HQ, D});
    require_names(run(a, padded), bad, {"q"});
    a = padded_args();
    a.k = view(1, bf16, {B * SK, HKV, D});
    require_names(run(a, padded), bad, {"k"});
    a = padded_args();
    a.v = view(2, bf16, {B * SK, HKV, D});
    require_names(run(a, padded), bad, {"v"});
    a = padded_args();
    a.out = view(3, bf16, {B * SQ, HQ, D});
    require_names(run(a, padded), bad, {"out"});
    a = padded_args();
    a.lse = view(4, f32, {HQ * B * SQ});
    require_names(run(a, padded), bad, {"lse"});
    a = ragged_args();  // a ragged config wants q as [total_q, h, d]
    a.q = view(0, bf16, {B, SQ, HQ, D});
    require_names(run(a, ragged), bad, {"q"});
    a = paged_args();  // a paged pool is [pages, page_size, h_kv, d]
    a.k = view(1, bf16, {PAGES * PAGE, HKV, D});
    require_names(run(a, paged), bad, {"k"});
    a = paged_args();
    a.block_table = view(7, i32, {B * MAXP});
    require_names(run(a, paged), bad, {"block_table"});
    a = paged_args();
    a.kv_lens = view(8, i32, {B, 1});
    require_names(run(a, paged), bad, {"kv_lens"});
    a = ragged_args();
    a.q_offsets = view(5, i32, {1, B + 1});
    require_names(run(a, ragged), bad, {"q_offsets"});
  }
  SECTION("shape") {
    MhaFwdArgs a = padded_args();
    a.k = view(1, bf16, {B, SK, HKV, 64});  // head dim other than the config's
    require_names(run(a, padded), bad, {"k"});
    a = padded_args();
    a.v = view(2, bf16, {B, SK + 1, HKV, D});  // v's keys differ from k's
    require_names(run(a, padded), bad, {"v", "k"});
    a = padded_args();
    a.k = view(1, bf16, {B + 1, SK, HKV, D});
    a.v = view(2, bf16, {B + 1, SK, HKV, D});
    require_names(run(a, padded), bad, {"k", "q"});
    a = padded_args();
    a.out = view(3, bf16, {B, SQ, HQ, 64});
    require_names(run(a, padded), bad, {"out"});
    a = padded_args();
    a.out = view(3, bf16, {B, SQ + 1, HQ, D});
    require_names(run(a, padded), bad, {"out"});
    a = padded_args();
    a.lse = view(4, f32, {B * SQ, HQ});  // [total_q, h_q] is not lse's [h_q, total_q]
    require_names(run(a, padded), bad, {"lse"});
    a = ragged_args();
    a.q_offsets = view(5, i32, {B});  // needs batch + 1 entries (reported against batch)
    require_names(run(a, ragged), bad, {"q_offsets", "batch"});
    a = ragged_args();
    a.k_offsets = view(6, i32, {B + 2});
    require_names(run(a, ragged), bad, {"k_offsets"});
    a = paged_args();
    a.k = view(1, bf16, {PAGES, 32, HKV, D});  // page size other than the config's
    a.v = view(2, bf16, {PAGES, 32, HKV, D});
    require_names(run(a, paged), bad, {"k"});
    a = paged_args();
    a.v = view(2, bf16, {PAGES + 1, PAGE, HKV, D});  // K and V pools share one table
    require_names(run(a, paged), bad, {"v", "k"});
    a = paged_args();
    a.block_table = view(7, i32, {B + 1, MAXP});
    require_names(run(a, paged), bad, {"block_table"});
    a = paged_args();
    a.kv_lens = view(8, i32, {B + 1});
    require_names(run(a, paged), bad, {"kv_lens"});
  }
  SECTION("heads and group") {
    MhaFwdArgs a = padded_args();  // h_q 8 is not a multiple of h_kv 3
    a.k = view(1, bf16, {B, SK, 3, D});
    a.v = view(2, bf16, {B, SK, 3, D});
    require_names(run(a, padded), bad, {"k", "q", "h_kv", "h_q"});
    a = padded_args();
    a.v = view(2, bf16, {B, SK, 1, D});  // k and v disagree on h_kv
    require_names(run(a, padded), bad, {"v", "k"});
    MhaFwdConfig g = padded;
    g.group = 2;  // the config packs 2 query heads per KV head, the call has 8 / 2 = 4
    require_names(run(padded_args(), g), bad, {"group", "q"});
    g.group = 8;
    require_names(run(padded_args(), g), bad, {"group", "q"});
  }
  SECTION("dtype") {
    MhaFwdArgs a = padded_args();
    a.q = view(0, f32, {B, SQ, HQ, D});
    require_names(run(a, padded), bad, {"q"});
    a = padded_args();
    a.k = view(1, f16, {B, SK, HKV, D});  // q bf16, k f16
    require_names(run(a, padded), bad, {"k"});
    a = padded_args();
    a.v = view(2, f16, {B, SK, HKV, D});
    require_names(run(a, padded), bad, {"v"});
    a = padded_args();
    a.out = view(3, f16, {B, SQ, HQ, D});
    require_names(run(a, padded), bad, {"out"});
    a = padded_args();
    a.lse = view(4, bf16, {HQ, B * SQ});
    require_names(run(a, padded), bad, {"lse"});
    a = padded_args();  // consistent f16 tensors against a bf16 config
    a.q.dtype = a.k.dtype = a.v.dtype = a.out.dtype = f16;
    require_names(run(a, padded), bad, {"q", "dtype"});
    a = ragged_args();
    a.q_offsets.dtype = f32;
    require_names(run(a, ragged), bad, {"q_offsets"});
    a = ragged_args();
    a.k_offsets.dtype = DType::kU8;
    require_names(run(a, ragged), bad, {"k_offsets"});
    a = paged_args();
    a.block_table.dtype = f32;
    require_names(run(a, paged), bad, {"block_table"});
    a = paged_args();
    a.kv_lens.dtype = f32;
    require_names(run(a, paged), bad, {"kv_lens"});
    MhaFwdConfig sink = padded;
    sink.sink = true;
    a = padded_args();
    a.sink = view(9, bf16, {HQ});
    require_names(run(a, sink), bad, {"sink"});
    MhaFwdConfig alibi = padded;
    alibi.score_mod = ScoreMod::kAlibi;
    a = padded_args();
    a.alibi_slopes = view(10, bf16, {HQ});
    require_names(run(a, alibi), bad, {"alibi_slopes"});
  }
  SECTION("alignment and strides") {
    using A = MhaFwdArgs;
    for (auto [field, name] : {std::pair{&A::q, "q"}, {&A::k, "k"}, {&A::v, "v"}, {&A::out, "out"},
                               {&A::lse, "lse"}}) {
      MhaFwdArgs a = padded_args();
      (a.*field).data = static_cast<char*>((a.*field).data) + 2;  // misaligned for any type
      require_names(run(a, padded), bad, {name});
    }
    for (auto [field, name] : {std::pair{&A::q_offsets, "q_offsets"}, {&A::k_offsets, "k_offsets"}}) {
      MhaFwdArgs a = ragged_args();
      (a.*field).data = static_cast<char*>((a.*field).data) + 2;
      require_names(run(a, ragged), bad, {name});
    }
    for (auto [field, name] : {std::pair{&A::block_table, "block_table"}, {&A::kv_lens, "kv_lens"}}) {
      MhaFwdArgs a = paged_args();
      (a.*field).data = static_cast<char*>((a.*field).data) + 2;
      require_names(run(a, paged), bad, {name});
    }
    // Last dimension with stride 2 (every other element).
    MhaFwdArgs a = padded_args();
    a.q = TensorView::strided(fake(0), bf16, {B, SQ, HQ, D}, {SQ * HQ * 2 * D, HQ * 2 * D, 2 * D, 2});
    require_names(run(a, padded), bad, {"q"});
    a = padded_args();
    a.v = TensorView::strided(fake(2), bf16, {B, SK, HKV, D}, {SK * HKV * 2 * D, HKV * 2 * D, 2 * D, 2});
    require_names(run(a, padded), bad, {"v"});
  }
  SECTION("layout tensors the config needs") {
    MhaFwdArgs a = ragged_args();
    a.q_offsets.data = nullptr;
    require_names(run(a, ragged), bad, {"q_offsets"});
    a = ragged_args();
    a.k_offsets.data = nullptr;  // contiguous ragged K/V need their own offsets
    require_names(run(a, ragged), bad, {"k_offsets"});
    a = ragged_args();
    a.max_seqlen_q = -1;
    require_names(run(a, ragged), bad, {"max_seqlen_q"});
    a = ragged_args();
    a.max_seqlen_k = -1;
    require_names(run(a, ragged), bad, {"max_seqlen_k"});
    a = paged_args();
    a.block_table.data = nullptr;
    require_names(run(a, paged), bad, {"block_table"});
    a = paged_args();
    a.kv_lens.data = nullptr;
    require_names(run(a, paged), bad, {"kv_lens"});
    a = paged_args();  // 4 pages × 64 = 256 keys per sequence: a larger bound cannot hold
    a.max_seqlen_k = MAXP * PAGE + 1;
    require_names(run(a, paged), bad, {"max_seqlen_k"});
  }
  SECTION("mask, score mod and sink values") {
    for (MaskKind m : {MaskKind::kWindow, MaskKind::kCausalWindow})
      for (int left : {-2, -100}) {
        MhaFwdArgs a = padded_args();
        a.window_left = left;
        require_names(run(a, config(false, KvLayout::kContiguous, m)), bad, {"window_left"});
      }
    for (int right : {-2, -7}) {
      MhaFwdArgs a = padded_args();
      a.window_right = right;
      require_names(run(a, config(false, KvLayout::kContiguous, MaskKind::kWindow)), bad,
                    {"window_right"});
    }
    for (int chunk : {0, -4}) {
      MhaFwdArgs a = padded_args();
      a.chunk = chunk;
      require_names(run(a, config(false, KvLayout::kContiguous, MaskKind::kChunked)), bad, {"chunk"});
    }
    MhaFwdConfig softcap = padded;
    softcap.score_mod = ScoreMod::kSoftcap;
    for (float cap : {0.0f, -30.0f, std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::infinity()}) {
      MhaFwdArgs a = padded_args();
      a.softcap = cap;
      INFO("softcap " << cap);
      require_names(run(a, softcap), bad, {"softcap"});
    }
    for (float scale : {0.0f, -0.1f, std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::infinity()}) {
      MhaFwdArgs a = padded_args();
      a.softmax_scale = scale;
      INFO("softmax_scale " << scale);
      require_names(run(a, padded), bad, {"softmax_scale"});
    }
    MhaFwdConfig sink = padded;
    sink.sink = true;
    MhaFwdArgs a = padded_args();  // the config has a sink, the call none
    require_names(run(a, sink), bad, {"sink"});
    a.sink = view(9, f32, {HQ + 1});
    require_names(run(a, sink), bad, {"sink"});
    MhaFwdConfig alibi = padded;
    alibi.score_mod = ScoreMod::kAlibi;
    a = padded_args();
    require_names(run(a, alibi), bad, {"alibi_slopes"});
    a.alibi_slopes = view(10, f32, {HQ / 2});
    require_names(run(a, alibi), bad, {"alibi_slopes"});
  }
  SECTION("a run's workspace") {
    const MhaFwdArgs a = padded_args();
    const MhaFwdPlan plan = plan_of(a, padded, 4);
    const size_t need = plan.workspace_bytes;
    REQUIRE(need > 0);
    auto run_with = [&](Workspace ws) { return [&a, &plan, ws] { mha_fwd(a, plan, ws, nullptr); }; };
    require_names(run_with({fake(11), need - 1}), bad, {"workspace"});
    require_names(run_with({nullptr, need}), bad, {"workspace"});
    require_names(run_with({fake(11, 4), need}), bad, {"workspace"});  // 16-byte aligned partials
    REQUIRE_ERROR(mha_fwd_schedule(plan, a, {fake(11), need - 1}, nullptr), bad, "workspace",
                  "mha_fwd_plan");
  }
  SECTION("an invalid config is refused as a config") {
    MhaFwdConfig c = padded;
    c.head_dim = 96;
    REQUIRE_ERROR(mha_fwd(padded_args(), nullptr, c), ErrorKind::kUnsupportedConfig, "'head_dim");
  }
}

TEST_CASE("mha_fwd shape and workspace queries", "[config][mha_fwd][args]") {
  const MhaFwdShape s = mha_fwd_shape(padded_args(), mha_fwd_features(config()));
  CHECK(s.batch == B);
  CHECK(s.max_seqlen_q == SQ);
  CHECK(s.max_seqlen_k == SK);
  CHECK(s.total_q == B * SQ);
  CHECK(s.h_q == HQ);
  CHECK(s.h_kv == HKV);
  const MhaFwdShape r = mha_fwd_shape(ragged_args(), mha_fwd_features(config(true)));
  CHECK(r.total_q == TQ);
  CHECK(r.max_seqlen_q == 64);
  CHECK(r.max_seqlen_k == 96);
  const MhaFwdShape p = mha_fwd_shape(paged_args(), mha_fwd_features(config(false, KvLayout::kPaged)));
  CHECK(p.max_seqlen_k == MAXP * PAGE);  // 0: the table's capacity
  CHECK(mha_fwd_workspace_bytes(s, 1) == 0);  // unsplit: outputs written directly
  CHECK(mha_fwd_workspace_bytes(s, 0) == 0);
  const size_t w2 = mha_fwd_workspace_bytes(s, 2);
  const size_t w8 = mha_fwd_workspace_bytes(s, 8);
  CHECK(w2 > 0);
  // The f32 partial outputs of every split, then their lse, 16-byte aligned.
  CHECK(w8 == size_t{8} * B * SQ * HQ * D * 4 + (size_t{8} * B * SQ * HQ * 4 + 15) / 16 * 16);
  CHECK(w8 >= w2);
  MhaFwdShape wide = s;
  wide.features.head_dim_v = 256;
  CHECK(mha_fwd_workspace_bytes(wide, 8) >= w8);
  CHECK(w8 % 16 == 0);
}

TEST_CASE("mha_fwd_plan rejects a bad shape before touching the device", "[config][mha_fwd][args]") {
  const MhaFwdConfig c = config();
  const MhaFwdShape good = mha_fwd_shape(padded_args(), mha_fwd_features(c));
  const auto bad = ErrorKind::kBadArgument;
  auto plan_with = [&](auto edit) {
    MhaFwdShape s = good;
    edit(s);
    return mha_fwd_plan(s, &c);
  };
  REQUIRE_ERROR(plan_with([](MhaFwdShape& s) { s.batch = -1; }), bad, "shape.batch");
  REQUIRE_ERROR(plan_with([](MhaFwdShape& s) { s.max_seqlen_q = -1; }), bad, "shape.max_seqlen_q");
  REQUIRE_ERROR(plan_with([](MhaFwdShape& s) { s.total_q = -1; }), bad, "shape.total_q");
  REQUIRE_ERROR(plan_with([](MhaFwdShape& s) { s.h_kv = 3; }), bad, "shape.h_q", "multiple");
  REQUIRE_ERROR(plan_with([](MhaFwdShape& s) { s.num_splits = 257; }), bad, "shape.num_splits");
  REQUIRE_ERROR(plan_with([](MhaFwdShape& s) { s.num_splits = -1; }), bad, "shape.num_splits");
  REQUIRE_ERROR(plan_with([](MhaFwdShape& s) { s.batch = 300, s.num_splits = 256; }), bad,
                "shape.num_splits", "grid");
  // A config carries the features it was built for: the shape's must be the same.
  REQUIRE_ERROR(plan_with([](MhaFwdShape& s) { s.features.mask = MaskKind::kCausal; }), bad,
                "shape.features.mask");
  REQUIRE_ERROR(plan_with([](MhaFwdShape& s) { s.features.sink = true; }), bad, "shape.features.sink");
  REQUIRE_ERROR(plan_with([](MhaFwdShape& s) { s.features.head_dim = 64; }), bad,
                "shape.features.head_dim");
  REQUIRE_ERROR(plan_with([](MhaFwdShape& s) { s.features.ragged = true; }), bad,
                "shape.features.ragged");
  MhaFwdConfig invalid = c;
  invalid.head_dim = 96;
  REQUIRE_ERROR(mha_fwd_plan(good, &invalid), ErrorKind::kUnsupportedConfig, "'head_dim");
}

TEST_CASE("mha_fwd refuses a call its plan was not made for", "[config][mha_fwd][args]") {
  const auto bad = ErrorKind::kBadArgument;
  const MhaFwdArgs a = padded_args();
  const MhaFwdConfig c = config();
  auto run = [&](const MhaFwdPlan& plan) { mha_fwd(a, plan, {}, nullptr); };
  MhaFwdPlan p = plan_of(a, c, 1);
  p.shape.batch = B + 1;
  REQUIRE_ERROR(run(p), bad, "q", "batch = 3");
  p = plan_of(a, c, 1);
  p.shape.max_seqlen_q = SQ / 2;
  REQUIRE_ERROR(run(p), bad, "q", "max_seqlen_q = 32");
  p = plan_of(a, c, 1);
  p.shape.total_q = B * SQ - 1;  // the plan's workspace would be too small
  p.shape.max_seqlen_q = SQ;
  REQUIRE_ERROR(run(p), bad, "q", "total_q");
  p = plan_of(a, c, 1);
  p.shape.h_kv = 1;
  REQUIRE_ERROR(run(p), bad, "q", "h_q / h_kv");
  p = plan_of(a, c, 1);
  p.num_splits = 0;  // not a plan mha_fwd_plan makes
  REQUIRE_ERROR(run(p), bad, "plan", "num_splits 0");
  // A ragged call against its plan: the bound it sizes the grid with must be the plan's.
  MhaFwdArgs r = ragged_args();
  MhaFwdPlan rp = plan_of(r, config(true), 1);
  r.max_seqlen_q = 63;
  REQUIRE_ERROR(mha_fwd(r, rp, {}, nullptr), bad, "max_seqlen_q", "64");
}

// ---- the float64 reference itself -----------------------------------------------------

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

enum class Form { kPadded, kRagged, kPaged };

// A small problem with random N(0,1) values; K/V rows that no sequence owns are NaN
// (paged: rows past each length, unused pages; ragged: a tail past the last sequence).
struct Tiny {
  Form form;
  int h_q, h_kv, d, dv, page = 4;
  std::vector<int> q_lens, k_lens;
  std::vector<float> q, k, v, sink, slopes;
  std::vector<int32_t> table;
  int max_pages = 0;
  int64_t total_q = 0, kv_rows = 0;

  Tiny(Form f, std::vector<int> ql, std::vector<int> kl, int hq, int hkv, int dd, int ddv,
       uint64_t seed, int page_size = 4)
      : form(f), h_q(hq), h_kv(hkv), d(dd), dv(ddv), page(page_size), q_lens(std::move(ql)),
        k_lens(std::move(kl)) {
    std::mt19937_64 gen(seed);
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (int l : q_lens) total_q += l;
    q.resize(static_cast<size_t>(total_q) * hq * dd);
    for (float& x : q) x = n(gen);
    if (form == Form::kPaged) {
      int used = 0;
      for (int l : k_lens) {
        max_pages = std::max(max_pages, (l + page - 1) / page + 1);
        used += (l + page - 1) / page;
      }
      const int pages = used + 2;
      kv_rows = int64_t{pages} * page;
      k.assign(static_cast<size_t>(kv_rows) * hkv * dd, kNaN);
      v.assign(static_cast<size_t>(kv_rows) * hkv * ddv, kNaN);
      table.assign(k_lens.size() * static_cast<size_t>(max_pages), -1);
      int next = pages - 1;  // pages handed out in reverse order
      for (size_t b = 0; b < k_lens.size(); ++b)
        for (int p = 0; p * page < k_lens[b]; ++p) {
          const int32_t id = next--;
          table[b * static_cast<size_t>(max_pages) + static_cast<size_t>(p)] = id;
          for (int r = 0; r < page && p * page + r < k_lens[b]; ++r) fill_row(int64_t{id} * page + r, n, gen);
        }
    } else {
      for (int l : k_lens) kv_rows += l;
      kv_rows += 3;  // NaN tail
      k.assign(static_cast<size_t>(kv_rows) * hkv * dd, kNaN);
      v.assign(static_cast<size_t>(kv_rows) * hkv * ddv, kNaN);
      for (int64_t r = 0; r < kv_rows - 3; ++r) fill_row(r, n, gen);
    }
  }

  template <class N, class G>
  void fill_row(int64_t r, N& n, G& gen) {
    for (size_t e = 0; e < static_cast<size_t>(h_kv) * d; ++e) k[static_cast<size_t>(r) * h_kv * d + e] = n(gen);
    for (size_t e = 0; e < static_cast<size_t>(h_kv) * dv; ++e) v[static_cast<size_t>(r) * h_kv * dv + e] = n(gen);
  }

  test::MhaProblem problem(double scale = 0.3) const {
    test::MhaProblem p;
    p.batch = static_cast<int>(q_lens.size());
    p.h_q = h_q;
    p.h_kv = h_kv;
    p.d = d;
    p.dv = dv;
    p.q_lens = q_lens;
    p.k_lens = k_lens;
    p.q_starts = test::mha_ragged_starts(q_lens);
    p.total_q = total_q;
    p.q = q;
    p.paged = form == Form::kPaged;
    if (p.paged) {
      p.page_size = page;
      p.max_pages = max_pages;
      p.block_table = table;
    } else {
      p.k_starts = test::mha_ragged_starts(k_lens);
    }
    p.kv_rows = kv_rows;
    p.k = k;
    p.v = v;
    p.softmax_scale = scale;
    return p;
  }

  // Key j of sequence b (for hand computations).
  const float* key(int b, int j, int hk) const { return k.data() + row(b, j) * h_kv * d + hk * d; }
  const float* val(int b, int j, int hk) const { return v.data() + row(b, j) * h_kv * dv + hk * dv; }
  const float* query(int b, int i, int h) const {
    int64_t start = 0;
    for (int s = 0; s < b; ++s) start += q_lens[static_cast<size_t>(s)];
    return q.data() + (static_cast<size_t>(start + i) * h_q + h) * d;
  }
  size_t row(int b, int j) const {
    if (form == Form::kPaged)
      return static_cast<size_t>(table[static_cast<size_t>(b) * max_pages + j / page]) * page + j % page;
    int64_t start = 0;
    for (int s = 0; s < b; ++s) start += k_lens[static_cast<size_t>(s)];
    return static_cast<size_t>(start + j);
  }
};

double dot(const float* a, const float* b, int n) {
  double s = 0;
  for (int e = 0; e < n; ++e) s += double(a[e]) * double(b[e]);
  return s;
}

// Index of row (b, i, h) in a full reference of a problem with these q lengths.
size_t full_index(const std::vector<int>& q_lens, int h_q, int b, int i, int h) {
  int64_t start = 0;
  for (int s = 0; s < b; ++s) start += q_lens[static_cast<size_t>(s)];
  return static_cast<size_t>((start + i) * h_q + h);
}

// Softmax over hand-given scores of keys `js` of (b, hk): out [dv] and lse.
std::pair<std::vector<double>, double> by_hand(const Tiny& t, int b, int hk, const std::vector<int>& js,
                                               const std::vector<double>& scores) {
  const double m = *std::max_element(scores.begin(), scores.end());
  double sum = 0;
  std::vector<double> out(static_cast<size_t>(t.dv), 0.0);
  for (size_t n = 0; n < js.size(); ++n) {
    const double w = std::exp(scores[n] - m);
    sum += w;
    for (int e = 0; e < t.dv; ++e) out[static_cast<size_t>(e)] += w * t.val(b, js[n], hk)[e];
  }
  for (double& x : out) x /= sum;
  return {out, m + std::log(sum)};
}

}  // namespace

TEST_CASE("mha reference: one key gives v, equal scores give the mean", "[reference][mha_fwd]") {
  const Tiny t(Form::kRagged, {1, 3}, {1, 5}, 2, 1, 8, 8, 1);
  test::MhaProblem p = t.problem(0.25);
  const test::MhaReference r = test::mha_reference(p);
  REQUIRE(r.rows.size() == 4 * 2);
  for (int h = 0; h < 2; ++h) {
    const size_t n = full_index(t.q_lens, 2, 0, 0, h);
    CHECK(r.visible[n] == 1);
    CHECK(r.lse[n] == Approx(0.25 * dot(t.query(0, 0, h), t.key(0, 0, 0), 8)).epsilon(1e-12));
    for (int e = 0; e < 8; ++e) CHECK(r.out[n * 8 + e] == Approx(t.val(0, 0, 0)[e]).epsilon(1e-12));
  }
  // A zero query scores every key 0: out = the mean of the visible V rows, lse = log(count).
  Tiny z = t;
  std::fill(z.q.begin(), z.q.end(), 0.0f);
  const test::MhaReference rz = test::mha_reference(z.problem(0.25));
  for (int i = 0; i < 3; ++i) {
    const size_t n = full_index(z.q_lens, 2, 1, i, 1);
    CHECK(rz.visible[n] == 5);
    CHECK(rz.lse[n] == Approx(std::log(5.0)).epsilon(1e-12));
    for (int e = 0; e < 8; ++e) {
      double mean = 0;
      for (int j = 0; j < 5; ++j) mean += z.val(1, j, 0)[e] / 5.0;
      CHECK(rz.out[n * 8 + e] == Approx(mean).epsilon(1e-12));
    }
  }
}

TEST_CASE("mha reference: causal is aligned bottom-right both ways", "[reference][mha_fwd]") {
  // s_q 5 > s_k 3: i' = i − 2, so queries 0 and 1 see nothing, query 2 sees key 0, query 4
  // keys 0..2. s_q 2 < s_k 5: i' = i + 3, query 0 sees keys 0..3, query 1 all 5.
  Tiny t(Form::kPadded, {5, 2}, {3, 5}, 1, 1, 4, 4, 2);
  test::MhaProblem p = t.problem();
  p.mask = MaskKind::kCausal;
  const test::MhaReference r = test::mha_reference(p);
  const std::vector<int64_t> want = {0, 0, 1, 2, 3, 4, 5};
  REQUIRE(r.visible == want);
  for (int i : {0, 1}) {
    CHECK(r.lse[static_cast<size_t>(i)] == -kInf);
    for (int e = 0; e < 4; ++e) CHECK(r.out[static_cast<size_t>(i) * 4 + e] == 0.0);
  }
  for (int e = 0; e < 4; ++e) CHECK(r.out[2 * 4 + e] == Approx(t.val(0, 0, 0)[e]).epsilon(1e-12));
  // Query 3 of sequence 0 by hand: keys 0 and 1.
  const double scale = p.softmax_scale;
  const auto [o, l] = by_hand(t, 0, 0, {0, 1},
                              {scale * dot(t.query(0, 3, 0), t.key(0, 0, 0), 4),
                               scale * dot(t.query(0, 3, 0), t.key(0, 1, 0), 4)});
  CHECK(r.lse[3] == Approx(l).epsilon(1e-12));
  for (int e = 0; e < 4; ++e) CHECK(r.out[3 * 4 + e] == Approx(o[static_cast<size_t>(e)]).epsilon(1e-12));
}

TEST_CASE("mha reference: every mask's interval agrees with the rule written literally",
          "[reference][mha_fwd]") {
  std::mt19937_64 gen(17);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); };
  int64_t checked = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const MaskKind mask = kAllMasks[pick(0, 4)];
    const int s_q = pick(0, 40), s_k = pick(0, 40);
    const int left = pick(-1, 12), right = pick(-1, 12), chunk = pick(1, 9);
    for (int i = 0; i < s_q; ++i) {
      const test::MhaKeyRange r = test::mha_key_range(mask, left, right, chunk, i, s_q, s_k);
      int64_t count = 0;
      for (int j = -3; j < s_k + 3; ++j) {
        const bool vis = test::mha_key_visible(mask, left, right, chunk, i, s_q, s_k, j);
        count += vis;
        if (vis != (j >= r.lo && j <= r.hi)) {
          INFO("mask " << int(mask) << " s_q " << s_q << " s_k " << s_k << " left " << left
                       << " right " << right << " chunk " << chunk << " i " << i << " j " << j);
          REQUIRE(vis == (j >= r.lo && j <= r.hi));
        }
      }
      REQUIRE(count == r.count());
      ++checked;
    }
  }
  CHECK(checked > 10000);
  // Hand-checked points (s_q = s_k = 10 unless said, so i' = i).
  using test::mha_key_visible;
  CHECK(mha_key_visible(MaskKind::kWindow, 2, 1, 0, 5, 10, 10, 3));
  CHECK(mha_key_visible(MaskKind::kWindow, 2, 1, 0, 5, 10, 10, 6));
  CHECK(!mha_key_visible(MaskKind::kWindow, 2, 1, 0, 5, 10, 10, 2));
  CHECK(!mha_key_visible(MaskKind::kWindow, 2, 1, 0, 5, 10, 10, 7));
  CHECK(mha_key_visible(MaskKind::kWindow, -1, 1, 0, 5, 10, 10, 0));   // left unbounded
  CHECK(mha_key_visible(MaskKind::kWindow, 2, -1, 0, 5, 10, 10, 9));   // right unbounded
  CHECK(!mha_key_visible(MaskKind::kCausalWindow, 2, 7, 0, 5, 10, 10, 6));  // right is 0
  CHECK(mha_key_visible(MaskKind::kCausalWindow, 2, 7, 0, 5, 10, 10, 3));
  CHECK(test::mha_key_range(MaskKind::kChunked, -1, -1, 4, 5, 10, 10).lo == 4);  // ⌊5/4⌋ = 1
  CHECK(test::mha_key_range(MaskKind::kChunked, -1, -1, 4, 5, 10, 10).hi == 5);
  CHECK(test::mha_key_range(MaskKind::kChunked, -1, -1, 4, 8, 10, 10).count() == 1);
  CHECK(test::mha_key_range(MaskKind::kChunked, -1, -1, 4, 3, 10, 10).count() == 4);
  // s_q 10 > s_k 4: i' = i − 6; a window reaching right can still see keys from i' < 0.
  CHECK(test::mha_key_range(MaskKind::kWindow, 1, 7, 0, 0, 10, 4).count() == 2);  // keys 0, 1
  CHECK(test::mha_key_range(MaskKind::kChunked, -1, -1, 4, 0, 10, 4).count() == 0);
  CHECK(test::mha_key_range(MaskKind::kCausal, -1, -1, 0, 5, 10, 4).count() == 0);
  CHECK(test::mha_key_range(MaskKind::kNone, -1, -1, 0, 0, 1, 0).count() == 0);  // no keys
}

TEST_CASE("mha reference: window and chunked rows by hand", "[reference][mha_fwd]") {
  const Tiny t(Form::kPadded, {10}, {10}, 1, 1, 4, 4, 3);
  test::MhaProblem p = t.problem(0.5);
  const double s = p.softmax_scale;
  auto score = [&](int i, int j) { return s * dot(t.query(0, i, 0), t.key(0, j, 0), 4); };
  p.mask = MaskKind::kWindow;
  p.window_left = 2;
  p.window_right = 1;
  const test::MhaReference w = test::mha_reference(p);
  {
    const auto [o, l] = by_hand(t, 0, 0, {3, 4, 5, 6}, {score(5, 3), score(5, 4), score(5, 5), score(5, 6)});
    CHECK(w.visible[5] == 4);
    CHECK(w.lse[5] == Approx(l).epsilon(1e-12));
    for (int e = 0; e < 4; ++e) CHECK(w.out[5 * 4 + e] == Approx(o[static_cast<size_t>(e)]).epsilon(1e-12));
  }
  p.mask = MaskKind::kChunked;
  p.chunk = 4;
  const test::MhaReference c = test::mha_reference(p);
  const std::vector<int64_t> want = {1, 2, 3, 4, 1, 2, 3, 4, 1, 2};
  CHECK(c.visible == want);
  {
    const auto [o, l] = by_hand(t, 0, 0, {4, 5, 6}, {score(6, 4), score(6, 5), score(6, 6)});
    CHECK(c.lse[6] == Approx(l).epsilon(1e-12));
    for (int e = 0; e < 4; ++e) CHECK(c.out[6 * 4 + e] == Approx(o[static_cast<size_t>(e)]).epsilon(1e-12));
  }
}

TEST_CASE("mha reference: softcap, ALiBi and sinks follow the formulas", "[reference][mha_fwd]") {
  // Sequence 0: 3 queries over 4 keys (i' = i + 1), causal; sequence 1: 2 queries, 0 keys.
  Tiny t(Form::kRagged, {3, 2}, {4, 0}, 4, 2, 8, 8, 4);
  test::MhaProblem p = t.problem(0.9);  // large scale: the cap matters
  p.mask = MaskKind::kCausal;
  const double s = p.softmax_scale;
  auto raw = [&](int i, int h, int j) { return s * dot(t.query(0, i, h), t.key(0, j, h / 2), 8); };
  const int i = 1, h = 3;  // i' = 2: keys 0..2, KV head 1
  const size_t n = full_index(t.q_lens, 4, 0, i, h);

  SECTION("softcap") {
    p.score_mod = ScoreMod::kSoftcap;
    p.softcap = 1.5;
    const test::MhaReference r = test::mha_reference(p);
    std::vector<double> sc;
    for (int j = 0; j < 3; ++j) sc.push_back(1.5 * std::tanh(raw(i, h, j) / 1.5));
    const auto [o, l] = by_hand(t, 0, 1, {0, 1, 2}, sc);
    CHECK(r.lse[n] == Approx(l).epsilon(1e-12));
    for (int e = 0; e < 8; ++e) CHECK(r.out[n * 8 + e] == Approx(o[static_cast<size_t>(e)]).epsilon(1e-12));
    CHECK(r.lse[n] <= 1.5 + std::log(3.0));  // capped scores bound the lse
  }
  SECTION("alibi") {
    const std::vector<float> slopes = {0.5f, 0.25f, 0.125f, 0.75f};
    p.score_mod = ScoreMod::kAlibi;
    p.alibi_slopes = slopes;
    const test::MhaReference r = test::mha_reference(p);
    std::vector<double> sc;
    for (int j = 0; j < 3; ++j) sc.push_back(raw(i, h, j) - 0.75 * (2 - j));  // −slope·(i' − j)
    const auto [o, l] = by_hand(t, 0, 1, {0, 1, 2}, sc);
    CHECK(r.lse[n] == Approx(l).epsilon(1e-12));
    for (int e = 0; e < 8; ++e) CHECK(r.out[n * 8 + e] == Approx(o[static_cast<size_t>(e)]).epsilon(1e-12));
  }
  SECTION("sinks") {
    const test::MhaReference plain = test::mha_reference(p);
    const std::vector<float> sinks = {0.7f, std::numeric_limits<float>::infinity(),
                                      -std::numeric_limits<float>::infinity(), 2.0f};
    p.sink = sinks;
    const test::MhaReference r = test::mha_reference(p);
    CHECK(r.lse == plain.lse);  // lse excludes the sink
    for (int b = 0; b < 2; ++b)
      for (int qi = 0; qi < t.q_lens[static_cast<size_t>(b)]; ++qi)
        for (int hh = 0; hh < 4; ++hh) {
          const size_t m = full_index(t.q_lens, 4, b, qi, hh);
          INFO("b " << b << " i " << qi << " h " << hh);
          if (b == 1) {  // no key: 0 and −inf whatever the sink
            CHECK(r.lse[m] == -kInf);
            for (int e = 0; e < 8; ++e) CHECK(r.out[m * 8 + e] == 0.0);
            continue;
          }
          const double keep =
              hh == 1 ? 0.0
                      : (hh == 2 ? 1.0
                                 : std::exp(plain.lse[m]) / (std::exp(plain.lse[m]) + std::exp(double(sinks[static_cast<size_t>(hh)]))));
          for (int e = 0; e < 8; ++e) {
            if (hh == 1)
              CHECK(r.out[m * 8 + e] == 0.0);  // +inf: exactly 0
            else
              CHECK(r.out[m * 8 + e] == Approx(plain.out[m * 8 + e] * keep).epsilon(1e-12));
          }
        }
  }
}

TEST_CASE("mha reference: GQA reads KV head h / (h_q / h_kv)", "[reference][mha_fwd]") {
  // h_q 6 over h_kv 2 against the same problem with K/V expanded to 6 heads (MHA).
  const Tiny g(Form::kRagged, {3, 2}, {5, 4}, 6, 2, 8, 4, 5);
  Tiny e = g;
  e.h_kv = 6;
  const int64_t rows = g.kv_rows;
  e.k.assign(static_cast<size_t>(rows) * 6 * 8, 0.0f);
  e.v.assign(static_cast<size_t>(rows) * 6 * 4, 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int h = 0; h < 6; ++h) {
      std::copy_n(g.k.begin() + (r * 2 + h / 3) * 8, 8, e.k.begin() + (r * 6 + h) * 8);
      std::copy_n(g.v.begin() + (r * 2 + h / 3) * 4, 4, e.v.begin() + (r * 6 + h) * 4);
    }
  const test::MhaReference a = test::mha_reference(g.problem());
  const test::MhaReference b = test::mha_reference(e.problem());
  CHECK(a.out == b.out);
  CHECK(a.lse == b.lse);
}

TEST_CASE("mha reference: paged, ragged and padded forms agree; sampling and bad tables",
          "[reference][mha_fwd]") {
  // The same sequences as padded (equal lengths), ragged and paged (reversed pages, NaN in
  // unused rows and pages, -1 past the used pages): the same answer to the last bit.
  const std::vector<int> ql = {7, 7, 7}, kl = {9, 9, 9};
  const Tiny rag(Form::kRagged, ql, kl, 4, 2, 8, 8, 6);
  Tiny pag(Form::kPaged, ql, kl, 4, 2, 8, 8, 6, 4);
  pag.q = rag.q;
  for (int b = 0; b < 3; ++b)
    for (int j = 0; j < 9; ++j)
      for (int hk = 0; hk < 2; ++hk) {
        std::copy_n(rag.key(b, j, hk), 8, pag.k.begin() + static_cast<ptrdiff_t>(pag.row(b, j) * 16 + hk * 8));
        std::copy_n(rag.val(b, j, hk), 8, pag.v.begin() + static_cast<ptrdiff_t>(pag.row(b, j) * 16 + hk * 8));
      }
  for (MaskKind mask : kAllMasks) {
    INFO("mask " << int(mask));
    test::MhaProblem pr = rag.problem(), pp = pag.problem();
    test::MhaProblem pd = pr;
    pd.q_starts = test::mha_padded_starts(3, 7);
    pd.k_starts = test::mha_padded_starts(3, 9);
    for (test::MhaProblem* x : {&pr, &pp, &pd}) {
      x->mask = mask;
      x->window_left = 3;
      x->window_right = 1;
      x->chunk = 3;
    }
    const test::MhaReference a = test::mha_reference(pr);
    const test::MhaReference b = test::mha_reference(pp);
    const test::MhaReference c = test::mha_reference(pd);
    for (double x : b.out) REQUIRE(std::isfinite(x));  // no NaN row was read
    CHECK(a.out == b.out);
    CHECK(a.lse == b.lse);
    CHECK(a.out == c.out);
    // Sampled rows give the same numbers and include every edge row.
    std::mt19937_64 gen(3);
    const auto rows = test::mha_sample_rows(pp, 5, gen);
    for (int s = 0; s < 3; ++s)
      for (int i : {0, 6})
        for (int h : {0, 3}) CHECK(std::find(rows.begin(), rows.end(), test::MhaRow{s, i, h}) != rows.end());
    const test::MhaReference d = test::mha_reference(pp, rows);
    for (size_t n = 0; n < rows.size(); ++n) {
      const size_t full = full_index(ql, 4, rows[n].b, rows[n].i, rows[n].h);
      CHECK(d.lse[n] == b.lse[full]);
      CHECK(d.visible[n] == b.visible[full]);
      for (int e = 0; e < 8; ++e) CHECK(d.out[n * 8 + e] == b.out[full * 8 + e]);
    }
  }
  // A table entry outside the pool for a visible key is a broken test, not silence.
  Tiny bad(Form::kPaged, {1}, {6}, 1, 1, 4, 4, 7, 4);
  bad.table[1] = 1000;  // keys 4, 5 live on logical page 1
  CHECK_THROWS_AS(test::mha_reference(bad.problem()), std::invalid_argument);
  test::MhaProblem p = bad.problem();
  p.mask = MaskKind::kWindow;  // the single query sees keys 0..3 only: page 1 never followed
  p.window_left = 5;
  p.window_right = -1;
  p.k_lens = {4};
  CHECK_NOTHROW(test::mha_reference(p));
}

TEST_CASE("mha_compare catches poison, non-zero empty rows and wrong lse", "[reference][mha_fwd]") {
  // Sequence 1 has no keys; head 1 has a +inf sink: both must be exactly 0.
  Tiny t(Form::kRagged, {3, 2}, {5, 0}, 2, 1, 8, 8, 9);
  t.sink = {0.5f, std::numeric_limits<float>::infinity()};
  test::MhaProblem p = t.problem();
  p.sink = t.sink;
  const test::MhaReference ref = test::mha_reference(p);
  std::vector<float> out(5 * 2 * 8), lse(2 * 5);
  for (size_t n = 0; n < ref.rows.size(); ++n) {
    const auto& r = ref.rows[n];
    const size_t q_row = static_cast<size_t>(p.q_starts[static_cast<size_t>(r.b)] + r.i);
    for (int e = 0; e < 8; ++e) out[(q_row * 2 + r.h) * 8 + e] = float(ref.out[n * 8 + e]);
    lse[static_cast<size_t>(r.h) * 5 + q_row] = float(ref.lse[n]);  // [h_q, total_q]
  }
  CHECK(test::mha_compare(p, ref, out, lse).passed);
  CHECK(test::mha_compare(p, ref, out, {}).passed);  // lse not requested

  auto o = out;
  o[7] = kNaN;  // an element left poisoned
  auto c = test::mha_compare(p, ref, o, lse);
  CHECK(!c.passed);
  CHECK(c.nonfinite_out == 1);
  o = out;
  o[(3 * 2 + 0) * 8 + 3] = 1e-30f;  // q row 3 = (b 1, i 0) sees no key: must be 0
  c = test::mha_compare(p, ref, o, lse);
  CHECK(!c.passed);
  CHECK(c.empty_rows_not_zero == 1);
  o = out;
  o[(1 * 2 + 1) * 8 + 0] = 1e-30f;  // (b 0, i 1, h 1): +inf sink, must be 0
  c = test::mha_compare(p, ref, o, lse);
  CHECK(!c.passed);
  CHECK(c.empty_rows_not_zero == 1);
  o = out;
  for (int e = 0; e < 8; ++e) o[(2 * 2 + 0) * 8 + e] *= 1.1f;  // one row 10% off
  c = test::mha_compare(p, ref, o, lse);
  CHECK(!c.passed);
  CHECK(c.worst_row == test::MhaRow{0, 2, 0});
  CHECK(c.worst_row_err > 0.05);
  auto l = lse;
  l[0 * 5 + 4] = -100.0f;  // (b 1, i 1) sees no key: should be −inf
  c = test::mha_compare(p, ref, out, l);
  CHECK(c.lse_wrong_inf == 1);
  l = lse;
  l[1 * 5 + 0] = -std::numeric_limits<float>::infinity();  // sees keys: must not be −inf
  c = test::mha_compare(p, ref, out, l);
  CHECK(c.lse_wrong_inf == 1);
  l = lse;
  l[1 * 5 + 2] = kNaN;
  c = test::mha_compare(p, ref, out, l);
  CHECK(c.lse_nonfinite == 1);
  l = lse;
  l[1 * 5 + 1] += 0.01f;  // lse is judged on +inf-sink heads too (it excludes the sink)
  c = test::mha_compare(p, ref, out, l);
  CHECK(!c.passed);
  CHECK(c.lse_max_abs_err > 1e-3);
}
