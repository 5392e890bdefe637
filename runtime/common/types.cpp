#include "attnjit/types.hpp"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <utility>

namespace attnjit {
namespace {

constexpr std::array<std::pair<DType, std::string_view>, 7> kDTypeNames{{
    {DType::kBF16, "bf16"},
    {DType::kF16, "f16"},
    {DType::kF32, "f32"},
    {DType::kE4M3, "e4m3"},
    {DType::kE5M2, "e5m2"},
    {DType::kI32, "i32"},
    {DType::kU8, "u8"},
}};

constexpr std::array<std::pair<Swizzle, std::string_view>, 4> kSwizzleNames{{
    {Swizzle::kNone, "none"},
    {Swizzle::k32B, "32B"},
    {Swizzle::k64B, "64B"},
    {Swizzle::k128B, "128B"},
}};

}  // namespace

std::string_view to_string(DType t) noexcept {
  for (const auto& [d, n] : kDTypeNames)
    if (d == t) return n;
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) noexcept {
  for (const auto& [d, n] : kDTypeNames)
    if (n == name) return d;
  // Common aliases users type.
  if (name == "bfloat16") return DType::kBF16;
  if (name == "fp16" || name == "float16" || name == "half") return DType::kF16;
  if (name == "fp32" || name == "float32") return DType::kF32;
  if (name == "fp8" || name == "fp8_e4m3" || name == "float8_e4m3fn") return DType::kE4M3;
  if (name == "fp8_e5m2" || name == "float8_e5m2") return DType::kE5M2;
  return std::nullopt;
}

std::string_view to_string(Swizzle s) noexcept {
  for (const auto& [v, n] : kSwizzleNames)
    if (v == s) return n;
  return "?";
}

std::optional<Swizzle> parse_swizzle(std::string_view name) noexcept {
  for (const auto& [v, n] : kSwizzleNames)
    if (n == name) return v;
  if (name == "0") return Swizzle::kNone;
  if (name == "32") return Swizzle::k32B;
  if (name == "64") return Swizzle::k64B;
  if (name == "128") return Swizzle::k128B;
  return std::nullopt;
}

std::string Arch::name() const {
  return fmt::format("sm_{}{}", number(), arch_specific ? "a" : "");
}

std::optional<Arch> parse_arch(std::string_view name) noexcept {
  if (name.substr(0, 3) == "sm_") name.remove_prefix(3);
  bool specific = false;
  if (!name.empty() && name.back() == 'a') {
    specific = true;
    name.remove_suffix(1);
  }
  int number = 0;
  auto [ptr, ec] = std::from_chars(name.data(), name.data() + name.size(), number);
  if (ec != std::errc() || ptr != name.data() + name.size() || number < 70 || number > 199)
    return std::nullopt;
  return Arch{number / 10, number % 10, specific};
}

}  // namespace attnjit
