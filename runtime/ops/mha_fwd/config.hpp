#pragma once
// Internal to the mha_fwd op: the kernel recipes shared by the launcher and the registry.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "attnjit/ops/mha_fwd.hpp"
#include "jit/kernel_table.hpp"

namespace attnjit {

inline constexpr unsigned kMhaMaxSmemPerBlock = 232448;  // H100/H200 opt-in per block

namespace ops {

// The combine kernel's compile-time shape.
struct MhaCombineConfig {
  DType dtype = DType::kBF16;
  int head_dim_v = 128;
  bool ragged = false;
  bool sink = false;

  std::string to_json() const;
  static MhaCombineConfig from_json(const nlohmann::json& j);  // validates
};

// The key tile for a causal call whose keys per sequence are at most `s_k` when it is short
// enough for a smaller tile to pay, else 0 (keep base's). A row block's diagonal tile is
// half masked on average, so a tile of block_n keys wastes about block_n / 2 of the ~s_k / 2
// keys a row sees: at 1k keys the default 240-key d64 tile wastes a quarter of the work.
// Measured on an H100 (docs/bench-notes.md): d64 causal 64 keys up to 4k, d128 causal 128
// keys up to 2k. Contiguous KV only (paged tiles are powers of two already).
int mha_short_causal_block_n(const MhaFwdConfig& base, int64_t s_k);

jit::KernelRecipe mha_fwd_recipe(const MhaFwdConfig& c, Arch arch);
jit::KernelRecipe mha_combine_recipe(const MhaCombineConfig& c, Arch arch);

}  // namespace ops
}  // namespace attnjit
