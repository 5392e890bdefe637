#pragma once
// mha_fwd's tuned choices for the op's host code (mha_fwd_tuning.cpp).
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

// The database's split count for a call of `config` with these sizes when args.num_splits
// is 0; 0 when there is none (then the heuristic decides). Never throws.
int tuned_splits(const MhaFwdConfig& config, const CallSizes& sizes);

}  // namespace attnjit::mha_tuning
