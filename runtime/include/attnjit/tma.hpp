#pragma once
// TMA tensor maps built at run time. A TmaMapSpec describes a global tensor and the
// box a kernel moves per copy; validate() checks every cuTensorMapEncodeTiled rule on
// the host and names the broken one with its values, so the driver is only ever called
// with arguments it accepts. The encoded map is passed to kernels by value as a
// `const __grid_constant__` parameter (kernel_templates/common/tensor_map.cuh declares
// the device-side twin of TmaDescriptor).
#include <array>
#include <cstdint>
#include <string>

#include "attnjit/tensor.hpp"
#include "attnjit/types.hpp"

namespace attnjit {

enum class TmaInterleave : uint8_t { kNone, k16B, k32B };
enum class TmaL2Promotion : uint8_t { kNone, k64B, k128B, k256B };
enum class TmaOobFill : uint8_t {
  kZero,                // out-of-bounds elements read as 0
  kNanRequestZeroFma,   // read as NaN (floating-point types only)
};

// Dimensions are listed outermost first, in the same order as TensorView::shape; the
// last dimension is the contiguous one (TMA's dimension 0).
struct TmaMapSpec {
  TensorView tensor;
  std::array<uint32_t, kMaxRank> box{};  // box extent per dimension, elements
  std::array<uint32_t, kMaxRank> element_strides{1, 1, 1, 1, 1};
  Swizzle swizzle = Swizzle::kNone;
  TmaInterleave interleave = TmaInterleave::kNone;
  TmaL2Promotion l2_promotion = TmaL2Promotion::k128B;
  TmaOobFill oob_fill = TmaOobFill::kZero;
};

// 128 bytes, 64-byte aligned: the same size and alignment as CUtensorMap.
struct alignas(64) TmaDescriptor {
  std::array<uint64_t, 16> opaque{};
};
static_assert(sizeof(TmaDescriptor) == 128 && alignof(TmaDescriptor) == 64);

// Throws Error(kBadArgument) "tma map '<name>': <rule> (<values>)" for the first broken
// rule. Needs no driver.
void validate_tma(const TmaMapSpec& spec, const char* name);

// validate_tma, then cuTensorMapEncodeTiled. Needs the driver.
TmaDescriptor encode_tma(const TmaMapSpec& spec, const char* name);

// Bytes one box occupies in shared memory: per dimension ceil(box / element stride)
// (the innermost stride of a non-interleaved map is ignored, as the driver does) ×
// element size — the expect-tx byte count of one load.
int64_t tma_box_bytes(const TmaMapSpec& spec);

}  // namespace attnjit
