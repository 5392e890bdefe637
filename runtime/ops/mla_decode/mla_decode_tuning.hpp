#pragma once
// mla_decode's host internals shared by its two files: the call's shape (mla_decode.cpp)
// and the tuned choices (mla_decode_tuning.cpp).
#include <cstdint>

#include "attnjit/ops/mla_decode.hpp"

namespace attnjit::mla_tuning {

// What the tuning database holds for one shape bucket on the current device.
struct Choice {
  bool found = false;
  MlaDecodeConfig config;
  int num_splits = 0;  // 0: the tuned candidate left the split count to the heuristic
};

// Looked up once per (device, bucket, database generation); never throws (no database,
// no GPU or an unusable entry give found = false).
Choice lookup(DType dtype, int64_t b, int64_t q_len, int64_t h, int64_t page, int64_t max_len);

}  // namespace attnjit::mla_tuning

namespace attnjit::mla_detail {

// Batch, q_len and heads of a call from host-visible shapes only. Padded: q [b, q_len, h,
// 576]. Ragged: b from q_offsets [b + 1], q_len = the caller's max_q_len bound, h = q's
// dim 1. ok = false when a tensor the form needs is missing or of the wrong rank (the
// argument checks name it).
struct CallShape {
  bool ok = false;
  bool ragged = false;
  int64_t b = 0, q_len = 0, h = 0;
};
CallShape call_shape(const MlaDecodeArgs& a);

}  // namespace attnjit::mla_detail
