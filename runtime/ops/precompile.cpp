// attnjit::precompile (attnjit/precompile.hpp): one registry kernel through the JIT's cache
// client, the library-side twin of `attnjit precompile --op OP --config JSON`.
#include "attnjit/precompile.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "attnjit/error.hpp"
#include "cache/cache.hpp"
#include "jit/cache_client.hpp"
#include "ops/registry.hpp"

namespace attnjit {

std::vector<std::string> kernel_ops() {
  std::vector<std::string> names;
  for (const ops::OpSpec& op : ops::registry()) names.push_back(op.name);
  return names;
}

PrecompiledKernel precompile(std::string_view op_name, std::string_view config_json, Arch arch,
                             const std::string& cache_dir) {
  const ops::OpSpec& op = ops::find_op(op_name);
  if (!op.supports(arch))
    throw Error(ErrorKind::kUnsupportedConfig,
                fmt::format("op '{}' is not built for {}", op.name, arch.name()));
  const nlohmann::json parsed = nlohmann::json::parse(config_json, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object())
    throw Error(ErrorKind::kUnsupportedConfig,
                fmt::format("op '{}': the config is not a JSON object: {}", op.name, config_json));
  const jit::KernelRecipe recipe = op.recipe(op.canonicalize(parsed), arch);

  cache::Cache cache = cache::Cache::open(cache_dir);
  // As `attnjit precompile`: a kernel that is not stored has not been precompiled.
  if (cache.settings().read_only)
    throw Error(ErrorKind::kCache, fmt::format("precompile needs a writable cache, but {} is "
                                               "read-only ({})",
                                               cache.root(), cache.settings().read_only_reason));
  const jit::CachedKernel c = jit::ensure_compiled(cache, recipe);
  if (!c.store_error.empty()) throw Error(ErrorKind::kCache, c.store_error);

  PrecompiledKernel out;
  out.op = op.name;
  out.config = recipe.source.config_json;
  out.arch = arch.name();
  out.key = c.key;
  out.cache_dir = cache.root();
  out.cache_hit = c.hit();
  out.registers = c.kernel.ptxas.registers;
  out.spill_bytes = c.kernel.ptxas.spill_store_bytes + c.kernel.ptxas.spill_load_bytes;
  out.cubin_bytes = c.kernel.cubin.size();
  out.ms = c.ms;
  return out;
}

}  // namespace attnjit
