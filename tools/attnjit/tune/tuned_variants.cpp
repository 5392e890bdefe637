// The tuning database's kernels for precompile (tuned_variants.hpp).
#include "tuned_variants.hpp"

#include <fmt/format.h>

#include <set>

#include "attnjit/error.hpp"
#include "space.hpp"

namespace attnjit::tune {

std::vector<TunedVariant> tuned_variants(const tuning::Db& db, const std::vector<Arch>& archs,
                                         const std::string& only_op, std::vector<std::string>* skipped) {
  std::vector<TunedVariant> out;
  std::set<std::string> seen;
  for (const tuning::Environment& env : db.environments) {
    const auto arch = parse_arch(env.fingerprint.arch);
    bool wanted = false;
    for (const Arch& a : archs) wanted = wanted || (arch && a == *arch);
    if (!wanted) continue;
    for (const tuning::Entry& e : env.entries) {
      if (!only_op.empty() && e.op != only_op) continue;
      try {
        const ops::OpSpec& op = ops::find_op(e.op);
        if (!op.tuning.variants) throw Error(ErrorKind::kUnsupportedConfig, "the op is not tunable in this build");
        const nlohmann::json config = op.canonicalize(split_candidate(op, e.best).first);
        for (const ops::KernelVariant& v : op.tuning.variants(config)) {
          const nlohmann::json c = v.op->canonicalize(v.config);
          if (seen.insert(fmt::format("{} {} {}", v.op->name, arch->name(), c.dump())).second)
            out.push_back({v.op, c, *arch});
        }
      } catch (const Error& err) {
        if (skipped) skipped->push_back(fmt::format("{} {} ({}): {}", e.op, e.bucket, env.fingerprint.arch, err.what()));
      }
    }
  }
  return out;
}

}  // namespace attnjit::tune
