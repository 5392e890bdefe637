#pragma once
// Tuned configs: the runtime side of `attnjit tune` (docs/tuning.md). A sweep writes the
// fastest verified candidate per (op, shape bucket) and environment into a JSON database;
// ops called without a config (tma_copy, mla_decode with config == nullptr) ask it before
// their built-in heuristic. An entry is used only when the GPU name, SM count and attnjit
// version of the current device and library match the ones it was tuned on.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace attnjit {

// An op's problem shape, with the keys `attnjit tune --shape` takes for that op, e.g.
// {"rows": 16384, "cols": 8192, "dtype": "bf16"} for tma_copy (docs/tuning.md lists them).
using ShapeKey = nlohmann::json;

// The database file: $ATTNJIT_TUNING_DB when set, else <cache root>/tuning.json (the
// kernel cache's root, see docs/cache.md); "" when neither can be resolved.
std::string tuning_db_path();

// The tuned candidate (config fields plus run-time fields such as num_splits) for `op` on
// `shape`'s bucket, for the current device's GPU; nullopt when the database has none, is
// missing, or was tuned elsewhere (then one warning per process names the file). The
// database is read once per process; a corrupt one is reported once and ignored. Throws
// Error(kUnsupportedConfig) for an unknown op, Error(kBadArgument) for a bad shape.
std::optional<nlohmann::json> tuned_config(std::string_view op, const ShapeKey& shape);

// Reads $ATTNJIT_TUNING_DB and the file again on the next lookup (e.g. after a sweep in
// this process). Ops that memoize their choice see the new generation and look again.
void reload_tuning_db();
uint64_t tuning_db_generation() noexcept;

}  // namespace attnjit
