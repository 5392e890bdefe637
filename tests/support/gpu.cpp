#include "support/gpu.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "driver/driver.hpp"
#include "support/catch.hpp"

namespace attnjit::test {

bool gpu_or_skip() {
  const char* req = std::getenv("ATTNJIT_REQUIRE_GPU");
  const bool required = req && std::string(req) == "1";
  if (!driver::available()) {
    if (required) FAIL("ATTNJIT_REQUIRE_GPU=1 but no GPU: " << driver::unavailable_reason());
    WARN("SKIPPED (no GPU): " << driver::unavailable_reason());
    return false;
  }
  int count = 0;
  driver::check(driver::api().cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (count == 0) {
    if (required) FAIL("ATTNJIT_REQUIRE_GPU=1 but the driver sees no device");
    WARN("SKIPPED (no GPU): the driver sees no device");
    return false;
  }
  driver::use_device(0);
  return true;
}

std::mt19937_64& rng() {
  static std::mt19937_64* gen = [] {
    uint64_t seed;
    if (const char* s = std::getenv("ATTNJIT_TEST_SEED"); s && *s)
      seed = std::strtoull(s, nullptr, 10);
    else
      seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    fmt::print("attnjit tests: random seed {} (set ATTNJIT_TEST_SEED to replay)\n", seed);
    return new std::mt19937_64(seed);
  }();
  return *gen;
}

}  // namespace attnjit::test
