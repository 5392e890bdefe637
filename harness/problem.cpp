#include "harness/problem.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "attnjit/error.hpp"
#include "harness/device.hpp"

namespace attnjit::harness {

using nlohmann::json;

// One function per ops.def row, defined in harness/<name>_problem.cpp.
#define ATTNJIT_OP(name) ProblemKind name##_problem();
#include "ops/ops.def"
#undef ATTNJIT_OP

const std::vector<ProblemKind>& problems() {
  static const std::vector<ProblemKind> all = [] {
    std::vector<ProblemKind> v;
#define ATTNJIT_OP(name) v.push_back(name##_problem());
#include "ops/ops.def"
#undef ATTNJIT_OP
    return v;
  }();
  return all;
}

const ProblemKind& find_problem(std::string_view op) {
  std::string known;
  for (const ProblemKind& k : problems()) {
    if (k.op == op) return k;
    known += fmt::format("{}{}", known.empty() ? "" : ", ", k.op);
  }
  fail_config("op", fmt::format("no problem for op '{}' (ops with one: {})", op, known));
}

json merge_config(const json& defaults, const json& overrides, const std::vector<std::string>& runtime_fields,
                  json& runtime) {
  if (!overrides.is_object())
    fail_arg("config", fmt::format("must be a JSON object of config fields, got {}", overrides.dump()));
  json merged = defaults;
  runtime = json::object();
  for (const auto& [key, value] : overrides.items()) {
    if (std::find(runtime_fields.begin(), runtime_fields.end(), key) != runtime_fields.end())
      runtime[key] = value;
    else
      merged[key] = value;  // an unknown key is the config reader's error, named there
  }
  return merged;
}

std::string config_source(const json* overrides, const json& planned, const json& heuristic) {
  if (overrides) return "given";
  return planned == heuristic ? "heuristic" : "tuning_db";
}

std::string compare_16bit(const std::vector<uint8_t>& ref, const std::vector<uint8_t>& got, bool f16,
                          double limit) {
  if (ref.size() != got.size())
    return fmt::format("output is {} bytes, the reference's {}", got.size(), ref.size());
  const DType dtype = f16 ? DType::kF16 : DType::kBF16;
  double diff2 = 0, ref2 = 0;
  size_t nonfinite = 0;
  for (size_t i = 0; i + 1 < ref.size(); i += 2) {
    uint16_t rb, gb;
    std::memcpy(&rb, ref.data() + i, 2);
    std::memcpy(&gb, got.data() + i, 2);
    const double r = from_bits(rb, dtype), g = from_bits(gb, dtype);
    // Outputs of finite inputs are finite (rows without keys are exactly 0): a NaN or inf on
    // either side is poison left behind or a broken kernel.
    if (!std::isfinite(r) || !std::isfinite(g)) {
      ++nonfinite;
      continue;
    }
    diff2 += (g - r) * (g - r);
    ref2 += r * r;
  }
  const double rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  if (nonfinite == 0 && rel <= limit) return {};
  return fmt::format("output differs from the reference's: relative L2 error {:.3g} (limit {}), {} "
                     "elements not finite",
                     rel, limit, nonfinite);
}

}  // namespace attnjit::harness
