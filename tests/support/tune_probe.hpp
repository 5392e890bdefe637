#pragma once
// Host side of the test-only kernel family kernel_templates/testing/tune_probe.cuh: an op
// spec (not in the registry) with a tuning space over its modes, and the harness problem
// the test worker binary (tune_test_worker.cpp) times. Shape: {"n": words}.
#include "harness/problem.hpp"
#include "ops/registry.hpp"

namespace attnjit::test {

inline constexpr uint32_t kTuneProbeOpId = 1200;  // test families use ids >= 1000

// modes 0 (correct), 1 (wrong), 2 (illegal address), 3 (trap), 4 (hang) × threads 128, 256.
const ops::OpSpec& tune_probe_op();
harness::ProblemKind tune_probe_problem();

}  // namespace attnjit::test
