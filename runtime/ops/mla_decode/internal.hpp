#pragma once
// mla_decode's host internals shared by its files: the checked sizes of a call and the
// argument checks (args.cpp), and the tuned choices (tuning.cpp). The plan and the
// launches (launch.cpp) read both.
#include <cuda.h>

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

inline constexpr int kMaxSplits = 256;
inline constexpr int kMaxBatch = 32768;  // grid y of a balanced run: batch + SM slots < 65536

// Host-visible sizes of a call whose arguments passed check_args. Ragged: q_len is the
// max_q_len bound.
struct Sizes {
  bool ragged = false;
  int64_t b = 0, q_len = 0, h = 0, total_q = 0, num_pages = 0, page_size = 0, max_pages = 0;
};

// Every host-visible rule of `a` under config `c`, before anything touches the GPU; errors
// name the argument.
Sizes check_args(const MlaDecodeArgs& a, const MlaDecodeConfig& c);

// Every rule of a plan's shape (errors name "shape.<field>") and of the config against it.
void check_shape(const MlaDecodeShape& s, const MlaDecodeConfig& c);

// A call of sizes `s` is one `plan` was made for; errors name the argument.
void check_matches_plan(const Sizes& s, const MlaDecodePlan& plan);

// Checked mode (ATTNJIT_CHECK=1): runs the validation kernel, synchronizes, and names the
// first bad device-resident value. Never on the hot path.
void device_check(const MlaDecodeArgs& a, const MlaDecodeConfig& c, const Sizes& s, Arch arch,
                  CUstream stream);

}  // namespace attnjit::mla_detail
