// The harness's problems (harness/*_problem.hpp) — what `attnjit bench` and the tune worker
// run — built, planned, run and judged as an engine would, at test scale.
#include <fmt/format.h>

#include "attnjit/ops/mha_fwd.hpp"
#include "attnjit/ops/mla_decode.hpp"
#include "harness/mha_problem.hpp"
#include "harness/mla_problem.hpp"
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
        R"({"b":128,"q_len":1,"h":128,"s_k":4096,"page":64,"dtype":"bf16","varlen":0,"lse":0,"splits":0})");
  const MlaDecodeCase c = harness::mla_decode_case(
      json{{"b", 3}, {"q_len", 2}, {"h", 16}, {"s_k", 700}, {"page", 32}, {"dtype", "f16"},
           {"varlen", true}, {"lse", 1}, {"splits", 4}});
  CHECK(c.describe() == "b=3 q_len=2 h=16 s_k=700 varlen page=32 f16 +lse");
  CHECK(harness::mla_decode_case(json::parse(c.to_json().dump())).to_json() == c.to_json());
  // Errors name the key; the op's own ranges apply.
  REQUIRE_ERROR(harness::mla_decode_case(json{{"h", 24}}), ErrorKind::kBadArgument, "'h'");
  REQUIRE_ERROR(harness::mla_decode_case(json{{"heads", 16}}), ErrorKind::kBadArgument, "heads");
  REQUIRE_ERROR(harness::mla_decode_case(json{{"varlen", 2}}), ErrorKind::kBadArgument, "'varlen'");
  REQUIRE_ERROR(harness::mla_decode_case(json{{"splits", -1}}), ErrorKind::kBadArgument, "'splits'");
  // The bench list: the registry's tuning shapes, then the mixed-length row.
  const auto bench = harness::mla_decode_bench_cases();
  REQUIRE(bench.size() >= 2);
  CHECK(bench.back().varlen);
  CHECK(static_cast<size_t>(bench.size() - 1) == ops::find_op("mla_decode").tuning.bench_shapes.size());
}

TEST_CASE("the mla_decode bench cases, at test scale, pass the float64 check", "[gpu][mla_decode][harness]") {
  if (!test::gpu_or_skip()) return;
  for (MlaDecodeCase c : harness::mla_decode_bench_cases()) {
    c.b = std::min(c.b, 6);
    c.s_k = std::min(c.s_k, 1500);  // off the page and the tile
    for (bool lse : {false, true}) {
      c.lse = lse;
      INFO(c.describe());
      harness::MlaDecodeProblem p(c, test::rng()());
      const MlaDecodePlan plan = mla_decode_plan(p.shape());
      harness::DeviceBuffer ws(std::max<size_t>(1, plan.workspace_bytes));
      const Workspace w{plan.workspace_bytes ? ws.data() : nullptr, plan.workspace_bytes};
      mla_decode_schedule(plan, p.args(), w, nullptr);
      p.poison_output();
      mla_decode(p.args(), plan, w, nullptr);
      const harness::MlaComparison r = p.check(0);  // every row
      INFO(r.summary());
      CHECK(r.passed);
      CHECK(r.checked_rows == int64_t{c.b} * c.q_len * c.h);
      CHECK(p.flops() > 0);
      CHECK(p.bytes() > static_cast<double>(c.b) * c.q_len * c.h * (576 + 512) * 2);
    }
  }
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

TEST_CASE("the mha_fwd bench cases, at test scale, pass the float64 check", "[gpu][mha_fwd][harness]") {
  if (!test::gpu_or_skip()) return;
  for (MhaFwdCase c : harness::mha_fwd_bench_cases()) {
    if (c.s_q != 1 && c.s_q != 1024) continue;  // one row of each (d, causal) and the decode row
    c.b = 2;
    c.s_q = c.s_q == 1 ? 1 : 333;  // off the tile
    c.s_k = std::min(c.s_k, 777);
    INFO(c.describe());
    harness::MhaFwdProblem p(c, test::rng()());
    const MhaFwdPlan plan = mha_fwd_plan(p.shape());
    harness::DeviceBuffer ws(std::max<size_t>(1, plan.workspace_bytes));
    const Workspace w{plan.workspace_bytes ? ws.data() : nullptr, plan.workspace_bytes};
    mha_fwd_schedule(plan, p.args(), w, nullptr);
    p.poison_output();
    mha_fwd(p.args(), plan, w, nullptr);
    const harness::MhaComparison r = p.check(0);  // every row
    INFO(r.summary());
    CHECK(r.passed);
    CHECK(r.checked_rows > 0);
    CHECK(p.flops() > 0);
  }
}
