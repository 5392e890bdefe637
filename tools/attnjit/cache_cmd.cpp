// `attnjit cache stats|ls|verify|prune|clear`: look after the kernel cache.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>

#include "attnjit/error.hpp"
#include "cache/cache.hpp"
#include "cache/entry.hpp"
#include "cache/root.hpp"
#include "jit/cache_client.hpp"

namespace attnjit::cli {
namespace {

struct CacheOptions {
  std::string action, cache_dir, max_size;
  bool json = false;
};

std::string when(std::time_t t) {
  char buf[32];
  std::tm tm{};
  ::localtime_r(&t, &tm);
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M", &tm);
  return buf;
}

int stats(cache::Cache& c, bool json) {
  const cache::Stats s = c.stats();
  const cache::Settings& st = c.settings();
  if (json) {
    nlohmann::ordered_json j;
    j["root"] = st.root;
    j["root_source"] = st.root_source;
    j["read_only"] = st.read_only;
    if (st.read_only) j["read_only_reason"] = st.read_only_reason;
    j["max_size"] = st.max_size;
    j["entries"] = s.entries;
    j["bytes"] = s.bytes;
    j["per_arch"] = nlohmann::ordered_json::object();
    for (const auto& [arch, n] : s.per_arch) j["per_arch"][arch] = n;
    j["quarantined"] = s.quarantined;
    j["quarantine_bytes"] = s.quarantine_bytes;
    j["tmp"] = s.tmp_dirs;
    j["tmp_bytes"] = s.tmp_bytes;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  fmt::print("cache {} (from {}){}\n", st.root, st.root_source,
             st.read_only ? fmt::format(", read-only: {}", st.read_only_reason) : "");
  fmt::print("  {} entries, {} of {} cap\n", s.entries, cache::format_size(s.bytes),
             cache::format_size(st.max_size));
  for (const auto& [arch, n] : s.per_arch) fmt::print("    {}: {}\n", arch, n);
  fmt::print("  quarantine: {} ({}); tmp: {} ({})\n", s.quarantined,
             cache::format_size(s.quarantine_bytes), s.tmp_dirs, cache::format_size(s.tmp_bytes));
  return 0;
}

int ls(cache::Cache& c, bool json) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const cache::EntryInfo& e : c.entries()) {
    // The entry is not verified here: entry_summary reads its meta.json without trusting
    // it, so one bad entry is shown as such instead of failing the listing.
    std::ifstream in(e.dir + "/" + cache::kMetaFile, std::ios::binary);
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const nlohmann::ordered_json s = jit::entry_summary(text);
    nlohmann::ordered_json j;
    j["op"] = s["op"];
    j["config"] = s["config"];
    j["arch"] = e.arch;
    j["key"] = e.key;
    for (const char* f : {"registers", "spill_bytes", "compile_ms", "static_smem_bytes",
                          "dynamic_smem_bytes"})
      j[f] = s[f];
    j["bytes"] = e.bytes;
    j["last_used"] = static_cast<long long>(e.last_used);
    if (s.contains("unreadable")) j["unreadable"] = true;
    out.push_back(j);
  }
  if (json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  fmt::print("{:<8} {:<10} {:>5} {:>6} {:>8} {:>9}  {:<16}  {}\n", "arch", "op", "regs", "spill",
             "compile", "size", "last used", "config");
  for (const auto& j : out)
    fmt::print("{:<8} {:<10} {:>5} {:>6} {:>6.0f}ms {:>9}  {:<16}  {}\n",
               j["arch"].get<std::string>(), j["op"].get<std::string>(), j["registers"].get<int>(),
               j["spill_bytes"].get<int>(), j["compile_ms"].get<double>(),
               cache::format_size(j["bytes"].get<uint64_t>()),
               when(j["last_used"].get<long long>()), j["config"].dump());
  return 0;
}

int verify(cache::Cache& c, bool json) {
  // The cache's own checks, and that each entry still decodes into a loadable kernel.
  const cache::VerifyReport r = c.verify([](const cache::Entry& e) {
    jit::CompiledKernel k;
    return jit::kernel_from_entry(e, k);
  });
  if (json) {
    nlohmann::ordered_json j;
    j["entries"] = r.entries;
    j["ok"] = r.ok;
    j["corrupt"] = r.corrupt;
    j["problems"] = nlohmann::ordered_json::array();
    for (const auto& [dir, why] : r.problems)
      j["problems"].push_back({{"entry", dir}, {"reason", why}});
    std::cout << j.dump(2) << "\n";
  } else {
    for (const auto& [dir, why] : r.problems) fmt::print("CORRUPT {}: {}\n", dir, why);
    fmt::print("verify: {} entries, {} ok, {} corrupt\n", r.entries, r.ok, r.corrupt);
  }
  return r.corrupt ? 1 : 0;
}

int prune(cache::Cache& c, const std::string& max_size, bool json) {
  const uint64_t cap =
      max_size.empty() ? c.settings().max_size : cache::parse_size(max_size, "--max-size");
  const cache::PruneReport r = c.prune(cap);
  if (json) {
    nlohmann::ordered_json j;
    j["max_size"] = cap;
    j["removed"] = r.removed;
    j["removed_bytes"] = r.removed_bytes;
    j["kept"] = r.kept;
    j["kept_bytes"] = r.kept_bytes;
    j["cleaned"] = r.cleaned;
    std::cout << j.dump(2) << "\n";
  } else {
    fmt::print("prune to {}: removed {} entries ({}), kept {} ({}), cleaned {} quarantined/stale\n",
               cache::format_size(cap), r.removed, cache::format_size(r.removed_bytes), r.kept,
               cache::format_size(r.kept_bytes), r.cleaned);
  }
  return 0;
}

int clear(cache::Cache& c, bool json) {
  const uint64_t removed = c.clear();
  if (json)
    std::cout << nlohmann::ordered_json{{"removed", removed}}.dump(2) << "\n";
  else
    fmt::print("clear: removed {} entries from {}\n", removed, c.root());
  return 0;
}

int run(const CacheOptions& o) {
  if (!o.max_size.empty() && o.action != "prune") {
    fmt::print(stderr, "attnjit cache {}: --max-size only applies to prune\n", o.action);
    return 2;
  }
  if (!o.max_size.empty()) {
    try {
      cache::parse_size(o.max_size, "--max-size");
    } catch (const Error& e) {
      fmt::print(stderr, "attnjit cache prune: {}\n", e.what());
      return 2;
    }
  }
  cache::Cache c = cache::Cache::open(o.cache_dir);
  if (o.action == "stats") return stats(c, o.json);
  if (o.action == "ls") return ls(c, o.json);
  if (o.action == "verify") return verify(c, o.json);
  if (o.action == "prune") return prune(c, o.max_size, o.json);
  return clear(c, o.json);
}

}  // namespace

std::function<int()> add_cache_command(CLI::App& app) {
  auto o = std::make_shared<CacheOptions>();
  CLI::App* cmd = app.add_subcommand("cache", "inspect and maintain the kernel cache");
  cmd->add_option("action", o->action,
                  "stats | ls | verify (quarantines bad entries) | prune | clear")
      ->required()
      ->check(CLI::IsMember({"stats", "ls", "verify", "prune", "clear"}));
  cmd->add_option("--cache-dir", o->cache_dir,
                  "cache root (default: ATTNJIT_CACHE_DIR, "
                  "XDG_CACHE_HOME/attnjit, ~/.cache/attnjit)");
  cmd->add_option("--max-size", o->max_size,
                  "prune: size cap, e.g. 500M or 10G (default: "
                  "ATTNJIT_CACHE_MAX_SIZE or 10G)");
  cmd->add_flag("--json", o->json, "machine-readable output");
  return [o] { return run(*o); };
}

}  // namespace attnjit::cli
