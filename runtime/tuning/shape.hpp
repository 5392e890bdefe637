#pragma once
// Reading an op's tuning shape ({"rows": 4096, "dtype": "bf16", ...}) with errors that
// name the key: unknown keys, wrong types and out-of-range values are refused, missing
// keys take the op's defaults (the benchmark's).
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "attnjit/error.hpp"
#include "attnjit/types.hpp"

namespace attnjit::tuning {

// A shape value for an error message. Shapes are built from command-line text
// (`--shape k=v`), whose strings need not be valid UTF-8: a plain dump() would throw
// json::type_error (316) in place of the error being reported. Bad bytes print as U+FFFD.
inline std::string shape_value_text(const nlohmann::json& v) {
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Whether command-line shape text is valid UTF-8 (what JSON strings must hold). The CLI's
// `--shape` parsers refuse text that is not, naming the flag.
inline bool is_valid_utf8(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

class ShapeReader {
 public:
  ShapeReader(const nlohmann::json& j, std::string op, std::string keys)
      : j_(j), op_(std::move(op)), keys_(std::move(keys)) {
    if (!j_.is_object())
      fail_arg(op_ + " shape", fmt::format("must be a JSON object of {}, got {}", keys_, shape_value_text(j_)));
  }

  int64_t get_int(const char* key, int64_t fallback, int64_t lo, int64_t hi) {
    seen_.insert(key);
    auto it = j_.find(key);
    if (it == j_.end()) return fallback;
    if (!it->is_number_integer())
      fail_arg(where(key), fmt::format("must be an integer, got {}", shape_value_text(*it)));
    const int64_t v = it->get<int64_t>();
    if (v < lo || v > hi) fail_arg(where(key), fmt::format("must be in {}..{}, got {}", lo, hi, v));
    return v;
  }

  DType get_dtype(const char* key, DType fallback) {
    seen_.insert(key);
    auto it = j_.find(key);
    if (it == j_.end()) return fallback;
    auto d = it->is_string() ? parse_dtype(it->get<std::string>()) : std::nullopt;
    if (!d) fail_arg(where(key), fmt::format("unknown dtype {}", shape_value_text(*it)));
    return *d;
  }

  void finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!seen_.count(it.key()))
        fail_arg(where(it.key().c_str()), fmt::format("unknown key (expected {})", keys_));
  }

  std::string where(const char* key) const { return fmt::format("{} shape key '{}'", op_, key); }

 private:
  const nlohmann::json& j_;
  std::string op_, keys_;
  std::set<std::string> seen_;
};

}  // namespace attnjit::tuning
