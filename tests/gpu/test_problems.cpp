// The harness's problems (harness/*_problem.hpp) — what `attnjit bench` and the tune worker
// run — built, planned, run and judged as an engine would, at test scale.
#include <fmt/format.h>

#include "attnjit/ops/mla_decode.hpp"
#include "harness/mla_problem.hpp"
#include "ops/registry.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/gpu.hpp"

using namespace attnjit;
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
