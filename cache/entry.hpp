#pragma once
// One cache entry on disk: <root>/<arch>/<key[0:2]>/<key>/ holding
//   kernel.cubin  the cubin, byte for byte as the publisher handed it over
//   meta.json     the cache's fields (format, key, arch, cubin size and SHA-256, created,
//                 the key record) and the publisher's description of the cubin
//   COMMITTED     written last; names the key and the SHA-256 of the cubin and meta.json
// Entries are built in <root>/tmp/<unique>/ (every file and the directory fsynced) and
// published with one rename(), so a reader sees a whole entry or none. An entry is never
// modified after publishing except its directory's mtime, the LRU recency stamp.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "cache/key.hpp"

namespace attnjit::cache {

inline constexpr const char* kCubinFile = "kernel.cubin";
inline constexpr const char* kMetaFile = "meta.json";
inline constexpr const char* kMarkerFile = "COMMITTED";
inline constexpr int kMetaFormat = 1;

std::string entry_dir(const std::string& root, const std::string& arch, const std::string& key);

// meta.json fields the cache writes itself; a publisher's description may not use them.
bool is_cache_meta_field(std::string_view name);

// A verified entry.
struct Entry {
  std::string key, arch, dir;
  std::string cubin;            // kernel.cubin's bytes
  nlohmann::ordered_json meta;  // all of meta.json: the cache's fields and the publisher's
  KeyRecord record;             // the record the key was computed from
};

// The caller's own check of an entry the cache verified (e.g. that the publisher's
// description in meta.json is complete): "" when usable, else why not.
using EntryCheck = std::function<std::string(const Entry&)>;

struct ReadResult {
  enum class Status { kMissing, kOk, kCorrupt };
  Status status = Status::kMissing;
  std::string reason;  // why it is corrupt
  Entry entry;         // when kOk
  uint64_t bytes = 0;  // on-disk size of the entry's files
  // False when the entry's arch or prefix folder is a symlink: the entry then lies outside
  // the root, so it is refused but not moved (moving it would change files outside).
  bool movable = true;
};

// "" when `path` is a real directory (lstat: not a symlink to one), else why not. Nothing
// is read from or written through a symlink inside the root: a cubin is only ever taken
// from inside the root the trust check approved.
std::string not_a_real_dir(const std::string& path);

// Reads and verifies the entry at `dir` (a real directory whose files are not symlinks,
// under real arch and prefix folders): marker present and naming `key` and the hashes
// of the cubin and meta.json, meta.json well formed, its key record hashing to `key`, its
// arch (and the record's) `arch`, the cubin's size and SHA-256 as recorded, and then
// `check` (when given). Never throws for a bad entry.
ReadResult read_entry(const std::string& dir, const std::string& key, const std::string& arch,
                      const EntryCheck& check = {});

// Builds the entry of `record` (key `key` = cache_key(record); folder: the record's
// "arch") in <root>/tmp and renames it into place. `meta` is the publisher's description
// of the cubin, stored in meta.json after the cache's own fields. Returns false when
// another publisher got there first (their entry stays; ours is removed). Throws
// Error(kCache) on I/O errors, a record without "arch", or a `meta` using a cache field.
bool publish_entry(const std::string& root, const std::string& key, const KeyRecord& record,
                   std::string_view cubin, const nlohmann::ordered_json& meta);

// Moves a bad entry to <root>/quarantine/ (with a REASON file) so it is never read again
// and its key is rebuilt. Returns the new path, or "" when it could not be moved (gone
// already, or a read-only root).
std::string quarantine_entry(const std::string& root, const std::string& dir,
                             const std::string& reason);

// Marks the entry as just used (its directory's mtime), for LRU pruning. Best effort.
void stamp_used(const std::string& dir);

}  // namespace attnjit::cache
