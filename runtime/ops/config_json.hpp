#pragma once
// Reading an op's config from JSON with errors that name the field: unknown fields,
// wrong types and unknown enum names are all refused (a typo in a manifest must not
// silently fall back to a default).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>

#include "attnjit/error.hpp"
#include "attnjit/types.hpp"

namespace attnjit::ops {

// Parses a config's JSON text; a syntax error names the op.
inline nlohmann::json parse_config_text(std::string_view text, const std::string& op) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail_config(op + " config", fmt::format("invalid JSON: {}", e.what()));
  }
}

class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& j, std::string op) : j_(j), op_(std::move(op)) {
    if (!j_.is_object())
      fail_config(op_ + " config", fmt::format("must be a JSON object, got {}", j_.dump()));
  }

  int get_int(const char* field, int fallback) {
    const nlohmann::json* v = take(field);
    if (!v) return fallback;
    if (!v->is_number_integer())
      fail_config(where(field), fmt::format("must be an integer, got {}", v->dump()));
    return v->get<int>();
  }

  DType get_dtype(const char* field, DType fallback) {
    const nlohmann::json* v = take(field);
    if (!v) return fallback;
    auto d = v->is_string() ? parse_dtype(v->get<std::string>()) : std::nullopt;
    if (!d)
      fail_config(where(field),
                  fmt::format("unknown dtype {} (bf16, f16, f32, e4m3, e5m2, i32, u8)", v->dump()));
    return *d;
  }

  Swizzle get_swizzle(const char* field, Swizzle fallback) {
    const nlohmann::json* v = take(field);
    if (!v) return fallback;
    auto s = v->is_string() ? parse_swizzle(v->get<std::string>()) : std::nullopt;
    if (!s)
      fail_config(where(field), fmt::format("unknown swizzle {} (none, 32B, 64B, 128B)", v->dump()));
    return *s;
  }

  bool get_bool(const char* field, bool fallback) {
    const nlohmann::json* v = take(field);
    if (!v) return fallback;
    if (!v->is_boolean())
      fail_config(where(field), fmt::format("must be true or false, got {}", v->dump()));
    return v->get<bool>();
  }

  // One of `names` (an op's enum spelled as in its to_string); returns the index.
  template <size_t N>
  int get_choice(const char* field, const std::array<std::string_view, N>& names, int fallback) {
    const nlohmann::json* v = take(field);
    if (!v) return fallback;
    if (v->is_string())
      for (size_t i = 0; i < N; ++i)
        if (names[i] == v->get<std::string>()) return static_cast<int>(i);
    fail_config(where(field), fmt::format("unknown value {} ({})", v->dump(), fmt::join(names, ", ")));
  }

  // Call last: any field not read is unknown.
  void finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!seen_.count(it.key()))
        fail_config(where(it.key().c_str()), "unknown field");
  }

 private:
  const nlohmann::json* take(const char* field) {
    seen_.insert(field);
    auto it = j_.find(field);
    return it == j_.end() ? nullptr : &*it;
  }
  std::string where(const char* field) const { return fmt::format("{} config field '{}'", op_, field); }

  const nlohmann::json& j_;
  std::string op_;
  std::set<std::string> seen_;
};

}  // namespace attnjit::ops
