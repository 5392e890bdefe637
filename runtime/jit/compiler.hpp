#pragma once
// NVRTC straight to cubin. The embedded kernel templates are handed to NVRTC as
// in-memory headers; toolkit headers (cuda_bf16.h, cuda_fp8.h, CCCL) come from the
// toolkit found at run time (see toolkit.hpp).
#include <string>
#include <vector>

#include "attnjit/types.hpp"
#include "jit/kernel_source.hpp"

namespace attnjit::jit {

// ptxas's resource report for the kernel's entry function.
struct PtxasInfo {
  int registers = -1;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  int stack_frame_bytes = 0;
  int static_smem_bytes = 0;
  int barriers = 0;
  bool parsed = false;
  bool from_cubin = false;  // log had no report: registers/frame read from the cubin's ELF
};

// Parses the "ptxas info" lines NVRTC writes to its log under --ptxas-options=-v.
PtxasInfo parse_ptxas_info(const std::string& log, const std::string& mangled_name);

struct CompileOptions {
  Arch arch = kSm90a;
  bool line_info = false;             // -lineinfo (for ncu source view)
  std::vector<std::string> extra;     // appended verbatim (e.g. "-DATTNJIT_CHECK=1")
};

struct CompiledKernel {
  std::string op;
  Arch arch;
  std::string source;        // the generated translation unit
  std::string lowered_name;  // mangled entry point
  std::vector<char> cubin;
  std::string log;           // NVRTC's full log (warnings and ptxas info)
  PtxasInfo ptxas;
  double compile_ms = 0;
  std::vector<std::string> options;  // exactly what NVRTC was given
};

// The NVRTC options a compile with `opts` uses, without the toolkit include paths (which
// compile() appends and which are absolute, so the disk cache's key leaves them out).
std::vector<std::string> nvrtc_options(const CompileOptions& opts);

// Compiles `src` for `opts.arch`. On failure throws Error(kCompile) whose message holds
// the log and the path where the generated source was written.
CompiledKernel compile(const KernelSource& src, const CompileOptions& opts);

// NVRTC's version, e.g. {13, 0}.
std::pair<int, int> nvrtc_version();

}  // namespace attnjit::jit
