#pragma once
// mha_fwd's host internals shared by its files: the tuned choices (tuning.cpp), and the
// checked sizes of a call and the argument checks (args.cpp). The plan and the launches
// (launch.cpp) read both.
#include <cuda.h>

#include <cstdint>
#include <optional>

#include "attnjit/ops/mha_fwd.hpp"

namespace attnjit::mha_tuning {

// What the tuning database holds for one shape bucket on the current device.
struct Choice {
  bool found = false;
  int block_n = 0;
  int stages = 0;
  int num_splits = 0;  // 0: the tuned candidate left the split count to the heuristic
};

// The sizes of a call as the bucket sees them (the launcher's bounds: s_q = the longest
// q sequence, s_k = the longest KV sequence).
struct CallSizes {
  int64_t b = 0, s_q = 0, s_k = 0, h = 0, h_kv = 0;
};

// Looked up once per (device, bucket, database generation); never throws. found = false
// without a database, a GPU, a usable entry, or for a config whose features the tuned
// shapes do not cover (masks other than none and causal).
Choice lookup(const MhaFwdConfig& features, const CallSizes& sizes);

// `base` with the tuned tile (block_n, stages), every feature field kept; nullopt when that
// config does not validate (e.g. a non-power-of-two tile with paged KV).
std::optional<MhaFwdConfig> apply(const MhaFwdConfig& base, int block_n, int stages);

// The database's split count for a plan of `config` with these sizes whose shape leaves
// num_splits 0; 0 when there is none (then the heuristic decides). Never throws.
int tuned_splits(const MhaFwdConfig& config, const CallSizes& sizes);

}  // namespace attnjit::mha_tuning

namespace attnjit::mha_detail {

inline constexpr int kMaxSplits = 256;
inline constexpr int kMaxGridYZ = 65535;  // bound on b × num_splits, and on heads

// Host-visible sizes of a call whose arguments passed check_args.
struct Sizes {
  int64_t b = 0, s_q = 0, s_k = 0, total_q = 0, total_k = 0, h_q = 0, h_kv = 0;
  int64_t max_s_q = 0;  // grid bound on query positions per sequence
  int64_t max_s_k = 0;  // bound on keys per sequence (split choice)
  int64_t num_pages = 0, max_pages = 0;
};

// Every host-visible rule of `a` under config `c`, before anything touches the GPU; errors
// name the argument.
Sizes check_args(const MhaFwdArgs& a, const MhaFwdConfig& c);

// Every rule of a plan's shape (errors name "shape.<field>") and of the config against it.
void check_shape(const MhaFwdShape& s, const MhaFwdConfig& c);

// A call of sizes `s` is one `plan` was made for; errors name the argument.
void check_matches_plan(const Sizes& s, const MhaFwdPlan& plan);

// Checked mode (ATTNJIT_CHECK=1): runs the validation kernel, synchronizes, and names the
// first bad device-resident value. Never on the hot path.
void device_check(const MhaFwdArgs& a, const MhaFwdConfig& c, const Sizes& s, Arch arch,
                  CUstream stream);

}  // namespace attnjit::mha_detail
