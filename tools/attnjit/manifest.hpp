#pragma once
// `attnjit precompile`'s inputs read from outside: the --manifest file (a JSON list of
// {"op", "config", "arch"?}) and --arch lists. Apart from the command so the fuzz target
// (tests/fuzz/fuzz_manifest.cpp) reads manifests exactly as the CLI does.
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnjit/types.hpp"
#include "ops/registry.hpp"

namespace attnjit::cli {

// A usage problem (bad flag value, bad manifest): exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Canonicalizes one {op, config} pair, and looks an op up by name; UsageError prefixed
// with `where` (the flag or manifest item the value came from).
nlohmann::json canonical(const ops::OpSpec& op, const nlohmann::json& config,
                         const std::string& where);
const ops::OpSpec& op_named(const std::string& name, const std::string& where);

// "sm_90a,sm_100a" → archs; UsageError naming a bad item or an empty list.
std::vector<Arch> parse_archs(const std::string& list);

struct ManifestVariant {
  const ops::OpSpec* op = nullptr;
  nlohmann::json config;  // canonical
  Arch arch;
};

// The variants a manifest's text names (`name` is the file, for errors). An item without
// "arch" is built for every arch of `archs`. UsageError naming the item and the problem:
// not JSON, not a list, an unknown field or op, a bad config or arch.
std::vector<ManifestVariant> parse_manifest(const std::string& text, const std::string& name,
                                            const std::vector<Arch>& archs);

}  // namespace attnjit::cli
