#pragma once
// Shared helpers for [gpu] tests: device selection with the skip/fail rule and the seeded
// generator. The device buffer, the conversions and the float64 references are the
// harness library's (support/harness.hpp).
#include <cuda.h>

#include <cstdint>
#include <random>
#include <vector>

#include "attnjit/runtime.hpp"
#include "support/harness.hpp"

namespace attnjit::test {

// True when a GPU is usable (and makes device 0 current). Otherwise: when
// ATTNJIT_REQUIRE_GPU=1 (the GPU machine script) the test FAILS; elsewhere it prints a
// visible "SKIPPED (no GPU)" warning and returns false. Use as:
//   if (!attnjit::test::gpu_or_skip()) return;
bool gpu_or_skip();

// A generator seeded from ATTNJIT_TEST_SEED or the clock; the seed is printed so a
// failure can be replayed.
std::mt19937_64& rng();

// Checked mode (ATTNJIT_CHECK) on or off for a scope, restored after it.
struct CheckModeScope {
  bool was = check_mode();
  explicit CheckModeScope(bool on) { set_check_mode(on); }
  ~CheckModeScope() { set_check_mode(was); }
  CheckModeScope(const CheckModeScope&) = delete;
  CheckModeScope& operator=(const CheckModeScope&) = delete;
};

}  // namespace attnjit::test
