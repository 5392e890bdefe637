#pragma once
// What a tuning worker measures: per op, a Bench that owns one shape's inputs on the GPU,
// readies a candidate (parse, load, attributes) and launches it, and compares its output
// with the reference's. Timing itself (CUDA events, warm-up, median) is bench_util.hpp's.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "driver/driver.hpp"

namespace attnjit::tune {

class Bench {
 public:
  virtual ~Bench() = default;
  // Parses `candidate` and loads its kernels; the returned call only enqueues one op call on
  // the null stream reading input copy `i % copies` (rotating copies keeps L2 cold).
  // Throws Error: kUnsupportedConfig/kBadArgument/kCompile/kCache when the candidate cannot
  // run here, kDriver when the driver refuses.
  virtual std::function<void(int i)> prepare(const nlohmann::json& candidate) = 0;
  // Fills the output of copy 0 with a pattern no kernel writes (NaN for floats), so a
  // kernel that writes nothing cannot pass as its reference.
  virtual void poison_output() = 0;
  virtual std::vector<uint8_t> output() = 0;  // copy 0's output, after a synchronize
  // "" when `got` matches the reference `ref` (bit for bit, or within the op's tolerance),
  // else what differs.
  virtual std::string compare(const std::vector<uint8_t>& ref,
                              const std::vector<uint8_t>& got) const = 0;
};

struct Tunable {
  std::string op;
  std::function<std::unique_ptr<Bench>(const nlohmann::json& shape, const driver::DeviceInfo&)> make;
};

// tma_copy, mla_decode and mha_fwd (their shapes: ops::TuningSpec::canonical_shape).
std::vector<Tunable> builtin_tunables();

}  // namespace attnjit::tune
