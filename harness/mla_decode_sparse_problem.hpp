#pragma once
// What the GPU tests reach behind mla_decode_sparse's Problem (harness/problem.hpp): the
// call's arguments, and new indices written into the same device buffers (a CUDA graph
// captured before must read them on its next replay).
#include <cstdint>

#include "attnjit/ops/mla_decode_sparse.hpp"

namespace attnjit::harness {

class MlaSparseHooks {
 public:
  virtual ~MlaSparseHooks() = default;
  virtual MlaDecodeSparseArgs args() const = 0;
  // Redraws every main index from the rows the case already references (so no NaN row is
  // reached) plus -1 and past-the-pool values, in place; check() then judges the new ones.
  virtual void redraw_indices(uint64_t seed) = 0;
};

}  // namespace attnjit::harness
