#include "cache/root.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "attnjit/error.hpp"

namespace attnjit::cache {
namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string user_name(uid_t uid) {
  if (const passwd* pw = ::getpwuid(uid)) return pw->pw_name;
  return "?";
}

// Creates `root` (and its parents) if missing; the root itself gets 0700 whatever the umask.
// Returns an empty string on success, else why it could not be created.
std::string create_root(const fs::path& root) {
  struct stat st {};
  if (::stat(root.c_str(), &st) == 0) return "";
  std::error_code ec;
  fs::create_directories(root.parent_path(), ec);
  if (::mkdir(root.c_str(), 0700) != 0 && errno != EEXIST)
    return fmt::format("cannot create it: {}", std::strerror(errno));
  ::chmod(root.c_str(), 0700);  // mkdir's mode is masked by the umask
  return "";
}

// Empty when a file can be created in `root`; else why not. Root ignores permission
// bits, so this tries for real instead of asking access(W_OK).
std::string probe_writable(const fs::path& root) {
  static std::atomic<int> counter{0};
  const fs::path probe =
      root / fmt::format(".probe-{}-{}", static_cast<long>(::getpid()), counter++);
  const int fd = ::open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return fmt::format("cannot create a file in it: {}", std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

}  // namespace

bool env_flag(const char* name) {
  std::string v = env(name);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  return v == "1" || v == "true" || v == "yes" || v == "on";
}

std::pair<std::string, std::string> resolve_root(const std::string& explicit_dir) {
  auto absolute = [](const std::string& p) { return fs::absolute(p).lexically_normal().string(); };
  if (!explicit_dir.empty()) return {absolute(explicit_dir), "--cache-dir"};
  if (std::string v = env("ATTNJIT_CACHE_DIR"); !v.empty())
    return {absolute(v), "ATTNJIT_CACHE_DIR"};
  // The XDG spec says relative values are to be ignored; so do we (never the cwd).
  if (std::string v = env("XDG_CACHE_HOME"); !v.empty() && v[0] == '/')
    return {(fs::path(v) / "attnjit").lexically_normal().string(), "XDG_CACHE_HOME"};
  std::string home = env("HOME");
  if (home.empty() || home[0] != '/')
    if (const passwd* pw = ::getpwuid(::geteuid())) home = pw->pw_dir ? pw->pw_dir : "";
  if (home.empty() || home[0] != '/')
    throw Error(ErrorKind::kCache,
                "no cache directory: set --cache-dir or ATTNJIT_CACHE_DIR "
                "(HOME is unset and the user has no home directory)");
  return {(fs::path(home) / ".cache" / "attnjit").lexically_normal().string(), "HOME"};
}

void check_root_trust(const std::string& root, const std::string& source) {
  struct stat st {};
  if (::stat(root.c_str(), &st) != 0)
    throw Error(ErrorKind::kCache,
                fmt::format("cache root {} (from {}): {}", root, source, std::strerror(errno)));
  if (!S_ISDIR(st.st_mode))
    throw Error(ErrorKind::kCache,
                fmt::format("cache root {} (from {}) is not a directory", root, source));
  const uid_t me = ::geteuid();
  if (st.st_uid != me && st.st_uid != 0)
    throw Error(ErrorKind::kCache,
                fmt::format("cache root {} (from {}) is owned by {} (uid {}), not by the current "
                            "user {} (uid {}); a cached cubin runs on the GPU as you, so attnjit "
                            "only trusts a cache directory you (or root) own. Point --cache-dir or "
                            "ATTNJIT_CACHE_DIR at your own directory",
                            root, source, user_name(st.st_uid), st.st_uid, user_name(me), me));
  const bool group = st.st_mode & S_IWGRP, others = st.st_mode & S_IWOTH;
  if (group || others)
    throw Error(ErrorKind::kCache,
                fmt::format("cache root {} (from {}) is writable by {} (mode {:04o}); anyone "
                            "there could plant a cubin that runs on your GPU. Fix with: chmod "
                            "go-w {}",
                            root, source,
                            group && others ? "group and others"
                            : group         ? "group"
                                            : "others",
                            st.st_mode & 07777, root));
}

Settings open_settings(const std::string& explicit_dir) {
  Settings s;
  std::tie(s.root, s.root_source) = resolve_root(explicit_dir);
  if (std::string max = env("ATTNJIT_CACHE_MAX_SIZE"); !max.empty())
    s.max_size = parse_size(max, "ATTNJIT_CACHE_MAX_SIZE");
  s.strict = env_flag("ATTNJIT_NO_COMPILE");
  if (std::string why = create_root(s.root); !why.empty()) {
    // Nothing to trust and nothing to hit: behave as a read-only, empty cache.
    s.read_only = true;
    s.read_only_reason = why;
    return s;
  }
  check_root_trust(s.root, s.root_source);
  if (env_flag("ATTNJIT_CACHE_READ_ONLY")) {
    s.read_only = true;
    s.read_only_reason = "ATTNJIT_CACHE_READ_ONLY is set";
  } else if (std::string why = probe_writable(s.root); !why.empty()) {
    s.read_only = true;
    s.read_only_reason = why;
  }
  return s;
}

uint64_t parse_size(std::string_view text, const std::string& what) {
  auto bad = [&]() -> uint64_t {
    throw Error(ErrorKind::kCache,
                fmt::format("{} = '{}' is not a size: use bytes or a number with K, M, G or T "
                            "(binary multiples), e.g. 500M or 10G",
                            what, text));
  };
  std::string t(text);
  t.erase(std::remove_if(t.begin(), t.end(), [](unsigned char c) { return std::isspace(c); }),
          t.end());
  size_t digits = 0;
  while (digits < t.size() &&
         (std::isdigit(static_cast<unsigned char>(t[digits])) || t[digits] == '.'))
    ++digits;
  if (digits == 0) return bad();
  std::string unit = t.substr(digits);
  std::transform(unit.begin(), unit.end(), unit.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  if (unit.size() > 1 && (unit.ends_with("IB") || unit.ends_with("B")))
    unit = unit.substr(0, unit.size() - (unit.ends_with("IB") ? 2 : 1));
  int shift = 0;
  if (unit.empty() || unit == "B")
    shift = 0;
  else if (unit == "K")
    shift = 10;
  else if (unit == "M")
    shift = 20;
  else if (unit == "G")
    shift = 30;
  else if (unit == "T")
    shift = 40;
  else
    return bad();
  double number = 0;
  try {
    size_t used = 0;
    number = std::stod(t.substr(0, digits), &used);
    if (used != digits) return bad();
  } catch (const std::exception&) {
    return bad();
  }
  const double bytes = std::ldexp(number, shift);
  if (!(bytes >= 0) || bytes > 1.8e19) return bad();
  return static_cast<uint64_t>(bytes);
}

std::string format_size(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, kUnits[u]);
}

}  // namespace attnjit::cache
