// mla_decode_fp8 without a GPU: config validation and JSON, the registry entries, and every
// argument check (each names its argument and rule before the driver is touched).
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "attnjit/ops/mla_decode_fp8.hpp"
#include "jit/compiler.hpp"
#include "ops/registry.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/sass.hpp"

using namespace attnjit;

namespace {
// The default's shape fields on schedule 0's tiles (64 query rows, 32-key tiles): the base
// of the fp8 wgmma kernel's and the seesaw's configs.
MlaDecodeFp8Config schedule0(int h, int q_len, int page) {
  MlaDecodeFp8Config c = mla_decode_fp8_default_config(h, q_len, page);
  c.schedule = 0;
  c.block_m = 64;
  c.block_n = 32;
  c.stages = 3;
  return c;
}

// Compiles c for sm_90a: no spills, wgmma not serialized (C7520); the SASS where a
// disassembler is at hand (ATTNJIT_REQUIRE_SASS makes its absence fail).
std::optional<std::string> compile_clean(const MlaDecodeFp8Config& c) {
  REQUIRE_NOTHROW(c.validate());
  INFO(c.describe());
  const ops::OpSpec& op = ops::find_op("mla_decode_fp8");
  const jit::CompiledKernel k = jit::compile_recipe(op.recipe(nlohmann::json::parse(c.to_json()), kSm90a));
  REQUIRE(k.ptxas.parsed);
  CHECK(k.ptxas.spill_store_bytes == 0);
  CHECK(k.ptxas.spill_load_bytes == 0);
  CHECK(k.log.find("C7520") == std::string::npos);
  return test::disassemble(k.cubin);
}
}  // namespace

TEST_CASE("mla_decode_fp8 default configs are valid", "[config][mla_decode_fp8]") {
  REQUIRE_NOTHROW(MlaDecodeFp8Config{}.validate());
  for (int h : {8, 16, 32, 64, 128})
    for (int q_len = 1; q_len <= 8; ++q_len)
      for (int page : {64, 128, 256}) {
        const MlaDecodeFp8Config c = mla_decode_fp8_default_config(h, q_len, page);
        REQUIRE_NOTHROW(c.validate());
        CHECK(c.max_q_len >= q_len);
        CHECK(c.page_size == page);
        // the narrow kernel, one wgmma N holding all q_len·h rows where 8, 16 or 32 can
        CHECK(c.schedule == 2);
        CHECK(c.block_m == std::min(32, std::max(8, static_cast<int>(std::bit_ceil(unsigned(c.max_q_len * h))))));
      }
}

TEST_CASE("mla_decode_fp8 config validation names the field", "[config][mla_decode_fp8]") {
  auto with = [](auto&& edit) {
    MlaDecodeFp8Config c;
    edit(c);
    return c;
  };
  for (int h : {0, 129})
    REQUIRE_ERROR(with([&](auto& c) { c.num_heads = h; }).validate(), ErrorKind::kUnsupportedConfig, "'num_heads'");
  for (int q : {0, 9})
    REQUIRE_ERROR(with([&](auto& c) { c.max_q_len = q; }).validate(), ErrorKind::kUnsupportedConfig, "'max_q_len'");
  for (int p : {16, 32, 48, 512})  // >= 64: a 32-key tile never straddles a page
    REQUIRE_ERROR(with([&](auto& c) { c.page_size = p; }).validate(), ErrorKind::kUnsupportedConfig, "'page_size'");
  REQUIRE_ERROR(with([](auto& c) { c.block_n = 64; }).validate(), ErrorKind::kUnsupportedConfig, "'block_n'",
                "schedule 0");
  // Schedule 1 (the seesaw) is 64-key tiles in 2 buffers, bf16 math: each rule names its field.
  const auto seesaw = [](MlaDecodeFp8Config& c) {
    c.schedule = 1;
    c.block_n = 64;
    c.stages = 2;
  };
  CHECK_NOTHROW(with(seesaw).validate());
  REQUIRE_ERROR(with([&](auto& c) { seesaw(c); c.block_n = 32; }).validate(), ErrorKind::kUnsupportedConfig, "'block_n'");
  REQUIRE_ERROR(with([&](auto& c) { seesaw(c); c.stages = 3; }).validate(), ErrorKind::kUnsupportedConfig, "'stages'");
  REQUIRE_ERROR(with([&](auto& c) { seesaw(c); c.fp8_mma = 1; }).validate(), ErrorKind::kUnsupportedConfig, "'fp8_mma'");
  // Schedule 2 (narrow) is 8/16/32 query rows per CTA on 64-key tiles, 2 or 4 ring stages.
  const auto narrow = [](MlaDecodeFp8Config& c) {
    c.schedule = 2;
    c.block_m = 16;
    c.block_n = 64;
    c.stages = 4;
  };
  CHECK_NOTHROW(with(narrow).validate());
  REQUIRE_ERROR(with([&](auto& c) { narrow(c); c.block_m = 64; }).validate(), ErrorKind::kUnsupportedConfig, "'block_m'");
  REQUIRE_ERROR(with([&](auto& c) { narrow(c); c.block_n = 32; }).validate(), ErrorKind::kUnsupportedConfig, "'block_n'");
  for (int s : {3, 5, 6})  // odd rings hand stages between the warpgroups; 6 does not fit
    REQUIRE_ERROR(with([&](auto& c) { narrow(c); c.stages = s; }).validate(), ErrorKind::kUnsupportedConfig,
                  "'stages'");
  REQUIRE_ERROR(with([&](auto& c) { narrow(c); c.fp8_mma = 1; }).validate(), ErrorKind::kUnsupportedConfig, "'fp8_mma'");
  // The narrow kernel chains its score steps by 1 or 2 (longer chains leave the error model).
  CHECK_NOTHROW(with([&](auto& c) { narrow(c); c.score_chain = 2; }).validate());
  for (int k : {0, 3, 4})
    REQUIRE_ERROR(with([&](auto& c) { narrow(c); c.score_chain = k; }).validate(), ErrorKind::kUnsupportedConfig,
                  "'score_chain'");
  REQUIRE_ERROR(with([](auto& c) { c.block_m = 32; }).validate(), ErrorKind::kUnsupportedConfig, "'block_m'");
  REQUIRE_ERROR(with([](auto& c) { c.schedule = 3; }).validate(), ErrorKind::kUnsupportedConfig, "'schedule'");
  for (int s : {1, 4, 9})
    REQUIRE_ERROR(with([&](auto& c) { c.stages = s; }).validate(), ErrorKind::kUnsupportedConfig, "'stages'");
  REQUIRE_ERROR(with([](auto& c) { c.fp8_mma = 2; }).validate(), ErrorKind::kUnsupportedConfig, "'fp8_mma'");
}

TEST_CASE("mla_decode_fp8's experimental fp8 kernel compiles with QGMMA and no spills",
          "[jit][nvrtc][mla_decode_fp8]") {
  // Not in the default set (the narrow kernel is faster at the same e4m3 P′ error); this
  // keeps it compiling and in shape.
  for (const auto& [h, q, page, stages] : {std::array<int, 4>{16, 1, 64, 6}, {128, 2, 64, 6}, {64, 8, 256, 8}}) {
    MlaDecodeFp8Config c = schedule0(h, q, page);
    c.fp8_mma = 1;
    c.stages = stages;
    INFO(c.describe());
    if (auto sass = compile_clean(c)) {
      CHECK(test::count_opcode(*sass, "QGMMA") >= 2);  // Q·Kᵀ content and P·V
      CHECK(test::count_opcode(*sass, "HGMMA") > 0);   // the bf16 rope
      CHECK(test::count_opcode(*sass, "UTMALDG") > 0);
      CHECK(test::count_opcode(*sass, "LDL") == 0);
      CHECK(test::count_opcode(*sass, "STL") == 0);
    }
  }
  MlaDecodeFp8Config c;
  c.fp8_mma = 1;
  c.stages = 8;  // the fp8 kernel's ring is its only K/V copy: 8 × 20 KiB fit
  CHECK_NOTHROW(c.validate());
  c.fp8_mma = 0;  // the widening kernel's bf16 tiles leave room for 3
  REQUIRE_ERROR(c.validate(), ErrorKind::kUnsupportedConfig, "'stages'");
}

TEST_CASE("mla_decode_fp8's seesaw kernel compiles with its producer and mla_decode's GEMMs",
          "[jit][nvrtc][mla_decode_fp8]") {
  // Not in the default set: its two seesaw warpgroups spill a few piece-level values at the
  // 232 registers its producer warpgroup leaves them, and the producer its loop state at 40
  // (docs/performance.md). This keeps it compiling, within its smem plan and in shape.
  const ops::OpSpec& op = ops::find_op("mla_decode_fp8");
  for (const auto& [h, q, page] : {std::array<int, 3>{16, 1, 64}, {128, 2, 64}, {64, 8, 256}}) {
    MlaDecodeFp8Config c = schedule0(h, q, page);
    c.schedule = 1;
    c.block_n = 64;
    c.stages = 2;
    REQUIRE_NOTHROW(c.validate());
    INFO(c.describe());
    const jit::CompiledKernel k = jit::compile_recipe(op.recipe(nlohmann::json::parse(c.to_json()), kSm90a));
    REQUIRE(k.ptxas.parsed);
    CHECK(k.log.find("C7520") == std::string::npos);  // wgmma not serialized
    CHECK(k.log.find("C7508") == std::string::npos);  // setmaxnreg honoured
    CHECK(k.ptxas.spill_store_bytes <= 256);           // the known spills, not more
    if (auto sass = test::disassemble(k.cubin)) {
      CHECK(test::count_opcode(*sass, "HGMMA") > 0);
      CHECK(test::count_opcode(*sass, "UTMALDG") > 0);
      CHECK(test::count_opcode(*sass, "USETMAXREG") == 2);
    }
  }
}

TEST_CASE("mla_decode_fp8's narrow kernel compiles with QGMMA, TMA and no spills",
          "[jit][nvrtc][mla_decode_fp8]") {
  for (const auto& [h, q, block_m, stages, chain] :
       {std::array<int, 5>{8, 1, 8, 4, 2}, {16, 1, 16, 2, 2}, {16, 2, 32, 4, 2}, {128, 8, 32, 2, 2},
        {128, 2, 32, 4, 1}}) {  // the last: Q·Kᵀ promoted every k32 step (score_chain 1)
    MlaDecodeFp8Config c = mla_decode_fp8_default_config(h, q, 64);
    c.schedule = 2;
    c.block_m = block_m;
    c.block_n = 64;
    c.stages = stages;
    c.score_chain = chain;
    INFO(c.describe());
    if (auto sass = compile_clean(c)) {
      CHECK(test::count_opcode(*sass, "QGMMA") >= 2);  // Kᵀ·Q content and Vᵀ·P′ᵀ
      CHECK(test::count_opcode(*sass, "HGMMA") > 0);   // the bf16 rope
      CHECK(test::count_opcode(*sass, "UTMALDG") > 0);
      CHECK(test::count_opcode(*sass, "LDSM") > 0);    // Vᵀ by ldmatrix.trans
      CHECK(test::count_opcode(*sass, "LDL") == 0);
      CHECK(test::count_opcode(*sass, "STL") == 0);
    }
  }
}

TEST_CASE("mla_decode_fp8 config JSON round trip and registry", "[config][mla_decode_fp8]") {
  MlaDecodeFp8Config c = mla_decode_fp8_default_config(16, 2, 128);
  c.stages = 2;
  CHECK(MlaDecodeFp8Config::from_json(c.to_json()) == c);
  REQUIRE_ERROR(MlaDecodeFp8Config::from_json(R"({"num_heads": 16, "dtype": "bf16"})"),
                ErrorKind::kUnsupportedConfig, "dtype");
  const ops::OpSpec& op = ops::find_op("mla_decode_fp8");
  CHECK(op.default_set().size() == 15);
  for (const auto& j : op.default_set()) CHECK_NOTHROW(op.canonicalize(j));
  CHECK_NOTHROW(ops::find_op("mla_fp8_quantize"));
}

// ---- argument checks ----------------------------------------------------------------

namespace {

void* fake(int slot, uintptr_t misalign = 0) {
  return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} + uintptr_t(slot) * (uintptr_t{1} << 28) + misalign);
}

constexpr int64_t B = 2, QL = 2, H = 16, PAGES = 10, PAGE = 64, MAXP = 4;

MlaDecodeFp8Args valid_args() {
  MlaDecodeFp8Args a;
  a.q = TensorView::contiguous(fake(0), DType::kU8, {B, QL, H, 640});
  a.q_scale = TensorView::contiguous(fake(1), DType::kF32, {B * QL});
  a.kv_cache = TensorView::contiguous(fake(2), DType::kU8, {PAGES, PAGE, 640});
  a.kv_scale = TensorView::contiguous(fake(3), DType::kF32, {PAGES, PAGE});
  a.block_table = TensorView::contiguous(fake(4), DType::kI32, {B, MAXP});
  a.cache_lens = TensorView::contiguous(fake(5), DType::kI32, {B});
  a.out = TensorView::contiguous(fake(6), DType::kBF16, {B, QL, H, 512});
  a.lse = TensorView::contiguous(fake(7), DType::kF32, {B, H, QL});
  a.softmax_scale = 0.0722f;
  return a;
}

MlaDecodeFp8Plan valid_plan(const MlaDecodeFp8Args& a) {
  MlaDecodeFp8Plan p;
  p.shape = mla_decode_fp8_shape(a);
  p.config = mla_decode_fp8_default_config(H, QL, PAGE);
  p.num_splits = 1;
  return p;
}

template <class Edit>
void expect_bad(Edit edit, const char* name, const char* rule) {
  MlaDecodeFp8Args a = valid_args();
  const MlaDecodeFp8Plan plan = valid_plan(a);
  edit(a);
  INFO("argument " << name);
  REQUIRE_ERROR(mla_decode_fp8(a, plan, Workspace{}, nullptr), ErrorKind::kBadArgument, name, rule);
}

}  // namespace

TEST_CASE("mla_decode_fp8 names every bad argument before any launch", "[args][mla_decode_fp8]") {
  // rows of 640 bytes (or 576 in the per-tensor form)
  expect_bad([](auto& a) { a.q = TensorView::contiguous(fake(0), DType::kU8, {B, QL, H, 600}); }, "q:", "640");
  expect_bad([](auto& a) { a.q = TensorView::contiguous(fake(0), DType::kU8, {B, QL, H, 576}); }, "q_scale:",
             "per-tensor");
  expect_bad([](auto& a) {  // 576-byte q rows take 576-byte cache rows and one σ each
               a.q = TensorView::contiguous(fake(0), DType::kU8, {B, QL, H, 576});
               a.q_scale = TensorView::contiguous(fake(1), DType::kF32, {1});
             },
             "kv_cache:", "576");
  expect_bad([](auto& a) {
               a.q = TensorView::contiguous(fake(0), DType::kU8, {B, QL, H, 576});
               a.q_scale = TensorView::contiguous(fake(1), DType::kF32, {1});
               a.kv_cache = TensorView::contiguous(fake(2), DType::kU8, {PAGES, PAGE, 576});
             },
             "kv_scale:", "[1]");
  expect_bad([](auto& a) { a.q.dtype = DType::kBF16; }, "q:", "bytes");
  expect_bad([](auto& a) { a.q.data = fake(0, 8); }, "q:", "aligned");
  expect_bad([](auto& a) { a.q = TensorView::contiguous(fake(0), DType::kU8, {B, QL, 8, 640}); }, "q:", "num_heads");
  expect_bad([](auto& a) { a.q = TensorView::contiguous(fake(0), DType::kU8, {B, 3, H, 640}); }, "q:", "max_q_len");
  // σ shapes
  expect_bad([](auto& a) { a.q_scale = TensorView::contiguous(fake(1), DType::kF32, {B}); }, "q_scale:", "tokens");
  expect_bad([](auto& a) { a.q_scale = TensorView::contiguous(fake(1), DType::kF32, {B * QL, 8}); }, "q_scale:", "head");
  expect_bad([](auto& a) { a.q_scale.dtype = DType::kBF16; }, "q_scale:", "f32");
  expect_bad([](auto& a) { a.kv_scale = TensorView::contiguous(fake(3), DType::kF32, {PAGES * PAGE}); }, "kv_scale:",
             "[pages, page_size]");
  expect_bad([](auto& a) { a.kv_scale = TensorView::contiguous(fake(3), DType::kF32, {PAGES, 32}); }, "kv_scale:",
             "one σ per cache row");
  // the cache: 640-byte rows, or 512 + kv_rope; page size as the config
  expect_bad([](auto& a) { a.kv_cache = TensorView::contiguous(fake(2), DType::kU8, {PAGES, PAGE, 576}); },
             "kv_cache:", "640");
  expect_bad([](auto& a) { a.kv_cache = TensorView::contiguous(fake(2), DType::kU8, {PAGES * 2, 32, 640}); },
             "kv_cache:", "page size");
  expect_bad([](auto& a) { a.kv_rope = TensorView::contiguous(fake(8), DType::kBF16, {PAGES, PAGE, 64}); },
             "kv_cache:", "three-tensor");
  expect_bad([](auto& a) {
               a.kv_cache = TensorView::contiguous(fake(2), DType::kU8, {PAGES, PAGE, 512});
               a.kv_rope = TensorView::contiguous(fake(8), DType::kBF16, {PAGES, PAGE, 32});
             },
             "kv_rope:", "64");
  expect_bad([](auto& a) {
               a.kv_cache = TensorView::contiguous(fake(2), DType::kU8, {PAGES, PAGE, 512});
               a.kv_rope = TensorView::contiguous(fake(8), DType::kF16, {PAGES, PAGE, 64});
             },
             "kv_rope:", "bf16");
  expect_bad([](auto& a) {
               a.kv_cache = TensorView::strided(fake(2), DType::kU8, {PAGES, PAGE, 640}, {PAGE * 656, 656, 1});
             },
             "kv_cache:", "contiguous");
  // table, lengths, outputs, scale
  expect_bad([](auto& a) { a.block_table = TensorView::contiguous(fake(4), DType::kI32, {B + 1, MAXP}); },
             "block_table:", "[b = 2");
  expect_bad([](auto& a) { a.cache_lens.dtype = DType::kF32; }, "cache_lens:", "i32");
  expect_bad([](auto& a) { a.out.dtype = DType::kF16; }, "out:", "bf16");
  expect_bad([](auto& a) { a.out = TensorView::contiguous(fake(6), DType::kBF16, {B, QL, H, 576}); }, "out:", "512");
  expect_bad([](auto& a) { a.lse = TensorView::contiguous(fake(7), DType::kF32, {B, QL, H}); }, "lse:", "[b, h, q_len]");
  expect_bad([](auto& a) { a.softmax_scale = 0.0f; }, "softmax_scale:", "positive");
  expect_bad([](auto& a) { a.block_table = TensorView::contiguous(fake(4), DType::kI32, {B, MAXP + 1}); },
             "block_table:", "max_pages");
}

TEST_CASE("mla_decode_fp8 takes both cache forms and per-head q scales", "[args][mla_decode_fp8]") {
  // A valid call stops at the workspace check of a split plan (nothing launched yet).
  MlaDecodeFp8Args a = valid_args();
  MlaDecodeFp8Plan plan = valid_plan(a);
  plan.num_splits = 2;
  REQUIRE_ERROR(mla_decode_fp8(a, plan, Workspace{}, nullptr), ErrorKind::kBadArgument, "workspace");
  a.q_scale = TensorView::contiguous(fake(1), DType::kF32, {B * QL, H});
  a.kv_cache = TensorView::contiguous(fake(2), DType::kU8, {PAGES, PAGE, 512});
  a.kv_rope = TensorView::contiguous(fake(8), DType::kBF16, {PAGES, PAGE, 64});
  REQUIRE_ERROR(mla_decode_fp8(a, plan, Workspace{}, nullptr), ErrorKind::kBadArgument, "workspace");
  // The per-tensor form: 576-byte rows, one σ_Q and one σ_KV (the widening kernel only).
  {
    MlaDecodeFp8Args pt = valid_args();
    pt.q = TensorView::contiguous(fake(0), DType::kU8, {B, QL, H, 576});
    MlaDecodeFp8Plan fp8_plan = valid_plan(pt);
    fp8_plan.config = schedule0(H, QL, PAGE);
    fp8_plan.config.fp8_mma = 1;
    REQUIRE_ERROR(mla_decode_fp8(pt, fp8_plan, Workspace{}, nullptr), ErrorKind::kBadArgument, "q:", "fp8_mma 0");
  }
  a = valid_args();
  a.q = TensorView::contiguous(fake(0), DType::kU8, {B, QL, H, 576});
  a.q_scale = TensorView::contiguous(fake(1), DType::kF32, {1});
  a.kv_cache = TensorView::contiguous(fake(2), DType::kU8, {PAGES, PAGE, 576});
  a.kv_scale = TensorView::contiguous(fake(3), DType::kF32, {1});
  REQUIRE_ERROR(mla_decode_fp8(a, plan, Workspace{}, nullptr), ErrorKind::kBadArgument, "workspace");
}
