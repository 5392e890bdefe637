#pragma once
// What the runtime compiles: a kernel template from kernel_templates/ plus the values
// of its parameter struct. The generated translation unit includes the template's
// header, declares the parameter struct from the config table's template fields (the
// kernels take `template <auto P>`; ops never hand-write it) and names the instantiation
// with C++20 designated initializers, so every template argument carries its field name:
//
//   struct Params { attnjit::DType dtype; int block_m; ... };
//   attnjit::tma_copy::kernel<attnjit_generated::Params{.dtype = attnjit::DType::kBF16,
//                                                       .block_m = 64, ...}>
//
// No text is pasted into kernel bodies; the kernel is found with nvrtcGetLoweredName.
#include <string>
#include <vector>

namespace attnjit::jit {

struct TemplateArg {
  std::string field;  // member of the params struct, e.g. "block_m"
  std::string value;  // C++ constant expression, e.g. "64" or "attnjit::Swizzle::k128B"
  std::string type;   // the member's C++ type, e.g. "int" (a declared params struct only)
};

// The struct a generated translation unit declares from its args.
inline constexpr const char* kGeneratedParams = "attnjit_generated::Params";

struct KernelSource {
  std::string op;                 // registry name, e.g. "tma_copy"
  std::string header;             // relative to kernel_templates/, e.g. "tma_copy/tma_copy.cuh"
  std::string kernel;             // qualified template name, e.g. "attnjit::tma_copy::kernel"
  // Empty: the TU declares kGeneratedParams with one member per arg (its type and name,
  // in order) — every op's kernels. Otherwise a struct the header declares, e.g.
  // "attnjit::testing::WgmmaTileParams" (the device-library test kernels).
  std::string params_type;
  std::vector<TemplateArg> args;  // in the struct's declaration order
  std::string config_json;        // canonical config, recorded in the TU's header comment
};

// "attnjit::tma_copy::kernel<attnjit::tma_copy::Params{.dtype = ..., .block_m = 64}>"
std::string instantiation_expression(const KernelSource& src);

// The whole generated translation unit.
std::string translation_unit(const KernelSource& src);

}  // namespace attnjit::jit
