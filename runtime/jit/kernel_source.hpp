#pragma once
// What the runtime compiles: a kernel template from kernel_templates/ plus the values
// of its parameter struct. The generated translation unit includes the template's
// header and names the instantiation with C++20 designated initializers, so every
// template argument carries its field name:
//
//   attnjit::tma_copy::kernel<attnjit::tma_copy::Params{.dtype = attnjit::DType::kBF16,
//                                                       .block_m = 64, ...}>
//
// No text is pasted into kernel bodies; the kernel is found with nvrtcGetLoweredName.
#include <string>
#include <vector>

namespace attnjit::jit {

struct TemplateArg {
  std::string field;  // member of the params struct, e.g. "block_m"
  std::string value;  // C++ constant expression, e.g. "64" or "attnjit::Swizzle::k128B"
};

struct KernelSource {
  std::string op;                 // registry name, e.g. "tma_copy"
  std::string header;             // relative to kernel_templates/, e.g. "tma_copy/tma_copy.cuh"
  std::string kernel;             // qualified template name, e.g. "attnjit::tma_copy::kernel"
  std::string params_type;        // qualified params struct, e.g. "attnjit::tma_copy::Params"
  std::vector<TemplateArg> args;  // in the struct's declaration order
  // Ops' config tables set this: the TU static_asserts that the params struct has exactly
  // args.size() members (common/member_count.cuh), so none is left silently zero.
  bool check_member_count = false;
  std::string config_json;        // canonical config, recorded in the TU's header comment
};

// "attnjit::tma_copy::kernel<attnjit::tma_copy::Params{.dtype = ..., .block_m = 64}>"
std::string instantiation_expression(const KernelSource& src);

// The whole generated translation unit.
std::string translation_unit(const KernelSource& src);

}  // namespace attnjit::jit
