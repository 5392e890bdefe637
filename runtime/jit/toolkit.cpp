#include "jit/toolkit.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

#include "attnjit/error.hpp"

#ifndef ATTNJIT_BUILD_CUDA_ROOT
#define ATTNJIT_BUILD_CUDA_ROOT "/usr/local/cuda"
#endif

namespace attnjit::jit {
namespace fs = std::filesystem;

const std::vector<std::string>& required_toolkit_headers() {
  static const std::vector<std::string> headers = {
      "cuda_bf16.h", "cuda_fp16.h", "cuda_fp8.h",
      "cccl/cuda/std/cstdint",  // CCCL (libcu++) lives under include/cccl in CUDA 13
      "cccl/cuda/ptx",
  };
  return headers;
}

namespace {

// Empty string when `root` is a usable toolkit, else what is missing.
std::string missing_headers(const fs::path& root) {
  std::string missing;
  for (const std::string& h : required_toolkit_headers()) {
    std::error_code ec;
    if (!fs::exists(root / "include" / h, ec))
      missing += fmt::format("{}{}", missing.empty() ? "" : ", ", (root / "include" / h).string());
  }
  return missing;
}

}  // namespace

Toolkit find_toolkit() {
  struct Candidate {
    std::string root, via;
    bool explicit_choice;
  };
  std::vector<Candidate> candidates;
  for (const char* var : {"ATTNJIT_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(var); v && *v) candidates.push_back({v, var, true});
  candidates.push_back({ATTNJIT_BUILD_CUDA_ROOT, "the toolkit attnjit was built with", false});
  candidates.push_back({"/usr/local/cuda", "/usr/local/cuda", false});

  std::string tried;
  for (const Candidate& c : candidates) {
    std::string missing = missing_headers(c.root);
    if (missing.empty()) {
      fs::path root = fs::path(c.root).lexically_normal();
      return Toolkit{root.string(), (root / "include").string(), (root / "include" / "cccl").string(),
                     c.via};
    }
    if (c.explicit_choice)
      throw Error(ErrorKind::kCompile,
                  fmt::format("${} = {} is not a usable CUDA 13 toolkit: missing {}. Point it at "
                              "the toolkit root (the folder holding include/cuda_bf16.h and "
                              "include/cccl), or unset it",
                              c.via, c.root, missing));
    tried += fmt::format("\n  {} ({}): missing {}", c.root, c.via, missing);
  }
  throw Error(ErrorKind::kCompile,
              fmt::format("no CUDA toolkit headers found for NVRTC (kernels include cuda_bf16.h, "
                          "cuda_fp8.h and CCCL from the toolkit). Set CUDA_HOME (or "
                          "ATTNJIT_CUDA_HOME) to the toolkit root. Tried:{}",
                          tried));
}

const Toolkit& toolkit() {
  static const Toolkit tk = find_toolkit();  // a throw here is retried on the next call
  return tk;
}

}  // namespace attnjit::jit
