// The harness's problems (harness/problem.hpp) — what `attnjit bench` and the tune worker
// run — built, planned, run and judged as an engine would, at test scale, for every op in
// runtime/ops/ops.def; and the case vocabularies of mla_decode and mha_fwd.
#include <fmt/format.h>

#include "harness/mha_fwd_problem.hpp"
#include "harness/mla_decode_problem.hpp"
#include "harness/problem.hpp"
#include "ops/registry.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/gpu.hpp"

using namespace attnjit;
using harness::MhaFwdCase;
using harness::MlaDecodeCase;
using nlohmann::json;

TEST_CASE("mla_decode cases read the tuning vocabulary plus the harness keys", "[harness]") {
  const MlaDecodeCase d = harness::mla_decode_case(json::object());
  CHECK(d.to_json().dump() ==
        R"({"b":128,"q_len":1,"h":128,"s_k":4096,"page":64,"dtype":"bf16","varlen":0,"short":0,"long":1,)"
        R"("equal_work":0,"lse":0,"splits":0})");
  const MlaDecodeCase c = harness::mla_decode_case(
      json{{"b", 3}, {"q_len", 2}, {"h", 16}, {"s_k", 700}, {"page", 32}, {"dtype", "f16"},
           {"varlen", true}, {"lse", 1}, {"splits", 4}});
  CHECK(c.describe() == "b=3 q_len=2 h=16 s_k=700 varlen page=32 f16 +lse");
  CHECK(harness::mla_decode_case(json::parse(c.to_json().dump())).to_json() == c.to_json());
  // Errors name the key; the op's own ranges apply.
  REQUIRE_ERROR(harness::mla_decode_case(json{{"h", 129}}), ErrorKind::kBadArgument, "'h'");
  REQUIRE_ERROR(harness::mla_decode_case(json{{"heads", 16}}), ErrorKind::kBadArgument, "heads");
  REQUIRE_ERROR(harness::mla_decode_case(json{{"varlen", 2}}), ErrorKind::kBadArgument, "'varlen'");
  REQUIRE_ERROR(harness::mla_decode_case(json{{"splits", -1}}), ErrorKind::kBadArgument, "'splits'");
  REQUIRE_ERROR(harness::mla_decode_case(json{{"short", 5000}}), ErrorKind::kBadArgument, "'short'");
  REQUIRE_ERROR(harness::mla_decode_case(json{{"short", 64}, {"varlen", 1}}), ErrorKind::kBadArgument, "'short'");
  REQUIRE_ERROR(harness::mla_decode_case(json{{"b", 4}, {"short", 64}, {"long", 5}}), ErrorKind::kBadArgument,
                "'long'");
  const MlaDecodeCase tail = harness::mla_decode_case(json{{"b", 64}, {"s_k", 65536}, {"short", 1024}});
  CHECK(tail.describe() == "b=64 q_len=1 h=128 s_k=65536 1×65536+63×1024 page=64 bf16");
  // The bench list: the registry's tuning shapes, the mixed-length row, two h = 8 rows, then
  // 10 mixed rows each followed by its equal-work uniform row.
  const auto bench = harness::mla_decode_bench_cases();
  const size_t tuned = ops::find_op("mla_decode").tuning.bench_shapes.size();
  REQUIRE(bench.size() == tuned + 3 + 20);
  CHECK(bench[tuned].varlen);
  CHECK(bench[tuned + 2].h == 8);
  for (size_t i = tuned + 3; i < bench.size(); i += 2) {
    CHECK((bench[i].varlen || bench[i].short_len > 0));
    CHECK(!bench[i].equal_work);
    MlaDecodeCase same = bench[i + 1];
    CHECK(same.equal_work);
    same.equal_work = false;
    CHECK(same.to_json() == bench[i].to_json());
  }
}

TEST_CASE("mla_decode_fp8 cases: the issue's rows in both cache forms; bad keys named", "[harness]") {
  const harness::ProblemKind& kind = harness::find_problem("mla_decode_fp8");
  const size_t shapes = ops::find_op("mla_decode_fp8").tuning.bench_shapes.size();
  const std::vector<json> bench = kind.bench_cases();
  REQUIRE(bench.size() == 2 * (shapes + 1));  // each form: the registry's rows + a mixed row
  CHECK(bench[shapes]["varlen"] == 1);
  CHECK(bench.back()["form"] == "three");
  CHECK(kind.test_cases().size() == bench.size());
  // Errors name the key before anything touches the GPU.
  REQUIRE_ERROR(kind.make(json{{"h", 129}}, 1, 0), ErrorKind::kBadArgument, "'h'");
  REQUIRE_ERROR(kind.make(json{{"heads", 16}}, 1, 0), ErrorKind::kBadArgument, "'heads'");
  REQUIRE_ERROR(kind.make(json{{"form", "576"}}, 1, 0), ErrorKind::kBadArgument, "'form'");
  REQUIRE_ERROR(kind.make(json{{"page", 32}}, 1, 0), ErrorKind::kBadArgument, "'page'");
}

TEST_CASE("mla_prefill_sparse cases: the issue's 12 rows, hostile twins; bad keys named", "[harness]") {
  const harness::ProblemKind& kind = harness::find_problem("mla_prefill_sparse");
  const std::vector<json> bench = kind.bench_cases();
  REQUIRE(bench.size() == 12);  // h 128 / 64 × topk 512 / 2048 / 8192 × pools of 32768 / 131072
  for (const json& c : bench) {
    INFO(c.dump());
    CHECK(c["tokens"] == 4096);
    CHECK((c["h"] == 128 || c["h"] == 64));
    CHECK((c["topk"] == 512 || c["topk"] == 2048 || c["topk"] == 8192));
    CHECK((c["pool"] == 32768 || c["pool"] == 131072));
    CHECK(c["hostile"] == 0);
  }
  const std::vector<json> tests = kind.test_cases();
  REQUIRE(tests.size() == bench.size());
  for (const json& c : tests) {
    INFO(c.dump());
    CHECK(c["hostile"] == 1);
    CHECK(c["topk"].get<int>() % 32 != 0);
    CHECK(c["pad"].get<int>() > 0);  // token stride above topk
  }
  // Errors name the key before anything touches the GPU.
  REQUIRE_ERROR(kind.make(json{{"h", 129}}, 1, 0), ErrorKind::kBadArgument, "'h'");
  REQUIRE_ERROR(kind.make(json{{"heads", 16}}, 1, 0), ErrorKind::kBadArgument, "'heads'");
  REQUIRE_ERROR(kind.make(json{{"lens", "seq"}}, 1, 0), ErrorKind::kBadArgument, "'lens'");
  REQUIRE_ERROR(kind.make(json{{"topk", 0}}, 1, 0), ErrorKind::kBadArgument, "'topk'");
  REQUIRE_ERROR(kind.make(json{{"pool", 1000}, {"page_size", 64}}, 1, 0), ErrorKind::kBadArgument, "'page_size'",
                "divide");
}

TEST_CASE("mha_fwd cases read the tuning vocabulary plus seq and splits", "[harness]") {
  const MhaFwdCase d = harness::mha_fwd_case(json::object());
  CHECK(d.to_json().dump() ==
        R"({"b":8,"s_q":4096,"s_k":4096,"h":16,"h_kv":16,"d":128,"dv":128,"causal":0,"dtype":"bf16","group":0,"splits":0})");
  const MhaFwdCase c = harness::mha_fwd_case(json{{"b", 2}, {"seq", 300}, {"h", 8}, {"h_kv", 2}, {"d", 192},
                                                  {"causal", 1}, {"splits", 3}});
  CHECK(c.s_q == 300);
  CHECK(c.s_k == 300);
  CHECK(c.dv == 128);  // the op's default for d 192
  CHECK(c.describe() == "b=2 s_q=300 s_k=300 h=8/2 d=192/128 causal bf16");
  CHECK(harness::mha_fwd_case(json::parse(c.to_json().dump())).to_json() == c.to_json());
  CHECK(harness::mha_fwd_case(json{{"seq", 300}, {"s_k", 900}}).s_k == 900);  // seq fills only what is missing
  REQUIRE_ERROR(harness::mha_fwd_case(json{{"causal", 2}}), ErrorKind::kBadArgument, "'causal'");
  REQUIRE_ERROR(harness::mha_fwd_case(json{{"window", 2}}), ErrorKind::kBadArgument, "window");
  REQUIRE_ERROR(harness::mha_fwd_case(json{{"splits", "x"}}), ErrorKind::kBadArgument, "'splits'");
  const auto bench = harness::mha_fwd_bench_cases();
  REQUIRE(bench.size() == 33);
  CHECK(bench.back().group == 8);
}

TEST_CASE("every op family has one problem, with bench rows and test rows", "[harness]") {
  std::vector<std::string> ops;
  for (const harness::ProblemKind& k : harness::problems()) {
    INFO(k.op);
    CHECK(ops::find_op(k.op).name == k.op);  // a registry family
    CHECK(!ops::find_op(k.op).tuning.bench_shapes.empty());
    CHECK(!k.bench_cases().empty());
    CHECK(!k.test_cases().empty());
    ops.push_back(k.op);
  }
  CHECK(ops == std::vector<std::string>{"tma_copy", "mla_decode", "mha_fwd", "merge_states", "mla_decode_fp8",
                                        "mla_decode_sparse", "mla_prefill_sparse", "mla_decode_branch_fp8"});
  REQUIRE_ERROR(harness::find_problem("mla_decode_combine"), ErrorKind::kUnsupportedConfig,
                "ops with one: tma_copy, mla_decode, mha_fwd, merge_states, mla_decode_fp8, mla_decode_sparse, "
                "mla_prefill_sparse, mla_decode_branch_fp8");
}

// What `attnjit bench` does per row, on every op's test rows: the runtime's plan, poisoned
// output, one run, the whole output judged. Then the heuristic's config given explicitly must
// reproduce that output (the tune worker's reference check), and an output never written
// must fail the check (the check can fail).
TEST_CASE("every op's test rows pass their check as bench and tune run them", "[gpu][harness]") {
  if (!test::gpu_or_skip()) return;
  for (const harness::ProblemKind& kind : harness::problems())
    for (const json& c : kind.test_cases()) {
      INFO(kind.op << " " << c.dump());
      const std::unique_ptr<harness::Problem> p = kind.make(c, test::rng()(), 0);
      CHECK(p->copies() == 1);
      const harness::Prepared runtime = p->prepare(nullptr);
      CHECK(runtime.config_source != "given");
      p->poison_output();
      runtime.run(0);
      const harness::Verdict v = p->check(0);  // every row
      INFO(v.summary);
      CHECK(v.passed);
      CHECK(v.numbers.at("passed") == true);
      CHECK(p->bytes() > 0);
      CHECK(p->flops() >= 0);
      const std::vector<uint8_t> reference = p->output_bytes();

      const harness::Prepared given = p->prepare(&runtime.config);
      CHECK(given.config == runtime.config);
      CHECK(given.config_source == "given");
      p->poison_output();
      given.run(0);
      CHECK(p->compare(reference, p->output_bytes()) == "");

      p->poison_output();
      CHECK_FALSE(p->check(0).passed);
      CHECK(p->compare(reference, p->output_bytes()) != "");
    }
}
