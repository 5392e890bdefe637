#include "cache/entry.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>

#include "attnjit/error.hpp"
#include "cache/hash.hpp"

namespace attnjit::cache {
namespace fs = std::filesystem;

namespace {

[[noreturn]] void io_fail(const std::string& what, const std::string& path) {
  throw Error(ErrorKind::kCache, fmt::format("{} {}: {}", what, path, std::strerror(errno)));
}

// O_NOFOLLOW: an entry's file that is a symlink (ELOOP) is not read, wherever it points.
// Relative to `dir_fd` when given (the entry folder, opened without following a link), so
// the folder cannot be swapped for a symlink between its check and the read.
std::optional<std::string> read_all(const fs::path& path, int dir_fd = AT_FDCWD) {
  const int fd = ::openat(dir_fd, path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

void fsync_path(const fs::path& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) io_fail("cannot open", path.string());
  const int r = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  errno = saved;
  if (r != 0) io_fail("fsync failed for", path.string());
}

void write_file(const fs::path& path, std::string_view bytes) {
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) io_fail("cannot create", path.string());
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int saved = errno;
      ::close(fd);
      errno = saved;
      io_fail("cannot write", path.string());
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) io_fail("cannot flush", path.string());
}

void make_dir(const fs::path& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST)
    io_fail("cannot create directory", path.string());
}

// Test hook: ATTNJIT_CACHE_TEST_KILL_AT=cubin|meta|marker|rename makes the process
// SIGKILL itself at that step of a publish, as a crash or `kill -9` would.
void maybe_die(const char* step) {
  static const std::string at = [] {
    const char* v = std::getenv("ATTNJIT_CACHE_TEST_KILL_AT");
    return std::string(v ? v : "");
  }();
  if (!at.empty() && at == step) ::kill(::getpid(), SIGKILL);
}

// The marker pins the exact bytes of both other files: any change to either is caught
// before meta.json is even parsed.
std::string marker_text(const std::string& key, const std::string& cubin_sha,
                        const std::string& meta_sha) {
  return fmt::format("attnjit cache entry v{}\nkey {}\ncubin-sha256 {}\nmeta-sha256 {}\n",
                     kMetaFormat, key, cubin_sha, meta_sha);
}

std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  return fmt::format("{}-{}-{}", static_cast<long>(::getpid()), counter++,
                     static_cast<long long>(std::time(nullptr)));
}

}  // namespace

std::string not_a_real_dir(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return fmt::format("{}: {}", path, std::strerror(errno));
  if (S_ISLNK(st.st_mode)) return fmt::format("{} is a symlink", path);
  if (!S_ISDIR(st.st_mode)) return fmt::format("{} is not a directory", path);
  return "";
}

std::string entry_dir(const std::string& root, const std::string& arch, const std::string& key) {
  return (fs::path(root) / arch / key.substr(0, 2) / key).string();
}

bool is_cache_meta_field(std::string_view name) {
  for (const char* f :
       {"format", "key", "arch", "cubin_bytes", "cubin_sha256", "created", "record"})
    if (name == f) return true;
  return false;
}

ReadResult read_entry(const std::string& dir, const std::string& key, const std::string& arch,
                      const EntryCheck& check) {
  ReadResult r;
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return r;  // kMissing
  r.status = ReadResult::Status::kCorrupt;
  auto corrupt = [&](std::string why) {
    r.reason = std::move(why);
    return r;
  };
  const fs::path d(dir);
  // lstat, not stat: an entry swapped for a symlink (to a copy of a good entry elsewhere)
  // is refused, never followed; the same for its arch and prefix folders.
  if (S_ISLNK(st.st_mode)) return corrupt("the entry is a symlink, not a directory in the root");
  if (!S_ISDIR(st.st_mode)) return corrupt("not a directory");
  for (const fs::path& up : {d.parent_path(), d.parent_path().parent_path()})
    if (std::string why = not_a_real_dir(up.string()); !why.empty()) {
      r.movable = false;
      return corrupt(why + " (refused: the entry would lie outside the root)");
    }
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir_fd < 0) {
    if (errno == ENOENT) {  // pruned or quarantined by another process just now
      r.status = ReadResult::Status::kMissing;
      return r;
    }
    return corrupt(fmt::format("cannot open the entry: {}", std::strerror(errno)));
  }
  auto missing = [&](const char* file, const char* what) {
    struct stat fst {};
    return ::fstatat(dir_fd, file, &fst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(fst.st_mode)
               ? fmt::format("{} is a symlink (refused)", file)
               : std::string(what);
  };
  const auto marker = read_all(kMarkerFile, dir_fd);
  const auto meta_text = read_all(kMetaFile, dir_fd);
  auto cubin = read_all(kCubinFile, dir_fd);
  const std::string why_not =
      !marker      ? missing(kMarkerFile, "no COMMITTED marker (an unfinished publish)")
      : !meta_text ? missing(kMetaFile, "no meta.json")
      : !cubin     ? missing(kCubinFile, "no kernel.cubin")
                   : "";
  ::close(dir_fd);
  if (!why_not.empty()) return corrupt(why_not);
  r.bytes = marker->size() + meta_text->size() + cubin->size();

  const std::string cubin_sha = sha256_hex(*cubin);
  if (*marker != marker_text(key, cubin_sha, sha256_hex(*meta_text)))
    return corrupt("the COMMITTED marker does not match this key, cubin and meta.json");
  try {
    // Ordered: the key record is hashed in the order its fields were written.
    nlohmann::ordered_json meta = nlohmann::ordered_json::parse(*meta_text);
    // Integers by type first: nlohmann converts a float such as 1e30 to int unchecked
    // (undefined behaviour, found by fuzz_entry_meta).
    if (!meta.at("format").is_number_integer() || !meta.at("cubin_bytes").is_number_unsigned())
      return corrupt("meta.json's format or cubin_bytes is not an integer");
    if (meta.at("format").get<int64_t>() != kMetaFormat) return corrupt("meta.json has another format");
    if (meta.at("key").get<std::string>() != key) return corrupt("meta.json names another key");
    if (meta.at("arch").get<std::string>() != arch) return corrupt("meta.json names another arch");
    KeyRecord record = key_record_from_json(meta.at("record"));
    if (cache_key(record) != key) return corrupt("meta.json's key record does not hash to the key");
    const std::string* record_arch = record.text("arch");
    if (!record_arch || *record_arch != arch) return corrupt("the key record names another arch");
    if (meta.at("cubin_bytes").get<uint64_t>() != cubin->size())
      return corrupt(fmt::format("kernel.cubin has {} bytes, meta.json says {}", cubin->size(),
                                 meta.at("cubin_bytes").get<uint64_t>()));
    if (meta.at("cubin_sha256").get<std::string>() != cubin_sha)
      return corrupt("kernel.cubin's SHA-256 differs from meta.json's");
    r.entry = Entry{key, arch, dir, std::move(*cubin), std::move(meta), std::move(record)};
  } catch (const nlohmann::json::exception& e) {
    return corrupt(fmt::format("meta.json is malformed: {}", e.what()));
  } catch (const Error& e) {
    return corrupt(fmt::format("meta.json is malformed: {}", e.what()));
  }
  if (check) {
    std::string why = check(r.entry);
    if (!why.empty()) {
      r.entry = Entry{};
      return corrupt(std::move(why));
    }
  }
  r.status = ReadResult::Status::kOk;
  return r;
}

bool publish_entry(const std::string& root, const std::string& key, const KeyRecord& record,
                   std::string_view cubin, const nlohmann::ordered_json& description) {
  const std::string* arch = record.text("arch");
  if (!arch || arch->empty())
    throw Error(ErrorKind::kCache, "cannot publish a key record without an 'arch' field");
  const std::string cubin_sha = sha256_hex(cubin);
  nlohmann::ordered_json meta;
  meta["format"] = kMetaFormat;
  meta["key"] = key;
  meta["arch"] = *arch;
  for (const auto& [name, value] : description.items()) {
    if (is_cache_meta_field(name))
      throw Error(ErrorKind::kCache,
                  fmt::format("meta.json field '{}' is the cache's own, not the publisher's", name));
    meta[name] = value;
  }
  meta["cubin_bytes"] = cubin.size();
  meta["cubin_sha256"] = cubin_sha;
  meta["created"] = static_cast<long long>(std::time(nullptr));
  meta["record"] = to_json(record);

  // Never write through a symlink planted in the root (it would put files outside it).
  auto real_dir = [](const fs::path& p) {
    if (std::string why = not_a_real_dir(p.string()); !why.empty())
      throw Error(ErrorKind::kCache,
                  fmt::format("cannot publish: {} (attnjit writes only to real directories "
                              "inside its cache root)",
                              why));
  };
  const fs::path tmp_root = fs::path(root) / "tmp";
  make_dir(tmp_root, 0700);
  real_dir(tmp_root);
  const fs::path tmp = tmp_root / fmt::format("{}-{}", key.substr(0, 16), unique_suffix());
  make_dir(tmp, 0755);
  try {
    write_file(tmp / kCubinFile, cubin);
    maybe_die("cubin");
    const std::string meta_text = meta.dump(2) + "\n";
    write_file(tmp / kMetaFile, meta_text);
    maybe_die("marker");
    // Last: the entry is whole.
    write_file(tmp / kMarkerFile, marker_text(key, cubin_sha, sha256_hex(meta_text)));
    fsync_path(tmp, O_RDONLY | O_DIRECTORY);
    maybe_die("rename");

    const fs::path arch_dir = fs::path(root) / *arch;
    const fs::path prefix_dir = arch_dir / key.substr(0, 2);
    make_dir(arch_dir, 0755);
    real_dir(arch_dir);
    make_dir(prefix_dir, 0755);
    real_dir(prefix_dir);
    const fs::path final_dir = prefix_dir / key;
    if (::rename(tmp.c_str(), final_dir.c_str()) != 0) {
      if (errno != EEXIST && errno != ENOTEMPTY) io_fail("cannot publish", final_dir.string());
      std::error_code ec;
      fs::remove_all(tmp, ec);  // another process published this key first: keep theirs
      return false;
    }
    fsync_path(prefix_dir, O_RDONLY | O_DIRECTORY);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  return true;
}

std::string quarantine_entry(const std::string& root, const std::string& dir,
                             const std::string& reason) {
  const fs::path q = fs::path(root) / "quarantine";
  if (::mkdir(q.c_str(), 0700) != 0 && errno != EEXIST) return "";
  if (!not_a_real_dir(q.string()).empty()) return "";  // never move entries out of the root
  const fs::path target =
      q / fmt::format("{}-{}", fs::path(dir).filename().string(), unique_suffix());
  struct stat st {};
  const bool is_link = ::lstat(dir.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
  if (::rename(dir.c_str(), target.c_str()) != 0) return "";
  if (is_link) return target.string();  // REASON would land in the link's target, outside
  const int fd = ::open((target / "REASON").c_str(),
                        O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd >= 0) {
    const std::string text = reason + "\n";
    [[maybe_unused]] ssize_t n = ::write(fd, text.data(), text.size());
    ::close(fd);
  }
  return target.string();
}

void stamp_used(const std::string& dir) { ::utimensat(AT_FDCWD, dir.c_str(), nullptr, 0); }

}  // namespace attnjit::cache
