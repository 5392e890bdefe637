#include "attnjit/error.hpp"

#include <fmt/format.h>

namespace attnjit {

const char* to_string(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::kBadArgument: return "bad argument";
    case ErrorKind::kUnsupportedConfig: return "unsupported config";
    case ErrorKind::kCompile: return "compile error";
    case ErrorKind::kDriver: return "driver error";
    case ErrorKind::kCache: return "cache error";
  }
  return "error";
}

Error::Error(ErrorKind kind, const std::string& message)
    : std::runtime_error(fmt::format("attnjit {}: {}", to_string(kind), message)), kind_(kind) {}

void fail(ErrorKind kind, const std::string& what, const std::string& rule) {
  throw Error(kind, fmt::format("{}: {}", what, rule));
}

}  // namespace attnjit
