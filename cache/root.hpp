#pragma once
// Where the disk cache lives and whether it may be trusted and written.
//
// Root, first found: --cache-dir, $ATTNJIT_CACHE_DIR, $XDG_CACHE_HOME/attnjit,
// ~/.cache/attnjit. Never the working directory: a relative path is only taken from an
// explicit choice (--cache-dir, ATTNJIT_CACHE_DIR) and made absolute at once.
//
// Trust: a cubin is code that runs on the GPU with the caller's rights, so the root must
// be owned by the current user (or by root, who could replace attnjit itself anyway) and
// must not be writable by group or others. Anything else is refused (Error kCache).
#include <cstdint>
#include <string>
#include <string_view>

namespace attnjit::cache {

inline constexpr uint64_t kDefaultMaxSize = uint64_t{10} << 30;  // 10 GiB

struct Settings {
  std::string root;         // absolute
  std::string root_source;  // "--cache-dir", "ATTNJIT_CACHE_DIR", "XDG_CACHE_HOME", "HOME"
  bool read_only = false;   // hits only; misses compile into memory
  std::string read_only_reason;
  uint64_t max_size = kDefaultMaxSize;  // ATTNJIT_CACHE_MAX_SIZE
  bool strict = false;                  // ATTNJIT_NO_COMPILE=1: a miss is an error
};

// Resolves the root (without touching the disk); {path, where it came from}.
std::pair<std::string, std::string> resolve_root(const std::string& explicit_dir);

// Throws Error(kCache) when `root` is not a directory, is owned by someone else, or is
// writable by group or others; the message says which and why.
void check_root_trust(const std::string& root, const std::string& source);

// Resolves, creates (mode 0700) if missing, checks trust, probes writability, reads the
// environment (ATTNJIT_CACHE_MAX_SIZE, ATTNJIT_NO_COMPILE, ATTNJIT_CACHE_READ_ONLY).
Settings open_settings(const std::string& explicit_dir);

// "500M", "10G", "1.5T", "4096", "64KiB" (binary multiples) → bytes. Throws
// Error(kCache) naming `what` and the accepted syntax.
uint64_t parse_size(std::string_view text, const std::string& what);
std::string format_size(uint64_t bytes);  // "1.5 GiB"

// "1", "true", "yes", "on" (any case) → true.
bool env_flag(const char* name);

}  // namespace attnjit::cache
