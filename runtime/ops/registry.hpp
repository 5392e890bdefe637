#pragma once
// The op registry: what `attnjit list` prints, what precompile and the tests build, and
// how a JSON config becomes a kernel recipe. Every op declares its config fields (with
// allowed values), the archs it supports and its default variant set.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "attnjit/types.hpp"
#include "jit/kernel_table.hpp"

namespace attnjit::ops {

struct FieldSpec {
  std::string name;
  std::string allowed;        // human-readable rule, e.g. "8..256, multiple of 8"
  std::string default_value;  // as JSON text
  std::string doc;
};

struct OpSpec {
  std::string name;
  uint32_t id = 0;  // KernelKey::op; stable within a build
  std::string summary;
  std::vector<FieldSpec> fields;
  std::vector<Arch> archs;
  // Canonical configs every deployment should have compiled.
  std::function<std::vector<nlohmann::json>()> default_set;
  // Validates (errors name the field) and returns the canonical form of a config.
  std::function<nlohmann::json(const nlohmann::json&)> canonicalize;
  // The kernel recipe of a (valid) config for an arch.
  std::function<jit::KernelRecipe(const nlohmann::json&, Arch)> recipe;

  bool supports(Arch arch) const;
};

const std::vector<OpSpec>& registry();

// Throws Error(kUnsupportedConfig) listing the known ops when `name` is not one.
const OpSpec& find_op(std::string_view name);

// Per-op registration (one function per op family, called by registry()).
OpSpec tma_copy_op_spec();
OpSpec mla_decode_op_spec();
OpSpec mla_decode_combine_op_spec();
OpSpec mha_fwd_op_spec();
OpSpec mha_fwd_combine_op_spec();

// Test-only families (op ids ≥ 1000) are not in the registry.
inline constexpr uint32_t kTmaCopyOpId = 1;
inline constexpr uint32_t kMlaDecodeOpId = 2;
inline constexpr uint32_t kMlaDecodeCombineOpId = 3;
inline constexpr uint32_t kMlaDecodeCheckOpId = 4;  // ATTNJIT_CHECK=1 validation kernel
inline constexpr uint32_t kMhaFwdOpId = 5;
inline constexpr uint32_t kMhaFwdCombineOpId = 6;
inline constexpr uint32_t kMhaFwdCheckOpId = 7;     // ATTNJIT_CHECK=1 validation kernel

}  // namespace attnjit::ops
