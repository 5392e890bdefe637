// mla_prefill_sparse on the GPU against the float64 reference: issue 21's correctness list
// (hostile indices and lengths, NaN in every unreferenced row, h 8..128, tokens that are no
// multiple of any tile, sink on and off, lse and max logit checked, paged and flat pools),
// the edges (1 and 0 tokens, topk 1, every length 0, optional outputs absent, more tokens
// than a grid dimension holds), many items a persistent CTA with empty ones among them, one
// plan for every token count, a CUDA-graph replay with new indices, and the checked mode's
// reports.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/ops/mla_prefill_sparse.hpp"
#include "attnjit/runtime.hpp"
#include "driver/driver.hpp"
#include "harness/mla_prefill_sparse_problem.hpp"
#include "harness/problem.hpp"
#include "jit/launch_count.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/gpu.hpp"

using namespace attnjit;
using nlohmann::json;

namespace {

const harness::ProblemKind& kind() { return harness::find_problem("mla_prefill_sparse"); }

// A hostile test-scale case: 37 tokens (no multiple of any tile), 100 indices each (no
// multiple of 32) over a flat pool of 1000 rows, token rows 3 apart, NaN in every row no
// token reads, with `extra` laid over it.
json hostile(const json& extra) {
  json c = {{"tokens", 37}, {"h", 16}, {"topk", 100}, {"pool", 1000}, {"page_size", 0}, {"hostile", 1}};
  for (const auto& [k, v] : extra.items()) c[k] = v;
  return c;
}

std::unique_ptr<harness::Problem> make(const json& c) { return kind().make(c, test::rng()(), 0); }

harness::MlaPrefillSparseHooks& hooks(harness::Problem& p) {
  auto* h = dynamic_cast<harness::MlaPrefillSparseHooks*>(&p);
  REQUIRE(h != nullptr);
  return *h;
}

// Plans with the runtime's choices (or `config` laid over them), poisons the outputs, runs
// once and judges (`sampled_rows` = 0: every token).
void run_and_judge(const json& c, int sampled_rows = 0, const json* config = nullptr) {
  INFO(c.dump() << (config ? " config " + config->dump() : ""));
  const auto p = make(c);
  const harness::Prepared run = p->prepare(config);
  p->poison_output();
  run.run(0);
  const harness::Verdict v = p->check(sampled_rows);
  fmt::print("mla_prefill_sparse [{}]: {}\n", p->describe(), v.summary);
  INFO(v.summary);
  CHECK(v.passed);
}

}  // namespace

TEST_CASE("mla_prefill_sparse passes every test row of its problem", "[gpu][mla_prefill_sparse]") {
  if (!test::gpu_or_skip()) return;
  const std::vector<json> rows = kind().test_cases();
  REQUIRE(rows.size() == kind().bench_cases().size());
  for (const json& c : rows) run_and_judge(c);
}

TEST_CASE("mla_prefill_sparse matches float64 on hostile edges", "[gpu][mla_prefill_sparse]") {
  if (!test::gpu_or_skip()) return;
  for (int h : {8, 16, 32, 64, 128}) run_and_judge(hostile({{"h", h}}));
  for (int topk : {1, 33, 100, 257}) run_and_judge(hostile({{"topk", topk}, {"h", 64}}));
  for (int tokens : {1, 2, 131}) run_and_judge(hostile({{"tokens", tokens}, {"h", 128}}));
  for (const char* sink : {"-inf", "finite", "+inf"}) run_and_judge(hostile({{"sink", sink}}));
  run_and_judge(hostile({{"lens", "token"}, {"h", 32}, {"topk", 300}}));  // -2 .. topk + 5, one 0
  // Paged pools (odd page sizes; the index is page · page_size + offset either way) and
  // the plain view; the stride back to back and padded.
  run_and_judge(hostile({{"page_size", 48}, {"pool", 960}, {"h", 64}}));
  for (int page : {1, 40, 1000}) run_and_judge(hostile({{"page_size", page}, {"h", 64}}));
  run_and_judge(hostile({{"page_size", 0}, {"pad", 0}}));
  run_and_judge(hostile({{"pad", 61}, {"topk", 33}}));
  // Optional outputs absent: out alone still matches.
  run_and_judge(hostile({{"lse", 0}, {"max_logit", 0}, {"h", 64}}));
  run_and_judge(hostile({{"lse", 0}, {"sink", "finite"}}));
  run_and_judge(hostile({{"max_logit", 0}, {"lens", "token"}}));
  // Clean data at a larger size: every row finite, 64-head tiles full.
  run_and_judge(json{{"tokens", 300}, {"h", 128}, {"topk", 2048}, {"pool", 32768}}, 1500);
}

TEST_CASE("mla_prefill_sparse: persistent CTAs walk many items with empty ones among them", "[gpu][mla_prefill_sparse]") {
  if (!test::gpu_or_skip()) return;
  // Several items a CTA (the default is persistent; 700 tokens at h 128 are 1400 items over
  // at most 132 CTAs): the ring's phases and Q's loads carry across items, and an item
  // without keys (lengths -2 .. topk + 5 clamp some to 0; one-key items; every length 0)
  // loads no Q and must leave the count right for the next; h 16 and 32 stage rows past h,
  // which never reach out.
  for (int h : {16, 32, 128}) run_and_judge(hostile({{"tokens", 700}, {"h", h}, {"topk", 130}, {"lens", "token"}}));
  run_and_judge(hostile({{"tokens", 500}, {"h", 64}, {"topk", 1}, {"lens", "token"}}));  // one key: 1-step items
  run_and_judge(hostile({{"tokens", 400}, {"h", 128}, {"lens", "zero"}}));               // no item loads Q
}

TEST_CASE("mla_prefill_sparse's softmax_wg schedule matches float64", "[gpu][mla_prefill_sparse]") {
  if (!test::gpu_or_skip()) return;
  // The default is two_consumers in persistent CTAs.
  const json config = {{"schedule", "softmax_wg"}, {"cluster", 1}, {"persistent", false}};
  for (int h : {16, 128}) run_and_judge(hostile({{"h", h}, {"sink", "finite"}}), 0, &config);
  run_and_judge(hostile({{"lens", "token"}, {"h", 64}, {"topk", 300}, {"page_size", 40}}), 0, &config);
  run_and_judge(hostile({{"lens", "zero"}, {"h", 32}}), 0, &config);  // no step at all
  run_and_judge(hostile({{"topk", 1}, {"h", 128}}), 0, &config);       // one step, one key
  run_and_judge(json{{"tokens", 300}, {"h", 128}, {"topk", 2048}, {"pool", 32768}}, 1500, &config);
}

TEST_CASE("mla_prefill_sparse's two_consumers without persistent CTAs matches float64", "[gpu][mla_prefill_sparse]") {
  if (!test::gpu_or_skip()) return;
  // The default walks the tiles in persistent CTAs (persistent.cuh); one CTA per tile stays
  // selectable, and it is mla_decode_sparse's bf16 default.
  const json config = {{"persistent", false}};
  for (int h : {16, 128}) run_and_judge(hostile({{"h", h}, {"sink", "finite"}, {"lens", "token"}}), 0, &config);
  run_and_judge(hostile({{"lens", "zero"}, {"h", 64}}), 0, &config);
  run_and_judge(json{{"tokens", 300}, {"h", 128}, {"topk", 2048}, {"pool", 32768}}, 1500, &config);
}

TEST_CASE("mla_prefill_sparse at h 128 with the cluster pair matches float64", "[gpu][mla_prefill_sparse]") {
  if (!test::gpu_or_skip()) return;
  // Opt-in cluster 2: the token's two head tiles share each gathered row (pair.cuh).
  const json config = {{"cluster", 2}, {"persistent", false}};
  run_and_judge(hostile({{"h", 128}, {"sink", "finite"}, {"lens", "token"}}), 0, &config);
  run_and_judge(hostile({{"topk", 1}, {"h", 128}}), 0, &config);
  run_and_judge(json{{"tokens", 300}, {"h", 128}, {"topk", 2048}, {"pool", 32768}}, 1500, &config);
}

TEST_CASE("mla_prefill_sparse: every length 0 gives out 0, lse and max logit -inf", "[gpu][mla_prefill_sparse]") {
  if (!test::gpu_or_skip()) return;
  // Every pool row is NaN (no token reads one): a kernel that loads a row anyway fails.
  for (int h : {16, 128}) run_and_judge(hostile({{"lens", "zero"}, {"h", h}, {"sink", "finite"}}));
  run_and_judge(hostile({{"lens", "zero"}, {"topk", 1}, {"pool", 960}, {"page_size", 48}}));
}

TEST_CASE("mla_prefill_sparse with 0 tokens launches nothing and writes nothing", "[gpu][mla_prefill_sparse]") {
  if (!test::gpu_or_skip()) return;
  // The problem's own 0-token case plans and runs.
  const auto empty = make(hostile({{"tokens", 0}, {"lens", "token"}, {"sink", "finite"}}));
  const harness::Prepared run = empty->prepare(nullptr);
  uint64_t launches = jit::launch_count();
  run.run(0);
  CHECK(jit::launch_count() == launches);
  CHECK(empty->check(0).passed);
  // A 1-token problem's buffers seen as 0 tokens: poisoned before, poisoned after.
  const auto p = make(hostile({{"tokens", 1}, {"lens", "token"}}));
  MlaPrefillSparseArgs a = hooks(*p).args();
  const MlaPrefillSparsePlan plan = mla_prefill_sparse_plan(mla_prefill_sparse_shape(a));
  for (TensorView* t : {&a.q, &a.indices, &a.topk_lengths, &a.out, &a.lse, &a.max_logit}) t->shape[0] = 0;
  p->poison_output();
  launches = jit::launch_count();
  mla_prefill_sparse(a, plan, nullptr);
  mla_prefill_sparse(a, nullptr);  // the one-call form too
  harness::synchronize();
  CHECK(jit::launch_count() == launches);
  const std::vector<uint8_t> out = p->output_bytes();
  CHECK(std::all_of(out.begin(), out.end(), [](uint8_t b) { return b == 0xFF; }));
}

TEST_CASE("mla_prefill_sparse: one plan serves every token count", "[gpu][mla_prefill_sparse]") {
  if (!test::gpu_or_skip()) return;
  const auto small = make(hostile({{"tokens", 3}, {"h", 64}, {"sink", "finite"}}));
  const auto large = make(hostile({{"tokens", 300}, {"h", 64}, {"sink", "finite"}, {"lens", "token"}}));
  const MlaPrefillSparseShape shape = mla_prefill_sparse_shape(hooks(*small).args());
  const MlaPrefillSparseShape other = mla_prefill_sparse_shape(hooks(*large).args());
  CHECK(shape.num_heads == other.num_heads);
  CHECK(shape.topk == other.topk);
  const MlaPrefillSparsePlan plan = mla_prefill_sparse_plan(shape);
  CHECK(plan.workspace_bytes == 0);
  for (harness::Problem* p : {small.get(), large.get(), small.get()}) {
    p->poison_output();
    mla_prefill_sparse(hooks(*p).args(), plan, nullptr);
    const harness::Verdict v = p->check(0);
    INFO(p->describe() << ": " << v.summary);
    CHECK(v.passed);
  }
  // The one-call form plans for itself and agrees.
  large->poison_output();
  mla_prefill_sparse(hooks(*large).args(), nullptr);
  CHECK(large->check(0).passed);
}

TEST_CASE("mla_prefill_sparse replays from a CUDA graph with new indices", "[gpu][mla_prefill_sparse][graph]") {
  if (!test::gpu_or_skip()) return;
  const driver::Api& api = driver::api();
  const auto p = make(hostile({{"tokens", 50}, {"h", 128}, {"sink", "finite"}, {"lens", "token"}, {"page_size", 40}}));
  harness::MlaPrefillSparseHooks& h = hooks(*p);
  const MlaPrefillSparseArgs a = h.args();
  const MlaPrefillSparsePlan plan = mla_prefill_sparse_plan(mla_prefill_sparse_shape(a));  // before the capture
  CUstream stream;
  ATTNJIT_CU(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
  ATTNJIT_CU(cuStreamBeginCapture, stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
  mla_prefill_sparse(a, plan, stream);
  CUgraph graph;
  ATTNJIT_CU(cuStreamEndCapture, stream, &graph);
  CUgraphExec exec;
  ATTNJIT_CU(cuGraphInstantiate, &exec, graph, 0);
  for (int round = 0; round < 3; ++round) {
    if (round > 0) h.redraw_indices(test::rng()());  // same buffer, new values
    p->poison_output();
    ATTNJIT_CU(cuGraphLaunch, exec, stream);
    ATTNJIT_CU(cuStreamSynchronize, stream);
    const harness::Verdict v = p->check(0);  // the reference of the indices now held
    INFO("round " << round << ": " << v.summary);
    CHECK(v.passed);
  }
  api.cuGraphExecDestroy(exec);
  api.cuGraphDestroy(graph);
  api.cuStreamDestroy(stream);
}

TEST_CASE("mla_prefill_sparse checked mode names the first bad index or length", "[gpu][mla_prefill_sparse][check]") {
  if (!test::gpu_or_skip()) return;
  const test::CheckModeScope scope(true);
  // Hostile indices hold values past the pool and negatives other than -1.
  const auto p = make(hostile({}));
  const harness::Prepared run = p->prepare(nullptr);
  REQUIRE_ERROR(run.run(0), ErrorKind::kBadArgument, "indices", "ATTNJIT_CHECK", "outside [0, 1000)");
  // Clean indices over a pool of 4 rows but one: 7 = pool rows + 3, written by hand.
  const auto clean = make(json{{"tokens", 5}, {"h", 16}, {"topk", 33}, {"pool", 4}, {"page_size", 2}});
  const MlaPrefillSparseArgs a = hooks(*clean).args();
  const harness::Prepared run_clean = clean->prepare(nullptr);
  REQUIRE_NOTHROW(run_clean.run(0));
  const int32_t seven = 7;
  ATTNJIT_CU(cuMemcpyHtoD, reinterpret_cast<CUdeviceptr>(a.indices.data) + (2 * a.indices.stride(0) + 5) * 4,
             &seven, 4);
  REQUIRE_ERROR(run_clean.run(0), ErrorKind::kBadArgument, "indices", "ATTNJIT_CHECK", "token 2",
                "outside [0, 4)");
  // Clean indices, lengths -2 .. topk + 5.
  const auto q = make(json{{"tokens", 20}, {"h", 16}, {"topk", 100}, {"pool", 1024}, {"lens", "token"}});
  const harness::Prepared run2 = q->prepare(nullptr);
  REQUIRE_ERROR(run2.run(0), ErrorKind::kBadArgument, "topk_lengths", "ATTNJIT_CHECK");
  // Without checked mode the same call runs and matches the clamped reference.
  set_check_mode(false);
  q->poison_output();
  run2.run(0);
  CHECK(q->check(0).passed);
}

TEST_CASE("mla_prefill_sparse runs more tokens than a grid dimension holds", "[gpu][mla_prefill_sparse]") {
  if (!test::gpu_or_skip()) return;
  // 70001 tokens: 65535 is the largest grid y / z; the judged sample holds the first and
  // last tokens and both sides of 65536, and every token's lse and max logit is checked.
  run_and_judge(hostile({{"tokens", 70001}, {"h", 16}, {"topk", 64}, {"pool", 512}, {"lens", "token"},
                         {"sink", "finite"}}),
                3000);
  // h 128: two CTAs per token, 66000 along the token axis.
  run_and_judge(json{{"tokens", 33000}, {"h", 128}, {"topk", 33}, {"pool", 512}, {"page_size", 0}}, 3000);
}
