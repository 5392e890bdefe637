#pragma once
// A non-owning view of a device tensor: pointer, dtype, shape and strides in
// elements. Fixed-capacity arrays keep views allocation-free on the launch path.
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "attnjit/types.hpp"

namespace attnjit {

inline constexpr int kMaxRank = 5;  // the most TMA (cuTensorMapEncodeTiled) accepts

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kBF16;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> strides{};  // in elements, outermost first
  int device = 0;                           // CUDA device ordinal the memory lives on

  // Row-major (last dimension contiguous) view.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               int device = 0);
  // Explicit strides (elements).
  static TensorView strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                            std::initializer_list<int64_t> strides, int device = 0);

  int64_t numel() const noexcept;
  int64_t size(int dim) const noexcept { return shape[static_cast<size_t>(dim)]; }
  int64_t stride(int dim) const noexcept { return strides[static_cast<size_t>(dim)]; }
  int64_t element_bytes() const noexcept { return dtype_bytes(dtype); }
  bool is_contiguous() const noexcept;
  std::string describe() const;  // "bf16[4096, 1024] strides [1024, 1]"
};

// Shape/dtype/alignment checks that every op runs before launching. Each one throws
// attnjit::Error(kBadArgument) naming `name` and the rule.
void check_rank(const TensorView& t, const char* name, int rank);
void check_dtype(const TensorView& t, const char* name, DType dtype);
void check_last_dim_contiguous(const TensorView& t, const char* name);
void check_aligned(const TensorView& t, const char* name, int bytes);
void check_same_shape(const TensorView& a, const char* a_name, const TensorView& b,
                      const char* b_name);
void check_same_device(const TensorView& a, const char* a_name, const TensorView& b,
                       const char* b_name);

// Device scratch an op's run uses, owned by the caller and sized by the op's plan
// (Plan::workspace_bytes): 16-byte aligned, on the op's device. A step's schedule writes
// what its runs read (split partials are written before they are read within a run), so
// one workspace serves every layer of a step, one run at a time on one stream.
struct Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};

}  // namespace attnjit
