#pragma once
// What `attnjit precompile` adds from the tuning database: the kernels every entry's best
// candidate needs, for the entries tuned on one of the archs being built (no GPU needed).
#include <string>
#include <vector>

#include "attnjit/types.hpp"
#include "ops/registry.hpp"
#include "tuning/db.hpp"

namespace attnjit::tune {

struct TunedVariant {
  const ops::OpSpec* op = nullptr;
  nlohmann::json config;  // canonical
  Arch arch;
};

// Entries of ops this build does not have, or whose best candidate it refuses, are
// skipped with a line in `skipped` each. `only_op` ("" = all) keeps one op's entries.
std::vector<TunedVariant> tuned_variants(const tuning::Db& db, const std::vector<Arch>& archs,
                                         const std::string& only_op, std::vector<std::string>* skipped);

}  // namespace attnjit::tune
