#include "cache/cache.hpp"

#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "attnjit/error.hpp"
#include "cache/entry.hpp"

namespace attnjit::cache {
namespace fs = std::filesystem;

namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// An advisory per-key lock (flock on <root>/tmp/<key>.lock) so that processes missing the
// same key compile it once. flock dies with its process, so a killed holder never blocks
// anyone; correctness does not depend on it (publishing is atomic either way).
class KeyLock {
 public:
  KeyLock(const std::string& root, const std::string& key) {
    const fs::path tmp = fs::path(root) / "tmp";
    ::mkdir(tmp.c_str(), 0700);
    path_ = (tmp / (key + ".lock")).string();
    fd_ = ::open(path_.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~KeyLock() {
    if (fd_ < 0) return;
    // Unlinked while held: a waiter on this inode re-checks the disk and hits (or, after a
    // failed compile, tries itself). At worst two processes compile one key at once.
    ::unlink(path_.c_str());
    ::close(fd_);
  }

 private:
  std::string path_;
  int fd_ = -1;
};

void warn_read_only_once(const Settings& s) {
  static std::once_flag once;
  std::call_once(once, [&] {
    fmt::print(stderr,
               "attnjit: warning: the kernel cache {} is read-only ({}); kernels missing from it "
               "are compiled into memory and not stored\n",
               s.root, s.read_only_reason);
  });
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

Cache Cache::open(const std::string& explicit_dir) { return Cache(open_settings(explicit_dir)); }

std::string precompile_command(const std::string& op, const std::string& config_json,
                               const std::string& arch, const std::string& root) {
  return fmt::format("attnjit precompile --op {} --config {} --arch {} --cache-dir {}", op,
                     shell_quote(config_json), arch, shell_quote(root));
}

bool Cache::try_load(const std::string& dir, const std::string& key, const std::string& arch,
                     Compiled& out) {
  ReadResult r = read_entry(dir, key, arch);
  if (r.status == ReadResult::Status::kOk) {
    if (!settings_.read_only) stamp_used(dir);
    out.kernel = std::move(r.kernel);
    out.from = Compiled::From::kDisk;
    return true;
  }
  if (r.status == ReadResult::Status::kCorrupt) {
    const std::string moved =
        settings_.read_only ? "" : quarantine_entry(settings_.root, dir, r.reason);
    fmt::print(stderr, "attnjit: warning: cache entry {} is bad ({}); {}\n", dir, r.reason,
               moved.empty() ? "ignoring it" : "moved to " + moved + ", rebuilding");
  }
  return false;
}

Compiled Cache::ensure_compiled(const jit::KernelRecipe& recipe) {
  const auto start = std::chrono::steady_clock::now();
  Compiled out;
  const KeyInputs inputs = key_inputs(recipe);
  out.key = cache_key(inputs);
  const std::string dir = entry_dir(settings_.root, inputs.arch, out.key);
  auto done = [&]() -> Compiled {
    out.ms = ms_since(start);
    return std::move(out);
  };
  if (try_load(dir, out.key, inputs.arch, out)) return done();

  if (settings_.strict)
    throw Error(
        ErrorKind::kCache,
        fmt::format(
            "ATTNJIT_NO_COMPILE is set and op '{}' with config {} for {} is not in "
            "the kernel cache {} (key {}). Build it ahead with:\n  {}",
            recipe.source.op, inputs.config_json, inputs.arch, settings_.root, out.key,
            precompile_command(recipe.source.op, inputs.config_json, inputs.arch, settings_.root)));
  if (settings_.read_only) {
    warn_read_only_once(settings_);
    out.kernel = jit::compile_recipe(recipe);
    out.from = Compiled::From::kCompiledNotStored;
    return done();
  }

  KeyLock lock(settings_.root, out.key);
  if (try_load(dir, out.key, inputs.arch, out)) return done();  // built while we waited
  out.kernel = jit::compile_recipe(recipe);
  out.from = Compiled::From::kCompiled;
  // A lost race leaves the other publisher's entry; if that one is bad, replace it.
  try {
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (publish_entry(settings_.root, out.key, inputs, out.kernel, recipe.dynamic_smem_bytes)) {
        after_publish(out.kernel.cubin.size());
        break;
      }
      ReadResult theirs = read_entry(dir, out.key, inputs.arch);
      if (theirs.status == ReadResult::Status::kOk) break;
      if (theirs.status == ReadResult::Status::kCorrupt)
        quarantine_entry(settings_.root, dir, theirs.reason);
    }
  } catch (const Error& e) {
    // The kernel is good; only storing it failed (disk full, root gone). The caller decides
    // whether that matters: the runtime runs on, precompile reports a failure.
    out.from = Compiled::From::kCompiledNotStored;
    out.store_error = e.what();
    fmt::print(stderr, "attnjit: warning: compiled op '{}' but could not store it in {}: {}\n",
               recipe.source.op, settings_.root, e.what());
  }
  return done();
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

jit::CompiledKernel runtime_compile(const jit::KernelRecipe& recipe) {
  const char* mode = std::getenv("ATTNJIT_CACHE");
  const std::string m = mode ? mode : "";
  if (m == "off" || m == "0" || m == "false" || m == "no") {
    if (env_flag("ATTNJIT_NO_COMPILE"))
      throw Error(ErrorKind::kCache,
                  fmt::format("ATTNJIT_NO_COMPILE is set but the kernel cache is off "
                              "(ATTNJIT_CACHE={}), so op '{}' with config {} cannot be found",
                              m, recipe.source.op, recipe.source.config_json));
    return jit::compile_recipe(recipe);
  }
  static std::mutex mutex;
  static std::unique_ptr<Cache> cache;  // opened on the first miss; a failure retries
  Cache* c = nullptr;
  {
    std::lock_guard lock(mutex);
    if (!cache) cache = std::make_unique<Cache>(Cache::open());
    c = cache.get();
  }
  return c->ensure_compiled(recipe).kernel;
}

}  // namespace attnjit::cache
