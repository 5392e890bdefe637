#pragma once
// tma_copy: dst = src for 2-D tensors, through shared memory with TMA loads and stores.
// The first kernel family: it proves the JIT path, the tensor maps and the device
// library end to end, and measures how close a TMA pipeline gets to cuMemcpyDtoD.
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "attnjit/tensor.hpp"
#include "attnjit/types.hpp"

namespace attnjit {

struct TmaCopyConfig {
  DType dtype = DType::kBF16;        // element type (a copy only cares about its size)
  int block_m = 128;                 // tile rows: 8..256, multiple of 8
  int block_n = 128;                 // tile columns (elements); a row is whole swizzle spans
  int stages = 4;                    // smem ring depth, 1..16
  Swizzle swizzle = Swizzle::kNone;  // smem layout of each box

  // Throws Error(kUnsupportedConfig) naming the first invalid field and the rule.
  void validate() const;
  unsigned dynamic_smem_bytes() const;  // tile ring + barriers + alignment slack
  std::string to_json() const;          // canonical: fixed key order, no spaces
  static TmaCopyConfig from_json(std::string_view json);  // unknown/invalid fields throw
  std::string describe() const;         // "bf16 128x128 s4 128B"
  friend bool operator==(const TmaCopyConfig&, const TmaCopyConfig&) = default;
};

// The built-in choice for a copy of `dtype` (before any tuning database is consulted).
TmaCopyConfig tma_copy_default_config(DType dtype);

// The config tma_copy(dst, src, stream, nullptr) uses for a rows × cols copy of `dtype`
// on the current device: the tuning database's winner for that shape's bucket when it has
// one for this GPU (attnjit/tuning.hpp, docs/tuning.md), else tma_copy_default_config.
TmaCopyConfig tma_copy_selected_config(int64_t rows, int64_t cols, DType dtype);

// Compiles (if needed), loads and sets attributes on the current device, so that a later
// tma_copy with this config does no compile/load — e.g. before a CUDA-graph capture.
void tma_copy_prepare(const TmaCopyConfig& config);

// Scratch bytes tma_copy needs for these tensors: none (the op-wide convention is that
// every op reports its workspace for given shapes and the caller passes it in).
inline size_t tma_copy_workspace_bytes(const TensorView& /*dst*/, const TensorView& /*src*/) {
  return 0;
}

// dst[rows, cols] = src[rows, cols] on `stream` (current device's context). Both 2-D,
// same shape and dtype, last dimension contiguous, 16-byte aligned, row strides a
// multiple of 16 bytes. `config` = nullptr picks tma_copy_selected_config(rows, cols, dtype).
// Needs no workspace.
void tma_copy(const TensorView& dst, const TensorView& src, CUstream stream,
              const TmaCopyConfig* config = nullptr);

}  // namespace attnjit
