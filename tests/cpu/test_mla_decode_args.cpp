// mla_decode argument checks without a GPU: padded and ragged q, the plan and its
// workspace, all before the driver is touched.
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

#include "attnjit/ops/mla_decode.hpp"
#include "ops/registry.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/harness.hpp"

using namespace attnjit;

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

  SECTION("the valid call passes every host check") {
    // A static split's schedule runs the run's checks and enqueues nothing, on any machine.
    REQUIRE_NOTHROW(mla_decode_schedule(valid_plan(valid_args(), 1), valid_args(), {}, nullptr));
  }
  SECTION("rank") {
    REQUIRE_REFUSED(call(with(&A::q, view(0, bf16, {B * QL, H, 576}))), bad, "q", "rank 4");
    REQUIRE_REFUSED(call(with(&A::kv_cache, view(1, bf16, {PAGES * PAGE, 576}))), bad, "kv_cache",
                    "rank 3");
    REQUIRE_REFUSED(call(with(&A::block_table, view(2, i32, {B * MAXP}))), bad, "block_table",
                    "rank 2");
    REQUIRE_REFUSED(call(with(&A::cache_lens, view(3, i32, {B, 1}))), bad, "cache_lens", "rank 1");
    REQUIRE_REFUSED(call(with(&A::out, view(4, bf16, {B * QL, H, 512}))), bad, "out", "rank 4");
    REQUIRE_REFUSED(call(with(&A::lse, view(5, f32, {B * H, QL}))), bad, "lse", "rank 3");
  }
  SECTION("shape") {
    REQUIRE_REFUSED(call(with(&A::q, view(0, bf16, {B, QL, H, 512}))), bad, "q", "576");
    REQUIRE_REFUSED(call(with(&A::kv_cache, view(1, bf16, {PAGES, PAGE, 512}))), bad, "kv_cache",
                    "576");
    // A page size other than the config's.
    REQUIRE_REFUSED(call(with(&A::kv_cache, view(1, bf16, {PAGES, 32, 576}))), bad, "kv_cache",
                    "page");
    REQUIRE_REFUSED(call(with(&A::out, view(4, bf16, {B, QL, H, 576}))), bad, "out", "512");
    REQUIRE_REFUSED(call(with(&A::out, view(4, bf16, {B + 1, QL, H, 512}))), bad, "out");
    REQUIRE_REFUSED(call(with(&A::out, view(4, bf16, {B, QL, H / 2, 512}))), bad, "out");
    // [b, q_len, h] is not lse's [b, h, q_len] layout.
    REQUIRE_REFUSED(call(with(&A::lse, view(5, f32, {B, QL, H}))), bad, "lse");
    REQUIRE_REFUSED(call(with(&A::block_table, view(2, i32, {B + 1, MAXP}))), bad, "block_table");
    REQUIRE_REFUSED(call(with(&A::cache_lens, view(3, i32, {B + 1}))), bad, "cache_lens");
  }
  SECTION("dtype") {
    REQUIRE_REFUSED(call(with(&A::q, view(0, f32, {B, QL, H, 576}))), bad, "q: ",
                    "must be bf16 or f16, got f32");
    REQUIRE_REFUSED(call(with(&A::kv_cache, view(1, DType::kF16, {PAGES, PAGE, 576}))), bad,
                    "kv_cache: ", "must be bf16, got f16");
    REQUIRE_REFUSED(call(with(&A::out, view(4, DType::kF16, {B, QL, H, 512}))), bad, "out: ",
                    "must be bf16");
    REQUIRE_REFUSED(call(with(&A::lse, view(5, bf16, {B, H, QL}))), bad, "lse: ", "must be f32");
    REQUIRE_REFUSED(call(with(&A::block_table, view(2, f32, {B, MAXP}))), bad, "block_table: ",
                    "must be i32");
    REQUIRE_REFUSED(call(with(&A::cache_lens, view(3, f32, {B}))), bad, "cache_lens: ",
                    "must be i32");
    // Consistent f16 tensors against a bf16 config.
    MlaDecodeArgs a = valid_args();
    a.q.dtype = a.kv_cache.dtype = a.out.dtype = DType::kF16;
    REQUIRE_REFUSED(call(a), bad, "q: ", "dtype f16 does not match the config's dtype bf16");
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
      REQUIRE_REFUSED(call(a), bad, name, "aligned");
    }
    // Last dimension with stride 2 (every other element).
    REQUIRE_REFUSED(call(with(&A::q, TensorView::strided(fake(0), bf16, {B, QL, H, 576},
                                                         {QL * H * 1152, H * 1152, 1152, 2}))),
                    bad, "q", "contiguous");
    REQUIRE_REFUSED(call(with(&A::kv_cache, TensorView::strided(fake(1), bf16, {PAGES, PAGE, 576},
                                                                {PAGE * 1152, 1152, 2}))),
                    bad, "kv_cache", "contiguous");
    REQUIRE_REFUSED(call(with(&A::out, TensorView::strided(fake(4), bf16, {B, QL, H, 512},
                                                           {QL * H * 1024, H * 1024, 1024, 2}))),
                    bad, "out", "contiguous");
  }
  SECTION("missing pointer") {
    for (auto [field, name] : {std::pair{&A::q, "q"},
                               {&A::kv_cache, "kv_cache"},
                               {&A::block_table, "block_table"},
                               {&A::cache_lens, "cache_lens"},
                               {&A::out, "out"}}) {
      MlaDecodeArgs a = valid_args();
      (a.*field).data = nullptr;  // the right shape, no memory
      const std::string named = std::string(name) + ": ";
      REQUIRE_REFUSED(call(a), bad, named.c_str(), "null");
    }
    // lse is optional: no pointer, no lse written (the host checks pass).
    MlaDecodeArgs a = valid_args();
    a.lse.data = nullptr;
    REQUIRE_NOTHROW(mla_decode_schedule(valid_plan(a, 1), a, {}, nullptr));
  }
  SECTION("device") {
    for (auto [field, name] : {std::pair{&A::kv_cache, "kv_cache"}, {&A::cache_lens, "cache_lens"},
                               {&A::lse, "lse"}}) {
      MlaDecodeArgs a = valid_args();
      (a.*field).device = 1;
      const std::string named = std::string(name) + ": ";
      REQUIRE_REFUSED(call(a), bad, named.c_str(), "is on device 1 but q is on device 0");
    }
  }
  SECTION("against the config") {
    MlaDecodeConfig more_heads = cfg;
    more_heads.num_heads = 128;
    REQUIRE_REFUSED(call(valid_args(), &more_heads), bad, "num_heads");
    MlaDecodeConfig single = cfg;
    single.max_q_len = 1;  // q_len 2 > max_q_len 1
    REQUIRE_REFUSED(call(valid_args(), &single), bad, "max_q_len");
    MlaDecodeConfig invalid = cfg;
    invalid.num_heads = 200;
    REQUIRE_REFUSED(call(valid_args(), &invalid), ErrorKind::kUnsupportedConfig, "'num_heads'");
  }
  SECTION("a run's workspace") {
    const MlaDecodeArgs a = valid_args();
    const MlaDecodePlan plan = valid_plan(a, 4);
    const size_t need = plan.workspace_bytes;
    REQUIRE(need > 0);
    auto run = [&](Workspace ws) { mla_decode(a, plan, ws, nullptr); };
    REQUIRE_REFUSED(run({fake(6), need - 1}), bad, "workspace", "mla_decode_plan");
    REQUIRE_REFUSED(run({nullptr, need}), bad, "workspace");
    REQUIRE_REFUSED(run({fake(6, 4), need}), bad, "workspace", "16-byte aligned");
    REQUIRE_REFUSED(mla_decode_schedule(plan, a, {fake(6), need - 1}, nullptr), bad, "workspace");
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
  REQUIRE_REFUSED(plan_with([](MlaDecodeShape& s) { s.max_len = MAXP * PAGE + 1; }), bad,
                  "shape.max_len", "256");
  REQUIRE_REFUSED(plan_with([](MlaDecodeShape& s) { s.max_len = -1; }), bad, "shape.max_len");
  REQUIRE_REFUSED(plan_with([](MlaDecodeShape& s) { s.num_splits = -1; }), bad, "shape.num_splits");
  REQUIRE_REFUSED(plan_with([](MlaDecodeShape& s) { s.num_splits = 257; }), bad,
                  "shape.num_splits");
  REQUIRE_REFUSED(plan_with([](MlaDecodeShape& s) { s.batch = -1; }), bad, "shape.batch");
  REQUIRE_REFUSED(plan_with([](MlaDecodeShape& s) { s.q_len = 3; }), bad, "shape.q_len",
                  "max_q_len = 2");
  REQUIRE_REFUSED(plan_with([](MlaDecodeShape& s) { s.q_len = 0; }), bad, "shape.q_len");
  REQUIRE_REFUSED(plan_with([](MlaDecodeShape& s) { s.num_heads = 32; }), bad, "shape.num_heads");
  REQUIRE_REFUSED(plan_with([](MlaDecodeShape& s) { s.page_size = 32; }), bad, "shape.page_size");
  REQUIRE_REFUSED(plan_with([](MlaDecodeShape& s) { s.dtype = DType::kF16; }), bad, "shape.dtype");
  REQUIRE_REFUSED(plan_with([](MlaDecodeShape& s) { s.max_pages = 0; }), bad, "shape.max_pages");
  // The config's own rules come first, naming the field.
  MlaDecodeConfig invalid = cfg;
  invalid.num_heads = 200;
  REQUIRE_REFUSED(mla_decode_plan(good, &invalid), ErrorKind::kUnsupportedConfig, "'num_heads'");
  // A batch-invariant config fixes the split itself, in pieces the combine must merge: a
  // 600-page table (600 tiles) in 1-tile pieces is more than its 512 partials.
  MlaDecodeConfig invariant = cfg;
  invariant.invariant_tiles = 4;
  MlaDecodeShape forced = good;
  forced.num_splits = 2;
  REQUIRE_REFUSED(mla_decode_plan(forced, &invariant), bad, "shape.num_splits",
                  "must be 0 with a batch-invariant config");
  invariant.invariant_tiles = 1;
  MlaDecodeShape long_table = good;
  long_table.max_pages = 600;
  REQUIRE_REFUSED(mla_decode_plan(long_table, &invariant), ErrorKind::kUnsupportedConfig,
                  "mla_decode.invariant_tiles", "600 pieces per sequence", "at most 512");
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
  REQUIRE_REFUSED(run(a, p), bad, "q", "batch = 3");
  p = valid_plan(a, 1);
  p.shape.max_pages = MAXP * 2;
  REQUIRE_REFUSED(run(a, p), bad, "block_table", "max_pages = 8");
  p = valid_plan(a, 1);
  p.shape.q_len = 1;
  REQUIRE_REFUSED(run(a, p), bad, "q", "q_len = 1");
  p = valid_plan(a, 1);
  p.shape.ragged = true;
  REQUIRE_REFUSED(run(a, p), bad, "q_offsets", "ragged form");
  p = valid_plan(a, 1);
  p.num_splits = 0;  // not a plan mla_decode_plan makes
  REQUIRE_REFUSED(run(a, p), bad, "plan", "num_splits 0");
  // The config's head count, page size and dtype are checked against the tensors.
  p = valid_plan(a, 1);
  p.config.num_heads = 32;
  REQUIRE_REFUSED(run(a, p), bad, "q", "num_heads = 32");
  // A balanced plan whose invariant pieces outnumber what the combine merges (600 tiles of
  // capacity in 1-tile pieces), which mla_decode_plan refuses to make.
  MlaDecodeArgs long_table = a;
  long_table.block_table = TensorView::contiguous(fake(2), DType::kI32, {B, 600});
  p = valid_plan(long_table, 1);
  p.balanced = true;
  p.num_splits = 0;
  p.sm_slots = 1;
  p.config.invariant_tiles = 1;
  // A workspace of the size such a plan reads: the call is refused for its pieces alone.
  const Workspace ws{fake(6), mla_decode_balanced_workspace_bytes(p.shape, 1, 1)};
  REQUIRE_REFUSED(mla_decode(long_table, p, ws, nullptr), ErrorKind::kUnsupportedConfig,
                  "mla_decode.invariant_tiles", "600 pieces per sequence");
  REQUIRE_REFUSED(mla_decode_schedule(p, long_table, ws, nullptr), ErrorKind::kUnsupportedConfig,
                  "mla_decode.invariant_tiles");
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

  // The valid call passes every host check (as in the padded case above).
  REQUIRE_NOTHROW(mla_decode_schedule(valid_plan(ragged_args(), 1), ragged_args(), {}, nullptr));
  auto ragged_with = [](TensorView MlaDecodeArgs::*field, const TensorView& v) {
    MlaDecodeArgs a = ragged_args();
    a.*field = v;
    return a;
  };
  using A = MlaDecodeArgs;
  SECTION("q, out and lse take the ragged layouts") {
    REQUIRE_REFUSED(call(ragged_with(&A::q, view(0, bf16, {1, TQ, H, 576}))), bad, "q", "rank 3",
                    "total_q");
    REQUIRE_REFUSED(call(ragged_with(&A::out, view(4, bf16, {1, TQ, H, 512}))), bad, "out",
                    "[total_q, h, 512]");
    REQUIRE_REFUSED(call(ragged_with(&A::out, view(4, bf16, {TQ + 1, H, 512}))), bad, "out");
    REQUIRE_REFUSED(call(ragged_with(&A::lse, view(5, f32, {TQ, H}))), bad, "lse", "[h, total_q]");
    // The padded form's lse [b, h, q_len] is not the ragged one.
    REQUIRE_REFUSED(call(ragged_with(&A::lse, view(5, f32, {B, H, 2}))), bad, "lse");
  }
  SECTION("q_offsets") {
    REQUIRE_REFUSED(call(ragged_with(&A::q_offsets, view(7, i32, {B + 1, 1}))), bad, "q_offsets",
                    "rank 1");
    REQUIRE_REFUSED(call(ragged_with(&A::q_offsets, view(7, i32, {0}))), bad, "q_offsets");
    REQUIRE_REFUSED(call(ragged_with(&A::q_offsets, view(7, f32, {B + 1}))), bad,
                    "q_offsets");
    MlaDecodeArgs a = ragged_args();
    a.q_offsets.data = fake(7, 2);
    REQUIRE_REFUSED(call(a), bad, "q_offsets", "aligned");
    // b comes from q_offsets: one more sequence than the table and lengths have.
    REQUIRE_REFUSED(call(ragged_with(&A::q_offsets, view(7, i32, {B + 2}))), bad, "block_table");
  }
  SECTION("max_q_len") {
    MlaDecodeArgs a = ragged_args();
    a.max_q_len = 0;  // required: it sizes the grid
    REQUIRE_REFUSED(call(a), bad, "max_q_len", "ragged");
    a.max_q_len = 3;  // over the config's bound of 2
    REQUIRE_REFUSED(call(a), bad, "max_q_len", "1..max_q_len = 2");
    // Padded calls take q_len from q: a different max_q_len is a contradiction.
    a = valid_args();
    a.max_q_len = 1;
    REQUIRE_REFUSED(call(a), bad, "max_q_len", "padded");
  }
  SECTION("the shape and the split workspace use the bound") {
    const MlaDecodeArgs a = ragged_args();
    const MlaDecodeShape shape = mla_decode_shape(a);
    CHECK(shape.ragged);
    CHECK(shape.batch == B);
    CHECK(shape.q_len == 2);  // the max_q_len bound, not total_q
    const MlaDecodePlan plan = valid_plan(a, 4);
    CHECK(plan.workspace_bytes == mla_decode_workspace_bytes(valid_plan(valid_args(), 4).shape, 4));
    REQUIRE_REFUSED(mla_decode(a, plan, {fake(6), plan.workspace_bytes - 1}, nullptr), bad,
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

TEST_CASE("mla_decode's batch-invariant workspace counts the config's key tiles",
          "[mla_decode][args]") {
  // A fixed piece of C tiles cuts a capacity of K keys into ⌈K / (C · block_n)⌉ pieces per
  // sequence, each with its partial slot: 32-key tiles give twice the pieces of 64-key ones.
  // (Before the block_n argument the bound counted 64-key tiles for both, so a block_n 32
  // plan's schedule overflowed its workspace and dropped pieces.)
  MlaDecodeShape s = mla_decode_shape(valid_args());
  s.batch = 4;
  s.page_size = 64;
  s.max_pages = 64;  // 4096 keys: 16 pieces of 4 × 64 keys, 32 of 4 × 32
  const size_t n64 = mla_decode_balanced_workspace_bytes(s, 1, 4, 64);
  const size_t n32 = mla_decode_balanced_workspace_bytes(s, 1, 4, 32);
  CHECK(n64 == mla_decode_balanced_workspace_bytes(s, 1, 4));  // 64 is the default
  const size_t slot = size_t{QL} * s.num_heads * (512 + 1) * 4;  // a partial and its lse
  CHECK(n32 >= n64 + size_t{s.batch} * 16 * slot);              // 16 more pieces per sequence
}
