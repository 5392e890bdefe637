#pragma once
// Internal to the mha_fwd op: the kernel recipes shared by the launcher and the registry.
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

jit::KernelRecipe mha_fwd_recipe(const MhaFwdConfig& c, Arch arch);
jit::KernelRecipe mha_combine_recipe(const MhaCombineConfig& c, Arch arch);

}  // namespace ops
}  // namespace attnjit
