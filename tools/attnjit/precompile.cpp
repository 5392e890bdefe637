// `attnjit precompile`: fill the kernel cache ahead of deployment, in parallel, with or
// without a GPU. Variants come from a manifest (a JSON list of {"op", "config", "arch"?}),
// from --op/--config (one variant, the line strict-mode errors print), or by default
// from every op's default set.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "attnjit/error.hpp"
#include "cache/cache.hpp"
#include "cache/hash.hpp"
#include "driver/driver.hpp"
#include "jit/cache_client.hpp"
#include "manifest.hpp"
#include "ops/registry.hpp"
#include "tune/tuned_variants.hpp"
#include "tuning/db.hpp"

namespace attnjit::cli {
namespace {

struct PrecompileOptions {
  std::string manifest, arch = "sm_90a", cache_dir, op, config;
  int jobs = 0;  // 0 = one per hardware thread
  bool json = false, load = false;
};

struct Variant {
  const ops::OpSpec* op = nullptr;
  nlohmann::json config;  // canonical
  Arch arch;
  bool tuned = false;  // added from the tuning database
};

struct Outcome {
  enum Status { kCompiled, kHit, kFailed } status = kFailed;
  std::string key, error;
  std::string cubin_sha256;  // of the bytes this process got (from disk or NVRTC)
  double ms = 0, load_ms = -1;
  int registers = -1, spill_bytes = 0;
};

// Returns {variants to build, variants skipped because their op lacks the arch}.
std::pair<std::vector<Variant>, std::vector<Variant>> plan(const PrecompileOptions& o) {
  const std::vector<Arch> archs = parse_archs(o.arch);
  std::vector<Variant> all;
  if (!o.manifest.empty()) {
    if (!o.op.empty() || !o.config.empty())
      throw UsageError("--manifest cannot be combined with --op/--config");
    std::ifstream in(o.manifest);
    if (!in) throw UsageError(fmt::format("--manifest: cannot read {}", o.manifest));
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    for (ManifestVariant& v : parse_manifest(text, o.manifest, archs))
      all.push_back({v.op, std::move(v.config), v.arch});
  } else if (!o.op.empty()) {
    const ops::OpSpec& op = op_named(o.op, "--op");
    std::vector<nlohmann::json> configs;
    if (o.config.empty()) {
      configs = op.default_set();
    } else {
      try {
        configs.push_back(canonical(op, nlohmann::json::parse(o.config), "--config"));
      } catch (const nlohmann::json::exception& e) {
        throw UsageError(fmt::format("--config is not JSON: {}", e.what()));
      }
    }
    for (const Arch& a : archs)
      for (const nlohmann::json& c : configs) all.push_back({&op, c, a});
  } else {
    if (!o.config.empty()) throw UsageError("--config needs --op");
    for (const Arch& a : archs)
      for (const ops::OpSpec& op : ops::registry())
        for (const nlohmann::json& c : op.default_set()) all.push_back({&op, c, a});
  }
  if (o.manifest.empty() && o.config.empty()) {
    // The tuning database's winners for these archs (docs/tuning.md), so a deployment
    // also has the kernels its tuned configs select. A corrupt database is reported by
    // load_db (naming the file) and ignored.
    const std::string db = tuning::db_path_for(o.cache_dir);
    std::vector<std::string> skipped_entries;
    for (tune::TunedVariant& t : tune::tuned_variants(db.empty() ? tuning::Db{} : tuning::load_db(db),
                                                      archs, o.op, &skipped_entries)) {
      bool known = false;
      for (const Variant& v : all) known = known || (v.op == t.op && v.arch == t.arch && v.config == t.config);
      if (!known) all.push_back({t.op, std::move(t.config), t.arch, true});
    }
    for (const std::string& s : skipped_entries)
      fmt::print(stderr, "attnjit precompile: tuning database {}: skipped {}\n", db, s);
  }
  std::vector<Variant> build, skipped;
  for (Variant& v : all) (v.op->supports(v.arch) ? build : skipped).push_back(std::move(v));
  return {std::move(build), std::move(skipped)};
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

int run(const PrecompileOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<Variant> variants, skipped;
  try {
    std::tie(variants, skipped) = plan(o);
  } catch (const UsageError& e) {
    fmt::print(stderr, "attnjit precompile: {}\n", e.what());
    return 2;
  }
  cache::Cache cache = cache::Cache::open(o.cache_dir);
  // Strict mode compiles nothing, so its coverage check also runs on a read-only root
  // (a shipped cache mounted read-only, docs/cache.md's deployment recipe).
  if (cache.settings().read_only && !cache.settings().strict)
    throw Error(ErrorKind::kCache, fmt::format("precompile needs a writable cache, but {} is "
                                               "read-only ({})",
                                               cache.root(), cache.settings().read_only_reason));
  const int jobs =
      std::max(1, o.jobs > 0 ? o.jobs : static_cast<int>(std::thread::hardware_concurrency()));
  double driver_init_ms = -1;
  Arch device_arch;
  if (o.load) {
    const auto t = std::chrono::steady_clock::now();
    driver::use_device(0);
    const driver::DeviceInfo& info = driver::cached_device_info(0);
    device_arch = Arch{info.cc_major, info.cc_minor, true};
    driver_init_ms = ms_since(t);
  }

  std::vector<Outcome> results(variants.size());
  std::atomic<size_t> next{0};
  std::mutex progress_mutex;
  size_t finished = 0, n_compiled = 0, n_hits = 0, n_failed = 0;
  const bool tty = ::isatty(STDERR_FILENO);
  auto work = [&] {
    if (o.load) driver::use_device(0);  // the context is per thread
    for (size_t i; (i = next.fetch_add(1)) < variants.size();) {
      const Variant& v = variants[i];
      Outcome& r = results[i];
      try {
        const jit::KernelRecipe recipe = v.op->recipe(v.config, v.arch);
        jit::CachedKernel c = jit::ensure_compiled(cache, recipe);
        if (!c.store_error.empty()) throw std::runtime_error(c.store_error);
        r.status = c.hit() ? Outcome::kHit : Outcome::kCompiled;
        r.key = c.key;
        r.cubin_sha256 =
            cache::sha256_hex(std::string_view(c.kernel.cubin.data(), c.kernel.cubin.size()));
        r.ms = c.ms;
        r.registers = c.kernel.ptxas.registers;
        r.spill_bytes = c.kernel.ptxas.spill_store_bytes + c.kernel.ptxas.spill_load_bytes;
        if (o.load && v.arch == device_arch) {
          const auto t = std::chrono::steady_clock::now();
          jit::Kernel k(std::move(c.kernel), recipe.dynamic_smem_bytes);
          k.prepare_current_device();
          r.load_ms = ms_since(t);
        }
      } catch (const std::exception& e) {
        r.status = Outcome::kFailed;
        r.error = e.what();
      }
      std::lock_guard lock(progress_mutex);
      ++finished;
      (r.status == Outcome::kHit        ? n_hits
       : r.status == Outcome::kCompiled ? n_compiled
                                        : n_failed)++;
      const char* what = r.status == Outcome::kHit        ? "cached"
                         : r.status == Outcome::kCompiled ? "compiled"
                                                          : "FAILED";
      if (tty)
        fmt::print(stderr, "\r[{}/{}] compiled {}, cache hits {}, failed {}   ", finished,
                   variants.size(), n_compiled, n_hits, n_failed);
      else
        fmt::print(stderr, "[{}/{}] {:<8} {} {} {} ({:.0f} ms)\n", finished, variants.size(), what,
                   v.op->name, v.arch.name(), v.config.dump(), r.ms);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < std::min<int>(jobs, static_cast<int>(variants.size())); ++t)
    threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  if (tty && !variants.empty()) fmt::print(stderr, "\n");
  const double wall_ms = ms_since(start);

  double hit_sum = 0, hit_max = 0, load_sum = 0, load_max = 0;
  int loads = 0;
  for (const Outcome& r : results) {
    if (r.status == Outcome::kHit) hit_sum += r.ms, hit_max = std::max(hit_max, r.ms);
    if (r.load_ms >= 0) load_sum += r.load_ms, load_max = std::max(load_max, r.load_ms), ++loads;
  }
  auto variant_json = [](const Variant& v) {
    return nlohmann::ordered_json{
        {"op", v.op->name}, {"config", v.config}, {"arch", v.arch.name()}};
  };
  if (o.json) {
    nlohmann::ordered_json out;
    out["total"] = variants.size() + skipped.size();
    out["compiled"] = n_compiled;
    out["cache_hits"] = n_hits;
    out["skipped"] = skipped.size();
    out["failed"] = n_failed;
    out["tuned"] = std::count_if(variants.begin(), variants.end(), [](const Variant& v) { return v.tuned; });
    out["cache_dir"] = cache.root();
    out["jobs"] = jobs;
    out["wall_ms"] = wall_ms;
    // Per-process key setup (toolkit and embedded header hashes), paid once by the first
    // miss or hit; hits' ms include reading and verifying the entry.
    out["key_setup_ms"] = variants.empty() ? 0.0 : jit::process_inputs().setup_ms;
    out["hit_ms_mean"] = n_hits ? hit_sum / static_cast<double>(n_hits) : 0.0;
    out["hit_ms_max"] = hit_max;
    if (o.load) {
      out["driver_init_ms"] = driver_init_ms;
      out["loaded"] = loads;
      out["load_ms_mean"] = loads ? load_sum / loads : 0.0;
      out["load_ms_max"] = load_max;
    }
    out["variants"] = nlohmann::ordered_json::array();
    for (size_t i = 0; i < variants.size(); ++i) {
      const Outcome& r = results[i];
      nlohmann::ordered_json j = variant_json(variants[i]);
      if (variants[i].tuned) j["tuned"] = true;
      j["status"] = r.status == Outcome::kHit        ? "cache_hit"
                    : r.status == Outcome::kCompiled ? "compiled"
                                                     : "failed";
      j["ms"] = r.ms;
      if (r.status == Outcome::kFailed) {
        j["error"] = r.error;
      } else {
        j["key"] = r.key;
        j["cubin_sha256"] = r.cubin_sha256;
        j["registers"] = r.registers;
        j["spill_bytes"] = r.spill_bytes;
      }
      if (r.load_ms >= 0) j["load_ms"] = r.load_ms;
      out["variants"].push_back(j);
    }
    out["skipped_variants"] = nlohmann::ordered_json::array();
    for (const Variant& v : skipped) out["skipped_variants"].push_back(variant_json(v));
    std::cout << out.dump(2) << "\n";
  } else {
    for (size_t i = 0; i < variants.size(); ++i)
      if (results[i].status == Outcome::kFailed)
        fmt::print("FAILED {} {} {}:\n  {}\n", variants[i].op->name, variants[i].arch.name(),
                   variants[i].config.dump(), results[i].error);
    fmt::print(
        "precompile: {} variants into {}: compiled {}, cache hits {}, skipped {} (op lacks "
        "the arch), failed {}; {:.1f} s with {} jobs\n",
        variants.size() + skipped.size(), cache.root(), n_compiled, n_hits, skipped.size(),
        n_failed, wall_ms / 1000, jobs);
    if (o.load && loads)
      fmt::print("  loaded {} on the GPU: {:.2f} ms mean, {:.2f} ms max (driver init {:.0f} ms)\n",
                 loads, load_sum / loads, load_max, driver_init_ms);
  }
  return n_failed ? 1 : 0;
}

}  // namespace

std::function<int()> add_precompile_command(CLI::App& app) {
  auto o = std::make_shared<PrecompileOptions>();
  CLI::App* cmd = app.add_subcommand(
      "precompile",
      "compile a manifest's variants (default: every op's default set) into the cache");
  cmd->add_option("--manifest", o->manifest,
                  "JSON list of {\"op\", \"config\", \"arch\"?} (docs/cache.md)");
  cmd->add_option("--arch", o->arch, "target(s), comma separated (default sm_90a)");
  cmd->add_option("--jobs,-j", o->jobs, "parallel compiles (default: hardware threads)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--cache-dir", o->cache_dir,
                  "cache root (default: ATTNJIT_CACHE_DIR, "
                  "XDG_CACHE_HOME/attnjit, ~/.cache/attnjit)");
  cmd->add_option("--op", o->op, "build this op only (its default set, or --config)");
  cmd->add_option("--config", o->config, "one config JSON for --op");
  cmd->add_flag("--json", o->json, "print one JSON object (counts, per-variant results)");
  cmd->add_flag("--load", o->load,
                "also load each cubin of the GPU's arch and time it (needs a GPU)");
  return [o] { return run(*o); };
}

}  // namespace attnjit::cli
