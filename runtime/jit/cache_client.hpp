#pragma once
// The JIT's side of the disk cache: build the key record of a recipe, ask the cache,
// compile on a miss and publish. The cache (cache/cache.hpp) stores bytes by key and keeps
// its guarantees (whole entries, verified loads, quarantine, LRU, root trust); what a
// miss costs, what strict mode says and what is written next to the cubin are decided
// here.
//
// ensure_compiled() never touches the GPU, so `attnjit precompile` runs on machines
// without one; the runtime's miss path (build_kernel) goes through runtime_compile().
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "cache/cache.hpp"
#include "jit/compiler.hpp"
#include "jit/kernel_table.hpp"
#include "jit/key_record.hpp"

namespace attnjit::jit {

struct CachedKernel {
  enum class From { kDisk, kCompiled, kCompiledNotStored };
  CompiledKernel kernel;
  std::string key;
  From from = From::kCompiled;
  double ms = 0;             // wall time of this call (key, disk, compile, publish)
  std::string store_error;  // why a compiled kernel could not be published ("" if it was)
  bool hit() const noexcept { return from == From::kDisk; }
};

// Computes the key, returns a verified entry when there is one, else compiles (one process
// per key at a time, by the cache's advisory lock that only saves duplicate work) and
// publishes. Throws Error(kCache) in strict mode on a miss (naming the op, its config and
// the `attnjit precompile` line that builds it), Error(kCompile) when NVRTC fails. A
// read-only root compiles misses into memory; a failed store is reported in store_error.
CachedKernel ensure_compiled(cache::Cache& cache, const KernelRecipe& recipe);

// The runtime's miss path: the process's cache (settings from the environment, opened on
// first use) unless ATTNJIT_CACHE=off, in which case it compiles into memory.
CompiledKernel runtime_compile(const KernelRecipe& recipe);

// The `attnjit precompile` command line that builds one variant (for strict-mode errors).
std::string precompile_command(const std::string& op, const std::string& config_json,
                               const std::string& arch, const std::string& root);

// What the JIT stores in meta.json next to the cubin: op, config, lowered_name,
// compile_ms, the ptxas numbers, dynamic_smem_bytes and the normalized options.
nlohmann::ordered_json entry_meta(const KeyInputs& inputs, const CompiledKernel& kernel,
                                  unsigned dynamic_smem_bytes);

// The kernel a verified entry holds (log empty; options normalized): "" and `out` filled,
// or why the entry cannot be used (an incomplete meta.json, an unknown arch). Also the
// check `attnjit cache verify` applies on top of the cache's own.
std::string kernel_from_entry(const cache::Entry& entry, CompiledKernel& out);

// `attnjit cache ls`'s row for an entry from its meta.json text, read without trusting it
// (ls lists unverified entries): op (string), config, registers, spill_bytes,
// static_smem_bytes, dynamic_smem_bytes (integers), compile_ms (number). A field that is
// missing or of another type takes its fallback ("?", null, -1); "unreadable": true when
// the text is not a JSON object. Never throws.
nlohmann::ordered_json entry_summary(std::string_view meta_text);

}  // namespace attnjit::jit
