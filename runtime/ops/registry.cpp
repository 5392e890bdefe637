#include "ops/registry.hpp"

#include <fmt/format.h>

#include "attnjit/error.hpp"

namespace attnjit::ops {

bool OpSpec::supports(Arch arch) const {
  for (const Arch& a : archs)
    if (a == arch) return true;
  return false;
}

const std::vector<OpSpec>& registry() {
  static const std::vector<OpSpec> ops = [] {
    std::vector<OpSpec> v;
    v.push_back(tma_copy_op_spec());
    v.push_back(mla_decode_op_spec());
    v.push_back(mla_decode_combine_op_spec());
    v.push_back(mha_fwd_op_spec());
    v.push_back(mha_fwd_combine_op_spec());
    return v;
  }();
  return ops;
}

const OpSpec& find_op(std::string_view name) {
  std::string known;
  for (const OpSpec& op : registry()) {
    if (op.name == name) return op;
    known += fmt::format("{}{}", known.empty() ? "" : ", ", op.name);
  }
  fail_config("op", fmt::format("unknown op '{}' (known: {})", name, known));
}

}  // namespace attnjit::ops
