#pragma once
// Element types, swizzle modes and GPU architectures: the vocabulary shared by
// tensor views, configs, tensor maps and the kernel templates.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace attnjit {

enum class DType : uint8_t {
  kBF16,
  kF16,
  kF32,
  kE4M3,  // float8_e4m3fn
  kE5M2,  // float8_e5m2
  kI32,
  kU8,
};

constexpr int dtype_bytes(DType t) noexcept {
  switch (t) {
    case DType::kBF16:
    case DType::kF16: return 2;
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kE4M3:
    case DType::kE5M2:
    case DType::kU8: return 1;
  }
  return 0;
}

// Canonical lower-case names: "bf16", "f16", "f32", "e4m3", "e5m2", "i32", "u8".
std::string_view to_string(DType t) noexcept;
std::optional<DType> parse_dtype(std::string_view name) noexcept;

// Shared-memory swizzle of a TMA box (and the matching wgmma descriptor mode).
// The value is the swizzle span in bytes (0 = none).
enum class Swizzle : uint8_t { kNone = 0, k32B = 32, k64B = 64, k128B = 128 };

std::string_view to_string(Swizzle s) noexcept;  // "none", "32B", "64B", "128B"
std::optional<Swizzle> parse_swizzle(std::string_view name) noexcept;
constexpr int swizzle_bytes(Swizzle s) noexcept { return static_cast<int>(s); }

// A compile target: sm_<major><minor>[a]. The 'a' (arch-specific) variants unlock
// wgmma/setmaxnreg (sm_90a) and tcgen05 (sm_100a).
struct Arch {
  int major = 9;
  int minor = 0;
  bool arch_specific = true;

  int number() const noexcept { return major * 10 + minor; }
  std::string name() const;  // "sm_90a"
  friend bool operator==(const Arch&, const Arch&) = default;
};

inline constexpr Arch kSm90a{9, 0, true};
inline constexpr Arch kSm100a{10, 0, true};

std::optional<Arch> parse_arch(std::string_view name) noexcept;  // "sm_90a", "90a", "sm_100a"

}  // namespace attnjit

// A config struct declares its members from its .def rows (attnjit/ops/<op>_config.def):
//   #define ATTNJIT_FIELD ATTNJIT_CONFIG_MEMBER
//   #include "attnjit/ops/<op>_config.def"
//   #undef ATTNJIT_FIELD
#define ATTNJIT_CONFIG_MEMBER(T_, member_, default_, ...) T_ member_ = default_;
