#pragma once
// Building kernels ahead of time, without a GPU: what `attnjit precompile` does, for an
// engine that fills its kernel cache when it is built or deployed (docs/cache.md). A
// kernel is named by its op and config, as `attnjit list` shows them and the ops' config
// structs write them (TmaCopyConfig::to_json(), MlaDecodeConfig::to_json(), ...).
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "attnjit/types.hpp"

namespace attnjit {

struct PrecompiledKernel {
  std::string op;
  std::string config;       // canonical config JSON
  std::string arch;         // "sm_90a"
  std::string key;          // the disk cache key (64 hex digits)
  std::string cache_dir;    // the cache root it is stored in
  bool cache_hit = false;   // found in the cache: nothing was compiled
  int registers = -1;       // ptxas's numbers for the kernel
  int spill_bytes = 0;
  size_t cubin_bytes = 0;
  double ms = 0;            // wall time of the call
};

// The kernel families precompile() knows, in `attnjit list` order (the ops and their
// helper kernels, e.g. "mla_decode_combine").
std::vector<std::string> kernel_ops();

// Compiles the kernel of `op` with `config_json` (fields left out take their defaults;
// the config is validated and canonicalized) for `arch` into the disk cache at
// `cache_dir` ("" = the default root: ATTNJIT_CACHE_DIR, XDG, HOME), or finds it there.
// Needs the CUDA toolkit's headers and NVRTC, not a GPU or a driver. Throws
// Error(kUnsupportedConfig) for an unknown op, a bad config or an arch the op does not
// support, Error(kCompile) when NVRTC fails, Error(kCache) when the cache cannot store it
// (read-only root, disk full) or, under ATTNJIT_NO_COMPILE=1, when it is missing.
PrecompiledKernel precompile(std::string_view op, std::string_view config_json,
                             Arch arch = kSm90a, const std::string& cache_dir = "");

}  // namespace attnjit
