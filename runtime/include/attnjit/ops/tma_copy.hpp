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
  // The fields (dtype, block_m, block_n, stages, swizzle), each with its rule and doc, are
  // the rows of tma_copy_config.def.
#define ATTNJIT_FIELD ATTNJIT_CONFIG_MEMBER
#include "attnjit/ops/tma_copy_config.def"
#undef ATTNJIT_FIELD

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

// One copy: dst[rows, cols] = src[rows, cols]. Both 2-D, same shape and dtype, last
// dimension contiguous, 16-byte aligned, row strides a multiple of 16 bytes.
struct TmaCopyArgs {
  TensorView dst;
  TensorView src;
};

// Host-visible shape of a copy.
struct TmaCopyShape {
  DType dtype = DType::kBF16;
  int64_t rows = 0;
  int64_t cols = 0;
};
TmaCopyShape tma_copy_shape(const TmaCopyArgs& args);  // src's dtype and sizes

struct TmaCopyPlan {
  TmaCopyShape shape;
  TmaCopyConfig config;
  size_t workspace_bytes = 0;  // always 0: a copy needs no scratch (the op-wide convention)
};

// The config tma_copy_plan picks without one: the tuning database's winner for the shape's
// bucket on this GPU (attnjit/tuning.hpp, docs/tuning.md), else tma_copy_default_config.
// Host only.
TmaCopyConfig tma_copy_selected_config(const TmaCopyShape& shape);

// The config for `shape`, compiled (or read from the disk cache) and loaded on the current
// device, so that a run does no compile or load (e.g. before a CUDA-graph capture).
TmaCopyPlan tma_copy_plan(const TmaCopyShape& shape, const TmaCopyConfig* config = nullptr);

// Nothing depends on device-resident values: enqueues nothing (the op-wide convention).
void tma_copy_schedule(const TmaCopyPlan& plan, const TmaCopyArgs& args, Workspace workspace,
                       CUstream stream);

// The copy on `stream` (current device's context), checked against the plan first.
void tma_copy(const TmaCopyArgs& args, const TmaCopyPlan& plan, Workspace workspace,
              CUstream stream);

// Plan and run in one call (outside graph capture).
void tma_copy(const TmaCopyArgs& args, CUstream stream, const TmaCopyConfig* config = nullptr);

}  // namespace attnjit
