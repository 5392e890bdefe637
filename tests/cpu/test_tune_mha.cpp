// mha_fwd's autotuning on the CPU: its search space enumerates valid canonical candidates
// (the default first: mha_fwd_default_config plus the shape's group and short-call tile),
// pruning says why (shared memory, the register rule, splits off decode-like shapes, splits
// past the KV tiles), buckets group shapes as docs/tuning.md says, and the runtime's
// selection keeps every feature field of the caller's config and falls back without a
// database.
#include <set>
#include <utility>

#include "attnjit/error.hpp"
#include "attnjit/ops/mha_fwd.hpp"
#include "attnjit/tuning.hpp"
#include "ops/mha_fwd/config.hpp"
#include "ops/mha_fwd/internal.hpp"
#include "ops/registry.hpp"
#include "support/catch.hpp"
#include "test_cache_support.hpp"
#include "tune/space.hpp"

using namespace attnjit;
using nlohmann::json;

namespace {

bool any_reason_contains(const tune::Space& s, const std::string& text) {
  for (const tune::Pruned& p : s.pruned)
    if (p.reason.find(text) != std::string::npos) return true;
  return false;
}

json row(int d, int dv, int causal) {  // a bench 8k row: b 4, h = 2048 / dv
  return {{"b", 4}, {"s_q", 8192}, {"s_k", 8192}, {"h", 2048 / dv}, {"d", d}, {"dv", dv}, {"causal", causal}};
}
const json kDecode = {{"b", 64},   {"s_q", 1}, {"s_k", 32768}, {"h", 16},
                      {"h_kv", 2}, {"d", 128}, {"causal", 1},  {"group", 8}};

MhaFwdConfig config_of(const ops::OpSpec& op, const json& candidate) {
  return MhaFwdConfig::from_json(tune::split_candidate(op, candidate).first.dump());
}

}  // namespace

TEST_CASE("tune mha_fwd: every bench shape's space validates, default first, nothing else split",
          "[tune]") {
  const ops::OpSpec& op = tune::tunable_op("mha_fwd");
  CHECK(op.tuning.runtime_fields == std::vector<std::string>{"num_splits"});
  REQUIRE(op.tuning.bench_shapes.size() == 9);
  for (const json& shape : op.tuning.bench_shapes) {
    const tune::Space s = tune::enumerate(op, shape);
    INFO(s.bucket);
    REQUIRE(s.candidates.size() >= 2);
    CHECK(s.candidates.front() == s.default_candidate);
    const bool decode = shape.at("s_q") == 1;
    std::set<std::string> seen;
    std::set<int> splits;
    for (const json& c : s.candidates) {
      CHECK(seen.insert(c.dump()).second);
      CHECK(tune::canonical_candidate(op, c) == c);
      MhaFwdConfig cfg;
      REQUIRE_NOTHROW(cfg = config_of(op, c));
      CHECK_NOTHROW(cfg.validate());
      CHECK(cfg.dynamic_smem_bytes() <= 232448u);
      CHECK(cfg.head_dim_v / 2 + 3 * cfg.block_n / 4 <= 224);
      CHECK(cfg.head_dim == shape.at("d").get<int>());
      CHECK(cfg.mask == (shape.at("causal") == 1 ? MaskKind::kCausal : MaskKind::kNone));
      CHECK(cfg.group == shape.value("group", 0));
      CHECK((cfg.stages == 2 || cfg.stages == 3));
      CHECK(cfg.block_n % 16 == 0);
      CHECK(cfg.block_n >= 64);
      splits.insert(c.at("num_splits").get<int>());
    }
    if (decode)
      CHECK(splits == std::set<int>{0, 1, 2, 4, 8});
    else
      CHECK(splits == std::set<int>{0});
    for (const tune::Pruned& p : s.pruned) CHECK_FALSE(p.reason.empty());
  }
}

TEST_CASE("tune mha_fwd: static pruning names the rule (shared memory, registers, splits)", "[tune]") {
  const ops::OpSpec& op = tune::tunable_op("mha_fwd");
  // Exactly the (block_n, stages) pairs MhaFwdConfig::validate accepts are candidates (the
  // rules themselves live in config.cpp: 227 KiB of shared memory, the register budget).
  for (auto [d, dv] : std::vector<std::pair<int, int>>{{64, 64}, {128, 128}, {256, 256}, {192, 128}}) {
    const tune::Space s = tune::enumerate(op, row(d, dv, 1));
    INFO(s.bucket);
    std::set<std::pair<int, int>> tiles;
    for (const json& c : s.candidates) tiles.insert({c["block_n"].get<int>(), c["stages"].get<int>()});
    for (int block_n = 64; block_n <= 256; block_n += 16)
      for (int stages : {2, 3}) {
        MhaFwdConfig c = config_of(op, s.default_candidate);
        c.block_n = block_n;
        c.stages = stages;
        bool valid = true;
        try {
          c.validate();
        } catch (const Error&) {
          valid = false;
        }
        INFO(block_n << " keys, " << stages << " stages");
        CHECK(tiles.count({block_n, stages}) == (valid ? 1u : 0u));
      }
    CHECK(s.candidates.size() + s.pruned.size() >= 26);
  }
  CHECK(any_reason_contains(tune::enumerate(op, row(128, 128, 0)), "shared memory"));
  CHECK(any_reason_contains(tune::enumerate(op, row(256, 256, 0)), "register"));

  // A --space asking for splits on a prefill shape: pruned; past the KV tiles: pruned; a
  // tile much wider than s_k: pruned.
  const tune::Space forced = tune::enumerate(op, row(128, 128, 0), json{{"num_splits", {0, 4}}});
  CHECK(forced.candidates.size() == 1);
  CHECK(any_reason_contains(forced, "decode-like"));
  const json short_decode = {{"b", 2}, {"s_q", 1}, {"s_k", 256}, {"h", 16}, {"h_kv", 2}, {"group", 8}};
  const tune::Space sd = tune::enumerate(op, short_decode, json{{"block_n", {64, 128}}, {"num_splits", {4, 8}}});
  CHECK(any_reason_contains(sd, "num_splits 8 exceeds the 2 128-key tiles of s_k = 256"));
  for (const json& c : sd.candidates)
    CHECK(c["num_splits"].get<int>() <= (256 + c["block_n"].get<int>() - 1) / c["block_n"].get<int>());
  const tune::Space tiny = tune::enumerate(op, {{"s_q", 64}, {"s_k", 64}, {"d", 64}});
  CHECK(any_reason_contains(tiny, "wider than s_k = 64"));
  for (const json& c : tiny.candidates)
    if (c != tiny.default_candidate) CHECK(c["block_n"].get<int>() < 64 + 16);
}

TEST_CASE("tune mha_fwd: the default candidate is mha_fwd_default_config with the shape's group "
          "(and the short-call tile)",
          "[tune]") {
  const ops::TuningSpec& t = ops::find_op("mha_fwd").tuning;
  for (auto [d, dv] : std::vector<std::pair<int, int>>{{64, 64}, {128, 128}, {256, 256}, {192, 128}})
    for (int causal : {0, 1}) {
      const json c = t.default_candidate(t.canonical_shape(row(d, dv, causal)));
      json want = json::parse(
          mha_fwd_default_config({.head_dim = d, .head_dim_v = dv, .mask = causal ? MaskKind::kCausal : MaskKind::kNone})
              .to_json());
      want["num_splits"] = 0;
      CHECK(c == want);
    }
  // A short causal row: the smaller tile mha_fwd_selected_config runs without a DB entry.
  json short_row = row(64, 64, 1);
  short_row["s_q"] = short_row["s_k"] = 1024;
  CHECK(t.default_candidate(t.canonical_shape(short_row))["block_n"] == 128);
  const MhaFwdConfig dec = mha_fwd_default_config({.mask = MaskKind::kCausal, .group = 8});
  CHECK_FALSE(dec.persistent);
  json want = json::parse(dec.to_json());
  want["num_splits"] = 0;
  CHECK(t.default_candidate(t.canonical_shape(kDecode)) == want);
  // Variants: the main kernel and the combine kernel (dtype, dv of the config).
  const auto v = t.variants(tune::split_candidate(ops::find_op("mha_fwd"), want).first);
  REQUIRE(v.size() == 2);
  CHECK(v[0].op->name == "mha_fwd");
  CHECK(v[1].op->name == "mha_fwd_combine");
  CHECK(v[1].config["head_dim_v"] == 128);
  CHECK_NOTHROW(v[1].op->canonicalize(v[1].config));
}

TEST_CASE("tune mha_fwd: shape buckets (exact heads/dims/dtype/causal/group, powers of two of lengths)",
          "[tune]") {
  const ops::TuningSpec& t = ops::find_op("mha_fwd").tuning;
  auto b = [&](json s) { return t.bucket(t.canonical_shape(s)); };
  CHECK(b(row(128, 128, 0)) == "bf16 d=128 dv=128 causal=0 group=0 h=16 h_kv=16 s_q=2^13 s_k=2^13");
  CHECK(b(kDecode) == "bf16 d=128 dv=128 causal=1 group=8 h=16 h_kv=2 s_q=2^0 s_k=2^15 b=2^6");
  json s = row(128, 128, 0);
  s["s_q"] = 5000;
  s["s_k"] = 4097;
  s["b"] = 7;  // prefill buckets ignore the batch
  CHECK(b(s) == b(row(128, 128, 0)));
  s["s_k"] = 4096;
  CHECK(b(s) != b(row(128, 128, 0)));
  CHECK(b(row(128, 128, 1)) != b(row(128, 128, 0)));
  CHECK(b(row(192, 128, 0)) != b(row(128, 128, 0)));
  json f16 = row(128, 128, 0);
  f16["dtype"] = "f16";
  CHECK(b(f16) != b(row(128, 128, 0)));
  json gqa = row(128, 128, 0);
  gqa["h_kv"] = 4;
  CHECK(b(gqa) != b(row(128, 128, 0)));
  json dec = kDecode;
  dec["b"] = 40;  // decode buckets hold the batch's power of two (it sets the split decision)
  CHECK(b(dec) == b(kDecode));
  dec["b"] = 65;
  CHECK(b(dec) != b(kDecode));
  // Defaults are the bench's: b 8, seq 4096, h 16, d 128, bf16, not causal.
  CHECK(b(json::object()) == "bf16 d=128 dv=128 causal=0 group=0 h=16 h_kv=16 s_q=2^12 s_k=2^12");
  CHECK(t.canonical_shape({{"d", 192}})["dv"] == 128);
  CHECK_THROWS_AS(t.canonical_shape({{"d", 96}}), Error);
  CHECK_THROWS_AS(t.canonical_shape({{"d", 128}, {"dv", 64}}), Error);
  CHECK_THROWS_AS(t.canonical_shape({{"h", 16}, {"h_kv", 3}}), Error);
  CHECK_THROWS_AS(t.canonical_shape({{"h", 16}, {"h_kv", 4}, {"group", 8}}), Error);
  CHECK_THROWS_AS(t.canonical_shape({{"group", 3}}), Error);
  CHECK_THROWS_AS(t.canonical_shape({{"causal", 2}}), Error);
  CHECK_THROWS_AS(t.canonical_shape({{"dtype", "f32"}}), Error);
  CHECK_THROWS_AS(t.canonical_shape({{"seq", 4096}}), Error);
}

TEST_CASE("tune mha_fwd: a tuned tile keeps every feature field of the caller's config", "[tune]") {
  const MhaFwdConfig base = mha_fwd_default_config({.dtype = DType::kF16,
                                                    .mask = MaskKind::kCausal,
                                                    .score_mod = ScoreMod::kSoftcap,
                                                    .ragged = true,
                                                    .group = 4,
                                                    .sink = true});
  const auto c = mha_tuning::apply(base, 128, 2);
  REQUIRE(c);
  MhaFwdConfig want = base;
  want.block_n = 128;
  want.stages = 2;
  CHECK(*c == want);
  CHECK_FALSE(mha_tuning::apply(base, 176, 3));  // 227 KiB: does not validate

  const MhaFwdConfig paged = mha_fwd_default_config(
      {.kv_layout = KvLayout::kPaged, .page_size = 64, .group = 8});
  CHECK_FALSE(mha_tuning::apply(paged, 176, 2));  // paged KV takes power-of-two tiles only
  const auto p = mha_tuning::apply(paged, 64, 3);
  REQUIRE(p);
  CHECK(p->kv_layout == KvLayout::kPaged);
  CHECK(p->page_size == 64);
  CHECK(p->group == 8);
  CHECK(p->block_n == 64);
  CHECK(p->stages == 3);
}

TEST_CASE("tune mha_fwd: mha_fwd_selected_config without a database is the default config",
          "[tune]") {
  test::ScratchDir dir;
  test::ScopedEnv db("ATTNJIT_TUNING_DB", (dir.path / "missing.json").c_str());
  reload_tuning_db();
  const MhaFwdShape a{.features = {.mask = MaskKind::kCausal, .sink = true},
                      .batch = 4,
                      .max_seqlen_q = 8192,
                      .max_seqlen_k = 8192,
                      .total_q = 4 * 8192,
                      .h_q = 16,
                      .h_kv = 16};
  const MhaFwdConfig base = mha_fwd_default_config(a.features);
  CHECK(base.sink);
  CHECK(mha_fwd_selected_config(a) == base);

  // Ragged and paged shapes, a window mask, and an empty shape: the same.
  const MhaFwdShape r{.features = {.head_dim = 64, .head_dim_v = 64, .ragged = true},
                      .batch = 4,
                      .max_seqlen_q = 400,
                      .max_seqlen_k = 1000,
                      .total_q = 1000,
                      .h_q = 8,
                      .h_kv = 8};
  CHECK(mha_fwd_selected_config(r) == mha_fwd_default_config(r.features));
  const MhaFwdShape p{
      .features = {.mask = MaskKind::kCausal, .kv_layout = KvLayout::kPaged, .page_size = 64, .group = 8},
      .batch = 64,
      .max_seqlen_q = 1,
      .max_seqlen_k = 512 * 64,
      .total_q = 64,
      .h_q = 16,
      .h_kv = 2};
  const MhaFwdConfig paged = mha_fwd_default_config(p.features);
  CHECK(mha_fwd_selected_config(p) == paged);
  MhaFwdShape window = a;
  window.features.mask = MaskKind::kWindow;
  CHECK(mha_fwd_selected_config(window) == mha_fwd_default_config(window.features));
  CHECK(mha_fwd_selected_config(MhaFwdShape{}) == mha_fwd_default_config({}));
  // No tuned split count either.
  CHECK(mha_tuning::tuned_splits(paged, {64, 1, 32768, 16, 2}) == 0);

  // A database of another GPU: still the default config (no GPU here, or a mismatch).
  test::write_text(dir.path / "other.json",
                   R"({"attnjit_tuning_db": 1, "environments": [{"fingerprint": {"gpu": "Not A GPU",
                       "sm_count": 1, "arch": "sm_90a", "driver": 1, "nvrtc": "13.0",
                       "attnjit": "0"}, "entries": []}]})");
  test::ScopedEnv other("ATTNJIT_TUNING_DB", (dir.path / "other.json").c_str());
  reload_tuning_db();
  CHECK(mha_fwd_selected_config(a) == base);
  reload_tuning_db();
}
