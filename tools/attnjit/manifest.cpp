// Reading `attnjit precompile --manifest` files (manifest.hpp).
#include "manifest.hpp"

#include <fmt/format.h>

#include <sstream>

#include "attnjit/error.hpp"

namespace attnjit::cli {

nlohmann::json canonical(const ops::OpSpec& op, const nlohmann::json& config,
                         const std::string& where) {
  try {
    return op.canonicalize(config);
  } catch (const Error& e) {
    throw UsageError(fmt::format("{}: {}", where, e.what()));
  }
}

const ops::OpSpec& op_named(const std::string& name, const std::string& where) {
  try {
    return ops::find_op(name);
  } catch (const Error& e) {
    throw UsageError(fmt::format("{}: {}", where, e.what()));
  }
}

std::vector<Arch> parse_archs(const std::string& list) {
  std::vector<Arch> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    auto a = parse_arch(item);
    if (!a) throw UsageError(fmt::format("--arch: '{}' is not an arch like sm_90a", item));
    out.push_back(*a);
  }
  if (out.empty()) throw UsageError("--arch: empty list");
  return out;
}

std::vector<ManifestVariant> parse_manifest(const std::string& text, const std::string& name,
                                            const std::vector<Arch>& archs) {
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("manifest {}: not JSON: {}", name, e.what()));
  }
  if (!m.is_array())
    throw UsageError(
        fmt::format("manifest {}: must be a JSON list of {{\"op\": ..., \"config\": "
                    "{{...}}, \"arch\": ...}} objects",
                    name));
  std::vector<ManifestVariant> out;
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string where = fmt::format("manifest {} item {}", name, i);
    const nlohmann::json& item = m[i];
    if (!item.is_object()) throw UsageError(where + ": must be an object");
    for (auto it = item.begin(); it != item.end(); ++it)
      if (it.key() != "op" && it.key() != "config" && it.key() != "arch")
        throw UsageError(
            fmt::format("{}: unknown field '{}' (expected op, config, arch)", where, it.key()));
    if (!item.contains("op") || !item["op"].is_string())
      throw UsageError(where + ": field 'op' is missing or not a string");
    const ops::OpSpec& op = op_named(item["op"].get<std::string>(), where);
    const nlohmann::json config =
        canonical(op, item.value("config", nlohmann::json::object()), where);
    std::vector<Arch> item_archs = archs;
    if (item.contains("arch")) {
      if (!item["arch"].is_string()) throw UsageError(where + ": field 'arch' must be a string");
      try {
        item_archs = parse_archs(item["arch"].get<std::string>());
      } catch (const UsageError& e) {
        throw UsageError(fmt::format("{}: field 'arch': {}", where, e.what()));
      }
    }
    for (const Arch& a : item_archs) out.push_back({&op, config, a});
  }
  return out;
}

}  // namespace attnjit::cli
