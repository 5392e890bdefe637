#include "jit/cache_client.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "attnjit/error.hpp"

namespace attnjit::jit {
namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string precompile_command(const std::string& op, const std::string& config_json,
                               const std::string& arch, const std::string& root) {
  return fmt::format("attnjit precompile --op {} --config {} --arch {} --cache-dir {}", op,
                     shell_quote(config_json), arch, shell_quote(root));
}

nlohmann::ordered_json entry_meta(const KeyInputs& inputs, const CompiledKernel& kernel,
                                  unsigned dynamic_smem_bytes) {
  nlohmann::ordered_json meta;
  meta["op"] = kernel.op;
  meta["config"] = nlohmann::json::parse(inputs.config_json, nullptr, false);
  if (meta["config"].is_discarded()) meta["config"] = inputs.config_json;
  meta["lowered_name"] = kernel.lowered_name;
  meta["compile_ms"] = kernel.compile_ms;
  meta["registers"] = kernel.ptxas.registers;
  meta["spill_bytes"] = kernel.ptxas.spill_store_bytes + kernel.ptxas.spill_load_bytes;
  meta["spill_store_bytes"] = kernel.ptxas.spill_store_bytes;
  meta["spill_load_bytes"] = kernel.ptxas.spill_load_bytes;
  meta["stack_frame_bytes"] = kernel.ptxas.stack_frame_bytes;
  meta["static_smem_bytes"] = kernel.ptxas.static_smem_bytes;
  meta["barriers"] = kernel.ptxas.barriers;
  meta["resources_from_cubin"] = kernel.ptxas.from_cubin;  // no ptxas report in NVRTC's log
  meta["dynamic_smem_bytes"] = dynamic_smem_bytes;
  meta["options"] = normalize_options(kernel.options);
  return meta;
}

std::string kernel_from_entry(const cache::Entry& entry, CompiledKernel& out) {
  const auto arch = parse_arch(entry.arch);
  if (!arch) return "unknown arch " + entry.arch;
  const std::string* source = entry.record.text("source");
  if (!source) return "the key record has no source";
  try {
    const nlohmann::ordered_json& meta = entry.meta;
    CompiledKernel k;
    k.op = meta.at("op").get<std::string>();
    k.arch = *arch;
    k.source = *source;
    k.lowered_name = meta.at("lowered_name").get<std::string>();
    if (k.lowered_name.empty()) return "meta.json has an empty lowered_name";
    k.cubin.assign(entry.cubin.begin(), entry.cubin.end());
    k.compile_ms = meta.at("compile_ms").get<double>();
    k.options = meta.at("options").get<std::vector<std::string>>();
    // By type: get<int>() of 1e30 is undefined behaviour, not an exception.
    std::string bad;
    auto int_field = [&](const char* name) {
      const nlohmann::ordered_json& v = meta.at(name);
      const bool fits = v.is_number_integer() &&
                        (v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t{INT32_MAX}
                                                : v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX);
      if (!fits && bad.empty()) bad = fmt::format("meta.json's {} is not a 32-bit integer", name);
      return fits ? v.get<int>() : -1;
    };
    k.ptxas.registers = int_field("registers");
    k.ptxas.spill_store_bytes = int_field("spill_store_bytes");
    k.ptxas.spill_load_bytes = int_field("spill_load_bytes");
    k.ptxas.stack_frame_bytes = int_field("stack_frame_bytes");
    k.ptxas.static_smem_bytes = int_field("static_smem_bytes");
    k.ptxas.barriers = int_field("barriers");
    if (!bad.empty()) return bad;
    k.ptxas.from_cubin = meta.value("resources_from_cubin", false);
    k.ptxas.parsed = k.ptxas.registers >= 0;
    out = std::move(k);
  } catch (const nlohmann::json::exception& e) {
    return fmt::format("meta.json is malformed: {}", e.what());
  }
  return "";
}

nlohmann::ordered_json entry_summary(std::string_view meta_text) {
  const nlohmann::json meta = nlohmann::json::parse(meta_text, nullptr, false);
  const bool readable = meta.is_object();
  auto field = [&](const char* name) -> const nlohmann::json* {
    if (!readable) return nullptr;
    auto it = meta.find(name);
    return it == meta.end() ? nullptr : &*it;
  };
  // Integers must fit an int (the text view prints them as one).
  auto integer = [&](const char* name) -> nlohmann::json {
    const nlohmann::json* v = field(name);
    if (!v || !v->is_number_integer()) return -1;
    if (v->is_number_unsigned()) {
      const auto u = v->get<uint64_t>();
      return u <= static_cast<uint64_t>(INT32_MAX) ? nlohmann::json(u) : nlohmann::json(-1);
    }
    const auto i = v->get<int64_t>();
    return i >= INT32_MIN && i <= INT32_MAX ? nlohmann::json(i) : nlohmann::json(-1);
  };
  nlohmann::ordered_json j;
  const nlohmann::json* op = field("op");
  j["op"] = op && op->is_string() ? *op : nlohmann::json("?");
  const nlohmann::json* config = field("config");
  j["config"] = config ? *config : nlohmann::json(nullptr);
  j["registers"] = integer("registers");
  j["spill_bytes"] = integer("spill_bytes");
  const nlohmann::json* ms = field("compile_ms");
  j["compile_ms"] = ms && ms->is_number() ? *ms : nlohmann::json(-1);
  j["static_smem_bytes"] = integer("static_smem_bytes");
  j["dynamic_smem_bytes"] = integer("dynamic_smem_bytes");
  if (!readable) j["unreadable"] = true;  // `verify` says why and quarantines it
  return j;
}

CachedKernel ensure_compiled(cache::Cache& cache, const KernelRecipe& recipe) {
  const auto start = std::chrono::steady_clock::now();
  CachedKernel out;
  const KeyInputs inputs = key_inputs(recipe);
  const cache::KeyRecord record = to_record(inputs);
  out.key = cache::cache_key(record);
  auto done = [&]() -> CachedKernel {
    out.ms = ms_since(start);
    return std::move(out);
  };
  // A verified entry whose description also decodes into a kernel; anything else is a
  // miss (and a bad entry is quarantined by the cache).
  auto load = [&] {
    CompiledKernel decoded;
    const auto check = [&](const cache::Entry& e) { return kernel_from_entry(e, decoded); };
    if (!cache.lookup(inputs.arch, out.key, check)) return false;
    out.kernel = std::move(decoded);
    out.from = CachedKernel::From::kDisk;
    return true;
  };
  if (load()) return done();

  const cache::Settings& settings = cache.settings();
  if (settings.strict)
    throw Error(
        ErrorKind::kCache,
        fmt::format(
            "ATTNJIT_NO_COMPILE is set and op '{}' with config {} for {} is not in "
            "the kernel cache {} (key {}). Build it ahead with:\n  {}",
            recipe.source.op, inputs.config_json, inputs.arch, settings.root, out.key,
            precompile_command(recipe.source.op, inputs.config_json, inputs.arch, settings.root)));
  if (settings.read_only) {
    cache.warn_read_only_once();
    out.kernel = compile_recipe(recipe);
    out.from = CachedKernel::From::kCompiledNotStored;
    return done();
  }

  const cache::KeyLock lock = cache.lock(out.key);
  if (load()) return done();  // built while we waited
  out.kernel = compile_recipe(recipe);
  out.from = CachedKernel::From::kCompiled;
  try {
    const std::string_view cubin(out.kernel.cubin.data(), out.kernel.cubin.size());
    cache.publish(record, cubin, entry_meta(inputs, out.kernel, recipe.dynamic_smem_bytes));
  } catch (const Error& e) {
    // The kernel is good; only storing it failed (disk full, root gone). The caller decides
    // whether that matters: the runtime runs on, precompile reports a failure.
    // One warning per process, as for a read-only root: a full disk fails every store,
    // and a serving process should not print one line per kernel.
    out.from = CachedKernel::From::kCompiledNotStored;
    out.store_error = e.what();
    static std::once_flag warned;
    std::call_once(warned, [&] {
      fmt::print(stderr,
                 "attnjit: warning: compiled op '{}' but could not store it in {}: {}; kernels "
                 "that cannot be stored run from memory (further failures are not reported)\n",
                 recipe.source.op, settings.root, e.what());
    });
  }
  return done();
}

CompiledKernel runtime_compile(const KernelRecipe& recipe) {
  const char* mode = std::getenv("ATTNJIT_CACHE");
  const std::string m = mode ? mode : "";
  if (m == "off" || m == "0" || m == "false" || m == "no") {
    if (cache::env_flag("ATTNJIT_NO_COMPILE"))
      throw Error(ErrorKind::kCache,
                  fmt::format("ATTNJIT_NO_COMPILE is set but the kernel cache is off "
                              "(ATTNJIT_CACHE={}), so op '{}' with config {} cannot be found",
                              m, recipe.source.op, recipe.source.config_json));
    return compile_recipe(recipe);
  }
  static std::mutex mutex;
  static std::unique_ptr<cache::Cache> cache;  // opened on the first miss; a failure retries
  cache::Cache* c = nullptr;
  {
    std::lock_guard lock(mutex);
    if (!cache) cache = std::make_unique<cache::Cache>(cache::Cache::open());
    c = cache.get();
  }
  return ensure_compiled(*c, recipe).kernel;
}

}  // namespace attnjit::jit
