// validate_tma: every cuTensorMapEncodeTiled rule, each broken on its own, is refused on the
// host with a message naming the map and the rule. No GPU or driver is needed: validation
// never dereferences the pointer, so the tests use made-up, suitably aligned addresses.
#include <cstdint>
#include <initializer_list>
#include <string>

#include "attnjit/error.hpp"
#include "attnjit/tma.hpp"
#include "support/catch.hpp"

using attnjit::DType;
using attnjit::Error;
using attnjit::ErrorKind;
using attnjit::Swizzle;
using attnjit::TensorView;
using attnjit::TmaInterleave;
using attnjit::TmaL2Promotion;
using attnjit::TmaMapSpec;
using attnjit::TmaOobFill;

namespace {

void* fake_ptr(uintptr_t addr = 0x7f0000000000) { return reinterpret_cast<void*>(addr); }

// A typical attention tile: bf16 [256, 1024], 64x64 box, 128B swizzle (64 x 2 B = 128 B).
TmaMapSpec valid_2d() {
  TmaMapSpec s;
  s.tensor = TensorView::contiguous(fake_ptr(), DType::kBF16, {256, 1024});
  s.box = {64, 64};
  s.swizzle = Swizzle::k128B;
  return s;
}

// A rank-4 NC/16HWC16-style tensor for the interleave rules: f16 [2, 4, 8, 16], where the
// innermost 16 channels are 32 B.
TmaMapSpec valid_interleaved(TmaInterleave mode) {
  TmaMapSpec s;
  s.tensor = TensorView::contiguous(fake_ptr(), DType::kF16, {2, 4, 8, 16});
  s.box = {1, 2, 8, 16};
  s.interleave = mode;
  s.swizzle = mode == TmaInterleave::k32B ? Swizzle::k32B : Swizzle::kNone;
  return s;
}

// The message validate_tma throws for `s`; fails the test when it throws nothing or
// throws anything but a kBadArgument attnjit::Error.
std::string rejection(const TmaMapSpec& s, const char* name = "src") {
  try {
    attnjit::validate_tma(s, name);
  } catch (const Error& e) {
    INFO(e.what());
    REQUIRE(e.kind() == ErrorKind::kBadArgument);
    return e.what();
  }
  FAIL("validate_tma accepted a spec that breaks a rule");
  return {};
}

// Every phrase must appear in the message, and so must the map's name.
void require_rejected(const TmaMapSpec& s, std::initializer_list<const char*> phrases) {
  const std::string msg = rejection(s, "src");
  INFO(msg);
  REQUIRE(msg.find("tma map 'src'") != std::string::npos);
  for (const char* p : phrases) {
    INFO("expected phrase: " << p);
    CHECK(msg.find(p) != std::string::npos);
  }
}

void require_valid(const TmaMapSpec& s) { REQUIRE_NOTHROW(attnjit::validate_tma(s, "ok")); }

}  // namespace

TEST_CASE("valid tensor maps pass validation", "[tma]") {
  SECTION("bf16 2D, 128B swizzle") { require_valid(valid_2d()); }
  SECTION("f32 1D, 16 B box, no swizzle") {
    TmaMapSpec s;
    s.tensor = TensorView::contiguous(fake_ptr(), DType::kF32, {1000});
    s.box = {4};
    require_valid(s);
  }
  SECTION("u8 5D with every box and element stride limit") {
    TmaMapSpec s;
    s.tensor = TensorView::contiguous(fake_ptr(), DType::kU8, {3, 5, 7, 9, 4096});
    s.box = {256, 1, 2, 3, 16};
    s.element_strides = {8, 1, 2, 3, 1};
    require_valid(s);
  }
  SECTION("fp8 with 64B swizzle (64 x 1 B)") {
    TmaMapSpec s = valid_2d();
    s.tensor.dtype = DType::kE4M3;
    s.swizzle = Swizzle::k64B;
    require_valid(s);
  }
  SECTION("box larger than the tensor (overhang is filled by TMA)") {
    TmaMapSpec s;
    s.tensor = TensorView::contiguous(fake_ptr(), DType::kBF16, {3, 8});
    s.box = {256, 64};
    require_valid(s);
  }
  SECTION("wide unswizzled box (256 x 2 B = 512 B)") {
    TmaMapSpec s = valid_2d();
    s.swizzle = Swizzle::kNone;
    s.box = {8, 256};
    require_valid(s);
  }
  SECTION("padded row stride (1032 x 2 B, multiple of 16)") {
    TmaMapSpec s = valid_2d();
    s.tensor = TensorView::strided(fake_ptr(), DType::kBF16, {256, 1024}, {1032, 1});
    require_valid(s);
  }
  SECTION("non-monotonic strides (a transposed outer pair)") {
    TmaMapSpec s;
    s.tensor = TensorView::strided(fake_ptr(), DType::kBF16, {16, 32, 64}, {64, 1024, 1});
    s.box = {1, 32, 64};
    s.swizzle = Swizzle::k128B;
    require_valid(s);
  }
  SECTION("global dim of exactly 2^32, stride just under 2^40 B") {
    TmaMapSpec s;
    s.tensor = TensorView::strided(fake_ptr(), DType::kU8, {2, int64_t{1} << 32},
                                   {(int64_t{1} << 40) - 16, 1});
    s.box = {1, 16};
    require_valid(s);
  }
  SECTION("NaN fill on floating-point types") {
    for (DType t : {DType::kBF16, DType::kF16, DType::kF32}) {
      TmaMapSpec s = valid_2d();
      s.tensor.dtype = t;
      s.swizzle = Swizzle::kNone;
      s.oob_fill = TmaOobFill::kNanRequestZeroFma;
      require_valid(s);
    }
  }
  SECTION("every L2 promotion") {
    for (auto p : {TmaL2Promotion::kNone, TmaL2Promotion::k64B, TmaL2Promotion::k128B,
                   TmaL2Promotion::k256B}) {
      TmaMapSpec s = valid_2d();
      s.l2_promotion = p;
      require_valid(s);
    }
  }
  SECTION("16B interleave, rank 3, any swizzle") {
    for (Swizzle sw : {Swizzle::kNone, Swizzle::k32B, Swizzle::k64B, Swizzle::k128B}) {
      TmaMapSpec s = valid_interleaved(TmaInterleave::k16B);
      s.tensor = TensorView::contiguous(fake_ptr(), DType::kF16, {4, 8, 8});
      s.box = {1, 8, 8};
      s.swizzle = sw;
      require_valid(s);
    }
  }
  SECTION("32B interleave with 32B swizzle") {
    require_valid(valid_interleaved(TmaInterleave::k32B));
  }
  SECTION("an interleaved inner box need not fit the swizzle span") {
    TmaMapSpec s = valid_interleaved(TmaInterleave::k16B);
    s.swizzle = Swizzle::k32B;
    s.tensor = TensorView::contiguous(fake_ptr(), DType::kF16, {2, 4, 8, 64});
    s.box = {1, 2, 8, 64};  // 128 B against a 32 B span
    require_valid(s);
  }
}

TEST_CASE("tma map rank rules", "[tma]") {
  SECTION("rank 1..5") {
    for (int rank : {0, -1, 6, 100}) {
      TmaMapSpec s = valid_2d();
      s.tensor.rank = rank;
      require_rejected(s, {"rank", std::to_string(rank).c_str(), "outside 1..5"});
    }
  }
  SECTION("interleaved maps need rank >= 3") {
    TmaMapSpec s = valid_2d();
    s.swizzle = Swizzle::kNone;
    s.interleave = TmaInterleave::k16B;
    require_rejected(s, {"interleave 16B needs rank >= 3", "got rank 2"});
  }
}

TEST_CASE("tma map enum rules", "[tma]") {
  SECTION("dtype without a TMA type") {
    TmaMapSpec s = valid_2d();
    s.tensor.dtype = static_cast<DType>(42);
    require_rejected(s, {"data type 42", "no TMA equivalent"});
  }
  SECTION("swizzle") {
    TmaMapSpec s = valid_2d();
    s.swizzle = static_cast<Swizzle>(16);
    require_rejected(s, {"swizzle mode 16"});
  }
  SECTION("interleave") {
    TmaMapSpec s = valid_2d();
    s.interleave = static_cast<TmaInterleave>(7);
    require_rejected(s, {"interleave mode 7"});
  }
  SECTION("L2 promotion") {
    TmaMapSpec s = valid_2d();
    s.l2_promotion = static_cast<TmaL2Promotion>(9);
    require_rejected(s, {"L2 promotion 9"});
  }
  SECTION("OOB fill") {
    TmaMapSpec s = valid_2d();
    s.oob_fill = static_cast<TmaOobFill>(3);
    require_rejected(s, {"OOB fill mode 3"});
  }
}

TEST_CASE("tma map address rules", "[tma]") {
  SECTION("null") {
    TmaMapSpec s = valid_2d();
    s.tensor.data = nullptr;
    require_rejected(s, {"data pointer is null"});
  }
  SECTION("16-byte alignment") {
    TmaMapSpec s = valid_2d();
    s.tensor.data = fake_ptr(0x7f0000000008);
    require_rejected(s, {"not 16-byte aligned", "0x7f0000000008"});
  }
  SECTION("32-byte alignment under 32B interleave") {
    TmaMapSpec s = valid_interleaved(TmaInterleave::k32B);
    s.tensor.data = fake_ptr(0x7f0000000010);
    require_rejected(s, {"not 32-byte aligned", "32B interleave"});
    s.interleave = TmaInterleave::k16B;  // 16 B is enough there
    require_valid(s);
  }
}

TEST_CASE("tma map global dim rules", "[tma]") {
  SECTION("positive") {
    for (int64_t n : {int64_t{0}, int64_t{-4}}) {
      TmaMapSpec s = valid_2d();
      s.tensor.shape[0] = n;
      require_rejected(s, {"dim 0 has size", "must be positive"});
    }
  }
  SECTION("more than 2^32") {
    TmaMapSpec s;
    s.tensor = TensorView::strided(fake_ptr(), DType::kU8, {(int64_t{1} << 32) + 1, 16},
                                   {16, 1});
    s.box = {1, 16};
    require_rejected(s, {"dim 0 has size 4294967297", "2^32"});
  }
}

TEST_CASE("tma map stride rules", "[tma]") {
  SECTION("innermost dim must be contiguous") {
    TmaMapSpec s = valid_2d();
    s.tensor = TensorView::strided(fake_ptr(), DType::kBF16, {256, 1024}, {2048, 2});
    require_rejected(s, {"innermost dim 1 must be contiguous", "stride 2"});
  }
  SECTION("stride must be positive") {
    for (int64_t bad : {int64_t{0}, int64_t{-1024}}) {
      TmaMapSpec s = valid_2d();
      s.tensor.strides[0] = bad;
      require_rejected(s, {"stride of dim 0", "must be positive"});
    }
  }
  SECTION("stride bytes must be a multiple of 16") {
    TmaMapSpec s = valid_2d();
    s.tensor = TensorView::strided(fake_ptr(), DType::kBF16, {256, 1000}, {1004, 1});
    require_rejected(s, {"stride of dim 0 is 1004 x 2 B = 2008 B", "multiple of 16 B"});
  }
  SECTION("a middle dim is checked too") {
    TmaMapSpec s;
    s.tensor = TensorView::strided(fake_ptr(), DType::kF32, {2, 3, 64}, {4096, 65, 1});
    s.box = {1, 1, 32};
    require_rejected(s, {"stride of dim 1 is 65 x 4 B = 260 B"});
  }
  SECTION("stride bytes must be a multiple of 32 under 32B interleave") {
    TmaMapSpec s = valid_interleaved(TmaInterleave::k32B);
    s.tensor.strides[1] = 8 * 16 + 8;  // 136 elements x 2 B = 272 B: 16 B but not 32 B
    require_rejected(s, {"272 B, not a multiple of 32 B", "32B interleave"});
  }
  SECTION("stride must be below 2^40 bytes") {
    TmaMapSpec s;
    s.tensor = TensorView::strided(fake_ptr(), DType::kF32, {2, 64},
                                   {int64_t{1} << 38, 1});  // 2^38 x 4 B = 2^40 B
    s.box = {1, 64};
    require_rejected(s, {"stride of dim 0", "2^40"});
    s.tensor.strides[0] = int64_t{1} << 62;  // would overflow int64 as bytes
    require_rejected(s, {"stride of dim 0", "2^40"});
  }
}

TEST_CASE("tma map box rules", "[tma]") {
  SECTION("extent 1..256") {
    for (uint32_t bad : {0u, 257u, 1000u}) {
      TmaMapSpec s = valid_2d();
      s.box[0] = bad;
      require_rejected(s, {"box extent", std::to_string(bad).c_str(), "dim 0", "1..256"});
    }
  }
  SECTION("inner box bytes must be a multiple of 16") {
    TmaMapSpec s = valid_2d();
    s.swizzle = Swizzle::kNone;
    s.box = {64, 12};  // 24 B
    require_rejected(s, {"box inner extent 12 x 2 B = 24 B", "multiple of 16 B"});
  }
  SECTION("interleaved maps too (the driver enforces it beyond the docs)") {
    for (TmaInterleave mode : {TmaInterleave::k16B, TmaInterleave::k32B}) {
      TmaMapSpec s = valid_interleaved(mode);
      s.box = {1, 2, 8, 4};  // 4 x 2 B = 8 B
      require_rejected(s, {"box inner extent 4 x 2 B = 8 B", "multiple of 16 B"});
    }
  }
}

TEST_CASE("tma map element stride rules", "[tma]") {
  for (uint32_t bad : {0u, 9u}) {
    TmaMapSpec s = valid_2d();
    s.element_strides[0] = bad;
    require_rejected(s, {"element stride", "of dim 0", "outside 1..8"});
    // The innermost one is range-checked as well, though ignored when not interleaved.
    s = valid_2d();
    s.element_strides[1] = bad;
    require_rejected(s, {"element stride", "of dim 1", "outside 1..8"});
  }
}

TEST_CASE("tma map swizzle and interleave rules", "[tma]") {
  SECTION("inner box bytes must fit the swizzle span") {
    struct Case {
      Swizzle swizzle;
      uint32_t inner;
      const char* phrase;
    };
    for (const Case& c : {Case{Swizzle::k128B, 128, "128 x 2 B = 256 B exceeds the 128B swizzle"},
                          Case{Swizzle::k64B, 64, "64 x 2 B = 128 B exceeds the 64B swizzle"},
                          Case{Swizzle::k32B, 24, "24 x 2 B = 48 B exceeds the 32B swizzle"}}) {
      TmaMapSpec s = valid_2d();
      s.swizzle = c.swizzle;
      s.box = {64, c.inner};
      require_rejected(s, {c.phrase, "span"});
      s.box = {64, static_cast<uint32_t>(swizzle_bytes(c.swizzle) / 2)};  // exactly the span
      require_valid(s);
    }
  }
  SECTION("32B interleave requires 32B swizzle") {
    for (Swizzle sw : {Swizzle::kNone, Swizzle::k64B, Swizzle::k128B}) {
      TmaMapSpec s = valid_interleaved(TmaInterleave::k32B);
      s.swizzle = sw;
      require_rejected(s, {"interleave 32B requires swizzle 32B", "got swizzle"});
    }
  }
}

TEST_CASE("tma map OOB NaN fill needs a floating-point type", "[tma]") {
  for (DType t : {DType::kI32, DType::kU8, DType::kE4M3, DType::kE5M2}) {
    TmaMapSpec s = valid_2d();
    s.tensor.dtype = t;
    s.swizzle = Swizzle::kNone;
    s.oob_fill = TmaOobFill::kNanRequestZeroFma;
    require_rejected(s, {"OOB NaN fill", "floating-point", std::string(to_string(t)).c_str()});
  }
}

TEST_CASE("tma map errors report the first broken rule and describe the map", "[tma]") {
  TmaMapSpec s = valid_2d();
  s.tensor.data = nullptr;    // address rule
  s.box[0] = 0;               // box rule, checked later
  s.element_strides[1] = 99;  // element stride rule, checked later still
  const std::string msg = rejection(s, "k_cache");
  INFO(msg);
  CHECK(msg.find("tma map 'k_cache'") != std::string::npos);
  CHECK(msg.find("null") != std::string::npos);
  CHECK(msg.find("box extent") == std::string::npos);
  CHECK(msg.find("element stride") == std::string::npos);
  // The spec follows the rule so the values can be read off the message.
  CHECK(msg.find("bf16[256, 1024] strides [1024, 1] box [0, 64]") != std::string::npos);
  CHECK(msg.find("swizzle 128B") != std::string::npos);

  SECTION("a broken rank does not make the description read out of bounds") {
    TmaMapSpec r = valid_2d();
    r.tensor.rank = 1000;
    CHECK(rejection(r).find("rank 1000") != std::string::npos);
  }
}

TEST_CASE("tma_box_bytes", "[tma]") {
  CHECK(attnjit::tma_box_bytes(valid_2d()) == 64 * 64 * 2);

  TmaMapSpec s;
  s.tensor = TensorView::contiguous(fake_ptr(), DType::kF32, {4, 16, 64});
  s.box = {2, 8, 4};
  CHECK(attnjit::tma_box_bytes(s) == 2 * 8 * 4 * 4);

  s.tensor.dtype = DType::kE4M3;
  CHECK(attnjit::tma_box_bytes(s) == 2 * 8 * 4);

  SECTION("element strides keep ceil(box / stride) elements of outer dims") {
    s.tensor.dtype = DType::kF32;
    s.element_strides = {2, 3, 1};  // 2 -> 1, ceil(8 / 3) = 3
    CHECK(attnjit::tma_box_bytes(s) == 1 * 3 * 4 * 4);
  }
  SECTION("the innermost element stride is ignored unless interleaved") {
    s.tensor.dtype = DType::kF32;
    s.element_strides = {1, 1, 4};
    CHECK(attnjit::tma_box_bytes(s) == 2 * 8 * 4 * 4);
    s.interleave = TmaInterleave::k16B;
    CHECK(attnjit::tma_box_bytes(s) == 2 * 8 * 1 * 4);
  }
  SECTION("rank 0 is an empty box") {
    s.tensor.rank = 0;
    CHECK(attnjit::tma_box_bytes(s) == 0);
  }
}
