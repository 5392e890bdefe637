#include "attnjit/tensor.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <span>

#include "attnjit/error.hpp"

namespace attnjit {
namespace {

std::span<const int64_t> dims(const std::array<int64_t, kMaxRank>& a, int rank) {
  return {a.data(), static_cast<size_t>(rank)};
}

TensorView make(void* data, DType dtype, std::initializer_list<int64_t> shape, int device) {
  if (shape.size() > static_cast<size_t>(kMaxRank))
    fail_arg("TensorView", fmt::format("rank {} exceeds the maximum {}", shape.size(), kMaxRank));
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.rank = static_cast<int>(shape.size());
  t.device = device;
  int i = 0;
  for (int64_t s : shape) t.shape[static_cast<size_t>(i++)] = s;
  return t;
}

}  // namespace

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                  int device) {
  TensorView t = make(data, dtype, shape, device);
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.strides[static_cast<size_t>(d)] = stride;
    stride *= t.shape[static_cast<size_t>(d)];
  }
  return t;
}

TensorView TensorView::strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               std::initializer_list<int64_t> strides, int device) {
  TensorView t = make(data, dtype, shape, device);
  if (strides.size() != shape.size())
    fail_arg("TensorView",
             fmt::format("{} strides given for rank {}", strides.size(), shape.size()));
  int i = 0;
  for (int64_t s : strides) t.strides[static_cast<size_t>(i++)] = s;
  return t;
}

int64_t TensorView::numel() const noexcept {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[static_cast<size_t>(d)];
  return n;
}

bool TensorView::is_contiguous() const noexcept {
  int64_t expect = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (shape[static_cast<size_t>(d)] != 1 && strides[static_cast<size_t>(d)] != expect)
      return false;
    expect *= shape[static_cast<size_t>(d)];
  }
  return true;
}

std::string TensorView::describe() const {
  return fmt::format("{}[{}] strides [{}]", to_string(dtype), fmt::join(dims(shape, rank), ", "),
                     fmt::join(dims(strides, rank), ", "));
}

void check_rank(const TensorView& t, const char* name, int rank) {
  if (t.rank != rank)
    fail_arg(name, fmt::format("must have rank {}, got {} ({})", rank, t.rank, t.describe()));
}

void check_dtype(const TensorView& t, const char* name, DType dtype) {
  if (t.dtype != dtype)
    fail_arg(name, fmt::format("must be {}, got {}", to_string(dtype), to_string(t.dtype)));
}

void check_last_dim_contiguous(const TensorView& t, const char* name) {
  if (t.rank > 0 && t.strides[static_cast<size_t>(t.rank - 1)] != 1)
    fail_arg(name, fmt::format("last dimension must be contiguous (stride 1), got {}",
                               t.describe()));
}

void check_aligned(const TensorView& t, const char* name, int bytes) {
  if (reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(bytes) != 0)
    fail_arg(name, fmt::format("data pointer {} must be {}-byte aligned", t.data, bytes));
}

void check_same_shape(const TensorView& a, const char* a_name, const TensorView& b,
                      const char* b_name) {
  bool same = a.rank == b.rank;
  for (int d = 0; same && d < a.rank; ++d) same = a.shape[static_cast<size_t>(d)] == b.shape[static_cast<size_t>(d)];
  if (!same)
    fail_arg(b_name, fmt::format("must have the shape of {} [{}], got [{}]", a_name,
                                 fmt::join(dims(a.shape, a.rank), ", "),
                                 fmt::join(dims(b.shape, b.rank), ", ")));
}

void check_same_device(const TensorView& a, const char* a_name, const TensorView& b,
                       const char* b_name) {
  if (a.device != b.device)
    fail_arg(b_name, fmt::format("is on device {} but {} is on device {}", b.device, a_name,
                                 a.device));
}

}  // namespace attnjit
