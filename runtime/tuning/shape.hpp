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

class ShapeReader {
 public:
  ShapeReader(const nlohmann::json& j, std::string op, std::string keys)
      : j_(j), op_(std::move(op)), keys_(std::move(keys)) {
    if (!j_.is_object())
      fail_arg(op_ + " shape", fmt::format("must be a JSON object of {}, got {}", keys_, j_.dump()));
  }

  int64_t get_int(const char* key, int64_t fallback, int64_t lo, int64_t hi) {
    seen_.insert(key);
    auto it = j_.find(key);
    if (it == j_.end()) return fallback;
    if (!it->is_number_integer())
      fail_arg(where(key), fmt::format("must be an integer, got {}", it->dump()));
    const int64_t v = it->get<int64_t>();
    if (v < lo || v > hi) fail_arg(where(key), fmt::format("must be in {}..{}, got {}", lo, hi, v));
    return v;
  }

  DType get_dtype(const char* key, DType fallback) {
    seen_.insert(key);
    auto it = j_.find(key);
    if (it == j_.end()) return fallback;
    auto d = it->is_string() ? parse_dtype(it->get<std::string>()) : std::nullopt;
    if (!d) fail_arg(where(key), fmt::format("unknown dtype {}", it->dump()));
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
