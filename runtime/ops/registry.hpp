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
#include "ops/field_table.hpp"

namespace attnjit::ops {

struct OpSpec;

// A kernel a config needs compiled: (op, canonical config). A tuning candidate may need
// more than one (mla_decode's split-KV candidates also need the combine kernel).
struct KernelVariant {
  const OpSpec* op = nullptr;
  nlohmann::json config;
};

// How an op is autotuned (docs/tuning.md). An op without a search_space is not tunable.
// A candidate is a JSON object: the op's config fields plus its run-time fields (call
// arguments such as mla_decode's num_splits) named in `runtime_fields`.
struct TuningSpec {
  std::string shape_keys;  // doc for --shape, e.g. "rows, cols, dtype"
  // Validates a shape's keys and values (errors name the key) and fills the defaults.
  std::function<nlohmann::json(const nlohmann::json& shape)> canonical_shape;
  // The DB bucket of a canonical shape, e.g. "bf16 rows=2^14 cols=2^13".
  std::function<std::string(const nlohmann::json& shape)> bucket;
  // The built-in heuristic's candidate: the reference every candidate is checked against.
  std::function<nlohmann::json(const nlohmann::json& shape)> default_candidate;
  // Every candidate to try for a shape; configs that cannot exist (shared memory, tile
  // divisibility) are pruned by the op's own validation, shape-dependent ones by `prune`.
  std::function<std::vector<nlohmann::json>(const nlohmann::json& shape)> search_space;
  // "" when `candidate` is worth timing on `shape`, else why not (e.g. a tile larger than
  // the tensor). Optional.
  std::function<std::string(const nlohmann::json& candidate, const nlohmann::json& shape)> prune;
  std::vector<std::string> runtime_fields;
  // The kernels a canonical candidate's config (runtime fields removed) needs compiled.
  std::function<std::vector<KernelVariant>(const nlohmann::json& config)> variants;
  // Shapes `tools/gpu_tune.sh` sweeps (the op's benchmark shapes).
  std::vector<nlohmann::json> bench_shapes;
};

// A config's derived forms, unvalidated (the field-walk tests compare them field by field).
struct ConfigForms {
  nlohmann::json json;
  jit::KernelKey key;
  std::vector<jit::TemplateArg> args;
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
  // The JSON, key and template arguments of a config read without its rules (tests).
  std::function<ConfigForms(const nlohmann::json&)> forms;
  TuningSpec tuning;  // empty: not tunable

  bool supports(Arch arch) const;
};

// Fills op.fields, canonicalize, recipe and forms from a config table: `recipe` builds the
// kernel of a validated config. `table` must outlive the registry (a function-local static).
template <class C, class... T>
void bind_config(OpSpec& op, const ConfigTable<C, T...>& table,
                 std::function<jit::KernelRecipe(const C&, Arch)> recipe) {
  op.fields = table.specs();
  auto read = [&table](const nlohmann::json& j) {
    C c = table.from_json(j);
    c.validate();
    return c;
  };
  op.canonicalize = [&table, read](const nlohmann::json& j) {
    return nlohmann::json::parse(table.to_json(read(j)).dump());
  };
  op.recipe = [read, recipe](const nlohmann::json& j, Arch arch) { return recipe(read(j), arch); };
  op.forms = [&table, id = op.id](const nlohmann::json& j) {
    const C c = table.from_json(j);
    return ConfigForms{nlohmann::json::parse(table.to_json(c).dump()), table.key(id, kSm90a, c),
                       table.template_args(c)};
  };
}

// The specs of every op family in runtime/ops/ops.def, in its row order (ops.def is the only
// list of ops). Throws Error(kUnsupportedConfig) on two specs with one name or id.
const std::vector<OpSpec>& registry();

// Throws Error(kUnsupportedConfig) listing the known ops when `name` is not one.
const OpSpec& find_op(std::string_view name);

// One function per ops.def row: the op's spec and those of its helper kernels the
// registry lists (e.g. mla_decode_combine), defined in runtime/ops/<name>/.
#define ATTNJIT_OP(name) std::vector<OpSpec> name##_op_specs();
#include "ops/ops.def"
#undef ATTNJIT_OP

// A kernel family's KernelKey::op, from its name (32-bit FNV-1a with the top bit set):
// no table of numbers to keep. Test-only families use small ids (1000..1999), which this
// never yields.
constexpr uint32_t op_id(std::string_view name) {
  uint32_t h = 2166136261u;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  return h | 0x80000000u;
}

}  // namespace attnjit::ops
