#include "cache/key.hpp"

#include <fmt/format.h>

#include "attnjit/error.hpp"
#include "cache/hash.hpp"

namespace attnjit::cache {

const std::string* KeyRecord::text(std::string_view name) const noexcept {
  for (const KeyField& f : fields)
    if (f.name == name) return std::get_if<std::string>(&f.value);
  return nullptr;
}

std::string cache_key(const KeyRecord& record) {
  // The layout of these bytes is what every stored key was computed from: changing it
  // changes every key, so it changes only with the record's version.
  Sha256 h;
  h.field("attnjit-cache-key").field(std::to_string(record.version));
  for (const KeyField& f : record.fields) {
    h.field(f.name);
    if (const auto* text = std::get_if<std::string>(&f.value)) {
      h.field(*text);
    } else {
      const auto& list = std::get<std::vector<std::string>>(f.value);
      h.field(std::to_string(list.size()));
      for (const std::string& item : list) h.field(item);
    }
  }
  return h.hex();
}

nlohmann::ordered_json to_json(const KeyRecord& record) {
  nlohmann::ordered_json j;
  j["record_version"] = record.version;
  for (const KeyField& f : record.fields)
    std::visit([&](const auto& v) { j[f.name] = v; }, f.value);
  return j;
}

KeyRecord key_record_from_json(const nlohmann::ordered_json& j) {
  if (!j.is_object()) throw Error(ErrorKind::kCache, "key record is not a JSON object");
  KeyRecord record;
  auto v = j.find("record_version");
  if (v == j.end() || !v->is_number_integer())
    throw Error(ErrorKind::kCache, "key record field 'record_version' is missing or not an integer");
  record.version = v->get<int>();
  for (const auto& [name, value] : j.items()) {
    if (name == "record_version") continue;
    if (value.is_string()) {
      record.fields.push_back({name, value.get<std::string>()});
      continue;
    }
    std::vector<std::string> list;
    bool ok = value.is_array();
    for (const auto& item : value) {
      if (!ok || !item.is_string()) {
        ok = false;
        break;
      }
      list.push_back(item.get<std::string>());
    }
    if (!ok)
      throw Error(ErrorKind::kCache,
                  fmt::format("key record field '{}' is neither a string nor a list of strings",
                              name));
    record.fields.push_back({name, std::move(list)});
  }
  return record;
}

}  // namespace attnjit::cache
