#include "cache/cache.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "attnjit/error.hpp"

namespace attnjit::cache {
namespace fs = std::filesystem;

KeyLock::KeyLock(const std::string& root, const std::string& key) {
  const fs::path tmp = fs::path(root) / "tmp";
  ::mkdir(tmp.c_str(), 0700);
  if (!not_a_real_dir(tmp.string()).empty()) return;  // no lock beats a file outside the root
  path_ = (tmp / (key + ".lock")).string();
  fd_ = ::open(path_.c_str(), O_CREAT | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

KeyLock::KeyLock(KeyLock&& other) noexcept : path_(std::move(other.path_)), fd_(other.fd_) {
  other.fd_ = -1;
}

KeyLock::~KeyLock() {
  if (fd_ < 0) return;
  // Unlinked while held: a waiter on this inode re-checks the disk and hits (or, after a
  // failed build, tries itself). At worst two processes build one key at once.
  ::unlink(path_.c_str());
  ::close(fd_);
}

Cache Cache::open(const std::string& explicit_dir) { return Cache(open_settings(explicit_dir)); }

std::optional<Entry> Cache::lookup(const std::string& arch, const std::string& key,
                                   const EntryCheck& check) {
  const std::string dir = entry_dir(settings_.root, arch, key);
  ReadResult r = read_entry(dir, key, arch, check);
  if (r.status == ReadResult::Status::kOk) {
    if (!settings_.read_only) stamp_used(dir);
    return std::move(r.entry);
  }
  if (r.status == ReadResult::Status::kCorrupt) {
    const std::string moved = settings_.read_only || !r.movable
                                  ? ""
                                  : quarantine_entry(settings_.root, dir, r.reason);
    fmt::print(stderr, "attnjit: warning: cache entry {} is bad ({}); {}\n", dir, r.reason,
               moved.empty() ? "ignoring it" : "moved to " + moved + ", rebuilding");
  }
  return std::nullopt;
}

std::string Cache::publish(const KeyRecord& record, std::string_view cubin,
                           const nlohmann::ordered_json& meta) {
  if (settings_.read_only)
    throw Error(ErrorKind::kCache, fmt::format("cannot store in the kernel cache {}: it is "
                                               "read-only ({})",
                                               root(), settings_.read_only_reason));
  const std::string key = cache_key(record);
  const std::string* arch = record.text("arch");
  if (!arch) throw Error(ErrorKind::kCache, "cannot publish a key record without an 'arch' field");
  const std::string dir = entry_dir(settings_.root, *arch, key);
  // A lost race leaves the other publisher's entry; if that one is bad, replace it.
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (publish_entry(settings_.root, key, record, cubin, meta)) {
      after_publish(cubin.size());
      break;
    }
    ReadResult theirs = read_entry(dir, key, *arch);
    if (theirs.status == ReadResult::Status::kOk) break;
    if (theirs.status == ReadResult::Status::kCorrupt)
      quarantine_entry(settings_.root, dir, theirs.reason);
  }
  return key;
}

void Cache::warn_read_only_once() const {
  static std::once_flag once;
  std::call_once(once, [&] {
    fmt::print(stderr,
               "attnjit: warning: the kernel cache {} is read-only ({}); kernels missing from it "
               "are compiled into memory and not stored\n",
               settings_.root, settings_.read_only_reason);
  });
}

void Cache::after_publish(uint64_t bytes) {
  // The size cap is enforced by the process that grows the cache. Scanning the root is
  // O(entries), so it happens once per process; later publishes add to the estimate.
  std::lock_guard lock(shared_->mutex);
  if (shared_->size_estimate < 0) {
    int64_t total = 0;
    for (const EntryInfo& e : entries()) total += static_cast<int64_t>(e.bytes);
    shared_->size_estimate = total;
  } else {
    shared_->size_estimate += static_cast<int64_t>(bytes) + 4096;  // + meta and marker
  }
  if (static_cast<uint64_t>(shared_->size_estimate) > settings_.max_size) {
    const PruneReport r = prune(settings_.max_size);
    shared_->size_estimate = static_cast<int64_t>(r.kept_bytes);
  }
}

}  // namespace attnjit::cache
