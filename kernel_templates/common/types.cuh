#pragma once
// Device twins of the host enums in runtime/include/attnjit/types.hpp. The enumerator
// names are the contract: the runtime writes them into generated instantiations
// ("attnjit::DType::kBF16"), so keep both lists in step (a CPU test compiles every
// enumerator the host can emit).
#include "common/arch.cuh"

namespace attnjit {

enum class DType : int { kBF16, kF16, kF32, kE4M3, kE5M2, kI32, kU8 };

enum class Swizzle : int { kNone = 0, k32B = 32, k64B = 64, k128B = 128 };

ATTNJIT_HOST_DEVICE constexpr int dtype_bytes(DType t) {
  return (t == DType::kBF16 || t == DType::kF16)                     ? 2
         : (t == DType::kF32 || t == DType::kI32)                    ? 4
         : (t == DType::kE4M3 || t == DType::kE5M2 || t == DType::kU8) ? 1
                                                                       : 0;
}

ATTNJIT_HOST_DEVICE constexpr int swizzle_bytes(Swizzle s) { return static_cast<int>(s); }

}  // namespace attnjit
