#pragma once
// The disk cache key: SHA-256 over a length-prefixed, versioned record of named fields.
//
// The cache does not know what the fields mean: the JIT decides what decides a cubin's
// bytes and builds the record (runtime/jit/key_record.hpp lists the fields). The cache
// hashes the fields in the order given, stores the record in meta.json (so `verify`
// can recompute the key from the entry alone) and needs one field by name: "arch", the
// folder an entry lives in.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace attnjit::cache {

struct KeyField {
  std::string name;
  std::variant<std::string, std::vector<std::string>> value;  // a text or a list of texts
};

struct KeyRecord {
  int version = 0;  // the record layout's version, chosen by whoever builds the record
  std::vector<KeyField> fields;

  // A text field's value, or nullptr when there is none of that name (or it is a list).
  const std::string* text(std::string_view name) const noexcept;
};

// 64 hex digits. Every part is length-prefixed, so moving bytes from one field to the
// next, or from one list item to the next, is a different key.
std::string cache_key(const KeyRecord& record);

// The record as JSON ({"record_version": v, <name>: text or [texts], ...} in field order)
// and back. The order of the fields is part of the record, so the JSON is ordered too.
// key_record_from_json throws Error(kCache) naming a missing or mistyped field.
nlohmann::ordered_json to_json(const KeyRecord& record);
KeyRecord key_record_from_json(const nlohmann::ordered_json& j);

}  // namespace attnjit::cache
