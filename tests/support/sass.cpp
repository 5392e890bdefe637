#include "support/sass.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "jit/toolkit.hpp"
#include "support/catch.hpp"

namespace attnjit::test {
namespace {

std::string find_cuobjdump() {
  if (const char* p = std::getenv("ATTNJIT_CUOBJDUMP"); p && *p) return p;
  if (std::system("command -v cuobjdump >/dev/null 2>&1") == 0) return "cuobjdump";
  try {
    auto path = std::filesystem::path(jit::toolkit().root) / "bin" / "cuobjdump";
    if (std::filesystem::exists(path)) return path.string();
  } catch (...) {
  }
  return {};
}

}  // namespace

std::optional<std::string> disassemble(const std::vector<char>& cubin) {
  const char* req = std::getenv("ATTNJIT_REQUIRE_SASS");
  const bool required = req && std::string(req) == "1";
  const std::string tool = find_cuobjdump();
  if (tool.empty()) {
    if (required) FAIL("ATTNJIT_REQUIRE_SASS=1 but no cuobjdump was found");
    WARN("SKIPPED SASS check: no cuobjdump (set ATTNJIT_CUOBJDUMP or put it on PATH)");
    return std::nullopt;
  }
  const auto file = std::filesystem::temp_directory_path() /
                    fmt::format("attnjit-sass-{}-{}.cubin", ::getpid(), std::rand());
  std::ofstream(file, std::ios::binary).write(cubin.data(), static_cast<std::streamsize>(cubin.size()));
  std::string out;
  const std::string cmd = fmt::format("{} -sass {} 2>&1", tool, file.string());
  if (FILE* pipe = ::popen(cmd.c_str(), "r")) {
    std::array<char, 4096> buf;
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
    const int rc = ::pclose(pipe);
    std::filesystem::remove(file);
    if (rc != 0) {
      if (required) FAIL("cuobjdump failed: " << out);
      WARN("SKIPPED SASS check: cuobjdump failed: " << out);
      return std::nullopt;
    }
  }
  return out;
}

int count_opcode(const std::string& sass, const std::string& opcode) {
  // SASS lines look like "/*0880*/  UTMALDG.2D [UR12], ..." (optionally predicated "@P0").
  const std::regex re("\\*/\\s+(@!?U?P[T0-9]+\\s+)?" + opcode + "[\\.\\s]");
  return static_cast<int>(std::distance(std::sregex_iterator(sass.begin(), sass.end(), re),
                                        std::sregex_iterator()));
}

}  // namespace attnjit::test
