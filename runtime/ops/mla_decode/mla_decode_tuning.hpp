#pragma once
// mla_decode's tuned choices for the op's host code (mla_decode_tuning.cpp).
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
