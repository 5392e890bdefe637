#pragma once
// Finding the CUDA toolkit headers at run time. NVRTC 13 ships no cuda_bf16.h,
// cuda_fp8.h or CCCL of its own: kernels get them from a toolkit on disk, found in this
// order: $ATTNJIT_CUDA_HOME, $CUDA_HOME, $CUDA_PATH, the toolkit attnjit was built
// against, /usr/local/cuda. A variable that is set but points at no usable toolkit is
// an error (never silently skipped).
#include <string>
#include <vector>

namespace attnjit::jit {

struct Toolkit {
  std::string root;         // e.g. /usr/local/cuda
  std::string include_dir;  // <root>/include
  std::string cccl_dir;     // <root>/include/cccl
  std::string found_via;    // "CUDA_HOME", "build default", ...
};

// The headers kernels include from the toolkit; the preflight checks each resolves.
const std::vector<std::string>& required_toolkit_headers();

// Discovers and checks now (reads the environment each call).
Toolkit find_toolkit();

// find_toolkit() once per process. Throws Error(kCompile) naming what is missing
// and which variable to set.
const Toolkit& toolkit();

}  // namespace attnjit::jit
