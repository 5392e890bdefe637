#pragma once
// The (stage, phase) cursor of a ring of kStages buffers guarded by mbarriers. Producer
// and consumer each keep one; the phase flips every time the index wraps, which is the
// parity to wait on for the buffer at `index`.
#include "common/arch.cuh"

namespace attnjit {

template <int kStages>
struct PipelineState {
  static_assert(kStages >= 1, "a pipeline needs at least one stage");
  u32 index = 0;
  u32 phase = 0;

  ATTNJIT_DEVICE void advance() {
    if (++index == kStages) {
      index = 0;
      phase ^= 1u;
    }
  }
  // The cursor `n` steps ahead (n ≥ 0).
  ATTNJIT_DEVICE PipelineState advanced(u32 n) const {
    PipelineState s;
    const u32 total = index + n;
    s.index = total % kStages;
    s.phase = phase ^ ((total / kStages) & 1u);
    return s;
  }
};

}  // namespace attnjit
