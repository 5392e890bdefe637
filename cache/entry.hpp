#pragma once
// One cache entry on disk: <root>/<arch>/<key[0:2]>/<key>/ holding
//   kernel.cubin  the cubin, byte for byte as NVRTC produced it
//   meta.json     the key record, options, compile ms, ptxas numbers, SHA-256 of the cubin
//   COMMITTED     written last; names the key and the SHA-256 of the cubin and meta.json
// Entries are built in <root>/tmp/<unique>/ (every file and the directory fsynced) and
// published with one rename(), so a reader sees a whole entry or none. An entry is never
// modified after publishing except its directory's mtime, the LRU recency stamp.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "cache/key.hpp"
#include "jit/compiler.hpp"

namespace attnjit::cache {

inline constexpr const char* kCubinFile = "kernel.cubin";
inline constexpr const char* kMetaFile = "meta.json";
inline constexpr const char* kMarkerFile = "COMMITTED";
inline constexpr int kMetaFormat = 1;

std::string entry_dir(const std::string& root, const std::string& arch, const std::string& key);

struct ReadResult {
  enum class Status { kMissing, kOk, kCorrupt };
  Status status = Status::kMissing;
  std::string reason;          // why it is corrupt
  jit::CompiledKernel kernel;  // when kOk (log empty; options normalized)
  nlohmann::json meta;         // when kOk
  uint64_t bytes = 0;          // on-disk size of the entry's files
};

// Reads and verifies the entry at `dir`: marker present and naming `key` and the
// hashes of the cubin and meta.json, meta.json well formed, its key record hashing to `key`, its
// arch `arch`, and the cubin's size and SHA-256 as recorded. Never throws for a bad entry.
ReadResult read_entry(const std::string& dir, const std::string& key, const std::string& arch);

// Builds the entry in <root>/tmp and renames it into place. Returns false when another
// publisher got there first (their entry stays; ours is removed). Throws Error(kCache)
// on I/O errors.
bool publish_entry(const std::string& root, const std::string& key, const KeyInputs& record,
                   const jit::CompiledKernel& kernel, unsigned dynamic_smem_bytes);

// Moves a bad entry to <root>/quarantine/ (with a REASON file) so it is never read again
// and its key is rebuilt. Returns the new path, or "" when it could not be moved (gone
// already, or a read-only root).
std::string quarantine_entry(const std::string& root, const std::string& dir,
                             const std::string& reason);

// Marks the entry as just used (its directory's mtime), for LRU pruning. Best effort.
void stamp_used(const std::string& dir);

}  // namespace attnjit::cache
