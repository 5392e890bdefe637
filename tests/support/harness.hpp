#pragma once
// The harness library (harness/: device buffer, conversions, float64 references and their
// comparisons), which `attnjit bench` and the tune worker use too, reachable from the tests
// as test::X.
#include "harness/device.hpp"
#include "harness/mha_reference.hpp"
#include "harness/mla_reference.hpp"

namespace attnjit::test {
using namespace attnjit::harness;  // NOLINT(google-build-using-namespace): one vocabulary
}  // namespace attnjit::test
