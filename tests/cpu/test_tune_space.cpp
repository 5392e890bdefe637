// Autotuning search spaces on the CPU: every op's space enumerates valid canonical
// candidates with the default first, static pruning drops what cannot fit (shared memory,
// tile larger than the tensor, more splits than KV tiles) and says why, --space files
// replace the space, and shape buckets group shapes as docs/tuning.md says.
#include <set>

#include "attnjit/error.hpp"
#include "attnjit/ops/tma_copy.hpp"
#include "ops/registry.hpp"
#include "support/catch.hpp"
#include "cli.hpp"
#include "tune/space.hpp"

using namespace attnjit;
using nlohmann::json;

namespace {

bool any_reason_contains(const tune::Space& s, const std::string& text) {
  for (const tune::Pruned& p : s.pruned)
    if (p.reason.find(text) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("tune space: tma_copy candidates are canonical, unique, default first; smem overflow pruned",
          "[tune]") {
  const ops::OpSpec& op = tune::tunable_op("tma_copy");
  const tune::Space s = tune::enumerate(op, {{"rows", 16384}, {"cols", 8192}, {"dtype", "bf16"}});
  REQUIRE(s.candidates.size() > 10);
  CHECK(s.candidates.front() == s.default_candidate);
  CHECK(s.default_candidate == json::parse(tma_copy_default_config(DType::kBF16).to_json()));
  std::set<std::string> seen;
  for (const json& c : s.candidates) {
    CHECK(seen.insert(c.dump()).second);
    CHECK(op.canonicalize(c) == c);  // canonical and valid
    const TmaCopyConfig cfg = TmaCopyConfig::from_json(c.dump());
    CHECK(cfg.dynamic_smem_bytes() <= 232448u);
  }
  // 256 rows × 256 B × 8 stages = 512 KiB cannot fit: pruned with the rule's words.
  CHECK(any_reason_contains(s, "shared memory"));
  for (const tune::Pruned& p : s.pruned) CHECK_FALSE(p.reason.empty());
}

TEST_CASE("tune space: shape-dependent pruning (tile taller than the tensor, splits past the KV tiles)",
          "[tune]") {
  const tune::Space small = tune::enumerate(tune::tunable_op("tma_copy"), {{"rows", 64}, {"cols", 4096}});
  for (const json& c : small.candidates)
    if (c != small.default_candidate) CHECK(c["block_m"].get<int>() <= 64);
  CHECK(any_reason_contains(small, "taller than the tensor's 64 rows"));

  const ops::OpSpec& mla = tune::tunable_op("mla_decode");
  const tune::Space s = tune::enumerate(mla, {{"b", 8}, {"s_k", 256}, {"h", 64}});
  CHECK(s.default_candidate["num_splits"] == 0);
  CHECK(s.default_candidate["num_heads"] == 64);
  std::set<std::pair<int, int>> tiles;
  for (const json& c : s.candidates) {
    tiles.insert({c["block_n"].get<int>(), c["stages"].get<int>()});
    CHECK(c["num_splits"].get<int>() <= 4);  // 256 keys = 4 tiles of 64
  }
  // 64-key tiles fit 2 stages only (MlaDecodeConfig::validate); 32-key tiles fit 2..4.
  CHECK(tiles == std::set<std::pair<int, int>>{{32, 2}, {32, 3}, {32, 4}, {64, 2}});
  CHECK(any_reason_contains(s, "shared memory"));
  CHECK(any_reason_contains(s, "num_splits 8 exceeds the 4 64-key tiles"));
  const auto [config, runtime] = tune::split_candidate(mla, s.candidates.back());
  CHECK_FALSE(config.contains("num_splits"));
  CHECK(runtime.contains("num_splits"));
  CHECK_NOTHROW(mla.canonicalize(config));
}

TEST_CASE("tune space: every candidate of every tunable op has recipes (no NVRTC)", "[tune]") {
  for (const ops::OpSpec& op : ops::registry()) {
    if (!op.tuning.search_space) continue;
    INFO(op.name);
    REQUIRE(op.tuning.canonical_shape);
    REQUIRE(op.tuning.bucket);
    REQUIRE(op.tuning.variants);
    REQUIRE_FALSE(op.tuning.bench_shapes.empty());
    for (const json& shape : op.tuning.bench_shapes) {
      const tune::Space s = tune::enumerate(op, shape);
      CHECK(s.candidates.size() >= 2);
      for (const json& c : s.candidates)
        for (const ops::KernelVariant& v : op.tuning.variants(tune::split_candidate(op, c).first))
          CHECK_NOTHROW(v.op->recipe(v.config, op.archs.front()));
    }
  }
}

TEST_CASE("tune space: --space as a field product or a candidate list; bad fields are usage errors",
          "[tune]") {
  const ops::OpSpec& op = tune::tunable_op("tma_copy");
  const json shape = {{"rows", 4096}, {"cols", 4096}};
  const tune::Space product =
      tune::enumerate(op, shape, json{{"block_m", {64, 128}}, {"stages", {2, 3, 40}}});
  // 2 × 2 valid combinations (+ the default, which is not among them), stages 40 pruned.
  CHECK(product.candidates.size() == 5);
  CHECK(product.pruned.size() == 2);
  CHECK(product.pruned.front().reason.find("stages") != std::string::npos);

  const tune::Space list = tune::enumerate(op, shape, json::array({json{{"swizzle", "128B"}}, json{{"stages", 2}}}));
  REQUIRE(list.candidates.size() == 3);
  CHECK(list.candidates[1]["swizzle"] == "128B");
  CHECK(list.candidates[1]["block_m"] == list.default_candidate["block_m"]);  // changes on the default

  CHECK_THROWS_AS(tune::enumerate(op, shape, json{{"blockm", {64}}}), tune::UsageError);
  CHECK_THROWS_AS(tune::enumerate(op, shape, json::array({1})), tune::UsageError);
  CHECK_THROWS_AS(tune::enumerate(op, shape, json("x")), tune::UsageError);
  CHECK_THROWS_AS(tune::enumerate(op, json{{"rows", 0}}), tune::UsageError);
  CHECK_THROWS_AS(tune::enumerate(op, json{{"depth", 3}}), tune::UsageError);
  CHECK_THROWS_AS(tune::tunable_op("mla_decode_combine"), tune::UsageError);
  CHECK_THROWS_AS(tune::tunable_op("nope"), tune::UsageError);
}

TEST_CASE("tune space: shape buckets (powers of two of lengths, exact dtype/heads/q_len/page)", "[tune]") {
  const ops::TuningSpec& t = ops::find_op("tma_copy").tuning;
  auto tb = [&](int64_t r, int64_t c, const char* d) {
    return t.bucket(t.canonical_shape({{"rows", r}, {"cols", c}, {"dtype", d}}));
  };
  CHECK(tb(16384, 8192, "bf16") == "bf16 rows=2^14 cols=2^13");
  CHECK(tb(10000, 5000, "bf16") == tb(16384, 8192, "bf16"));
  CHECK(tb(16385, 8192, "bf16") != tb(16384, 8192, "bf16"));
  CHECK(tb(16384, 8192, "e4m3") != tb(16384, 8192, "bf16"));
  CHECK(t.bucket(t.canonical_shape(json::object())) == "bf16 rows=2^14 cols=2^13");  // defaults

  const ops::TuningSpec& m = ops::find_op("mla_decode").tuning;
  auto mb = [&](json s) { return m.bucket(m.canonical_shape(s)); };
  CHECK(mb({{"b", 128}, {"s_k", 4096}, {"h", 16}}) == "bf16 h=16 q_len=1 page=64 b=2^7 s_k=2^12");
  CHECK(mb({{"b", 100}, {"s_k", 3000}, {"h", 16}}) == mb({{"b", 128}, {"s_k", 4096}, {"h", 16}}));
  CHECK(mb({{"b", 128}, {"s_k", 4096}, {"h", 32}}) != mb({{"b", 128}, {"s_k", 4096}, {"h", 16}}));
  CHECK(mb({{"q_len", 2}}) != mb({{"q_len", 1}}));
  CHECK_THROWS_AS(m.canonical_shape({{"h", 129}}), Error);
  CHECK_THROWS_AS(m.canonical_shape({{"page", 48}}), Error);
  CHECK_THROWS_AS(m.canonical_shape({{"dtype", "f32"}}), Error);
}

TEST_CASE("tune space: --shape text and describe_change", "[tune]") {
  CHECK(tune::shape_from_text("rows=4096,cols=1024,dtype=bf16") ==
        json{{"rows", 4096}, {"cols", 1024}, {"dtype", "bf16"}});
  CHECK_THROWS_AS(tune::shape_from_text("rows"), tune::UsageError);
  CHECK_THROWS_AS(tune::shape_from_text("rows=1,=2"), tune::UsageError);
  const json d = {{"a", 1}, {"b", "x"}};
  CHECK(tune::describe_change(d, d) == "default");
  CHECK(tune::describe_change({{"a", 2}, {"b", "x"}}, d) == "a=2");
  CHECK(tune::describe_change({{"a", 2}, {"b", "y"}}, d) == "a=2 b=y");
}

// Found by tests/fuzz/fuzz_shape.cpp (its corpus keeps the input, utf8_lse_log2): `--shape`
// text is bytes, and a value that is not valid UTF-8 reached the shape readers' error
// messages, whose json::dump() threw type_error 316 instead of the error being reported
// (an uncaught exception out of `attnjit tune` / `attnjit bench`).
TEST_CASE("tune space: --shape text that is not UTF-8 is a usage error", "[tune][cli]") {
  const std::string bad = "tokens=8192,lse_log2=\x97\x97" "1";
  CHECK_THROWS_AS(tune::shape_from_text(bad), tune::UsageError);
  try {
    attnjit::cli::parse_shape_json(bad);
    FAIL("parse_shape_json accepted invalid UTF-8");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kBadArgument);
    CHECK(std::string(e.what()).find("UTF-8") != std::string::npos);
  }
  // A shape object built in code with such a string: the op's reader still answers with
  // its own Error naming the key.
  for (const auto& op : ops::registry()) {
    if (!op.tuning.canonical_shape) continue;
    INFO(op.name);
    for (const char* key : {"dtype", "rows", "tokens", "b"}) {
      try {
        (void)op.tuning.canonical_shape(json{{key, std::string("\x97")}});
      } catch (const Error& e) {
        CHECK(std::string(e.what()).find(key) != std::string::npos);
      }
    }
  }
}
