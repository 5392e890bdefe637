// mha_fwd argument checks without a GPU: every rule on the tensors, the shape and
// workspace queries, and the plan checks all run before the driver is touched.
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

// Runs `call`, which must throw attnjit::Error(kind) whose message names one of `names` as
// an argument ("bad argument: NAME: rule", what fail_arg writes), and launch nothing (as
// REQUIRE_REFUSED). Several names: a rule between two tensors (e.g. h_q vs h_kv) may be
// reported on either of them.
template <class F>
void require_names(F&& call, ErrorKind kind, std::initializer_list<const char*> names) {
  const uint64_t launches = jit::launch_count();
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
  CHECK(jit::launch_count() == launches);
}

}  // namespace

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
  }
  SECTION("missing pointer") {
    using A = MhaFwdArgs;
    for (auto [field, name] : {std::pair{&A::q, "q"}, {&A::k, "k"}, {&A::v, "v"}, {&A::out, "out"}}) {
      MhaFwdArgs a = padded_args();
      (a.*field).data = nullptr;  // the right shape, no memory
      const std::string named = std::string(name) + ": ";
      REQUIRE_REFUSED(run(a, padded)(), bad, named.c_str(), "got null");
    }
    // lse is optional: no pointer, no lse written (the host checks pass).
    MhaFwdArgs a = padded_args();
    a.lse.data = nullptr;
    REQUIRE_NOTHROW(mha_fwd_schedule(plan_of(a, padded, 1), a, {}, nullptr));
  }
  SECTION("device") {
    // Every tensor a call sets lives on q's device, by name.
    MhaFwdArgs a = padded_args();
    a.lse.device = 1;
    REQUIRE_REFUSED(run(a, padded)(), bad, "lse: ", "is on device 1 but q is on device 0");
    a = ragged_args();
    a.k_offsets.device = 1;
    REQUIRE_REFUSED(run(a, ragged)(), bad, "k_offsets: ", "is on device 1");
    a = paged_args();
    a.block_table.device = 1;
    REQUIRE_REFUSED(run(a, paged)(), bad, "block_table: ", "is on device 1");
    a = padded_args();
    a.v.device = 1;
    REQUIRE_REFUSED(run(a, padded)(), bad, "v: ", "is on device 1");
  }
  SECTION("capacity against the length hints") {
    // A ragged bound cannot exceed the rows q and k hold (100 and 150 here).
    MhaFwdArgs a = ragged_args();
    a.max_seqlen_q = TQ + 1;
    REQUIRE_REFUSED(run(a, ragged)(), bad, "max_seqlen_q: ", "0..total_q = 100");
    a = ragged_args();
    a.max_seqlen_k = TK + 1;
    REQUIRE_REFUSED(run(a, ragged)(), bad, "max_seqlen_k: ", "0..total_k = 150");
    // Nor a paged one the table's 4 pages × 64 keys.
    a = paged_args();
    a.max_seqlen_k = MAXP * PAGE + 1;
    REQUIRE_REFUSED(run(a, paged)(), bad, "max_seqlen_k: ", "max_pages × page_size = 256");
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
    REQUIRE_REFUSED(mha_fwd_schedule(plan, a, {fake(11), need - 1}, nullptr), bad, "workspace",
                    "mha_fwd_plan");
  }
  SECTION("an invalid config is refused as a config") {
    MhaFwdConfig c = padded;
    c.head_dim = 96;
    REQUIRE_REFUSED(mha_fwd(padded_args(), nullptr, c), ErrorKind::kUnsupportedConfig, "'head_dim");
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
  REQUIRE_REFUSED(plan_with([](MhaFwdShape& s) { s.batch = -1; }), bad, "shape.batch");
  REQUIRE_REFUSED(plan_with([](MhaFwdShape& s) { s.max_seqlen_q = -1; }), bad, "shape.max_seqlen_q");
  REQUIRE_REFUSED(plan_with([](MhaFwdShape& s) { s.total_q = -1; }), bad, "shape.total_q");
  REQUIRE_REFUSED(plan_with([](MhaFwdShape& s) { s.h_kv = 3; }), bad, "shape.h_q", "multiple");
  REQUIRE_REFUSED(plan_with([](MhaFwdShape& s) { s.num_splits = 257; }), bad, "shape.num_splits");
  REQUIRE_REFUSED(plan_with([](MhaFwdShape& s) { s.num_splits = -1; }), bad, "shape.num_splits");
  REQUIRE_REFUSED(plan_with([](MhaFwdShape& s) { s.batch = 300, s.num_splits = 256; }), bad,
                  "shape.num_splits", "grid");
  // A config carries the features it was built for: the shape's must be the same.
  REQUIRE_REFUSED(plan_with([](MhaFwdShape& s) { s.features.mask = MaskKind::kCausal; }), bad,
                  "shape.features.mask");
  REQUIRE_REFUSED(plan_with([](MhaFwdShape& s) { s.features.sink = true; }), bad, "shape.features.sink");
  REQUIRE_REFUSED(plan_with([](MhaFwdShape& s) { s.features.head_dim = 64; }), bad,
                  "shape.features.head_dim");
  REQUIRE_REFUSED(plan_with([](MhaFwdShape& s) { s.features.ragged = true; }), bad,
                  "shape.features.ragged");
  MhaFwdConfig invalid = c;
  invalid.head_dim = 96;
  REQUIRE_REFUSED(mha_fwd_plan(good, &invalid), ErrorKind::kUnsupportedConfig, "'head_dim");
}

TEST_CASE("mha_fwd refuses a call its plan was not made for", "[config][mha_fwd][args]") {
  const auto bad = ErrorKind::kBadArgument;
  const MhaFwdArgs a = padded_args();
  const MhaFwdConfig c = config();
  auto run = [&](const MhaFwdPlan& plan) { mha_fwd(a, plan, {}, nullptr); };
  MhaFwdPlan p = plan_of(a, c, 1);
  p.shape.batch = B + 1;
  REQUIRE_REFUSED(run(p), bad, "q", "batch = 3");
  p = plan_of(a, c, 1);
  p.shape.max_seqlen_q = SQ / 2;
  REQUIRE_REFUSED(run(p), bad, "q", "max_seqlen_q = 32");
  p = plan_of(a, c, 1);
  p.shape.total_q = B * SQ - 1;  // the plan's workspace would be too small
  p.shape.max_seqlen_q = SQ;
  REQUIRE_REFUSED(run(p), bad, "q", "total_q");
  p = plan_of(a, c, 1);
  p.shape.h_kv = 1;
  REQUIRE_REFUSED(run(p), bad, "q", "h_q / h_kv");
  p = plan_of(a, c, 1);
  p.num_splits = 0;  // not a plan mha_fwd_plan makes
  REQUIRE_REFUSED(run(p), bad, "plan", "num_splits 0");
  // A ragged call against its plan: the bound it sizes the grid with must be the plan's.
  MhaFwdArgs r = ragged_args();
  MhaFwdPlan rp = plan_of(r, config(true), 1);
  r.max_seqlen_q = 63;
  REQUIRE_REFUSED(mha_fwd(r, rp, {}, nullptr), bad, "max_seqlen_q", "64");
}
