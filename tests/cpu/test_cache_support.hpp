#pragma once
// Helpers shared by the disk cache and precompile tests: scratch cache roots, scoped
// environment variables, a cheap real recipe, and running the attnjit CLI.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "jit/kernel_table.hpp"
#include "ops/registry.hpp"

namespace attnjit::test {

namespace fs = std::filesystem;

// A fresh directory (mode 0700) removed at scope exit; `root()` is a not-yet-existing
// cache root inside it, so the cache creates it.
struct ScratchDir {
  fs::path path;
  ScratchDir() {
    std::string templ = (fs::temp_directory_path() / "attnjit-cache-test-XXXXXX").string();
    path = ::mkdtemp(templ.data());
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path, ec);
  }
  std::string root() const { return (path / "cache").string(); }
};

struct ScopedEnv {
  std::string name, old;
  bool had;
  ScopedEnv(const char* n, const char* value) : name(n) {
    const char* o = std::getenv(n);
    had = o != nullptr;
    if (had) old = o;
    if (value)
      ::setenv(n, value, 1);
    else
      ::unsetenv(n);
  }
  ~ScopedEnv() {
    if (had)
      ::setenv(name.c_str(), old.c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
};

// tma_copy recipes: real NVRTC compiles of ~50-100 ms each.
inline nlohmann::json tma_config(const nlohmann::json& changes = nlohmann::json::object()) {
  nlohmann::json c = {
      {"dtype", "bf16"}, {"block_m", 64}, {"block_n", 64}, {"stages", 2}, {"swizzle", "128B"}};
  if (!changes.is_null()) c.merge_patch(changes);
  return ops::find_op("tma_copy").canonicalize(c);
}
inline jit::KernelRecipe tma_recipe(const nlohmann::json& changes = nlohmann::json::object(),
                                    Arch arch = kSm90a) {
  return ops::find_op("tma_copy").recipe(tma_config(changes), arch);
}

inline std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
inline void write_text(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
}

inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct CliResult {
  int rc = -1;      // exit status; 128 + signal when killed
  std::string out;  // stdout (and stderr when merged)
};

// Runs shell text `cmd` through sh: its stdout and exit status.
inline CliResult run_shell(const std::string& cmd) {
  CliResult r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) r.out.append(buf, n);
  const int status = ::pclose(pipe);
  if (WIFEXITED(status)) r.rc = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.rc = 128 + WTERMSIG(status);
  return r;
}

// Runs `attnjit <args>` through sh; `args` is shell text. stderr goes to stdout when
// `merge_stderr`, else is discarded.
// `env` ("NAME=value ...") is set for the CLI only.
inline CliResult run_cli(const std::string& args, bool merge_stderr = false,
                         const std::string& env = "") {
  return run_shell((env.empty() ? "" : "env " + env + " ") + ATTNJIT_CLI_PATH + " " + args +
                   (merge_stderr ? " 2>&1" : " 2>/dev/null"));
}

inline nlohmann::json json_of(const CliResult& r) {
  return nlohmann::json::parse(r.out, nullptr, false);
}

}  // namespace attnjit::test
