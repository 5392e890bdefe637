// mla_decode without a GPU: config validation and JSON, the registry entry, argument
// checks (all of which run before the driver is touched), and the float64 reference's own
// sanity (hand-computed cases, paging, causal rule) so that the GPU tests judge against
// something known to be right.
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

// ---- argument checks (no GPU: every one runs before the driver is touched) ----------

namespace {

// Fake device addresses: the host checks look at the numbers only, never behind them.
void* fake(int slot, uintptr_t misalign = 0) {
  return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} +
                                 uintptr_t(slot) * (uintptr_t{1} << 28) + misalign);
}

constexpr int64_t B = 2, QL = 2, H = 64, PAGES = 10, PAGE = 64, MAXP = 4;

// A valid call: q [2, 2, 64, 576], cache [10, 64, 576], table [2, 4] (capacity 256).
MlaDecodeArgs valid_args() {
  MlaDecodeArgs a;
  a.q = TensorView::contiguous(fake(0), DType::kBF16, {B, QL, H, 576});
  a.kv_cache = TensorView::contiguous(fake(1), DType::kBF16, {PAGES, PAGE, 576});
  a.block_table = TensorView::contiguous(fake(2), DType::kI32, {B, MAXP});
  a.cache_lens = TensorView::contiguous(fake(3), DType::kI32, {B});
  a.out = TensorView::contiguous(fake(4), DType::kBF16, {B, QL, H, 512});
  a.lse = TensorView::contiguous(fake(5), DType::kF32, {B, H, QL});
  a.softmax_scale = 0.0722f;
  return a;
}

MlaDecodeConfig valid_config() {
  MlaDecodeConfig c = mla_decode_default_config(DType::kBF16, H, QL, PAGE);
  c.max_q_len = 2;
  return c;
}

// A plan for valid_args() built by hand (mla_decode_plan would need the device's SM count
// and loads kernels): the run checks the call against it before touching the device.
MlaDecodePlan valid_plan(const MlaDecodeArgs& a, int num_splits) {
  MlaDecodePlan p;
  p.shape = mla_decode_shape(a);
  p.config = valid_config();
  p.num_splits = num_splits;
  p.workspace_bytes = mla_decode_workspace_bytes(p.shape, num_splits);
  return p;
}

// valid_args() with one tensor replaced.
MlaDecodeArgs with(TensorView MlaDecodeArgs::*field, const TensorView& v) {
  MlaDecodeArgs a = valid_args();
  a.*field = v;
  return a;
}
TensorView view(int slot, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(fake(slot), dtype, shape);
}

}  // namespace

TEST_CASE("mla_decode rejects bad arguments before launching", "[mla_decode][args]") {
  const MlaDecodeConfig cfg = valid_config();
  auto call = [&](const MlaDecodeArgs& a, const MlaDecodeConfig* c = nullptr) {
    mla_decode(a, nullptr, c ? c : &cfg);
  };
  const auto bad = ErrorKind::kBadArgument;
  const DType bf16 = DType::kBF16, f32 = DType::kF32, i32 = DType::kI32;
  using A = MlaDecodeArgs;

  SECTION("rank") {
    REQUIRE_ERROR(call(with(&A::q, view(0, bf16, {B * QL, H, 576}))), bad, "q", "rank 4");
    REQUIRE_ERROR(call(with(&A::kv_cache, view(1, bf16, {PAGES * PAGE, 576}))), bad, "kv_cache",
                  "rank 3");
    REQUIRE_ERROR(call(with(&A::block_table, view(2, i32, {B * MAXP}))), bad, "block_table",
                  "rank 2");
    REQUIRE_ERROR(call(with(&A::cache_lens, view(3, i32, {B, 1}))), bad, "cache_lens", "rank 1");
    REQUIRE_ERROR(call(with(&A::out, view(4, bf16, {B * QL, H, 512}))), bad, "out", "rank 4");
    REQUIRE_ERROR(call(with(&A::lse, view(5, f32, {B * H, QL}))), bad, "lse", "rank 3");
  }
  SECTION("shape") {
    REQUIRE_ERROR(call(with(&A::q, view(0, bf16, {B, QL, H, 512}))), bad, "q", "576");
    REQUIRE_ERROR(call(with(&A::kv_cache, view(1, bf16, {PAGES, PAGE, 512}))), bad, "kv_cache",
                  "576");
    // A page size other than the config's.
    REQUIRE_ERROR(call(with(&A::kv_cache, view(1, bf16, {PAGES, 32, 576}))), bad, "kv_cache",
                  "page");
    REQUIRE_ERROR(call(with(&A::out, view(4, bf16, {B, QL, H, 576}))), bad, "out", "512");
    REQUIRE_ERROR(call(with(&A::out, view(4, bf16, {B + 1, QL, H, 512}))), bad, "out");
    REQUIRE_ERROR(call(with(&A::out, view(4, bf16, {B, QL, H / 2, 512}))), bad, "out");
    // [b, q_len, h] is not lse's [b, h, q_len] layout.
    REQUIRE_ERROR(call(with(&A::lse, view(5, f32, {B, QL, H}))), bad, "lse");
    REQUIRE_ERROR(call(with(&A::block_table, view(2, i32, {B + 1, MAXP}))), bad, "block_table");
    REQUIRE_ERROR(call(with(&A::cache_lens, view(3, i32, {B + 1}))), bad, "cache_lens");
  }
  SECTION("dtype") {
    REQUIRE_ERROR(call(with(&A::q, view(0, f32, {B, QL, H, 576}))), bad, "q");
    REQUIRE_ERROR(call(with(&A::kv_cache, view(1, DType::kF16, {PAGES, PAGE, 576}))), bad,
                  "kv_cache");
    REQUIRE_ERROR(call(with(&A::out, view(4, DType::kF16, {B, QL, H, 512}))), bad, "out");
    REQUIRE_ERROR(call(with(&A::lse, view(5, bf16, {B, H, QL}))), bad, "lse");
    REQUIRE_ERROR(call(with(&A::block_table, view(2, f32, {B, MAXP}))), bad, "block_table");
    REQUIRE_ERROR(call(with(&A::cache_lens, view(3, f32, {B}))), bad, "cache_lens");
    // Consistent f16 tensors against a bf16 config.
    MlaDecodeArgs a = valid_args();
    a.q.dtype = a.kv_cache.dtype = a.out.dtype = DType::kF16;
    REQUIRE_ERROR(call(a), bad, "dtype");
  }
  SECTION("alignment and strides") {
    for (auto [field, name, slot] : {std::tuple{&A::q, "q", 0},
                                     {&A::kv_cache, "kv_cache", 1},
                                     {&A::block_table, "block_table", 2},
                                     {&A::cache_lens, "cache_lens", 3},
                                     {&A::out, "out", 4},
                                     {&A::lse, "lse", 5}}) {
      MlaDecodeArgs a = valid_args();
      (a.*field).data = fake(slot, 2);  // 2 bytes off: misaligned for every element type
      REQUIRE_ERROR(call(a), bad, name, "aligned");
    }
    // Last dimension with stride 2 (every other element).
    REQUIRE_ERROR(call(with(&A::q, TensorView::strided(fake(0), bf16, {B, QL, H, 576},
                                                       {QL * H * 1152, H * 1152, 1152, 2}))),
                  bad, "q", "contiguous");
    REQUIRE_ERROR(call(with(&A::kv_cache, TensorView::strided(fake(1), bf16, {PAGES, PAGE, 576},
                                                              {PAGE * 1152, 1152, 2}))),
                  bad, "kv_cache", "contiguous");
    REQUIRE_ERROR(call(with(&A::out, TensorView::strided(fake(4), bf16, {B, QL, H, 512},
                                                         {QL * H * 1024, H * 1024, 1024, 2}))),
                  bad, "out", "contiguous");
  }
  SECTION("against the config") {
    MlaDecodeConfig more_heads = cfg;
    more_heads.num_heads = 128;
    REQUIRE_ERROR(call(valid_args(), &more_heads), bad, "num_heads");
    MlaDecodeConfig single = cfg;
    single.max_q_len = 1;  // q_len 2 > max_q_len 1
    REQUIRE_ERROR(call(valid_args(), &single), bad, "max_q_len");
    MlaDecodeConfig invalid = cfg;
    invalid.num_heads = 200;
    REQUIRE_ERROR(call(valid_args(), &invalid), ErrorKind::kUnsupportedConfig, "'num_heads'");
  }
  SECTION("a run's workspace") {
    const MlaDecodeArgs a = valid_args();
    const MlaDecodePlan plan = valid_plan(a, 4);
    const size_t need = plan.workspace_bytes;
    REQUIRE(need > 0);
    auto run = [&](Workspace ws) { mla_decode(a, plan, ws, nullptr); };
    REQUIRE_ERROR(run({fake(6), need - 1}), bad, "workspace", "mla_decode_plan");
    REQUIRE_ERROR(run({nullptr, need}), bad, "workspace");
    REQUIRE_ERROR(run({fake(6, 4), need}), bad, "workspace", "16-byte aligned");
    REQUIRE_ERROR(mla_decode_schedule(plan, a, {fake(6), need - 1}, nullptr), bad, "workspace");
  }
}

TEST_CASE("mla_decode_plan rejects a bad shape before touching the device", "[mla_decode][args]") {
  const MlaDecodeConfig cfg = valid_config();
  const MlaDecodeShape good = mla_decode_shape(valid_args());
  CHECK(good.batch == B);
  CHECK(good.q_len == QL);
  CHECK(good.num_heads == H);
  CHECK(good.page_size == PAGE);
  CHECK(good.max_pages == MAXP);
  CHECK_FALSE(good.ragged);
  const auto bad = ErrorKind::kBadArgument;
  auto plan_with = [&](auto edit) {
    MlaDecodeShape s = good;
    edit(s);
    return mla_decode_plan(s, &cfg);
  };
  // The table holds 4 pages × 64 = 256 rows: a longer bound cannot be honoured.
  REQUIRE_ERROR(plan_with([](MlaDecodeShape& s) { s.max_len = MAXP * PAGE + 1; }), bad,
                "shape.max_len", "256");
  REQUIRE_ERROR(plan_with([](MlaDecodeShape& s) { s.max_len = -1; }), bad, "shape.max_len");
  REQUIRE_ERROR(plan_with([](MlaDecodeShape& s) { s.num_splits = -1; }), bad, "shape.num_splits");
  REQUIRE_ERROR(plan_with([](MlaDecodeShape& s) { s.num_splits = 257; }), bad, "shape.num_splits");
  REQUIRE_ERROR(plan_with([](MlaDecodeShape& s) { s.batch = -1; }), bad, "shape.batch");
  REQUIRE_ERROR(plan_with([](MlaDecodeShape& s) { s.q_len = 3; }), bad, "shape.q_len",
                "max_q_len = 2");
  REQUIRE_ERROR(plan_with([](MlaDecodeShape& s) { s.q_len = 0; }), bad, "shape.q_len");
  REQUIRE_ERROR(plan_with([](MlaDecodeShape& s) { s.num_heads = 32; }), bad, "shape.num_heads");
  REQUIRE_ERROR(plan_with([](MlaDecodeShape& s) { s.page_size = 32; }), bad, "shape.page_size");
  REQUIRE_ERROR(plan_with([](MlaDecodeShape& s) { s.dtype = DType::kF16; }), bad, "shape.dtype");
  REQUIRE_ERROR(plan_with([](MlaDecodeShape& s) { s.max_pages = 0; }), bad, "shape.max_pages");
  // The config's own rules come first, naming the field.
  MlaDecodeConfig invalid = cfg;
  invalid.num_heads = 200;
  REQUIRE_ERROR(mla_decode_plan(good, &invalid), ErrorKind::kUnsupportedConfig, "'num_heads'");
}

TEST_CASE("mla_decode refuses a call its plan was not made for", "[mla_decode][args]") {
  const auto bad = ErrorKind::kBadArgument;
  const MlaDecodeArgs a = valid_args();
  auto run = [&](const MlaDecodeArgs& call, const MlaDecodePlan& plan) {
    mla_decode(call, plan, {}, nullptr);
  };
  // Each field of the shape, changed in the plan only.
  MlaDecodePlan p = valid_plan(a, 1);
  p.shape.batch = B + 1;
  REQUIRE_ERROR(run(a, p), bad, "q", "batch = 3");
  p = valid_plan(a, 1);
  p.shape.max_pages = MAXP * 2;
  REQUIRE_ERROR(run(a, p), bad, "block_table", "max_pages = 8");
  p = valid_plan(a, 1);
  p.shape.q_len = 1;
  REQUIRE_ERROR(run(a, p), bad, "q", "q_len = 1");
  p = valid_plan(a, 1);
  p.shape.ragged = true;
  REQUIRE_ERROR(run(a, p), bad, "q_offsets", "ragged form");
  p = valid_plan(a, 1);
  p.num_splits = 0;  // not a plan mla_decode_plan makes
  REQUIRE_ERROR(run(a, p), bad, "plan", "num_splits 0");
  // The config's head count, page size and dtype are checked against the tensors.
  p = valid_plan(a, 1);
  p.config.num_heads = 32;
  REQUIRE_ERROR(run(a, p), bad, "q", "num_heads = 32");
}

namespace {

constexpr int64_t TQ = 3;  // ragged: 3 query tokens over B = 2 sequences

// A valid ragged call: q [3, 64, 576] with q_offsets [3] and max_q_len 2.
MlaDecodeArgs ragged_args() {
  MlaDecodeArgs a = valid_args();
  a.q = TensorView::contiguous(fake(0), DType::kBF16, {TQ, H, 576});
  a.q_offsets = TensorView::contiguous(fake(7), DType::kI32, {B + 1});
  a.max_q_len = 2;
  a.out = TensorView::contiguous(fake(4), DType::kBF16, {TQ, H, 512});
  a.lse = TensorView::contiguous(fake(5), DType::kF32, {H, TQ});
  return a;
}

}  // namespace

TEST_CASE("mla_decode ragged q: the form's own argument rules", "[mla_decode][args]") {
  const MlaDecodeConfig cfg = valid_config();
  auto call = [&](const MlaDecodeArgs& a) { mla_decode(a, nullptr, &cfg); };
  const auto bad = ErrorKind::kBadArgument;
  const DType bf16 = DType::kBF16, f32 = DType::kF32, i32 = DType::kI32;

  // The valid call passes every host check: without a GPU it fails only at the driver.
  try {
    call(ragged_args());
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.kind() != bad);
  }
  auto ragged_with = [](TensorView MlaDecodeArgs::*field, const TensorView& v) {
    MlaDecodeArgs a = ragged_args();
    a.*field = v;
    return a;
  };
  using A = MlaDecodeArgs;
  SECTION("q, out and lse take the ragged layouts") {
    REQUIRE_ERROR(call(ragged_with(&A::q, view(0, bf16, {1, TQ, H, 576}))), bad, "q", "rank 3",
                  "total_q");
    REQUIRE_ERROR(call(ragged_with(&A::out, view(4, bf16, {1, TQ, H, 512}))), bad, "out",
                  "[total_q, h, 512]");
    REQUIRE_ERROR(call(ragged_with(&A::out, view(4, bf16, {TQ + 1, H, 512}))), bad, "out");
    REQUIRE_ERROR(call(ragged_with(&A::lse, view(5, f32, {TQ, H}))), bad, "lse", "[h, total_q]");
    // The padded form's lse [b, h, q_len] is not the ragged one.
    REQUIRE_ERROR(call(ragged_with(&A::lse, view(5, f32, {B, H, 2}))), bad, "lse");
  }
  SECTION("q_offsets") {
    REQUIRE_ERROR(call(ragged_with(&A::q_offsets, view(7, i32, {B + 1, 1}))), bad, "q_offsets",
                  "rank 1");
    REQUIRE_ERROR(call(ragged_with(&A::q_offsets, view(7, i32, {0}))), bad, "q_offsets");
    REQUIRE_ERROR(call(ragged_with(&A::q_offsets, view(7, f32, {B + 1}))), bad,
                  "q_offsets");
    MlaDecodeArgs a = ragged_args();
    a.q_offsets.data = fake(7, 2);
    REQUIRE_ERROR(call(a), bad, "q_offsets", "aligned");
    // b comes from q_offsets: one more sequence than the table and lengths have.
    REQUIRE_ERROR(call(ragged_with(&A::q_offsets, view(7, i32, {B + 2}))), bad, "block_table");
  }
  SECTION("max_q_len") {
    MlaDecodeArgs a = ragged_args();
    a.max_q_len = 0;  // required: it sizes the grid
    REQUIRE_ERROR(call(a), bad, "max_q_len", "ragged");
    a.max_q_len = 3;  // over the config's bound of 2
    REQUIRE_ERROR(call(a), bad, "max_q_len", "1..max_q_len = 2");
    // Padded calls take q_len from q: a different max_q_len is a contradiction.
    a = valid_args();
    a.max_q_len = 1;
    REQUIRE_ERROR(call(a), bad, "max_q_len", "padded");
  }
  SECTION("the shape and the split workspace use the bound") {
    const MlaDecodeArgs a = ragged_args();
    const MlaDecodeShape shape = mla_decode_shape(a);
    CHECK(shape.ragged);
    CHECK(shape.batch == B);
    CHECK(shape.q_len == 2);  // the max_q_len bound, not total_q
    const MlaDecodePlan plan = valid_plan(a, 4);
    CHECK(plan.workspace_bytes == mla_decode_workspace_bytes(valid_plan(valid_args(), 4).shape, 4));
    REQUIRE_ERROR(mla_decode(a, plan, {fake(6), plan.workspace_bytes - 1}, nullptr), bad,
                  "workspace");
  }
}

TEST_CASE("mla_decode workspace query", "[mla_decode][args]") {
  MlaDecodeShape s = mla_decode_shape(valid_args());
  CHECK(mla_decode_workspace_bytes(s, 1) == 0);  // unsplit: outputs written directly
  const size_t w2 = mla_decode_workspace_bytes(s, 2);
  const size_t w8 = mla_decode_workspace_bytes(s, 8);
  CHECK(w2 > 0);
  CHECK(w8 >= w2);
  CHECK(w8 % 16 == 0);
  // Partials: b × splits × q_len × h rows of 512 f32, then their lse, 16-byte aligned.
  CHECK(w2 == size_t{B} * 2 * QL * H * 512 * 4 + (size_t{B} * 2 * QL * H * 4 + 15) / 16 * 16);
  s.batch *= 4;
  CHECK(mla_decode_workspace_bytes(s, 8) >= w8);
  s.batch /= 4;
  s.num_heads *= 2;
  CHECK(mla_decode_workspace_bytes(s, 8) >= w8);
}

// ---- the float64 reference itself -----------------------------------------------------

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A small problem whose cache is NaN except for each sequence's rows below its length.
struct TinyProblem {
  int batch, q_len, heads, page, pages, max_pages;
  std::vector<float> q, cache;
  std::vector<int32_t> table, lens;

  TinyProblem(int b, int ql, int h, int pg, std::vector<int32_t> lengths, uint64_t seed)
      : batch(b), q_len(ql), heads(h), page(pg), lens(std::move(lengths)) {
    std::mt19937_64 gen(seed);
    std::normal_distribution<float> n(0.0f, 1.0f);
    max_pages = 0;
    int used = 0;
    for (int l : lens) {
      max_pages = std::max(max_pages, (l + pg - 1) / pg + 1);
      used += (l + pg - 1) / pg;
    }
    pages = used + 2;
    std::vector<int32_t> order(static_cast<size_t>(pages));
    for (int i = 0; i < pages; ++i) order[static_cast<size_t>(i)] = pages - 1 - i;  // reversed
    q.resize(static_cast<size_t>(b) * ql * h * 576);
    for (float& x : q) x = n(gen);
    cache.assign(static_cast<size_t>(pages) * pg * 576, kNaN);
    table.assign(static_cast<size_t>(b) * max_pages, -1);
    size_t next = 0;
    for (int s = 0; s < b; ++s)
      for (int p = 0; p * pg < lens[static_cast<size_t>(s)]; ++p) {
        const int32_t page_id = order[next++];
        table[static_cast<size_t>(s) * max_pages + p] = page_id;
        for (int r = 0; r < pg && p * pg + r < lens[static_cast<size_t>(s)]; ++r)
          for (int d = 0; d < 576; ++d)
            cache[(static_cast<size_t>(page_id) * pg + r) * 576 + d] = n(gen);
      }
  }

  test::MlaProblem problem(double scale = 0.1) const {
    test::MlaProblem p;
    p.batch = batch;
    p.q_len = q_len;
    p.num_heads = heads;
    p.page_size = page;
    p.num_pages = pages;
    p.max_pages = max_pages;
    p.q = q;
    p.kv_cache = cache;
    p.block_table = table;
    p.cache_lens = lens;
    p.softmax_scale = scale;
    return p;
  }
  const float* key(int b, int j) const {
    const int32_t pg = table[static_cast<size_t>(b) * max_pages + j / page];
    return cache.data() + (static_cast<size_t>(pg) * page + j % page) * 576;
  }
  const float* query(int b, int t, int h) const {
    return q.data() + ((static_cast<size_t>(b) * q_len + t) * heads + h) * 576;
  }
};

double dot576(const float* a, const float* b) {
  double s = 0;
  for (int d = 0; d < 576; ++d) s += double(a[d]) * double(b[d]);
  return s;
}

}  // namespace

TEST_CASE("mla reference: hand-computed rows, causal rule and empty rows", "[mla_reference]") {
  // Sequence 0: L = 1 (q_len 3: queries 0, 1 see nothing, query 2 sees key 0).
  // Sequence 1: L = 2 (query 0 nothing, 1 sees key 0, 2 sees keys 0 and 1).
  // Sequence 2: L = 0. Page size 16 (so one partial page each); NaN everywhere else.
  const TinyProblem tp(3, 3, 2, 16, {1, 2, 0}, 7);
  const double scale = 0.1;
  const test::MlaReference ref = test::mla_reference(tp.problem(scale));
  REQUIRE(ref.rows.size() == 3 * 3 * 2);
  auto idx = [](int b, int t, int h) { return static_cast<size_t>((b * 3 + t) * 2 + h); };
  const double inf = std::numeric_limits<double>::infinity();
  for (int h = 0; h < 2; ++h) {
    for (auto [b, t] : std::initializer_list<std::pair<int, int>>{
             {0, 0}, {0, 1}, {1, 0}, {2, 0}, {2, 1}, {2, 2}}) {
      const size_t i = idx(b, t, h);
      CHECK(ref.visible[i] == 0);
      CHECK(ref.lse[i] == -inf);
      for (int d = 0; d < 512; ++d) CHECK(ref.out[i * 512 + d] == 0.0);
    }
    // One key: out = its first 512 dims, lse = its score.
    for (auto [b, t] : std::initializer_list<std::pair<int, int>>{{0, 2}, {1, 1}}) {
      const size_t i = idx(b, t, h);
      CHECK(ref.visible[i] == 1);
      CHECK(ref.lse[i] == Approx(scale * dot576(tp.query(b, t, h), tp.key(b, 0))).epsilon(1e-12));
      for (int d = 0; d < 512; ++d) CHECK(ref.out[i * 512 + d] == Approx(tp.key(b, 0)[d]));
    }
    // Two keys: the softmax mix, by hand.
    const size_t i = idx(1, 2, h);
    CHECK(ref.visible[i] == 2);
    const double s0 = scale * dot576(tp.query(1, 2, h), tp.key(1, 0));
    const double s1 = scale * dot576(tp.query(1, 2, h), tp.key(1, 1));
    const double m = std::max(s0, s1);
    const double w0 = std::exp(s0 - m), w1 = std::exp(s1 - m);
    CHECK(ref.lse[i] == Approx(m + std::log(w0 + w1)).epsilon(1e-12));
    for (int d = 0; d < 512; ++d)
      CHECK(ref.out[i * 512 + d] ==
            Approx((w0 * tp.key(1, 0)[d] + w1 * tp.key(1, 1)[d]) / (w0 + w1)).epsilon(1e-12));
  }
}

TEST_CASE("mla reference: page order and sampling do not change the answer", "[mla_reference]") {
  TinyProblem tp(2, 2, 4, 16, {70, 33}, 11);
  const test::MlaReference a = test::mla_reference(tp.problem());
  for (double x : a.out) REQUIRE(std::isfinite(x));  // no NaN row was read
  // Move every page to a new slot (rotate the pool) and rewrite the table to match.
  TinyProblem moved = tp;
  for (int p = 0; p < tp.pages; ++p) {
    const int to = (p + 3) % tp.pages;
    std::copy_n(tp.cache.begin() + static_cast<ptrdiff_t>(p) * 16 * 576, 16 * 576,
                moved.cache.begin() + static_cast<ptrdiff_t>(to) * 16 * 576);
  }
  for (int32_t& e : moved.table)
    if (e >= 0) e = (e + 3) % tp.pages;
  const test::MlaReference b = test::mla_reference(moved.problem());
  CHECK(a.out == b.out);
  CHECK(a.lse == b.lse);
  // A sampled subset gives the same numbers for its rows and includes every edge row.
  std::mt19937_64 gen(3);
  const auto rows = test::mla_sample_rows(tp.problem(), 5, gen);
  for (int s = 0; s < 2; ++s)
    for (int t : {0, 1})
      for (int h : {0, 3})
        CHECK(std::find(rows.begin(), rows.end(), test::MlaRow{s, t, h}) != rows.end());
  const test::MlaReference c = test::mla_reference(tp.problem(), rows);
  for (size_t i = 0; i < rows.size(); ++i) {
    const size_t full = static_cast<size_t>((rows[i].b * 2 + rows[i].t) * 4 + rows[i].h);
    CHECK(c.lse[i] == a.lse[full]);
    for (int d = 0; d < 512; ++d) CHECK(c.out[i * 512 + d] == a.out[full * 512 + d]);
  }
}

TEST_CASE("mla reference: bad table entries for visible keys are refused", "[mla_reference]") {
  TinyProblem tp(1, 1, 1, 16, {20}, 5);
  tp.table[1] = tp.pages;  // key 16..19 live on logical page 1
  CHECK_THROWS_AS(test::mla_reference(tp.problem()), std::invalid_argument);
  tp.lens[0] = 16;  // page 1 no longer visible: its garbage entry is never followed
  CHECK_NOTHROW(test::mla_reference(tp.problem()));
}

TEST_CASE("mla_compare catches poison, non-zero empty rows and wrong lse", "[mla_reference]") {
  const TinyProblem tp(2, 2, 2, 16, {40, 1}, 9);  // sequence 1: query 0 sees no key
  const test::MlaProblem p = tp.problem();
  const test::MlaReference ref = test::mla_reference(p);
  std::vector<float> out(2 * 2 * 2 * 512), lse(2 * 2 * 2);
  for (size_t i = 0; i < ref.rows.size(); ++i) {
    const auto& r = ref.rows[i];
    for (int d = 0; d < 512; ++d)
      out[((static_cast<size_t>(r.b) * 2 + r.t) * 2 + r.h) * 512 + d] = float(ref.out[i * 512 + d]);
    lse[(static_cast<size_t>(r.b) * 2 + r.h) * 2 + r.t] = float(ref.lse[i]);
  }
  CHECK(test::mla_compare(p, ref, out, lse).passed);
  CHECK(test::mla_compare(p, ref, out, {}).passed);  // lse not requested

  auto o = out;
  o[7] = kNaN;  // an element left poisoned
  auto c = test::mla_compare(p, ref, o, lse);
  CHECK(!c.passed);
  CHECK(c.nonfinite_out == 1);
  o = out;
  o[((1 * 2 + 0) * 2 + 1) * 512 + 3] = 1e-30f;  // (b 1, t 0, h 1) sees no key: must be 0
  c = test::mla_compare(p, ref, o, lse);
  CHECK(!c.passed);
  CHECK(c.empty_rows_not_zero == 1);
  o = out;
  for (int d = 0; d < 512; ++d) o[d] *= 1.1f;  // one row 10% off
  c = test::mla_compare(p, ref, o, lse);
  CHECK(!c.passed);
  CHECK(c.worst_row == test::MlaRow{0, 0, 0});
  CHECK(c.worst_row_err > 0.05);
  auto l = lse;
  l[(1 * 2 + 0) * 2 + 0] = -100.0f;  // should be -inf
  c = test::mla_compare(p, ref, out, l);
  CHECK(c.lse_wrong_inf == 1);
  l = lse;
  l[0] += 0.01f;
  c = test::mla_compare(p, ref, out, l);
  CHECK(!c.passed);
  CHECK(c.lse_max_abs_err > 1e-3);
}
