#pragma once
// The content-addressed disk cache of cubins (contract: docs/design.md, "The disk cache
// contract"; user guide: docs/cache.md).
//
// The cache stores bytes by key and knows nothing of how they were made: the JIT builds
// the key record, asks lookup(), compiles on a miss and hands the cubin to publish()
// (runtime/jit/cache_client.hpp). What the cache guarantees, whoever calls it: an entry
// is whole or absent (marker + rename), every load from disk is verified, a bad entry is
// quarantined and reported as a miss, the root is trusted before anything is read, the
// size cap holds (LRU), and a read-only root is never written.
#include <cstdint>
#include <ctime>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/entry.hpp"
#include "cache/key.hpp"
#include "cache/root.hpp"

namespace attnjit::cache {

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

// An advisory per-key lock (flock on <root>/tmp/<key>.lock) so that processes missing the
// same key build it once. flock dies with its process, so a killed holder never blocks
// anyone; correctness does not depend on it (publishing is atomic either way). Held
// until destroyed; a lock that could not be taken holds nothing.
class KeyLock {
 public:
  KeyLock(const std::string& root, const std::string& key);
  ~KeyLock();
  KeyLock(KeyLock&& other) noexcept;
  KeyLock& operator=(KeyLock&&) = delete;
  KeyLock(const KeyLock&) = delete;
  KeyLock& operator=(const KeyLock&) = delete;
  bool held() const noexcept { return fd_ >= 0; }

 private:
  std::string path_;
  int fd_ = -1;
};

class Cache {
 public:
  explicit Cache(Settings settings)
      : settings_(std::move(settings)), shared_(std::make_unique<Shared>()) {}
  // open_settings(explicit_dir): resolve, create, check trust, probe, read the environment.
  static Cache open(const std::string& explicit_dir = "");

  const Settings& settings() const noexcept { return settings_; }
  const std::string& root() const noexcept { return settings_.root; }

  // The verified entry for `key` under `arch`, its recency stamped (unless read-only), or
  // nullopt. A bad entry (torn, flipped, unmarked, or refused by `check`) is moved to the
  // quarantine with a warning on stderr and is a miss: it is never returned.
  std::optional<Entry> lookup(const std::string& arch, const std::string& key,
                              const EntryCheck& check = {});

  // The lock a builder holds from its second lookup to its publish (see KeyLock).
  [[nodiscard]] KeyLock lock(const std::string& key) const { return KeyLock(root(), key); }

  // Stores `cubin` under cache_key(record) (returned) in the record's "arch" folder, with
  // `meta` (the publisher's description) in meta.json. Losing a race to another publisher
  // of the same key keeps theirs (a bad one is quarantined and replaced). Enforces the size
  // cap. Throws Error(kCache) on a read-only root and on I/O errors (disk full, root gone).
  std::string publish(const KeyRecord& record, std::string_view cubin,
                      const nlohmann::ordered_json& meta);

  // One warning per process that a read-only root does not store what misses build.
  void warn_read_only_once() const;

  std::vector<EntryInfo> entries() const;  // sorted by key
  Stats stats() const;
  // Full check of every entry (and `check`, as lookup does); bad ones are quarantined.
  VerifyReport verify(const EntryCheck& check = {});
  // Deletes least-recently-used entries until at most `max_size` bytes remain, plus
  // quarantined entries and unfinished publishes older than an hour.
  PruneReport prune(uint64_t max_size);
  // Deletes every entry, the quarantine and tmp/. Leaves files it does not recognise.
  uint64_t clear();

 private:
  void after_publish(uint64_t bytes);

  struct Shared {  // lookup and publish run on several threads (precompile --jobs)
    std::mutex mutex;
    int64_t size_estimate = -1;  // bytes of entries as this process believes; -1 = unknown
  };
  Settings settings_;
  std::unique_ptr<Shared> shared_;
};

}  // namespace attnjit::cache
