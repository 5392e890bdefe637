// `--shape k=v,...` strings (cli.hpp). Apart from bench.cpp so the fuzz target
// (tests/fuzz/fuzz_shape.cpp) links them without the benchmark.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "attnjit/error.hpp"
#include "cli.hpp"
#include "tuning/shape.hpp"

namespace attnjit::cli {

std::map<std::string, std::string> parse_shape(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      fail_arg("--shape", fmt::format("'{}' is not key=value", item));
    out[item.substr(0, eq)] = item.substr(eq + 1);
    pos = end + 1;
  }
  return out;
}

nlohmann::json parse_shape_json(const std::string& text) {
  // The shape becomes JSON (dumped for case seeds and messages): only valid UTF-8.
  if (!tuning::is_valid_utf8(text)) fail_arg("--shape", "the text is not valid UTF-8");
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : parse_shape(text)) {
    if (k == "dtype") {
      j[k] = v;
      continue;
    }
    try {
      size_t used = 0;
      const long long value = std::stoll(v, &used);
      if (used != v.size()) throw std::invalid_argument(v);
      j[k] = value;
    } catch (const std::logic_error&) {
      // A word (layout=bf16, sink=-inf) goes to the problem as a string; it names its words.
      const bool word = std::any_of(v.begin(), v.end(), [](char ch) { return std::isalpha(static_cast<unsigned char>(ch)); }) &&
                        std::all_of(v.begin(), v.end(), [](char ch) {
                          return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '+' || ch == '_';
                        });
      if (!word) fail_arg("--shape", fmt::format("{}={} is neither an integer nor a word", k, v));
      j[k] = v;
    }
  }
  return j;
}

}  // namespace attnjit::cli
