// Cache upkeep: scanning, stats, verify, LRU prune and clear (`attnjit cache ...`).
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <ctime>
#include <filesystem>
#include <map>

#include "attnjit/error.hpp"
#include "attnjit/types.hpp"
#include "cache/cache.hpp"

namespace attnjit::cache {
namespace fs = std::filesystem;

namespace {

constexpr std::time_t kStaleTmpSeconds = 3600;  // an unfinished publish older than this is dead

bool is_hex(const std::string& s, size_t n) {
  return s.size() == n && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// Bytes of the regular files under `p` (not following links).
uint64_t tree_bytes(const fs::path& p) {
  std::error_code ec;
  uint64_t total = 0;
  const fs::file_status st = fs::symlink_status(p, ec);
  if (fs::is_symlink(st)) return 0;  // a planted symlink: its target is not the cache's
  if (fs::is_regular_file(st)) return fs::file_size(p, ec);
  for (fs::recursive_directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (it->is_regular_file(e2)) total += it->file_size(e2);
  }
  return total;
}

std::time_t mtime_of(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 ? st.st_mtime : 0;
}

// Removes a directory so that no reader ever sees it half deleted: rename it into tmp/
// first (atomic), then delete at leisure.
void remove_entry_dir(const std::string& root, const fs::path& dir) {
  static std::atomic<uint64_t> counter{0};
  const fs::path tmp = fs::path(root) / "tmp";
  ::mkdir(tmp.c_str(), 0700);
  const fs::path doomed =
      tmp / fmt::format("deleting-{}-{}", static_cast<long>(::getpid()), counter++);
  std::error_code ec;
  // tmp/ swapped for a symlink: delete in place rather than move the entry outside the root.
  if (not_a_real_dir(tmp.string()).empty() && ::rename(dir.c_str(), doomed.c_str()) == 0)
    fs::remove_all(doomed, ec);
  else
    fs::remove_all(dir, ec);
}

}  // namespace

std::vector<EntryInfo> Cache::entries() const {
  std::vector<EntryInfo> out;
  std::error_code ec;
  for (const fs::directory_entry& arch_dir : fs::directory_iterator(root(), ec)) {
    const std::string arch = arch_dir.path().filename().string();
    // Symlinked arch or prefix folders lead outside the root: never listed, read or pruned.
    if (!parse_arch(arch) || !not_a_real_dir(arch_dir.path().string()).empty()) continue;
    for (const fs::directory_entry& prefix : fs::directory_iterator(arch_dir.path(), ec)) {
      const std::string p = prefix.path().filename().string();
      if (!is_hex(p, 2) || !not_a_real_dir(prefix.path().string()).empty()) continue;
      for (const fs::directory_entry& entry : fs::directory_iterator(prefix.path(), ec)) {
        const std::string key = entry.path().filename().string();
        if (!is_hex(key, 64) || key.compare(0, 2, p) != 0) continue;
        EntryInfo info;
        info.dir = entry.path().string();
        info.arch = arch;
        info.key = key;
        info.bytes = tree_bytes(entry.path());
        info.last_used = mtime_of(entry.path());
        out.push_back(std::move(info));
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const EntryInfo& a, const EntryInfo& b) {
    return a.arch != b.arch ? a.arch < b.arch : a.key < b.key;
  });
  return out;
}

Stats Cache::stats() const {
  Stats s;
  std::map<std::string, uint64_t> per_arch;
  for (const EntryInfo& e : entries()) {
    ++s.entries;
    s.bytes += e.bytes;
    ++per_arch[e.arch];
  }
  s.per_arch.assign(per_arch.begin(), per_arch.end());
  std::error_code ec;
  for (const fs::directory_entry& q : fs::directory_iterator(fs::path(root()) / "quarantine", ec)) {
    ++s.quarantined;
    s.quarantine_bytes += tree_bytes(q.path());
  }
  for (const fs::directory_entry& t : fs::directory_iterator(fs::path(root()) / "tmp", ec)) {
    ++s.tmp_dirs;
    s.tmp_bytes += tree_bytes(t.path());
  }
  return s;
}

VerifyReport Cache::verify(const EntryCheck& check) {
  VerifyReport r;
  for (const EntryInfo& e : entries()) {
    ++r.entries;
    const ReadResult read = read_entry(e.dir, e.key, e.arch, check);
    if (read.status == ReadResult::Status::kOk) {
      ++r.ok;
      continue;
    }
    ++r.corrupt;
    const std::string moved =
        settings_.read_only || !read.movable ? "" : quarantine_entry(root(), e.dir, read.reason);
    r.problems.emplace_back(e.dir,
                            moved.empty() ? read.reason : read.reason + "; moved to " + moved);
  }
  return r;
}

PruneReport Cache::prune(uint64_t max_size) {
  if (settings_.read_only)
    throw Error(ErrorKind::kCache, fmt::format("cannot prune the kernel cache {}: it is read-only "
                                               "({})",
                                               root(), settings_.read_only_reason));
  PruneReport r;
  const std::time_t now = std::time(nullptr);
  std::error_code ec;
  // Dead weight first: quarantined entries, and publishes or deletions a killed process
  // left in tmp/ (recent ones may belong to a live process).
  // Only real folders: a quarantine/ or tmp/ swapped for a symlink would have prune
  // delete files outside the root.
  const fs::path quarantine = fs::path(root()) / "quarantine", tmp = fs::path(root()) / "tmp";
  if (not_a_real_dir(quarantine.string()).empty())
    for (const fs::directory_entry& q : fs::directory_iterator(quarantine, ec)) {
      std::error_code e2;
      fs::remove_all(q.path(), e2);
      ++r.cleaned;
    }
  if (not_a_real_dir(tmp.string()).empty())
    for (const fs::directory_entry& t : fs::directory_iterator(tmp, ec)) {
      if (now - mtime_of(t.path()) < kStaleTmpSeconds) continue;
      std::error_code e2;
      fs::remove_all(t.path(), e2);
      ++r.cleaned;
    }
  std::vector<EntryInfo> all = entries();
  uint64_t total = 0;
  for (const EntryInfo& e : all) total += e.bytes;
  // Least recently used first; the key breaks ties so the order is reproducible.
  std::sort(all.begin(), all.end(), [](const EntryInfo& a, const EntryInfo& b) {
    return a.last_used != b.last_used ? a.last_used < b.last_used : a.key < b.key;
  });
  for (const EntryInfo& e : all) {
    if (total <= max_size) {
      ++r.kept;
      r.kept_bytes += e.bytes;
      continue;
    }
    remove_entry_dir(root(), e.dir);
    total -= e.bytes;
    ++r.removed;
    r.removed_bytes += e.bytes;
  }
  return r;
}

uint64_t Cache::clear() {
  if (settings_.read_only)
    throw Error(ErrorKind::kCache, fmt::format("cannot clear the kernel cache {}: it is read-only "
                                               "({})",
                                               root(), settings_.read_only_reason));
  uint64_t removed = entries().size();
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (const fs::directory_entry& d : fs::directory_iterator(root(), ec)) {
    const std::string name = d.path().filename().string();
    if (parse_arch(name) || name == "quarantine" || name == "tmp") doomed.push_back(d.path());
  }
  for (const fs::path& p : doomed) fs::remove_all(p, ec);
  return removed;
}

}  // namespace attnjit::cache
