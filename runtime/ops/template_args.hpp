#pragma once
// C++ spellings of config values for generated instantiations: the device enums in
// kernel_templates/common/types.cuh have the same enumerator names as the host ones.
#include <string>

#include "attnjit/types.hpp"

namespace attnjit::ops {

inline std::string cxx_enum(DType d) {
  switch (d) {
    case DType::kBF16: return "attnjit::DType::kBF16";
    case DType::kF16: return "attnjit::DType::kF16";
    case DType::kF32: return "attnjit::DType::kF32";
    case DType::kE4M3: return "attnjit::DType::kE4M3";
    case DType::kE5M2: return "attnjit::DType::kE5M2";
    case DType::kI32: return "attnjit::DType::kI32";
    case DType::kU8: return "attnjit::DType::kU8";
  }
  return "?";
}

inline std::string cxx_enum(Swizzle s) {
  switch (s) {
    case Swizzle::kNone: return "attnjit::Swizzle::kNone";
    case Swizzle::k32B: return "attnjit::Swizzle::k32B";
    case Swizzle::k64B: return "attnjit::Swizzle::k64B";
    case Swizzle::k128B: return "attnjit::Swizzle::k128B";
  }
  return "?";
}

}  // namespace attnjit::ops
