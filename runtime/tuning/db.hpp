#pragma once
// The tuning database (docs/tuning.md): its JSON form, merge rules, crash- and
// race-safe saving, and the lookup the runtime does.
//
// File = environments, each a fingerprint (GPU name, SM count, arch, driver, NVRTC and
// attnjit versions) with its entries; an entry = (op, shape bucket) → the best candidate
// and every candidate's timing. Several sweeps may save into one file at once: each save
// takes an flock on <file>.lock, re-reads the file, merges, writes a temp file in the same
// directory, fsyncs it and renames it over the file, so no entry of another sweep is lost
// and no reader ever sees half a file.
#include <cstdint>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "driver/driver.hpp"

namespace attnjit::tuning {

inline constexpr int kDbVersion = 1;

using Warn = std::function<void(const std::string&)>;
// Prints "attnjit: warning: ..." on stderr.
void warn_stderr(const std::string& message);

// Where and with what a database entry was measured.
struct Fingerprint {
  std::string gpu;  // device name, e.g. "NVIDIA H100 80GB HBM3"
  int sm_count = 0;
  std::string arch;     // "sm_90a"
  int driver = 0;       // cuDriverGetVersion, e.g. 13000
  std::string nvrtc;    // "13.0"
  std::string attnjit;  // ATTNJIT_VERSION
  nlohmann::json to_json() const;
  friend bool operator==(const Fingerprint&, const Fingerprint&) = default;
};
// This process's fingerprint on `dev` (needs the driver for its version).
Fingerprint fingerprint_of(const driver::DeviceInfo& dev);

// What must match for the runtime to use an entry: GPU name, SM count, attnjit version.
// Driver and NVRTC versions are recorded, not required (they rarely change the winner,
// and a driver update must not silently drop every tuned config).
struct Identity {
  std::string gpu;
  int sm_count = 0;
  std::string attnjit;
};
Identity identity_of(const driver::DeviceInfo& dev);
bool matches(const Fingerprint& f, const Identity& who);
std::string attnjit_version();

struct Timing {
  nlohmann::json candidate;
  std::string status;  // ok, mismatch, compile_failed, launch_failed, fault, timeout, crashed
  double us = -1;      // median, when status == ok
  std::string error;
  int device = -1;
};

struct Entry {
  std::string op, bucket;
  nlohmann::json shape;  // the shape that was swept (canonical)
  nlohmann::json best;   // fastest candidate that matched the reference
  double best_us = -1;
  nlohmann::json default_candidate;  // the heuristic's, the reference
  double default_us = -1;            // -1 when the default itself could not be timed
  int iters = 0;
  int64_t updated = 0;  // Unix time of the sweep
  std::vector<Timing> timings;
};

struct Environment {
  Fingerprint fingerprint;
  std::vector<Entry> entries;
};

struct Db {
  std::vector<Environment> environments;
  bool empty() const noexcept { return environments.empty(); }
};

nlohmann::json to_json(const Db& db);
// Throws Error(kCache) "tuning database PATH is corrupt: <what>" naming the first bad part.
Db from_json(const nlohmann::json& j, const std::string& path);

// A missing file is an empty database; an unreadable or corrupt one throws Error(kCache)
// naming the file.
Db read_db(const std::string& path);
// read_db, except that a corrupt file is reported through `warn` (naming it) and ignored.
Db load_db(const std::string& path, const Warn& warn = warn_stderr);

// Environments are matched by their whole fingerprint; an entry of `add` replaces `base`'s
// entry for the same (op, bucket) in that environment; every other entry is kept.
void merge_into(Db& base, const Db& add);

// Merges `add` into the file under an exclusive flock (see the file comment). A corrupt
// file found there is moved aside to PATH.corrupt-<unix time> (reported through `warn`),
// never silently overwritten. Throws Error(kCache) when the file cannot be written.
void save_merged(const std::string& path, const Db& add, const Warn& warn = warn_stderr);

// Takes the run-time field `name` (e.g. "num_splits") out of a tuned candidate as the
// runtime reads it from the database: missing = `fallback`, else an integer in lo..hi.
// Throws Error(kUnsupportedConfig) naming the field otherwise — the file comes from disk
// and may be hand-edited, and a JSON type error or a float cast out of range must not
// escape the ops' "unusable entry: use the heuristic" handling.
int take_runtime_int(nlohmann::json& candidate, const char* name, int fallback, int lo, int hi);

// The database path for a cache root chosen explicitly (--cache-dir; "" = the usual
// resolution): $ATTNJIT_TUNING_DB, else <root>/tuning.json; "" (no database) when
// ATTNJIT_TUNING_DB=off or no root can be resolved.
std::string db_path_for(const std::string& explicit_cache_dir);

// A loaded database answering lookups. The process has one (tuned_config); tests make
// their own with a fake identity and a warning sink.
class Selector {
 public:
  Selector(std::string path, Warn warn) : path_(std::move(path)), warn_(std::move(warn)) {}
  const std::string& path() const noexcept { return path_; }
  // True when the file is missing, corrupt or holds no environment (loads on first use).
  bool empty();
  // The best candidate of the newest entry for (op, bucket) among environments matching
  // `who`. When the database has environments but none matches `who`, warns once per
  // Selector, naming the file and what it was tuned for.
  std::optional<nlohmann::json> find(std::string_view op, const std::string& bucket,
                                     const Identity& who);

 private:
  void load_locked();
  std::mutex mutex_;
  std::string path_;
  Warn warn_;
  bool loaded_ = false;
  bool warned_mismatch_ = false;
  Db db_;
};

}  // namespace attnjit::tuning

namespace attnjit::tuning {
// Shape buckets round lengths up to a power of two: ceil(log2(v)) for v ≥ 1 (0 for v ≤ 1).
inline int ceil_log2(int64_t v) {
  int k = 0;
  while (k < 62 && (int64_t{1} << k) < v) ++k;
  return k;
}
}  // namespace attnjit::tuning
