#pragma once
// What the GPU tests reach behind mla_prefill_sparse's Problem (harness/problem.hpp): the
// call's arguments (to plan, capture or call the op by hand), and new indices written into
// the same device buffer (a CUDA graph captured before must read them on its next replay).
#include <cstdint>

#include "attnjit/ops/mla_prefill_sparse.hpp"

namespace attnjit::harness {

class MlaPrefillSparseHooks {
 public:
  virtual ~MlaPrefillSparseHooks() = default;
  // Views of the problem's own buffers; lse and max_logit absent when the case says so.
  virtual MlaPrefillSparseArgs args() const = 0;
  // Redraws every index within each token's topk (the row padding keeps its values) from
  // the rows the case already references (so no NaN row is reached), plus -1 and
  // past-the-pool values, in place; check(), flops() and bytes() then follow the new ones.
  virtual void redraw_indices(uint64_t seed) = 0;
};

}  // namespace attnjit::harness
