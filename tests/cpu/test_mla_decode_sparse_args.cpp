// mla_decode_sparse without a GPU: the config as data, the split choice, and every host
// argument rule refused before the driver is touched (naming the argument and the rule).
#include <cstdint>
#include <initializer_list>
#include <string>
#include <tuple>
#include <utility>

#include "attnjit/ops/mla_decode_sparse.hpp"
#include "ops/registry.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"

using namespace attnjit;

namespace {

void* fake(int slot, uintptr_t misalign = 0) {
  return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} + uintptr_t(slot) * (uintptr_t{1} << 28) +
                                 misalign);
}

constexpr int64_t B = 2, QL = 2, H = 16, PAGES = 10, PAGE = 64, TOPK = 100, TOPK_X = 20;

TensorView view(int slot, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(fake(slot), dtype, shape);
}

// A valid fp8 call: q [2, 2, 16, 576], pool [10, 64, 656] u8, indices [2, 2, 100] with a
// token stride of 104, per-token lengths, sink, an extra cache [128, 656] with 20 indices.
MlaDecodeSparseArgs valid_args() {
  MlaDecodeSparseArgs a;
  a.q = view(0, DType::kBF16, {B, QL, H, 576});
  a.kv_cache = view(1, DType::kU8, {PAGES, PAGE, 656});
  a.indices = TensorView::strided(fake(2), DType::kI32, {B, QL, TOPK}, {QL * 104, 104, 1});
  a.topk_lengths = view(3, DType::kI32, {B, QL});
  a.attn_sink = view(4, DType::kF32, {H});
  a.extra_kv_cache = view(5, DType::kU8, {128, 656});
  a.extra_indices = view(6, DType::kI32, {B, QL, TOPK_X});
  a.extra_topk_lengths = view(7, DType::kI32, {B});
  a.out = view(8, DType::kBF16, {B, QL, H, 512});
  a.lse = view(9, DType::kF32, {B, H, QL});
  a.softmax_scale = 0.0722f;
  return a;
}

MlaDecodeSparseConfig valid_config() { return mla_decode_sparse_default_config(MlaSparseLayout::kFp8, H); }

// A plan for valid_args() made by hand (mla_decode_sparse_plan needs a device).
MlaDecodeSparsePlan valid_plan(const MlaDecodeSparseArgs& a, int splits) {
  MlaDecodeSparsePlan p;
  p.shape = mla_decode_sparse_shape(a);
  p.config = valid_config();
  p.num_splits = splits;
  p.workspace_bytes = mla_decode_sparse_workspace_bytes(p.shape, splits);
  return p;
}

MlaDecodeSparseArgs with(TensorView MlaDecodeSparseArgs::*field, const TensorView& v) {
  MlaDecodeSparseArgs a = valid_args();
  a.*field = v;
  return a;
}

}  // namespace

TEST_CASE("mla_decode_sparse config: defaults, rules and JSON", "[mla_decode_sparse][config]") {
  const MlaDecodeSparseConfig c = valid_config();
  REQUIRE_NOTHROW(c.validate());
  CHECK(MlaDecodeSparseConfig::from_json(c.to_json()) == c);
  CHECK(c.describe().find("fp8") != std::string::npos);
  MlaDecodeSparseConfig bad = c;
  bad.num_heads = 4;  // below 8: not a head count the op serves
  REQUIRE_ERROR(bad.validate(), ErrorKind::kUnsupportedConfig, "'num_heads'");
  bad = c;
  bad.schedule = MlaSparseSchedule::kSoftmaxWarpgroup;
  bad.block_n = 32;
  bad.stages = 3;  // softmax_wg's fp8: Q, 2 bf16 tiles and 3 raw tiles fit
  REQUIRE_NOTHROW(bad.validate());
  bad.stages = 4;  // and 4 raw tiles of 32 keys need 240 KiB
  REQUIRE_ERROR(bad.validate(), ErrorKind::kUnsupportedConfig, "'stages'", "shared memory");
  bad.cache_layout = MlaSparseLayout::kBF16;
  REQUIRE_NOTHROW(bad.validate());  // bf16: 4 tiles of 36 KiB fit
  bad.block_n = 64;  // bf16, stages 4: two 64-key steps in the ring
  REQUIRE_NOTHROW(bad.validate());
  bad.stages = 3;  // a ring of 1.5 steps
  REQUIRE_ERROR(bad.validate(), ErrorKind::kUnsupportedConfig, "'block_n'", "stages 4");
  bad.stages = 4;
  bad.cache_layout = MlaSparseLayout::kFp8;  // softmax_wg's fp8 widens into 32-key steps
  REQUIRE_ERROR(bad.validate(), ErrorKind::kUnsupportedConfig, "'block_n'", "two_consumers");
  bad.block_n = 48;
  REQUIRE_ERROR(bad.validate(), ErrorKind::kUnsupportedConfig, "'block_n'");
  // two_consumers: a 64-key S per consumer (so stages 4 too); the default of both layouts
  // but fp8 at h 8 and 16 (narrow).
  for (MlaSparseLayout l : {MlaSparseLayout::kBF16, MlaSparseLayout::kFp8})
    for (int h : {8, 32, 64, 128}) {
      if (l == MlaSparseLayout::kFp8 && h == 8) continue;
      MlaDecodeSparseConfig two = mla_decode_sparse_default_config(l, h);
      CHECK(two.schedule == MlaSparseSchedule::kTwoConsumers);
      CHECK(two.block_n == 64);
      REQUIRE_NOTHROW(two.validate());
      CHECK(MlaDecodeSparseConfig::from_json(two.to_json()) == two);
      two.block_n = 32;
      REQUIRE_ERROR(two.validate(), ErrorKind::kUnsupportedConfig, "'schedule'", "block_n 64");
      two.block_n = 64;
      two.stages = 3;
      REQUIRE_ERROR(two.validate(), ErrorKind::kUnsupportedConfig, "'block_n'", "stages 4");
    }
  // cluster 2 (opt-in): bf16 two_consumers with two 64-head tiles per token.
  MlaDecodeSparseConfig pair = mla_decode_sparse_default_config(MlaSparseLayout::kBF16, 128);
  CHECK(pair.cluster == 1);
  pair.cluster = 2;
  REQUIRE_NOTHROW(pair.validate());
  CHECK(MlaDecodeSparseConfig::from_json(pair.to_json()) == pair);
  CHECK(pair.describe().find("c2") != std::string::npos);
  pair.num_heads = 64;  // one tile per token: nothing to pair
  REQUIRE_ERROR(pair.validate(), ErrorKind::kUnsupportedConfig, "'cluster'", "num_heads 65..128");
  pair.num_heads = 128;
  pair.cache_layout = MlaSparseLayout::kFp8;
  REQUIRE_ERROR(pair.validate(), ErrorKind::kUnsupportedConfig, "'cluster'", "bf16 rows");
  pair.cache_layout = MlaSparseLayout::kBF16;
  pair.schedule = MlaSparseSchedule::kSoftmaxWarpgroup;
  REQUIRE_ERROR(pair.validate(), ErrorKind::kUnsupportedConfig, "'cluster'", "two_consumers");
  pair.cluster = 3;
  REQUIRE_ERROR(pair.validate(), ErrorKind::kUnsupportedConfig, "'cluster'");
  // persistent (opt-in here, the prefill's default): bf16 two_consumers, cluster 1.
  MlaDecodeSparseConfig walk = mla_decode_sparse_default_config(MlaSparseLayout::kBF16, 64);
  CHECK(!walk.persistent);
  walk.persistent = true;
  REQUIRE_NOTHROW(walk.validate());
  CHECK(MlaDecodeSparseConfig::from_json(walk.to_json()) == walk);
  CHECK(walk.describe().find("persistent") != std::string::npos);
  walk.cache_layout = MlaSparseLayout::kFp8;
  REQUIRE_ERROR(walk.validate(), ErrorKind::kUnsupportedConfig, "'persistent'", "bf16 rows");
  walk.cache_layout = MlaSparseLayout::kBF16;
  walk.num_heads = 128;
  walk.cluster = 2;
  REQUIRE_ERROR(walk.validate(), ErrorKind::kUnsupportedConfig, "'persistent'", "cluster 1");
  // narrow: fp8 rows, h 8 or 16, block_n 64, stages 4; the fp8 default at h 8 and 16.
  for (int h : {8, 16}) {
    MlaDecodeSparseConfig n = mla_decode_sparse_default_config(MlaSparseLayout::kFp8, h);
    CHECK(n.schedule == MlaSparseSchedule::kNarrow);
    REQUIRE_NOTHROW(n.validate());
    CHECK(MlaDecodeSparseConfig::from_json(n.to_json()) == n);
    CHECK(n.describe().find("narrow") != std::string::npos);
  }
  MlaDecodeSparseConfig n = mla_decode_sparse_default_config(MlaSparseLayout::kFp8, 16);
  n.num_heads = 32;  // N = 32: its smem (q, P′ and 4 stages) does not fit
  REQUIRE_ERROR(n.validate(), ErrorKind::kUnsupportedConfig, "'schedule'", "num_heads 8 or 16");
  n.num_heads = 16;
  n.cache_layout = MlaSparseLayout::kBF16;
  REQUIRE_ERROR(n.validate(), ErrorKind::kUnsupportedConfig, "'schedule'", "fp8 rows");
  n.cache_layout = MlaSparseLayout::kFp8;
  n.stages = 2;  // block_n 64's own rule speaks first
  REQUIRE_ERROR(n.validate(), ErrorKind::kUnsupportedConfig, "'block_n'", "stages 4");
  REQUIRE_ERROR(MlaDecodeSparseConfig::from_json(R"({"cache_layout":"fp16"})"),
                ErrorKind::kUnsupportedConfig, "cache_layout");
  const ops::OpSpec& op = ops::find_op("mla_decode_sparse");
  CHECK(op.default_set().size() == 10);  // 2 layouts × h 8, 16, 32, 64, 128
}

TEST_CASE("mla_decode_sparse splits the top-k only to fill the SMs", "[mla_decode_sparse][config]") {
  MlaDecodeSparseShape s;
  s.batch = 128, s.q_len = 2, s.num_heads = 128, s.topk = 2048;
  CHECK(mla_decode_sparse_splits(s, 132) == 1);  // 512 CTAs: no split
  s.batch = 64, s.q_len = 1, s.num_heads = 8;
  CHECK(mla_decode_sparse_splits(s, 132) == 2);  // 64 CTAs: one wave of 128, runs of 16 tiles
  s.batch = 128;
  CHECK(mla_decode_sparse_splits(s, 132) == 1);  // 128 CTAs: one wave (two of 16 tiles cost more)
  s.batch = 96, s.num_heads = 16;
  CHECK(mla_decode_sparse_splits(s, 132) == 1);  // 96 CTAs: fewer SMs beat 3 waves of 8 tiles
  s.batch = 48;
  CHECK(mla_decode_sparse_splits(s, 132) == 2);  // 48 CTAs: 96 of 16 tiles, not 384 of 4
  s.batch = 16, s.q_len = 2, s.num_heads = 128;
  CHECK(mla_decode_sparse_splits(s, 132) == 2);  // 64 CTAs (2 head tiles a token): 128 of 16 tiles
  s.q_len = 1, s.num_heads = 8;
  s.batch = 1;
  CHECK(mla_decode_sparse_splits(s, 132) == 8);  // 1 CTA: runs of 4 tiles, the shortest
  s.topk = 300;
  CHECK(mla_decode_sparse_splits(s, 132) == 1);  // 5 tiles: runs would be under 4 tiles
  s.num_splits = 7;
  CHECK(mla_decode_sparse_splits(s, 132) == 7);  // forced
  CHECK(mla_decode_sparse_workspace_bytes(s, 1) == 0);
}

TEST_CASE("mla_decode_sparse rejects bad arguments before launching", "[mla_decode_sparse][args]") {
  const MlaDecodeSparseConfig cfg = valid_config();
  auto call = [&](const MlaDecodeSparseArgs& a, const MlaDecodeSparseConfig* c = nullptr) {
    mla_decode_sparse(a, nullptr, c ? c : &cfg);
  };
  const auto bad = ErrorKind::kBadArgument;
  const DType bf16 = DType::kBF16, f32 = DType::kF32, i32 = DType::kI32, u8 = DType::kU8;
  using A = MlaDecodeSparseArgs;

  SECTION("the valid call passes every host check") {
    REQUIRE_NOTHROW(mla_decode_sparse_schedule(valid_plan(valid_args(), 1), valid_args(), {}, nullptr));
    MlaDecodeSparseArgs a = valid_args();  // optional inputs absent
    a.topk_lengths = a.attn_sink = a.extra_kv_cache = a.extra_indices = a.extra_topk_lengths = a.lse = {};
    REQUIRE_NOTHROW(mla_decode_sparse_schedule(valid_plan(a, 1), a, {}, nullptr));
  }
  SECTION("q: rank, heads, q_len") {
    REQUIRE_REFUSED(call(with(&A::q, view(0, bf16, {B * QL, H, 576}))), bad, "q", "rank 4");
    REQUIRE_REFUSED(call(with(&A::q, view(0, bf16, {B, QL, H, 512}))), bad, "q", "576");
    REQUIRE_REFUSED(call(with(&A::q, view(0, bf16, {B, QL, 32, 576}))), bad, "q", "num_heads = 16");
    REQUIRE_REFUSED(call(with(&A::q, view(0, bf16, {B, 9, H, 576}))), bad, "q", "q_len 9", "1..8");
    REQUIRE_REFUSED(call(with(&A::q, view(0, DType::kF16, {B, QL, H, 576}))), bad, "q", "bf16");
  }
  SECTION("h outside 8..128 is a config the op does not build") {
    MlaDecodeSparseConfig small = cfg;
    small.num_heads = 4;
    REQUIRE_REFUSED(call(with(&A::q, view(0, bf16, {B, QL, 4, 576})), &small),
                    ErrorKind::kUnsupportedConfig, "'num_heads'", "8..128");
  }
  SECTION("cache layout") {
    REQUIRE_REFUSED(call(with(&A::kv_cache, view(1, u8, {PAGES, PAGE, 640}))), bad, "kv_cache", "656");
    REQUIRE_REFUSED(call(with(&A::kv_cache, view(1, bf16, {PAGES, PAGE, 656}))), bad, "kv_cache",
                    "dtype u8 or e4m3");
    REQUIRE_REFUSED(call(with(&A::kv_cache, view(1, u8, {PAGES * PAGE * 656}))), bad, "kv_cache", "656");
    // a bf16 config wants 576 bf16 rows
    const MlaDecodeSparseConfig bf = mla_decode_sparse_default_config(MlaSparseLayout::kBF16, H);
    REQUIRE_REFUSED(call(valid_args(), &bf), bad, "kv_cache", "576");
    REQUIRE_REFUSED(call(with(&A::extra_kv_cache, view(5, u8, {128, 576}))), bad, "extra_kv_cache", "656");
  }
  SECTION("indices: rank, dtype, strides") {
    REQUIRE_REFUSED(call(with(&A::indices, view(2, i32, {B * QL, TOPK}))), bad, "indices", "rank 3");
    REQUIRE_REFUSED(call(with(&A::indices, view(2, DType::kU8, {B, QL, TOPK}))), bad, "indices", "i32");
    REQUIRE_REFUSED(call(with(&A::indices, view(2, i32, {B, QL + 1, TOPK}))), bad, "indices", "q_len = 2");
    REQUIRE_REFUSED(call(with(&A::indices, TensorView::strided(fake(2), i32, {B, QL, TOPK}, {2 * QL * TOPK, 2 * TOPK, 2}))),
                    bad, "indices", "contiguous");
    REQUIRE_REFUSED(call(with(&A::indices, TensorView::strided(fake(2), i32, {B, QL, TOPK}, {QL * 50, 50, 1}))),
                    bad, "indices", "below topk");
    REQUIRE_REFUSED(call(with(&A::indices, TensorView::strided(fake(2), i32, {B, QL, TOPK}, {500, 104, 1}))),
                    bad, "indices", "evenly spaced");
    REQUIRE_REFUSED(call(with(&A::indices, TensorView{})), bad, "indices", "[b, q_len, topk]");
    MlaDecodeSparseArgs a = valid_args();
    a.indices.data = fake(2, 2);
    REQUIRE_REFUSED(call(a), bad, "indices", "aligned");
    REQUIRE_REFUSED(call(with(&A::extra_indices, view(6, i32, {B, QL}))), bad, "extra_indices", "rank 3");
  }
  SECTION("topk_lengths: per sequence or per token") {
    REQUIRE_NOTHROW(mla_decode_sparse_schedule(valid_plan(valid_args(), 1),
                                               with(&A::topk_lengths, view(3, i32, {B})), {}, nullptr));
    REQUIRE_REFUSED(call(with(&A::topk_lengths, view(3, i32, {B + 1}))), bad, "topk_lengths", "[b]");
    REQUIRE_REFUSED(call(with(&A::topk_lengths, view(3, i32, {B, QL + 1}))), bad, "topk_lengths");
    REQUIRE_REFUSED(call(with(&A::topk_lengths, view(3, f32, {B}))), bad, "topk_lengths", "i32");
    REQUIRE_REFUSED(call(with(&A::extra_topk_lengths, view(7, i32, {B, QL, 1}))), bad, "extra_topk_lengths");
  }
  SECTION("sink and the extra cache") {
    REQUIRE_REFUSED(call(with(&A::attn_sink, view(4, f32, {H + 1}))), bad, "attn_sink", "[h]");
    REQUIRE_REFUSED(call(with(&A::attn_sink, view(4, bf16, {H}))), bad, "attn_sink", "f32");
    REQUIRE_REFUSED(call(with(&A::extra_kv_cache, TensorView{})), bad, "extra_kv_cache", "required");
    MlaDecodeSparseArgs a = valid_args();
    a.extra_indices = {};
    REQUIRE_REFUSED(call(a), bad, "extra_indices", "required");
  }
  SECTION("outputs") {
    REQUIRE_REFUSED(call(with(&A::out, view(8, bf16, {B, QL, H, 576}))), bad, "out", "512");
    REQUIRE_REFUSED(call(with(&A::lse, view(9, f32, {B, QL, H}))), bad, "lse", "[b, h, q_len]");
    REQUIRE_REFUSED(call(with(&A::out, view(8, f32, {B, QL, H, 512}))), bad, "out", "bf16");
  }
  SECTION("ragged offsets") {
    MlaDecodeSparseArgs a = valid_args();
    a.q = view(0, bf16, {5, H, 576});
    a.q_offsets = view(10, i32, {B + 1});
    a.max_q_len = 3;
    a.indices = view(2, i32, {5, TOPK});
    a.topk_lengths = view(3, i32, {5});
    a.extra_indices = view(6, i32, {5, TOPK_X});
    a.extra_topk_lengths = {};
    a.out = view(8, bf16, {5, H, 512});
    a.lse = view(9, f32, {H, 5});
    REQUIRE_NOTHROW(mla_decode_sparse_schedule(valid_plan(a, 1), a, {}, nullptr));
    MlaDecodeSparseArgs b = a;
    b.max_q_len = 0;
    REQUIRE_REFUSED(call(b), bad, "max_q_len", "1..8");
    b = a;
    b.q_offsets = view(10, i32, {B + 1, 1});
    REQUIRE_REFUSED(call(b), bad, "q_offsets", "rank 1");
    b = a;
    b.topk_lengths = view(3, i32, {B});  // ragged lengths are per token
    REQUIRE_REFUSED(call(b), bad, "topk_lengths", "[total_q]");
    b = a;
    b.indices = view(2, i32, {B, 3, TOPK});
    REQUIRE_REFUSED(call(b), bad, "indices", "rank 2 [total_q = 5, topk]");
    REQUIRE_REFUSED(mla_decode_sparse_schedule(valid_plan(valid_args(), 1), a, {}, nullptr), bad,
                    "q_offsets", "padded form");
  }
  SECTION("scale, device, plan and workspace") {
    MlaDecodeSparseArgs a = valid_args();
    a.softmax_scale = 0.0f;
    REQUIRE_REFUSED(call(a), bad, "softmax_scale", "positive");
    a = valid_args();
    a.extra_indices.device = 1;
    REQUIRE_REFUSED(call(a), bad, "extra_indices", "device 1");
    const MlaDecodeSparsePlan plan = valid_plan(valid_args(), 4);
    REQUIRE(plan.workspace_bytes > 0);
    REQUIRE_REFUSED(mla_decode_sparse(valid_args(), plan, {fake(11), plan.workspace_bytes - 1}, nullptr),
                    bad, "workspace", "mla_decode_sparse_plan");
    MlaDecodeSparseArgs fewer = valid_args();
    fewer.indices = view(2, i32, {B, QL, TOPK - 1});
    REQUIRE_REFUSED(mla_decode_sparse(fewer, plan, {fake(11), plan.workspace_bytes}, nullptr), bad,
                    "indices", "plan's topk = 100");
    MlaDecodeSparseArgs no_extra = valid_args();
    no_extra.extra_kv_cache = no_extra.extra_indices = no_extra.extra_topk_lengths = {};
    REQUIRE_REFUSED(mla_decode_sparse(no_extra, plan, {fake(11), plan.workspace_bytes}, nullptr), bad,
                    "extra_indices", "topk_extra 0");
    MlaDecodeSparsePlan hand = plan;
    hand.num_splits = 0;
    REQUIRE_REFUSED(mla_decode_sparse(valid_args(), hand, {}, nullptr), bad, "plan", "num_splits");
    hand = plan;
    hand.num_splits = 3;  // narrow (fp8, h 16), but 3 splits do not divide its 8 dim tiles
    hand.merge_in_cluster = true;
    REQUIRE(hand.config.schedule == MlaSparseSchedule::kNarrow);
    REQUIRE_REFUSED(mla_decode_sparse(valid_args(), hand, {fake(11), plan.workspace_bytes}, nullptr), bad,
                    "plan", "merge_in_cluster");
  }
  SECTION("the shape's rules") {
    MlaDecodeSparseShape s = mla_decode_sparse_shape(valid_args());
    s.q_len = 9;
    REQUIRE_REFUSED(mla_decode_sparse_plan(s, &cfg), bad, "shape.q_len");
    s = mla_decode_sparse_shape(valid_args());
    s.num_splits = 300;
    REQUIRE_REFUSED(mla_decode_sparse_plan(s, &cfg), bad, "shape.num_splits");
    s = mla_decode_sparse_shape(valid_args());
    s.layout = MlaSparseLayout::kBF16;
    REQUIRE_REFUSED(mla_decode_sparse_plan(s, &cfg), bad, "shape.layout");
  }
}

TEST_CASE("mla_decode_sparse helpers check their arguments", "[mla_decode_sparse][args]") {
  const auto bad = ErrorKind::kBadArgument;
  REQUIRE_REFUSED(mla_sparse_quantize(view(0, DType::kBF16, {4, 512}), {}, view(1, DType::kU8, {8, 656}), nullptr),
                  bad, "src", "576");
  REQUIRE_REFUSED(mla_sparse_quantize(view(0, DType::kBF16, {4, 576}), {}, view(1, DType::kU8, {8, 640}), nullptr),
                  bad, "pool", "656");
  REQUIRE_REFUSED(mla_sparse_quantize(view(0, DType::kBF16, {9, 576}), {}, view(1, DType::kU8, {8, 656}), nullptr),
                  bad, "src", "pool only 8");
  REQUIRE_REFUSED(mla_sparse_quantize(view(0, DType::kBF16, {4, 576}), view(2, DType::kI32, {3}),
                                      view(1, DType::kU8, {8, 656}), nullptr),
                  bad, "dst_rows");
  REQUIRE_REFUSED(mla_sparse_remap(view(0, DType::kI32, {6, 10}), view(1, DType::kI32, {4, 3}), 64, 10,
                                   view(2, DType::kI32, {6, 10}), nullptr),
                  bad, "block_table", "divide");
  REQUIRE_REFUSED(mla_sparse_remap(view(0, DType::kI32, {6, 10}), view(1, DType::kI32, {3, 3}), 64, 10,
                                   view(2, DType::kI32, {6, 9}), nullptr),
                  bad, "physical");
}
