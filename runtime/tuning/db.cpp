// The tuning database: JSON form, merge, flock-protected atomic saves, lookup.
#include "tuning/db.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "attnjit/error.hpp"
#include "attnjit/types.hpp"
#include "cache/root.hpp"
#include "jit/compiler.hpp"

namespace attnjit::tuning {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

[[noreturn]] void corrupt(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::kCache, fmt::format("tuning database {} is corrupt: {}", path, what));
}

// Field readers for from_json: each names the path inside the file that is wrong.
struct Reader {
  const std::string& path;
  const json& field(const json& obj, const char* name, const std::string& at) const {
    auto it = obj.find(name);
    if (it == obj.end()) corrupt(path, fmt::format("{}: missing field '{}'", at, name));
    return *it;
  }
  std::string str(const json& obj, const char* name, const std::string& at) const {
    const json& v = field(obj, name, at);
    if (!v.is_string()) corrupt(path, fmt::format("{}.{}: must be a string, got {}", at, name, v.dump()));
    return v.get<std::string>();
  }
  int64_t integer(const json& obj, const char* name, const std::string& at) const {
    const json& v = field(obj, name, at);
    if (!v.is_number_integer())
      corrupt(path, fmt::format("{}.{}: must be an integer, got {}", at, name, v.dump()));
    return v.get<int64_t>();
  }
  double number(const json& obj, const char* name, const std::string& at) const {
    const json& v = field(obj, name, at);
    if (!v.is_number()) corrupt(path, fmt::format("{}.{}: must be a number, got {}", at, name, v.dump()));
    return v.get<double>();
  }
  const json& object(const json& obj, const char* name, const std::string& at) const {
    const json& v = field(obj, name, at);
    if (!v.is_object()) corrupt(path, fmt::format("{}.{}: must be an object, got {}", at, name, v.dump()));
    return v;
  }
  const json& array(const json& obj, const char* name, const std::string& at) const {
    const json& v = field(obj, name, at);
    if (!v.is_array()) corrupt(path, fmt::format("{}.{}: must be a list", at, name));
    return v;
  }
};

json timing_json(const Timing& t) {
  json j = {{"candidate", t.candidate}, {"status", t.status}};
  if (t.status == "ok") j["us"] = t.us;
  if (!t.error.empty()) j["error"] = t.error;
  if (t.device >= 0) j["device"] = t.device;
  return j;
}

json entry_json(const Entry& e) {
  json j;
  j["op"] = e.op;
  j["bucket"] = e.bucket;
  j["shape"] = e.shape;
  j["best"] = e.best;
  j["best_us"] = e.best_us;
  j["default"] = e.default_candidate;
  j["default_us"] = e.default_us;
  j["speedup"] = e.default_us > 0 && e.best_us > 0 ? e.default_us / e.best_us : 0.0;
  j["iters"] = e.iters;
  j["updated"] = e.updated;
  j["timings"] = json::array();
  for (const Timing& t : e.timings) j["timings"].push_back(timing_json(t));
  return j;
}

std::string read_file(const std::string& path, bool& missing) {
  missing = false;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      missing = true;
      return {};
    }
    throw Error(ErrorKind::kCache, fmt::format("cannot read tuning database {}: {}", path,
                                               std::strerror(errno)));
  }
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_all(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw Error(ErrorKind::kCache, fmt::format("cannot write {}: {}", path, std::strerror(errno)));
    done += static_cast<size_t>(n);
  }
}

// flock on PATH.lock for the scope (released by close, also when the process dies).
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ < 0)
      throw Error(ErrorKind::kCache, fmt::format("cannot open the tuning database lock {}: {}", path,
                                                 std::strerror(errno)));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd_);
      throw Error(ErrorKind::kCache, fmt::format("cannot lock {}: {}", path, std::strerror(e)));
    }
  }
  ~FileLock() { ::close(fd_); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

void warn_stderr(const std::string& message) {
  std::fprintf(stderr, "attnjit: warning: %s\n", message.c_str());
}

std::string attnjit_version() { return ATTNJIT_VERSION; }

json Fingerprint::to_json() const {
  return {{"gpu", gpu}, {"sm_count", sm_count}, {"arch", arch},
          {"driver", driver}, {"nvrtc", nvrtc}, {"attnjit", attnjit}};
}

Fingerprint fingerprint_of(const driver::DeviceInfo& dev) {
  Fingerprint f;
  f.gpu = dev.name;
  f.sm_count = dev.sm_count;
  f.arch = Arch{dev.cc_major, dev.cc_minor, true}.name();
  f.driver = driver::api().driver_version;
  const auto [major, minor] = jit::nvrtc_version();
  f.nvrtc = fmt::format("{}.{}", major, minor);
  f.attnjit = attnjit_version();
  return f;
}

Identity identity_of(const driver::DeviceInfo& dev) {
  return Identity{dev.name, dev.sm_count, attnjit_version()};
}

bool matches(const Fingerprint& f, const Identity& who) {
  return f.gpu == who.gpu && f.sm_count == who.sm_count && f.attnjit == who.attnjit;
}

json to_json(const Db& db) {
  json j;
  j["attnjit_tuning_db"] = kDbVersion;
  j["environments"] = json::array();
  for (const Environment& env : db.environments) {
    json e;
    e["fingerprint"] = env.fingerprint.to_json();
    e["entries"] = json::array();
    for (const Entry& entry : env.entries) e["entries"].push_back(entry_json(entry));
    j["environments"].push_back(e);
  }
  return j;
}

Db from_json(const json& j, const std::string& path) {
  const Reader r{path};
  if (!j.is_object()) corrupt(path, "the top level must be a JSON object");
  if (r.integer(j, "attnjit_tuning_db", "top level") != kDbVersion)
    corrupt(path, fmt::format("version {} is not {} (written by another attnjit?)",
                              j["attnjit_tuning_db"].dump(), kDbVersion));
  Db db;
  const json& envs = r.array(j, "environments", "top level");
  for (size_t i = 0; i < envs.size(); ++i) {
    const std::string at = fmt::format("environments[{}]", i);
    if (!envs[i].is_object()) corrupt(path, at + ": must be an object");
    Environment env;
    const json& f = r.object(envs[i], "fingerprint", at);
    const std::string fat = at + ".fingerprint";
    env.fingerprint.gpu = r.str(f, "gpu", fat);
    env.fingerprint.sm_count = static_cast<int>(r.integer(f, "sm_count", fat));
    env.fingerprint.arch = r.str(f, "arch", fat);
    env.fingerprint.driver = static_cast<int>(r.integer(f, "driver", fat));
    env.fingerprint.nvrtc = r.str(f, "nvrtc", fat);
    env.fingerprint.attnjit = r.str(f, "attnjit", fat);
    const json& entries = r.array(envs[i], "entries", at);
    for (size_t k = 0; k < entries.size(); ++k) {
      const std::string eat = fmt::format("{}.entries[{}]", at, k);
      const json& ej = entries[k];
      if (!ej.is_object()) corrupt(path, eat + ": must be an object");
      Entry e;
      e.op = r.str(ej, "op", eat);
      e.bucket = r.str(ej, "bucket", eat);
      e.shape = r.object(ej, "shape", eat);
      e.best = r.object(ej, "best", eat);
      e.best_us = r.number(ej, "best_us", eat);
      e.default_candidate = r.object(ej, "default", eat);
      e.default_us = r.number(ej, "default_us", eat);
      e.iters = static_cast<int>(r.integer(ej, "iters", eat));
      e.updated = r.integer(ej, "updated", eat);
      const json& ts = r.array(ej, "timings", eat);
      for (size_t t = 0; t < ts.size(); ++t) {
        const std::string tat = fmt::format("{}.timings[{}]", eat, t);
        if (!ts[t].is_object()) corrupt(path, tat + ": must be an object");
        Timing tm;
        tm.candidate = r.object(ts[t], "candidate", tat);
        tm.status = r.str(ts[t], "status", tat);
        if (tm.status == "ok") tm.us = r.number(ts[t], "us", tat);
        if (ts[t].contains("error")) tm.error = r.str(ts[t], "error", tat);
        if (ts[t].contains("device")) tm.device = static_cast<int>(r.integer(ts[t], "device", tat));
        e.timings.push_back(std::move(tm));
      }
      env.entries.push_back(std::move(e));
    }
    db.environments.push_back(std::move(env));
  }
  return db;
}

Db read_db(const std::string& path) {
  bool missing = false;
  const std::string text = read_file(path, missing);
  if (missing) return {};
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    corrupt(path, fmt::format("not JSON ({})", e.what()));
  }
  return from_json(j, path);
}

// An Error's message without its "attnjit cache error: " prefix, for warnings.
static std::string without_kind(const Error& e) {
  const std::string what = e.what();
  const std::string prefix = fmt::format("attnjit {}: ", to_string(e.kind()));
  return what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what;
}

Db load_db(const std::string& path, const Warn& warn) {
  try {
    return read_db(path);
  } catch (const Error& e) {
    warn(fmt::format("{}; ignoring it (the built-in heuristics are used)", without_kind(e)));
    return {};
  }
}

void merge_into(Db& base, const Db& add) {
  for (const Environment& env : add.environments) {
    Environment* target = nullptr;
    for (Environment& b : base.environments)
      if (b.fingerprint == env.fingerprint) target = &b;
    if (!target) {
      base.environments.push_back(env);
      continue;
    }
    for (const Entry& e : env.entries) {
      bool replaced = false;
      for (Entry& old : target->entries)
        if (old.op == e.op && old.bucket == e.bucket) {
          old = e;
          replaced = true;
        }
      if (!replaced) target->entries.push_back(e);
    }
  }
}

void save_merged(const std::string& path, const Db& add, const Warn& warn) {
  const fs::path file = fs::absolute(path);
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  const FileLock lock(file.string() + ".lock");
  Db base;
  try {
    base = read_db(file.string());
  } catch (const Error& e) {
    const std::string aside = fmt::format("{}.corrupt-{}", file.string(), std::time(nullptr));
    fs::rename(file, aside, ec);
    warn(fmt::format("{}; moved it to {} and started a new one", without_kind(e), aside));
  }
  merge_into(base, add);
  const std::string text = to_json(base).dump(1) + "\n";

  static std::atomic<unsigned> counter{0};
  const std::string tmp =
      fmt::format("{}.tmp.{}.{}", file.string(), ::getpid(), counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    throw Error(ErrorKind::kCache, fmt::format("cannot create {}: {}", tmp, std::strerror(errno)));
  try {
    write_all(fd, text, tmp);
    if (::fsync(fd) != 0)
      throw Error(ErrorKind::kCache, fmt::format("fsync {}: {}", tmp, std::strerror(errno)));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw Error(ErrorKind::kCache, fmt::format("cannot rename {} to {}: {}", tmp, file.string(),
                                               std::strerror(e)));
  }
  // The rename is durable only once the directory is.
  if (const int dfd = ::open(file.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

int take_runtime_int(json& candidate, const char* name, int fallback, int lo, int hi) {
  if (!candidate.is_object())
    throw Error(ErrorKind::kUnsupportedConfig,
                fmt::format("tuned candidate must be a JSON object, got {}", candidate.dump()));
  auto it = candidate.find(name);
  if (it == candidate.end()) return fallback;
  // Integers only: get<int>() of a string throws json::type_error, of 1e300 is undefined.
  const bool ok = it->is_number_integer() &&
                  !(it->is_number_unsigned() && it->get<uint64_t>() > uint64_t{INT64_MAX});
  const int64_t v = ok ? it->get<int64_t>() : 0;
  if (!ok || v < lo || v > hi)
    throw Error(ErrorKind::kUnsupportedConfig,
                fmt::format("tuned candidate field '{}' must be an integer in {}..{}, got {}", name, lo,
                            hi, it->dump()));
  candidate.erase(it);
  return static_cast<int>(v);
}

std::string db_path_for(const std::string& explicit_cache_dir) {
  if (const char* p = std::getenv("ATTNJIT_TUNING_DB"); p && *p) {
    if (std::string_view(p) == "off") return {};  // tuning workers time the heuristic itself
    return fs::absolute(p).string();
  }
  try {
    return (fs::path(cache::resolve_root(explicit_cache_dir).first) / "tuning.json").string();
  } catch (const Error&) {
    return {};  // no cache root (no HOME): no default database either
  }
}

bool Selector::empty() {
  std::lock_guard lock(mutex_);
  load_locked();
  return db_.empty();
}

void Selector::load_locked() {
  if (loaded_) return;
  loaded_ = true;
  if (!path_.empty()) db_ = load_db(path_, warn_);
}

std::optional<json> Selector::find(std::string_view op, const std::string& bucket,
                                   const Identity& who) {
  std::lock_guard lock(mutex_);
  load_locked();
  if (db_.empty()) return std::nullopt;
  const Entry* best = nullptr;
  bool any_env = false;
  for (const Environment& env : db_.environments) {
    if (!matches(env.fingerprint, who)) continue;
    any_env = true;
    for (const Entry& e : env.entries)
      if (e.op == op && e.bucket == bucket && (!best || e.updated > best->updated)) best = &e;
  }
  if (!any_env && !warned_mismatch_) {
    warned_mismatch_ = true;
    std::string tuned_for;
    for (const Environment& env : db_.environments)
      tuned_for += fmt::format("{}{} ({} SMs, attnjit {})", tuned_for.empty() ? "" : "; ",
                               env.fingerprint.gpu, env.fingerprint.sm_count, env.fingerprint.attnjit);
    warn_(fmt::format("tuning database {} was tuned for {}, not for this {} ({} SMs, attnjit {}); "
                      "using the built-in heuristics",
                      path_, tuned_for, who.gpu, who.sm_count, who.attnjit));
  }
  if (!best) return std::nullopt;
  return best->best;
}

}  // namespace attnjit::tuning
