#pragma once
// What the mha_fwd CPU tests sweep (test_mha_fwd_config.cpp, test_mha_fwd_reference.cpp):
// every mask kind and every (head_dim, head_dim_v) pair the kernels support.
#include <utility>

#include "attnjit/ops/mha_fwd.hpp"

namespace attnjit::test {

inline constexpr MaskKind kAllMasks[] = {MaskKind::kNone, MaskKind::kCausal, MaskKind::kWindow,
                                         MaskKind::kCausalWindow, MaskKind::kChunked};
inline constexpr std::pair<int, int> kHeadDims[] = {{64, 64}, {128, 128}, {256, 256}, {192, 128}};

}  // namespace attnjit::test
