#pragma once
// Internal to the mha_fwd op: the kernel recipes shared by the launcher and the registry.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "attnjit/ops/mha_fwd.hpp"
#include "jit/kernel_table.hpp"

namespace attnjit {

namespace ops {

struct OpSpec;
struct TuningSpec;
TuningSpec mha_fwd_tuning_spec();  // tuning.cpp

// The combine kernel's compile-time shape: the rows of combine_config.def.
struct MhaCombineConfig {
#define ATTNJIT_FIELD ATTNJIT_CONFIG_MEMBER
#include "ops/mha_fwd/combine_config.def"
#undef ATTNJIT_FIELD
  void validate() const;
};

// The checked mode's validation kernel: the rows of check_config.def.
struct MhaCheckConfig {
#define ATTNJIT_FIELD ATTNJIT_CONFIG_MEMBER
#include "ops/mha_fwd/check_config.def"
#undef ATTNJIT_FIELD
  void validate() const;
};

// The default key tile of c's head dims, mask, KV layout and launch (persistent or grid).
int mha_default_block_n(const MhaFwdConfig& c);

// c itself, or for packed query heads (group > 0) the grid launch with its default tile and
// 2 stages: the
// persistent launch measured 3 % slower on the GQA-8 decode row (703 against 683 µs, H100).
MhaFwdConfig mha_grid_for_packed_groups(MhaFwdConfig c);

// The key tile for a call whose keys per sequence are at most `s_k` when it is short enough
// for a smaller tile to pay, else 0 (keep base's). Two kinds of waste shrink with the tile:
// under a causal mask a row block's diagonal tile is half masked on average (about n / 2 of
// the ~s_k / 2 keys a row sees: a quarter of d64's work at 1k keys with 240-key tiles), and
// a last tile that s_k fills only partly (1024 keys = 5⅓ tiles of 192). Measured on an H100
// (docs/performance.md): d64 causal 128 keys up to 2k (persistent) or 64 up to 4k (grid);
// d128 128 keys up to 2k when causal, and when unmasked where base's partial last tile
// wastes over 5 % more keys than 128's.
// Contiguous KV, masks none and causal only (paged tiles are powers of two already).
int mha_short_call_block_n(const MhaFwdConfig& base, int64_t s_k);

jit::KernelRecipe mha_fwd_recipe(const MhaFwdConfig& c, Arch arch);
jit::KernelRecipe mha_combine_recipe(const MhaCombineConfig& c, Arch arch);

// The loaded kernel of a config on `arch` (compiled on first use; validated then).
const jit::Kernel& mha_main_kernel(const MhaFwdConfig& c, Arch arch);
const jit::Kernel& mha_combine_kernel(const MhaCombineConfig& c, Arch arch);
const jit::Kernel& mha_check_kernel(const MhaCheckConfig& c, Arch arch);

// The registry entries' fields, canonical form and recipes, from the config tables.
void bind_mha_fwd_config(OpSpec& op);
void bind_mha_combine_config(OpSpec& op);
nlohmann::json mha_combine_json(const MhaCombineConfig& c);

}  // namespace ops
}  // namespace attnjit
