#include "attnjit/tma.hpp"

#include <cuda.h>
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "attnjit/error.hpp"
#include "driver/driver.hpp"

namespace attnjit {
namespace {

// TmaDescriptor is handed to kernels as the CUtensorMap the driver encoded, byte for byte.
// CUDA 13's cuda.h declares CUtensorMap alignas(128) while the driver documents 64 B as
// the requirement, so TmaDescriptor only needs the documented 64; encode_tma lets the
// driver write into a real CUtensorMap and copies the bytes out.
static_assert(sizeof(TmaDescriptor) == sizeof(CUtensorMap));
static_assert(alignof(TmaDescriptor) >= 64 && alignof(CUtensorMap) >= 64);
static_assert(std::is_trivially_copyable_v<TmaDescriptor> &&
              std::is_trivially_copyable_v<CUtensorMap>);

// Limits from the cuTensorMapEncodeTiled documentation (CUDA 13.0 cuda.h).
constexpr int kMinInterleavedRank = 3;
constexpr int64_t kMaxGlobalDim = int64_t{1} << 32;        // globalDim <= 2^32
constexpr int64_t kGlobalStrideLimit = int64_t{1} << 40;   // globalStrides < 2^40 bytes
constexpr uint32_t kMaxBoxDim = 256;
constexpr uint32_t kMaxElementStride = 8;

std::optional<CUtensorMapDataType> tma_data_type(DType t) {
  switch (t) {
    case DType::kBF16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case DType::kF16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case DType::kF32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case DType::kI32: return CU_TENSOR_MAP_DATA_TYPE_INT32;
    // TMA has no fp8 type; it only moves bytes, so fp8 travels as UINT8. That also means
    // the driver treats fp8 as an integer type for the OOB NaN-fill rule.
    case DType::kU8:
    case DType::kE4M3:
    case DType::kE5M2: return CU_TENSOR_MAP_DATA_TYPE_UINT8;
  }
  return std::nullopt;
}

// "Floating point" as the driver sees it, i.e. after the mapping above.
bool tma_is_float(DType t) {
  return t == DType::kBF16 || t == DType::kF16 || t == DType::kF32;
}

std::optional<CUtensorMapSwizzle> tma_swizzle(Swizzle s) {
  switch (s) {
    case Swizzle::kNone: return CU_TENSOR_MAP_SWIZZLE_NONE;
    case Swizzle::k32B: return CU_TENSOR_MAP_SWIZZLE_32B;
    case Swizzle::k64B: return CU_TENSOR_MAP_SWIZZLE_64B;
    case Swizzle::k128B: return CU_TENSOR_MAP_SWIZZLE_128B;
  }
  return std::nullopt;
}

std::optional<CUtensorMapInterleave> tma_interleave(TmaInterleave i) {
  switch (i) {
    case TmaInterleave::kNone: return CU_TENSOR_MAP_INTERLEAVE_NONE;
    case TmaInterleave::k16B: return CU_TENSOR_MAP_INTERLEAVE_16B;
    case TmaInterleave::k32B: return CU_TENSOR_MAP_INTERLEAVE_32B;
  }
  return std::nullopt;
}

std::optional<CUtensorMapL2promotion> tma_l2(TmaL2Promotion p) {
  switch (p) {
    case TmaL2Promotion::kNone: return CU_TENSOR_MAP_L2_PROMOTION_NONE;
    case TmaL2Promotion::k64B: return CU_TENSOR_MAP_L2_PROMOTION_L2_64B;
    case TmaL2Promotion::k128B: return CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
    case TmaL2Promotion::k256B: return CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  }
  return std::nullopt;
}

std::optional<CUtensorMapFloatOOBfill> tma_oob(TmaOobFill f) {
  switch (f) {
    case TmaOobFill::kZero: return CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;
    case TmaOobFill::kNanRequestZeroFma: return CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA;
  }
  return std::nullopt;
}

const char* to_string(TmaInterleave i) {
  switch (i) {
    case TmaInterleave::kNone: return "none";
    case TmaInterleave::k16B: return "16B";
    case TmaInterleave::k32B: return "32B";
  }
  return "?";
}

const char* to_string(TmaL2Promotion p) {
  switch (p) {
    case TmaL2Promotion::kNone: return "none";
    case TmaL2Promotion::k64B: return "64B";
    case TmaL2Promotion::k128B: return "128B";
    case TmaL2Promotion::k256B: return "256B";
  }
  return "?";
}

const char* to_string(TmaOobFill f) {
  switch (f) {
    case TmaOobFill::kZero: return "zero";
    case TmaOobFill::kNanRequestZeroFma: return "nan";
  }
  return "?";
}

// Enum values as numbers when they are out of range, so a corrupted spec is still legible.
template <typename E>
std::string enum_text(E e, std::string_view text) {
  if (text != "?") return std::string(text);
  return fmt::format("<invalid {}>", static_cast<int>(e));
}

// The rank to print: a broken rank must not make the description read past the arrays.
int printable_rank(const TmaMapSpec& spec) { return std::clamp(spec.tensor.rank, 0, kMaxRank); }

template <typename T>
std::string list(const std::array<T, kMaxRank>& a, int rank) {
  std::string out = "[";
  for (int i = 0; i < rank; ++i) {
    if (i > 0) out += ", ";
    out += fmt::to_string(a[static_cast<size_t>(i)]);
  }
  return out + "]";
}

// "bf16[256, 1024] strides [1024, 1] box [64, 64] elem strides [1, 1] swizzle 128B ..."
std::string describe(const TmaMapSpec& spec) {
  const TensorView& t = spec.tensor;
  const int rank = printable_rank(spec);
  return fmt::format(
      "{}{} strides {} box {} elem strides {} swizzle {} interleave {} l2 {} oob {} at {}",
      enum_text(t.dtype, to_string(t.dtype)), list(t.shape, rank), list(t.strides, rank),
      list(spec.box, rank), list(spec.element_strides, rank),
      enum_text(spec.swizzle, to_string(spec.swizzle)),
      enum_text(spec.interleave, to_string(spec.interleave)),
      enum_text(spec.l2_promotion, to_string(spec.l2_promotion)),
      enum_text(spec.oob_fill, to_string(spec.oob_fill)), t.data);
}

// Runs the rules in the order the driver documents them, stopping at the first broken one.
class Validator {
 public:
  Validator(const TmaMapSpec& spec, const char* name)
      : spec_(spec), t_(spec.tensor), name_(name != nullptr ? name : "?") {}

  void run() {
    check_rank();
    check_enums();
    check_address();
    check_global_dims();
    check_global_strides();
    check_box();
    check_element_strides();
    check_swizzle();
    check_oob_fill();
  }

 private:
  [[noreturn]] void broken(const std::string& rule) const {
    fail_arg(fmt::format("tma map '{}'", name_), fmt::format("{} [{}]", rule, describe(spec_)));
  }

  size_t at(int dim) const { return static_cast<size_t>(dim); }
  int innermost() const { return t_.rank - 1; }
  int64_t elem() const { return t_.element_bytes(); }
  bool interleaved() const { return spec_.interleave != TmaInterleave::kNone; }
  // Address and stride granularity: 32 B under 32B interleave, otherwise 16 B.
  int64_t granule() const { return spec_.interleave == TmaInterleave::k32B ? 32 : 16; }

  void check_rank() const {
    // Also keeps every later loop inside the TensorView / TmaMapSpec arrays.
    if (t_.rank < 1 || t_.rank > kMaxRank)
      broken(fmt::format("rank {} is outside 1..{}", t_.rank, kMaxRank));
  }

  void check_enums() const {
    if (!tma_data_type(t_.dtype))
      broken(fmt::format("data type {} has no TMA equivalent", static_cast<int>(t_.dtype)));
    if (!tma_swizzle(spec_.swizzle))
      broken(fmt::format("swizzle mode {} is not none/32B/64B/128B",
                         static_cast<int>(spec_.swizzle)));
    if (!tma_interleave(spec_.interleave))
      broken(fmt::format("interleave mode {} is not none/16B/32B",
                         static_cast<int>(spec_.interleave)));
    if (!tma_l2(spec_.l2_promotion))
      broken(fmt::format("L2 promotion {} is not none/64B/128B/256B",
                         static_cast<int>(spec_.l2_promotion)));
    if (!tma_oob(spec_.oob_fill))
      broken(fmt::format("OOB fill mode {} is not zero/nan", static_cast<int>(spec_.oob_fill)));
    if (interleaved() && t_.rank < kMinInterleavedRank)
      broken(fmt::format("interleave {} needs rank >= {}, got rank {}",
                         to_string(spec_.interleave), kMinInterleavedRank, t_.rank));
  }

  void check_address() const {
    // The driver encodes a null address without complaint; the map would fault on first use.
    if (t_.data == nullptr) broken("data pointer is null");
    const auto addr = reinterpret_cast<uintptr_t>(t_.data);
    if (addr % static_cast<uintptr_t>(granule()) != 0)
      broken(fmt::format("data pointer {} is not {}-byte aligned{}", t_.data, granule(),
                         granule() == 32 ? " (required by 32B interleave)" : ""));
  }

  void check_global_dims() const {
    for (int d = 0; d < t_.rank; ++d) {
      const int64_t n = t_.shape[at(d)];
      if (n <= 0) broken(fmt::format("dim {} has size {}, must be positive", d, n));
      if (n > kMaxGlobalDim)
        broken(fmt::format("dim {} has size {}, more than the TMA limit 2^32", d, n));
    }
  }

  void check_global_strides() const {
    // TMA's dimension 0 has an implicit stride of one element: it cannot be strided.
    if (t_.strides[at(innermost())] != 1)
      broken(fmt::format("innermost dim {} must be contiguous (stride 1), got stride {}",
                         innermost(), t_.strides[at(innermost())]));
    for (int d = 0; d < innermost(); ++d) {
      const int64_t s = t_.strides[at(d)];
      // The driver takes 0 (a multiple of 16) but attnjit has no use for broadcast maps,
      // and a zero or negative stride here is almost always a wrongly built view.
      if (s <= 0) broken(fmt::format("stride of dim {} is {}, must be positive", d, s));
      // Compared in elements first so the byte product below cannot overflow.
      if (s >= kGlobalStrideLimit || s * elem() >= kGlobalStrideLimit)
        broken(fmt::format("stride of dim {} is {} x {} B, not below the 2^40 B limit", d, s,
                           elem()));
      const int64_t bytes = s * elem();
      if (bytes % granule() != 0)
        broken(fmt::format("stride of dim {} is {} x {} B = {} B, not a multiple of {} B{}", d,
                           s, elem(), bytes, granule(),
                           granule() == 32 ? " (required by 32B interleave)" : ""));
    }
  }

  void check_box() const {
    for (int d = 0; d < t_.rank; ++d) {
      const uint32_t b = spec_.box[at(d)];
      // Boxes may overhang the tensor (TMA fills the rest), so no comparison with shape.
      if (b < 1 || b > kMaxBoxDim)
        broken(fmt::format("box extent {} of dim {} is outside 1..{}", b, d, kMaxBoxDim));
    }
    // The docs state this for non-interleaved maps only, but the driver (580, CUDA 13.0)
    // refuses interleaved maps with a ragged inner box row as well (8 B and 24 B tried).
    const int64_t inner = inner_box_bytes();
    if (inner % 16 != 0)
      broken(fmt::format("box inner extent {} x {} B = {} B is not a multiple of 16 B",
                         spec_.box[at(innermost())], elem(), inner));
  }

  void check_element_strides() const {
    for (int d = 0; d < t_.rank; ++d) {
      const uint32_t e = spec_.element_strides[at(d)];
      // The driver range-checks the innermost one too, although it ignores it when not
      // interleaved.
      if (e < 1 || e > kMaxElementStride)
        broken(fmt::format("element stride {} of dim {} is outside 1..{}", e, d,
                           kMaxElementStride));
    }
  }

  void check_swizzle() const {
    // Documented; the 580 driver does not enforce it, but nothing defines the layout
    // other combinations produce.
    if (spec_.interleave == TmaInterleave::k32B && spec_.swizzle != Swizzle::k32B)
      broken(fmt::format("interleave 32B requires swizzle 32B, got swizzle {}",
                         to_string(spec_.swizzle)));
    // The swizzle pattern permutes 16 B chunks inside one span; a box row wider than the
    // span has no defined layout. Interleaved maps have no such limit (docs and driver agree).
    const int span = swizzle_bytes(spec_.swizzle);
    const int64_t inner = inner_box_bytes();
    if (!interleaved() && span != 0 && inner > span)
      broken(fmt::format("box inner extent {} x {} B = {} B exceeds the {} swizzle span",
                         spec_.box[at(innermost())], elem(), inner, to_string(spec_.swizzle)));
  }

  void check_oob_fill() const {
    if (spec_.oob_fill == TmaOobFill::kNanRequestZeroFma && !tma_is_float(t_.dtype))
      broken(fmt::format("OOB NaN fill needs a floating-point TMA type, {} is not one{}",
                         to_string(t_.dtype),
                         t_.dtype == DType::kE4M3 || t_.dtype == DType::kE5M2
                             ? " (fp8 is moved as UINT8)"
                             : ""));
  }

  int64_t inner_box_bytes() const {
    return static_cast<int64_t>(spec_.box[at(innermost())]) * elem();
  }

  const TmaMapSpec& spec_;
  const TensorView& t_;
  const char* name_;
};

}  // namespace

void validate_tma(const TmaMapSpec& spec, const char* name) { Validator(spec, name).run(); }

TmaDescriptor encode_tma(const TmaMapSpec& spec, const char* name) {
  validate_tma(spec, name);
  const TensorView& t = spec.tensor;
  const int rank = t.rank;
  const auto elem = static_cast<cuuint64_t>(t.element_bytes());

  // The spec lists dimensions outermost first; TMA wants dimension 0 innermost.
  std::array<cuuint64_t, kMaxRank> dims{};
  std::array<cuuint64_t, kMaxRank> strides{};  // rank - 1 entries: dims 1.. in bytes
  std::array<cuuint32_t, kMaxRank> box{};
  std::array<cuuint32_t, kMaxRank> element_strides{};
  for (int i = 0; i < rank; ++i) {
    const auto d = static_cast<size_t>(rank - 1 - i);
    const auto k = static_cast<size_t>(i);
    dims[k] = static_cast<cuuint64_t>(t.shape[d]);
    box[k] = spec.box[d];
    element_strides[k] = spec.element_strides[d];
    if (i > 0) strides[k - 1] = static_cast<cuuint64_t>(t.strides[d]) * elem;
  }

  // validate_tma has rejected every value these mappings could miss.
  CUtensorMap map{};
  const CUresult r = driver::api().cuTensorMapEncodeTiled(
      &map, *tma_data_type(t.dtype), static_cast<cuuint32_t>(rank), t.data, dims.data(),
      strides.data(), box.data(), element_strides.data(), *tma_interleave(spec.interleave),
      *tma_swizzle(spec.swizzle), *tma_l2(spec.l2_promotion), *tma_oob(spec.oob_fill));
  // Maps are encoded per call on the launch path: build the message only on failure.
  if (r != CUDA_SUCCESS) {
    driver::check(r, "cuTensorMapEncodeTiled",
                  fmt::format("for tma map '{}' [{}]{}", name != nullptr ? name : "?",
                              describe(spec),
                              r == CUDA_ERROR_INVALID_VALUE
                                  ? " (validate_tma accepted it: a driver rule attnjit misses)"
                                  : ""));
  }

  // Copied rather than encoded in place: no object is accessed through another type, and
  // the driver writes into an object with cuda.h's own alignment.
  return std::bit_cast<TmaDescriptor>(map);
}

int64_t tma_box_bytes(const TmaMapSpec& spec) {
  const int rank = printable_rank(spec);
  int64_t elements = rank > 0 ? 1 : 0;
  for (int d = 0; d < rank; ++d) {
    const auto k = static_cast<size_t>(d);
    const int64_t extent = spec.box[k];
    // With an element stride s TMA keeps ceil(box / s) elements of that dimension, except
    // along the innermost one of a non-interleaved map, whose stride the driver ignores.
    const bool strided = d != rank - 1 || spec.interleave != TmaInterleave::kNone;
    const int64_t step = strided ? std::max<int64_t>(spec.element_strides[k], 1) : 1;
    elements *= (extent + step - 1) / step;
  }
  return elements * spec.tensor.element_bytes();
}

}  // namespace attnjit
