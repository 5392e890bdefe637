#pragma once
// Search spaces: what candidates a sweep times for one (op, shape), after static pruning,
// and the shapes and space files `attnjit tune` reads.
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ops/registry.hpp"

namespace attnjit::tune {

// A usage problem (bad flag value, bad shape or space file): exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Pruned {
  nlohmann::json candidate;
  std::string reason;
};

struct Space {
  nlohmann::json shape;  // canonical
  std::string bucket;
  nlohmann::json default_candidate;     // canonical; the reference
  std::vector<nlohmann::json> candidates;  // canonical, unique, the default first
  std::vector<Pruned> pruned;           // what static pruning dropped, and why
};

// The tunable op `name`; UsageError when it is unknown or declares no search space.
const ops::OpSpec& tunable_op(const std::string& name);

// {config, run-time fields} of a candidate.
std::pair<nlohmann::json, nlohmann::json> split_candidate(const ops::OpSpec& op,
                                                          const nlohmann::json& candidate);
// Validates a candidate (the config through the op's canonicalize, run-time fields must be
// integers) and returns its canonical form; throws Error naming the field.
nlohmann::json canonical_candidate(const ops::OpSpec& op, const nlohmann::json& candidate);

// The candidates for `shape`: the op's search space, or `space` when given — a JSON list
// of candidates or an object {field: [values...]} (every combination), both written as
// changes to the shape's default candidate. Configs the op refuses and candidates its
// prune rule drops are listed in `pruned`. UsageError for a field the op does not have.
Space enumerate(const ops::OpSpec& op, const nlohmann::json& shape,
                const std::optional<nlohmann::json>& space = std::nullopt);

// "rows=4096,cols=1024,dtype=bf16" → {"rows": 4096, "cols": 1024, "dtype": "bf16"}
// (integers become numbers). UsageError naming a bad item.
nlohmann::json shape_from_text(const std::string& text);
// A --shapes file: a JSON list of shape objects or "k=v,..." strings.
std::vector<nlohmann::json> read_shapes_file(const std::string& path);
// A --space file (JSON).
nlohmann::json read_space_file(const std::string& path);

// The fields of `candidate` that differ from `reference`, "block_n=32 stages=4"; "default"
// when none do.
std::string describe_change(const nlohmann::json& candidate, const nlohmann::json& reference);

}  // namespace attnjit::tune
