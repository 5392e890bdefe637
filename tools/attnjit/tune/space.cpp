// Search-space enumeration and the sweep's input files (space.hpp).
#include "space.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "attnjit/error.hpp"
#include "tuning/shape.hpp"

namespace attnjit::tune {
using nlohmann::json;

namespace {

json read_json_file(const std::string& path, const char* flag) {
  std::ifstream in(path);
  if (!in) throw UsageError(fmt::format("{}: cannot read {}", flag, path));
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw UsageError(fmt::format("{} {}: not JSON: {}", flag, path, e.what()));
  }
}

bool is_runtime_field(const ops::OpSpec& op, const std::string& field) {
  return std::find(op.tuning.runtime_fields.begin(), op.tuning.runtime_fields.end(), field) !=
         op.tuning.runtime_fields.end();
}

void check_fields(const ops::OpSpec& op, const json& candidate, const std::string& where) {
  for (auto it = candidate.begin(); it != candidate.end(); ++it) {
    bool known = is_runtime_field(op, it.key());
    for (const ops::FieldSpec& f : op.fields) known = known || f.name == it.key();
    if (!known) {
      std::string names;
      for (const ops::FieldSpec& f : op.fields) names += (names.empty() ? "" : ", ") + f.name;
      for (const std::string& f : op.tuning.runtime_fields) names += ", " + f;
      throw UsageError(fmt::format("{}: {} has no field '{}' (fields: {})", where, op.name, it.key(), names));
    }
  }
}

// Every combination of {field: [values]} applied to `base`.
std::vector<json> product(const json& base, const json& axes) {
  std::vector<json> out{base};
  for (auto it = axes.begin(); it != axes.end(); ++it) {
    const json values = it->is_array() ? *it : json::array({*it});
    std::vector<json> next;
    for (const json& partial : out)
      for (const json& v : values) {
        json c = partial;
        c[it.key()] = v;
        next.push_back(std::move(c));
      }
    out = std::move(next);
  }
  return out;
}

}  // namespace

const ops::OpSpec& tunable_op(const std::string& name) {
  const ops::OpSpec* op = nullptr;
  try {
    op = &ops::find_op(name);
  } catch (const Error& e) {
    throw UsageError(fmt::format("--op: {}", e.what()));
  }
  if (!op->tuning.search_space) {
    std::string tunable;
    for (const ops::OpSpec& o : ops::registry())
      if (o.tuning.search_space) tunable += (tunable.empty() ? "" : ", ") + o.name;
    throw UsageError(fmt::format("--op: {} has no search space (tunable: {})", name, tunable));
  }
  return *op;
}

std::pair<json, json> split_candidate(const ops::OpSpec& op, const json& candidate) {
  json config = json::object(), runtime = json::object();
  for (auto it = candidate.begin(); it != candidate.end(); ++it)
    (is_runtime_field(op, it.key()) ? runtime : config)[it.key()] = *it;
  return {config, runtime};
}

json canonical_candidate(const ops::OpSpec& op, const json& candidate) {
  if (!candidate.is_object())
    fail_config(op.name + " candidate", fmt::format("must be a JSON object, got {}", candidate.dump()));
  auto [config, runtime] = split_candidate(op, candidate);
  json out = op.canonicalize(config);
  for (auto it = runtime.begin(); it != runtime.end(); ++it) {
    if (!it->is_number_integer())
      fail_config(fmt::format("{} field '{}'", op.name, it.key()),
                  fmt::format("must be an integer, got {}", it->dump()));
    out[it.key()] = *it;
  }
  return out;
}

Space enumerate(const ops::OpSpec& op, const json& shape, const std::optional<json>& space) {
  Space s;
  try {
    s.shape = op.tuning.canonical_shape(shape);
  } catch (const Error& e) {
    throw UsageError(fmt::format("--shape: {}", e.what()));
  }
  s.bucket = op.tuning.bucket(s.shape);
  s.default_candidate = canonical_candidate(op, op.tuning.default_candidate(s.shape));
  std::vector<json> raw;
  if (!space) {
    raw = op.tuning.search_space(s.shape);
  } else if (space->is_array()) {
    for (size_t i = 0; i < space->size(); ++i) {
      const json& item = (*space)[i];
      if (!item.is_object()) throw UsageError(fmt::format("--space item {}: must be an object", i));
      check_fields(op, item, fmt::format("--space item {}", i));
      json c = s.default_candidate;
      c.update(item);
      raw.push_back(std::move(c));
    }
  } else if (space->is_object()) {
    check_fields(op, *space, "--space");
    raw = product(s.default_candidate, *space);
  } else {
    throw UsageError("--space: must be a JSON list of candidates or an object {field: [values]}");
  }

  std::set<std::string> seen{s.default_candidate.dump()};
  s.candidates.push_back(s.default_candidate);
  for (const json& c : raw) {
    json canonical;
    try {
      canonical = canonical_candidate(op, c);
    } catch (const Error& e) {
      s.pruned.push_back({c, e.what()});
      continue;
    }
    if (op.tuning.prune)
      if (std::string why = op.tuning.prune(canonical, s.shape); !why.empty()) {
        s.pruned.push_back({canonical, why});
        continue;
      }
    if (seen.insert(canonical.dump()).second) s.candidates.push_back(std::move(canonical));
  }
  return s;
}

json shape_from_text(const std::string& text) {
  if (!tuning::is_valid_utf8(text)) throw UsageError("--shape: the text is not valid UTF-8");
  json out = json::object();
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      throw UsageError(fmt::format("--shape: '{}' is not key=value", item));
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(value, &used);
    } catch (...) {
      used = 0;
    }
    if (used == value.size())
      out[key] = v;
    else
      out[key] = value;
    pos = end + 1;
  }
  return out;
}

std::vector<json> read_shapes_file(const std::string& path) {
  const json j = read_json_file(path, "--shapes");
  if (!j.is_array() || j.empty())
    throw UsageError(fmt::format("--shapes {}: must be a non-empty JSON list of shapes", path));
  std::vector<json> out;
  for (size_t i = 0; i < j.size(); ++i) {
    if (j[i].is_object())
      out.push_back(j[i]);
    else if (j[i].is_string())
      out.push_back(shape_from_text(j[i].get<std::string>()));
    else
      throw UsageError(fmt::format("--shapes {} item {}: must be an object or a \"k=v,...\" string", path, i));
  }
  return out;
}

json read_space_file(const std::string& path) { return read_json_file(path, "--space"); }

std::string describe_change(const json& candidate, const json& reference) {
  std::string out;
  for (auto it = candidate.begin(); it != candidate.end(); ++it) {
    auto r = reference.find(it.key());
    if (r != reference.end() && *r == *it) continue;
    out += fmt::format("{}{}={}", out.empty() ? "" : " ", it.key(),
                       it->is_string() ? it->get<std::string>() : it->dump());
  }
  return out.empty() ? "default" : out;
}

}  // namespace attnjit::tune
