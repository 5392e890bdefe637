#pragma once
// Shared by the libFuzzer targets (tests/fuzz/README.md). A target feeds one parser of
// input that comes from outside the process and treats as a finding, besides what ASan and
// UBSan report: an exception the parser's contract does not name (it would escape to the
// caller as an unexpected crash of the CLI or engine), and a broken round trip (a value
// the parser accepted and wrote back that it then refuses or reads differently).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace attnjit::fuzz {

inline std::string text_of(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// A broken invariant: print it and abort, so libFuzzer saves the input as a crash.
[[noreturn]] inline void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "FUZZ FINDING: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace attnjit::fuzz
