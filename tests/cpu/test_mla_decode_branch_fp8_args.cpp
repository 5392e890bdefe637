// mla_decode_branch_fp8 without a GPU: the projection config as data (rules, JSON, the
// registry entries) and every host argument rule refused before the driver is touched,
// the error naming the argument and the rule.
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>

#include "attnjit/ops/mla_decode_branch_fp8.hpp"
#include "ops/registry.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"

using namespace attnjit;

namespace {

void* fake(int slot) {
  return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} + uintptr_t(slot) * (uintptr_t{1} << 28));
}

constexpr int64_t T = 5, B = 3, H = 16, PAGES = 10, PAGE = 64, MAXP = 4, POS = 300;

TensorView view(int slot, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(fake(slot), dtype, shape);
}

// A valid call on a bf16 cache: 5 tokens over 3 sequences, h 16.
MlaDecodeBranchFp8Args valid_args() {
  MlaDecodeBranchFp8Args a;
  a.q = view(0, DType::kBF16, {T, H, 192});
  a.input_row_offsets = view(1, DType::kI32, {B + 1});
  a.cache_lens_before = view(2, DType::kI32, {B});
  a.kv_input = view(3, DType::kBF16, {T, 576});
  a.freqs_cis = view(4, DType::kF32, {POS, 64});
  a.kv_norm_gamma = view(5, DType::kBF16, {512});
  a.kv_cache = view(6, DType::kBF16, {PAGES, PAGE, 576});
  a.block_table = view(7, DType::kI32, {B, MAXP});
  a.w_uk = view(8, DType::kE4M3, {H, 512, 128});
  a.w_uk_scale = view(9, DType::kF32, {H, 4, 1});
  a.w_uv = view(10, DType::kE4M3, {H, 128, 512});
  a.w_uv_scale = view(11, DType::kF32, {H, 1, 4});
  a.out = view(12, DType::kBF16, {T, H, 128});
  a.softmax_scale = 0.0722f;
  return a;
}

// The plan of valid_args() made by hand (mla_decode_branch_fp8_plan needs a device).
MlaDecodeBranchFp8Plan valid_plan() {
  MlaDecodeBranchFp8Plan p;
  p.shape = mla_decode_branch_fp8_shape(valid_args(), 2);
  p.absorb = mla_branch_proj_default_config(128, T, H);
  p.output = mla_branch_proj_default_config(512, T, H);
  p.workspace_bytes = 1 << 20;
  return p;
}

MlaDecodeBranchFp8Args with(TensorView MlaDecodeBranchFp8Args::*field, const TensorView& v) {
  MlaDecodeBranchFp8Args a = valid_args();
  a.*field = v;
  return a;
}

void refused(const MlaDecodeBranchFp8Args& a, const char* name, const char* rule) {
  INFO(name << ": " << rule);
  REQUIRE_REFUSED(mla_decode_branch_fp8(a, valid_plan(), Workspace{fake(30), 1 << 20}, nullptr),
                  ErrorKind::kBadArgument, name, rule);
}

}  // namespace

TEST_CASE("mla_decode_branch_fp8 config: defaults, rules, JSON and the registry", "[mla_decode_branch_fp8][config]") {
  for (int k : {128, 512})
    for (int tokens : {1, 16, 17, 64, 256})
      for (int h : {16, 128}) {
        const MlaBranchProjConfig c = mla_branch_proj_default_config(k, tokens, h);
        CHECK_NOTHROW(c.validate());
        CHECK(c.k_dim == k);
        CHECK(c.n_dim == (k == 128 ? 512 : 128));
        // A step holds the call's tokens up to a 32-token tile; CTAs walk steps past 128.
        CHECK(c.block_m >= std::min(tokens, 32));
        CHECK(c.block_m <= std::max(8, 2 * tokens));
        CHECK(c.m_steps == (tokens > 128 ? (k == 512 ? 4 : 2) : 1));
        CHECK(MlaBranchProjConfig::from_json(c.to_json()) == c);
      }
  MlaBranchProjConfig bad = mla_branch_proj_default_config(128, 1, 128);
  bad.n_dim = 128;
  REQUIRE_ERROR(bad.validate(), ErrorKind::kUnsupportedConfig, "n_dim", "k_dim 128");
  bad = mla_branch_proj_default_config(512, 1, 128);
  bad.block_n = 128;
  CHECK_NOTHROW(bad.validate());
  bad.block_m = 128;  // 128 tokens × 512 activations: past what the threads hold
  REQUIRE_ERROR(bad.validate(), ErrorKind::kUnsupportedConfig, "block_m", "32768");
  bad.block_m = 12;
  REQUIRE_ERROR(bad.validate(), ErrorKind::kUnsupportedConfig, "block_m");
  bad = mla_branch_proj_default_config(128, 1, 128);
  bad.block_m = 128;
  bad.block_n = 512;
  bad.m_steps = 8;
  CHECK_NOTHROW(bad.validate());  // 113 KiB: W 64, codes 16, the stage 32 (one CTA an SM)
  bad.m_steps = 9;
  REQUIRE_ERROR(bad.validate(), ErrorKind::kUnsupportedConfig, "m_steps");
  bad = mla_branch_proj_default_config(512, 1, 128);
  bad.block_n = 256;
  REQUIRE_ERROR(bad.validate(), ErrorKind::kUnsupportedConfig, "block_n", "n_dim");
  // e4m3 activations (the attention's e4m3 output): the output projection only.
  for (int tokens : {1, 16, 64, 100, 256, 1000}) {
    const MlaBranchProjConfig c = mla_branch_proj_default_config(512, tokens, 128, true);
    CHECK_NOTHROW(c.validate());
    CHECK(c.a_e4m3);
    CHECK(c.block_m * c.m_steps >= std::min(tokens, 128));
  }
  CHECK_FALSE(mla_branch_proj_default_config(128, 16, 128, true).a_e4m3);  // the absorption's are bf16
  bad = mla_branch_proj_default_config(128, 16, 128);
  bad.a_e4m3 = true;
  REQUIRE_ERROR(bad.validate(), ErrorKind::kUnsupportedConfig, "a_e4m3", "k_dim 512");
  REQUIRE_ERROR(MlaBranchProjConfig::from_json(R"({"k_dim": 128, "tile": 3})"), ErrorKind::kUnsupportedConfig, "tile");
  const ops::OpSpec& main = ops::find_op("mla_decode_branch_fp8");
  CHECK(!main.default_set().empty());
  const ops::OpSpec& rope = ops::find_op("mla_branch_rope");
  CHECK(rope.default_set().size() == 3);
}

TEST_CASE("mla_decode_branch_fp8 refuses bad arguments before any launch", "[mla_decode_branch_fp8][args]") {
  using A = MlaDecodeBranchFp8Args;
  refused(with(&A::q, view(0, DType::kBF16, {T, H, 576})), "q", "[tokens, h, 192]");
  refused(with(&A::q, view(0, DType::kF16, {T, H, 192})), "q", "bf16");
  refused(with(&A::q, view(0, DType::kBF16, {T, 129, 192})), "q", "1..128");
  refused(with(&A::q, TensorView::strided(fake(0), DType::kBF16, {T, H, 192}, {H * 196, 196, 1})), "q", "16 bytes");
  refused(with(&A::input_row_offsets, view(1, DType::kF32, {B + 1})), "input_row_offsets", "i32");
  refused(with(&A::cache_lens_before, view(2, DType::kI32, {B + 1})), "cache_lens_before", "[b]");
  refused(with(&A::kv_input, view(3, DType::kBF16, {T + 1, 576})), "kv_input", "[tokens = 5, 576]");
  refused(with(&A::freqs_cis, view(4, DType::kF32, {POS, 32})), "freqs_cis", "[max_pos >= 1, 64]");
  refused(with(&A::kv_norm_gamma, view(5, DType::kF32, {512})), "kv_norm_gamma", "bf16");
  refused(with(&A::kv_cache, view(6, DType::kBF16, {PAGES, PAGE, 656})), "kv_cache", "640");
  refused(with(&A::kv_cache, view(6, DType::kU8, {PAGES, PAGE, 640})), "kv_scale", "[pages, page_size]");
  refused(with(&A::kv_scale, view(13, DType::kF32, {PAGES, PAGE})), "kv_scale", "bf16 cache has none");
  refused(with(&A::block_table, view(7, DType::kI32, {B + 1, MAXP})), "block_table", "[b = 3");
  refused(with(&A::w_uk, view(8, DType::kE4M3, {H, 128, 512})), "w_uk", "[h, 512, 128]");
  refused(with(&A::w_uk, view(8, DType::kBF16, {H, 512, 128})), "w_uk", "e4m3");
  refused(with(&A::w_uk_scale, view(9, DType::kF32, {H, 1, 4})), "w_uk_scale", "[h, 4, 1]");
  refused(with(&A::w_uv, view(10, DType::kE4M3, {H, 512, 128})), "w_uv", "[h, 128, 512]");
  refused(with(&A::w_uv_scale, view(11, DType::kF32, {H, 4, 1})), "w_uv_scale", "[h, 1, 4]");
  refused(with(&A::out, view(12, DType::kBF16, {T, H, 512})), "out", "[tokens, h, 128]");
  refused(with(&A::out, TensorView{}), "out", "rank 3");
  MlaDecodeBranchFp8Args a = valid_args();
  a.softmax_scale = std::numeric_limits<float>::quiet_NaN();
  refused(a, "softmax_scale", "finite");
  a = valid_args();
  a.epsilon = -1.0f;
  refused(a, "epsilon", ">= 0");
  // Against the plan, and the workspace.
  refused(with(&A::block_table, view(7, DType::kI32, {B, MAXP + 1})), "block_table", "max_pages");
  REQUIRE_REFUSED(mla_decode_branch_fp8(valid_args(), valid_plan(), Workspace{fake(30), 16}, nullptr),
                  ErrorKind::kBadArgument, "workspace");
  REQUIRE_REFUSED(mla_branch_project(view(0, DType::kBF16, {T, H, 100}), valid_args().w_uk, valid_args().w_uk_scale,
                                     view(12, DType::kBF16, {T, H, 512}), mla_branch_proj_default_config(128, T, H), nullptr),
                  ErrorKind::kBadArgument, "a", ">= 128");
}

TEST_CASE("mla_decode_branch_fp8's sparse attention: its arguments checked before any launch",
          "[mla_decode_branch_fp8][args]") {
  using A = MlaDecodeBranchFp8Args;
  constexpr int64_t K = 64;  // topk
  MlaDecodeBranchFp8Args sparse = valid_args();
  sparse.kv_cache = view(6, DType::kU8, {PAGES, PAGE, 656});
  sparse.indices = view(14, DType::kI32, {T, K});
  sparse.topk_lengths = view(15, DType::kI32, {T});
  sparse.attn_sink = view(16, DType::kF32, {H});
  const MlaDecodeBranchFp8Shape shape = mla_decode_branch_fp8_shape(sparse, 2);
  CHECK(shape.cache == MlaBranchCache::kFp8Block);
  CHECK(shape.topk == K);
  CHECK(shape.topk_extra == 0);
  MlaDecodeBranchFp8Plan plan = valid_plan();
  plan.shape = shape;
  plan.attention_sparse.config = mla_decode_sparse_default_config(MlaSparseLayout::kFp8, H);
  auto refused_sparse = [&](const A& a, const char* name, const char* rule) {
    INFO(name << ": " << rule);
    REQUIRE_REFUSED(mla_decode_branch_fp8(a, plan, Workspace{fake(30), 1 << 20}, nullptr), ErrorKind::kBadArgument,
                    name, rule);
  };
  // The branch's own rules: which cache goes with which attention, the indices' shape.
  A a = sparse;
  a.indices = TensorView{};
  refused_sparse(a, "indices", "required with the 656-byte cache");
  a = valid_args();
  a.topk_lengths = view(15, DType::kI32, {T});
  refused(a, "topk_lengths", "set indices too");
  a = valid_args();
  a.kv_cache = view(6, DType::kU8, {PAGES, PAGE, 640});
  a.kv_scale = view(13, DType::kF32, {PAGES, PAGE});
  a.indices = view(14, DType::kI32, {T, K});
  refused(a, "indices", "not the 640-byte one");
  a = sparse;
  a.indices = view(14, DType::kI32, {T + 1, K});
  refused_sparse(a, "indices", "[tokens = 5, topk >= 1]");
  a = sparse;
  a.indices = view(14, DType::kI32, {T, K + 1});
  refused_sparse(a, "indices", "plan was made for 64");
  a = sparse;
  a.kv_scale = view(13, DType::kF32, {PAGES, PAGE});
  refused_sparse(a, "kv_scale", "carry their scales");
  // mla_decode_sparse's rules, checked by the branch before its first stage.
  a = sparse;
  a.attn_sink = view(16, DType::kF32, {H + 1});
  refused_sparse(a, "attn_sink", "");
  a = sparse;
  a.indices = view(14, DType::kF32, {T, K});
  refused_sparse(a, "indices", "i32");
}
