// mla_prefill_sparse without a GPU: the config as data (rules, JSON, the decode kernel it
// maps onto, the registry entry), and every host argument rule refused before the driver
// is touched, the error naming the argument and the rule.
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>

#include "attnjit/ops/mla_prefill_sparse.hpp"
#include "ops/registry.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"

using namespace attnjit;

namespace {

void* fake(int slot, uintptr_t misalign = 0) {
  return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} + uintptr_t(slot) * (uintptr_t{1} << 28) +
                                 misalign);
}

constexpr int64_t T = 5, H = 16, TOPK = 100, STRIDE = 104, PAGES = 10, PAGE = 48;

TensorView view(int slot, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(fake(slot), dtype, shape);
}

// A valid call: q [5, 16, 576], a pool of 10 pages of 48 rows, indices [5, 100] with a token
// stride of 104, per-token lengths, sink, out, lse and max logit.
MlaPrefillSparseArgs valid_args() {
  MlaPrefillSparseArgs a;
  a.q = view(0, DType::kBF16, {T, H, 576});
  a.kv_cache = view(1, DType::kBF16, {PAGES, PAGE, 576});
  a.indices = TensorView::strided(fake(2), DType::kI32, {T, TOPK}, {STRIDE, 1});
  a.topk_lengths = view(3, DType::kI32, {T});
  a.attn_sink = view(4, DType::kF32, {H});
  a.out = view(5, DType::kBF16, {T, H, 512});
  a.lse = view(6, DType::kF32, {T, H});
  a.max_logit = view(7, DType::kF32, {T, H});
  a.softmax_scale = 0.0722f;
  return a;
}

// The same call over 0 tokens: every rule applies, and the op returns before planning.
MlaPrefillSparseArgs no_tokens(MlaPrefillSparseArgs a) {
  for (TensorView* t : {&a.q, &a.indices, &a.topk_lengths, &a.out, &a.lse, &a.max_logit}) t->shape[0] = 0;
  return a;
}

// A plan for valid_args() made by hand (mla_prefill_sparse_plan needs a device).
MlaPrefillSparsePlan valid_plan() {
  MlaPrefillSparsePlan p;
  p.shape = mla_prefill_sparse_shape(valid_args());
  p.config = mla_prefill_sparse_default_config(H);
  return p;
}

MlaPrefillSparseArgs with(TensorView MlaPrefillSparseArgs::*field, const TensorView& v) {
  MlaPrefillSparseArgs a = valid_args();
  a.*field = v;
  return a;
}

}  // namespace

TEST_CASE("mla_prefill_sparse config: defaults, rules, JSON and its kernel", "[mla_prefill_sparse][config]") {
  const MlaPrefillSparseConfig c = mla_prefill_sparse_default_config(128);
  CHECK(c.num_heads == 128);
  CHECK(c.block_n == 64);
  CHECK(c.stages == 4);
  CHECK(c.schedule == MlaSparseSchedule::kTwoConsumers);
  CHECK(c.persistent);
  CHECK(c.kernel().persistent);
  REQUIRE_NOTHROW(c.validate());
  // A JSON config without the field is one CTA per tile, so opt-in schedules stay valid;
  // asked for together, the rule names the field.
  CHECK_FALSE(MlaPrefillSparseConfig::from_json(R"({"cluster": 2})").persistent);
  REQUIRE_ERROR(MlaPrefillSparseConfig::from_json(R"({"cluster": 2, "persistent": true})"),
                ErrorKind::kUnsupportedConfig, "'persistent'", "cluster 1");
  CHECK(MlaPrefillSparseConfig::from_json(c.to_json()) == c);
  // 32-key steps are softmax_wg's: the default schedule refuses them by name.
  REQUIRE_ERROR(MlaPrefillSparseConfig::from_json(R"({"block_n": 32, "stages": 3})"),
                ErrorKind::kUnsupportedConfig, "'schedule'", "block_n 64");
  const MlaPrefillSparseConfig h64 = MlaPrefillSparseConfig::from_json(
      R"({"num_heads": 64, "block_n": 32, "stages": 3, "schedule": "softmax_wg"})");
  CHECK(h64.num_heads == 64);
  CHECK(h64.block_n == 32);
  CHECK(h64.stages == 3);
  CHECK(MlaPrefillSparseConfig::from_json(h64.to_json()) == h64);
  CHECK(h64.describe().find("64") != std::string::npos);
  // The kernel: mla_decode_sparse's, bf16 rows, the same h, step and ring depth.
  for (const MlaPrefillSparseConfig& p : {c, h64, mla_prefill_sparse_default_config(16)}) {
    const MlaDecodeSparseConfig k = p.kernel();
    CHECK(k.cache_layout == MlaSparseLayout::kBF16);
    CHECK(k.num_heads == p.num_heads);
    CHECK(k.block_n == p.block_n);
    CHECK(k.stages == p.stages);
    REQUIRE_NOTHROW(k.validate());
  }
  for (int h : {7, 129}) {
    MlaPrefillSparseConfig bad = c;
    bad.num_heads = h;
    REQUIRE_ERROR(bad.validate(), ErrorKind::kUnsupportedConfig, "'num_heads'", "8..128");
  }
  for (int s : {1, 5}) {
    MlaPrefillSparseConfig bad = c;
    bad.stages = s;
    REQUIRE_ERROR(bad.validate(), ErrorKind::kUnsupportedConfig, "'stages'");
  }
  REQUIRE_ERROR(MlaPrefillSparseConfig::from_json(R"({"num_heads": 129})"), ErrorKind::kUnsupportedConfig,
                "'num_heads'");
  // 64-key steps need the 4-stage ring (two steps); other step sizes do not exist.
  REQUIRE_ERROR(MlaPrefillSparseConfig::from_json(R"({"block_n": 64, "stages": 3})"),
                ErrorKind::kUnsupportedConfig, "'block_n'", "stages 4");
  REQUIRE_ERROR(MlaPrefillSparseConfig::from_json(R"({"block_n": 128})"), ErrorKind::kUnsupportedConfig,
                "'block_n'");
  REQUIRE_ERROR(MlaPrefillSparseConfig::from_json(R"({"stages": "four"})"), ErrorKind::kUnsupportedConfig,
                "'stages'");
}

TEST_CASE("mla_prefill_sparse in the registry: sm_90a, h 16..128, issue 21's rows", "[mla_prefill_sparse][config]") {
  const ops::OpSpec& op = ops::find_op("mla_prefill_sparse");
  CHECK(op.supports(kSm90a));
  CHECK(op.default_set().size() == 4);  // h 16, 32, 64, 128
  CHECK(op.tuning.bench_shapes.size() == 12);
  for (const nlohmann::json& s : op.tuning.bench_shapes) {
    INFO(s.dump());
    CHECK(s.size() == 4);
    CHECK(s.contains("tokens"));
    CHECK(s.contains("pool"));
  }
  REQUIRE_ERROR(op.canonicalize(nlohmann::json{{"num_heads", 4}}), ErrorKind::kUnsupportedConfig, "'num_heads'");
}

TEST_CASE("mla_prefill_sparse's shape and plan rules", "[mla_prefill_sparse][args]") {
  const MlaPrefillSparseShape s = mla_prefill_sparse_shape(valid_args());
  CHECK(s.num_heads == H);
  CHECK(s.topk == TOPK);
  // The shape holds no token count: the same for any.
  const MlaPrefillSparseShape s0 = mla_prefill_sparse_shape(no_tokens(valid_args()));
  CHECK(s0.num_heads == s.num_heads);
  CHECK(s0.topk == s.topk);
  const auto bad = ErrorKind::kBadArgument;
  REQUIRE_ERROR(mla_prefill_sparse_shape(with(&MlaPrefillSparseArgs::q, view(0, DType::kBF16, {T, 1, H, 576}))),
                bad, "q", "rank 3");
  REQUIRE_ERROR(mla_prefill_sparse_shape(with(&MlaPrefillSparseArgs::indices, view(2, DType::kI32, {T, 1, TOPK}))),
                bad, "indices", "rank 2");
  const MlaPrefillSparseConfig cfg = mla_prefill_sparse_default_config(H);
  MlaPrefillSparseShape wrong = s;
  wrong.num_heads = 32;
  REQUIRE_REFUSED(mla_prefill_sparse_plan(wrong, &cfg), bad, "shape.num_heads");
  wrong = s;
  wrong.topk = 0;
  REQUIRE_REFUSED(mla_prefill_sparse_plan(wrong, &cfg), bad, "shape.topk");
  MlaPrefillSparseConfig deep = cfg;
  deep.stages = 5;
  REQUIRE_REFUSED(mla_prefill_sparse_plan(s, &deep), ErrorKind::kUnsupportedConfig, "'stages'");
}

TEST_CASE("mla_prefill_sparse rejects bad arguments before launching", "[mla_prefill_sparse][args]") {
  const MlaPrefillSparseConfig cfg = mla_prefill_sparse_default_config(H);
  auto call = [&](const MlaPrefillSparseArgs& a, const MlaPrefillSparseConfig* c = nullptr) {
    mla_prefill_sparse(a, nullptr, c ? c : &cfg);
  };
  const auto bad = ErrorKind::kBadArgument;
  const DType bf16 = DType::kBF16, f32 = DType::kF32, i32 = DType::kI32;
  using A = MlaPrefillSparseArgs;

  SECTION("the valid call passes every host check") {
    // Over 0 tokens the op checks everything, then returns before planning: no device.
    REQUIRE_NOTHROW(call(no_tokens(valid_args())));
    MlaPrefillSparseArgs a = no_tokens(valid_args());  // optional inputs absent
    a.topk_lengths = a.attn_sink = a.lse = a.max_logit = {};
    REQUIRE_NOTHROW(call(a));
    a.kv_cache = view(1, bf16, {PAGES * PAGE, 576});  // the plain pool view
    REQUIRE_NOTHROW(call(a));
  }
  SECTION("q: rank, last dim, heads, dtype") {
    REQUIRE_REFUSED(call(with(&A::q, view(0, bf16, {T, 1, H, 576}))), bad, "q", "rank 3");
    REQUIRE_REFUSED(call(with(&A::q, view(0, bf16, {T * H, 576}))), bad, "q", "rank 3");
    REQUIRE_REFUSED(call(with(&A::q, view(0, bf16, {T, H, 512}))), bad, "q", "576");
    REQUIRE_REFUSED(call(with(&A::q, view(0, bf16, {T, 32, 576}))), bad, "q", "num_heads = 16");
    REQUIRE_REFUSED(call(with(&A::q, view(0, DType::kF16, {T, H, 576}))), bad, "q", "bf16");
  }
  SECTION("h outside 8..128 is a config the op does not build") {
    MlaPrefillSparseConfig small = cfg;
    small.num_heads = 7;
    MlaPrefillSparseArgs a = valid_args();
    a.q = view(0, bf16, {T, 7, 576});
    a.out = view(5, bf16, {T, 7, 512});
    REQUIRE_REFUSED(call(a, &small), ErrorKind::kUnsupportedConfig, "'num_heads'", "8..128");
  }
  SECTION("cache: bf16 576-wide rows, paged or plain") {
    REQUIRE_REFUSED(call(with(&A::kv_cache, view(1, DType::kU8, {PAGES, PAGE, 656}))), bad, "kv_cache", "576");
    REQUIRE_REFUSED(call(with(&A::kv_cache, view(1, DType::kF16, {PAGES, PAGE, 576}))), bad, "kv_cache", "bf16");
    REQUIRE_REFUSED(call(with(&A::kv_cache, view(1, DType::kU8, {PAGES, PAGE, 1152}))), bad, "kv_cache", "576");
    REQUIRE_REFUSED(call(with(&A::kv_cache, view(1, bf16, {PAGES, PAGE, 512}))), bad, "kv_cache", "576");
    REQUIRE_REFUSED(call(with(&A::kv_cache, view(1, bf16, {PAGES * PAGE * 576}))), bad, "kv_cache", "576");
    REQUIRE_REFUSED(call(with(&A::kv_cache, TensorView{})), bad, "kv_cache");
  }
  SECTION("indices: [tokens, topk] i32, last dim contiguous, stride >= topk") {
    REQUIRE_REFUSED(call(with(&A::indices, view(2, i32, {T, 1, TOPK}))), bad, "indices", "rank 2");
    REQUIRE_REFUSED(call(with(&A::indices, view(2, i32, {T + 1, TOPK}))), bad, "indices", "tokens = 5");
    REQUIRE_REFUSED(call(with(&A::indices, view(2, DType::kU8, {T, TOPK}))), bad, "indices", "i32");
    REQUIRE_REFUSED(call(with(&A::indices, TensorView::strided(fake(2), i32, {T, TOPK}, {2 * TOPK, 2}))), bad,
                    "indices", "contiguous");
    REQUIRE_REFUSED(call(with(&A::indices, TensorView::strided(fake(2), i32, {T, TOPK}, {TOPK - 1, 1}))), bad,
                    "indices", "below topk");
    REQUIRE_REFUSED(call(with(&A::indices, view(2, i32, {T, 0}))), bad, "indices", "topk");
    REQUIRE_REFUSED(call(with(&A::indices, TensorView{})), bad, "indices", "required");
    REQUIRE_REFUSED(mla_prefill_sparse(with(&A::indices, TensorView{}), valid_plan(), nullptr), bad, "indices",
                    "required");
    MlaPrefillSparseArgs a = valid_args();
    a.indices.data = fake(2, 2);
    REQUIRE_REFUSED(call(a), bad, "indices", "aligned");
  }
  SECTION("topk_lengths: [tokens] i32") {
    REQUIRE_REFUSED(call(with(&A::topk_lengths, view(3, i32, {T + 1}))), bad, "topk_lengths", "[tokens]");
    REQUIRE_REFUSED(call(with(&A::topk_lengths, view(3, i32, {T, 1}))), bad, "topk_lengths", "[tokens]");
    REQUIRE_REFUSED(call(with(&A::topk_lengths, view(3, f32, {T}))), bad, "topk_lengths", "i32");
  }
  SECTION("attn_sink: [h] f32") {
    REQUIRE_REFUSED(call(with(&A::attn_sink, view(4, f32, {H + 1}))), bad, "attn_sink", "[h]");
    REQUIRE_REFUSED(call(with(&A::attn_sink, view(4, f32, {1, H}))), bad, "attn_sink", "[h]");
    REQUIRE_REFUSED(call(with(&A::attn_sink, view(4, bf16, {H}))), bad, "attn_sink", "f32");
  }
  SECTION("outputs: out [tokens, h, 512] bf16, lse and max_logit [tokens, h] f32") {
    REQUIRE_REFUSED(call(with(&A::out, view(5, bf16, {T, H, 576}))), bad, "out", "512");
    REQUIRE_REFUSED(call(with(&A::out, view(5, bf16, {T, 1, H, 512}))), bad, "out", "rank 3");
    REQUIRE_REFUSED(call(with(&A::out, view(5, f32, {T, H, 512}))), bad, "out", "bf16");
    REQUIRE_REFUSED(call(with(&A::out, TensorView{})), bad, "out");
    for (TensorView A::*field : {&A::lse, &A::max_logit}) {
      const char* name = field == &A::lse ? "lse" : "max_logit";
      INFO(name);
      REQUIRE_REFUSED(call(with(field, view(6, f32, {H, T}))), bad, name, "[tokens, h]");
      REQUIRE_REFUSED(call(with(field, view(6, f32, {T, H, 1}))), bad, name, "[tokens, h]");
      REQUIRE_REFUSED(call(with(field, view(6, f32, {T * H}))), bad, name, "[tokens, h]");
      REQUIRE_REFUSED(call(with(field, view(6, bf16, {T, H}))), bad, name, "f32");
      REQUIRE_REFUSED(call(with(field, TensorView::strided(fake(6), f32, {T, H}, {2 * H, 2}))), bad, name);
    }
  }
  SECTION("softmax_scale: positive and finite") {
    for (float s : {0.0f, -0.07f, std::numeric_limits<float>::quiet_NaN(), INFINITY}) {
      INFO(s);
      MlaPrefillSparseArgs a = valid_args();
      a.softmax_scale = s;
      REQUIRE_REFUSED(call(a), bad, "softmax_scale", "positive");
    }
  }
  SECTION("every tensor on q's device") {
    for (TensorView A::*field : {&A::kv_cache, &A::indices, &A::max_logit, &A::lse}) {
      MlaPrefillSparseArgs a = valid_args();
      (a.*field).device = 1;
      REQUIRE_REFUSED(call(a), bad, "device 1");
    }
  }
  SECTION("the call against its plan") {
    const MlaPrefillSparsePlan plan = valid_plan();
    CHECK(plan.workspace_bytes == 0);
    MlaPrefillSparsePlan other = plan;  // planned for 32 heads
    other.shape.num_heads = 32;
    other.config = mla_prefill_sparse_default_config(32);
    REQUIRE_REFUSED(mla_prefill_sparse(valid_args(), other, nullptr), bad, "q", "num_heads = 32");
    other = plan;  // planned for another topk
    other.shape.topk = TOPK + 1;
    REQUIRE_REFUSED(mla_prefill_sparse(valid_args(), other, nullptr), bad, "indices", "plan's topk = 101");
    other = plan;  // a hand-made plan whose shape and config disagree
    other.shape.num_heads = 32;
    REQUIRE_REFUSED(mla_prefill_sparse(valid_args(), other, nullptr), bad, "shape.num_heads");
    other = plan;
    other.config.stages = 5;
    REQUIRE_REFUSED(mla_prefill_sparse(valid_args(), other, nullptr), ErrorKind::kUnsupportedConfig, "'stages'");
    // The plan's checks are the one-call form's: a bad argument is named the same way.
    REQUIRE_REFUSED(mla_prefill_sparse(with(&A::lse, view(6, f32, {H, T})), plan, nullptr), bad, "lse");
  }
}
