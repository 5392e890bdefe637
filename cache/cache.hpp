#pragma once
// The content-addressed disk cache of cubins (contract: DESIGN.md, "The disk cache
// contract"; user guide: docs/cache.md).
//
// ensure_compiled() is the one way kernels enter and leave the cache: it computes the
// key, returns a verified entry when there is one, else compiles (one process per key
// at a time, by an advisory lock that only saves duplicate work) and publishes. It never
// touches the GPU, so `attnjit precompile` runs on machines without one; the runtime's
// miss path (jit::build_kernel) goes through runtime_compile().
#include <cstdint>
#include <ctime>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/key.hpp"
#include "cache/root.hpp"
#include "jit/compiler.hpp"
#include "jit/kernel_table.hpp"

namespace attnjit::cache {

struct Compiled {
  enum class From { kDisk, kCompiled, kCompiledNotStored };
  jit::CompiledKernel kernel;
  std::string key;
  From from = From::kCompiled;
  double ms = 0;             // wall time of this call (key, disk, compile, publish)
  std::string store_error;  // why a compiled kernel could not be published ("" if it was)
  bool hit() const noexcept { return from == From::kDisk; }
};

// One entry as found by a scan of the root.
struct EntryInfo {
  std::string dir, arch, key;
  uint64_t bytes = 0;
  std::time_t last_used = 0;  // the entry directory's mtime
};

struct Stats {
  uint64_t entries = 0, bytes = 0;
  uint64_t quarantined = 0, quarantine_bytes = 0;
  uint64_t tmp_dirs = 0, tmp_bytes = 0;                    // unfinished publishes (and locks)
  std::vector<std::pair<std::string, uint64_t>> per_arch;  // arch → entries
};

struct VerifyReport {
  uint64_t entries = 0, ok = 0, corrupt = 0;
  std::vector<std::pair<std::string, std::string>> problems;  // dir → reason (now in quarantine)
};

struct PruneReport {
  uint64_t removed = 0, removed_bytes = 0, kept = 0, kept_bytes = 0;
  uint64_t cleaned = 0;  // quarantined entries and stale tmp dirs deleted
};

class Cache {
 public:
  explicit Cache(Settings settings)
      : settings_(std::move(settings)), shared_(std::make_unique<Shared>()) {}
  // open_settings(explicit_dir): resolve, create, check trust, probe, read the environment.
  static Cache open(const std::string& explicit_dir = "");

  const Settings& settings() const noexcept { return settings_; }
  const std::string& root() const noexcept { return settings_.root; }

  // See the file comment. Throws Error(kCache) in strict mode on a miss (naming the op,
  // its config and the `attnjit precompile` line that builds it), Error(kCompile) when
  // NVRTC fails.
  Compiled ensure_compiled(const jit::KernelRecipe& recipe);

  std::vector<EntryInfo> entries() const;  // sorted by key
  Stats stats() const;
  VerifyReport verify();  // full check of every entry; bad ones are quarantined
  // Deletes least-recently-used entries until at most `max_size` bytes remain, plus
  // quarantined entries and unfinished publishes older than an hour.
  PruneReport prune(uint64_t max_size);
  // Deletes every entry, the quarantine and tmp/. Leaves files it does not recognise.
  uint64_t clear();

 private:
  bool try_load(const std::string& dir, const std::string& key, const std::string& arch,
                Compiled& out);
  void after_publish(uint64_t bytes);

  struct Shared {  // ensure_compiled runs on several threads (precompile --jobs)
    std::mutex mutex;
    int64_t size_estimate = -1;  // bytes of entries as this process believes; -1 = unknown
  };
  Settings settings_;
  std::unique_ptr<Shared> shared_;
};

// The `attnjit precompile` command line that builds one variant (for strict-mode errors).
std::string precompile_command(const std::string& op, const std::string& config_json,
                               const std::string& arch, const std::string& root);

// The runtime's miss path: the process's cache (settings from the environment, opened on
// first use) unless ATTNJIT_CACHE=off, in which case it compiles into memory.
jit::CompiledKernel runtime_compile(const jit::KernelRecipe& recipe);

}  // namespace attnjit::cache
