#pragma once
// One error type for the whole library. The category says which layer refused;
// the message names the argument or config field and the rule it broke, with values.
#include <stdexcept>
#include <string>

namespace attnjit {

enum class ErrorKind {
  kBadArgument,        // a tensor/scalar passed to an op breaks a rule (shape, dtype, alignment...)
  kUnsupportedConfig,  // a config struct is invalid or not built for this arch
  kCompile,            // NVRTC or the toolkit headers failed
  kDriver,             // the CUDA driver refused (or is missing)
  kCache,              // the kernel cache is unusable
};

const char* to_string(ErrorKind kind) noexcept;

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message);
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

// Throw helpers: `fail_arg("q", "must be rank 4, got rank 3")` → "bad argument: q: must be ...".
[[noreturn]] void fail(ErrorKind kind, const std::string& what, const std::string& rule);
[[noreturn]] inline void fail_arg(const std::string& what, const std::string& rule) {
  fail(ErrorKind::kBadArgument, what, rule);
}
[[noreturn]] inline void fail_config(const std::string& what, const std::string& rule) {
  fail(ErrorKind::kUnsupportedConfig, what, rule);
}

}  // namespace attnjit
