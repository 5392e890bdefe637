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
    auto add = [&v](std::vector<OpSpec> specs) {
      for (OpSpec& op : specs) {
        for (const OpSpec& seen : v)
          if (seen.name == op.name || seen.id == op.id)
            fail_config("op registry", fmt::format("'{}' and '{}' share a name or id ({})",
                                                   seen.name, op.name, op.id));
        v.push_back(std::move(op));
      }
    };
#define ATTNJIT_OP(name) add(name##_op_specs());
#include "ops/ops.def"
#undef ATTNJIT_OP
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
