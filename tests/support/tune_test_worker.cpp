// The tests' tuning worker: `attnjit tune-worker` plus the test-only tune_probe family,
// so a GPU test can sweep candidates that are wrong, fault, trap or hang without adding
// them to the product's CLI. Usage: attnjit_tune_test_worker tune-worker --device N
#include <cstdio>
#include <cstdlib>
#include <string>

#include "support/tune_probe.hpp"
#include "tune/worker.hpp"

int main(int argc, char** argv) {
  int device = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) device = std::atoi(argv[++i]);
  }
  if (argc < 2 || std::string(argv[1]) != "tune-worker" || device < 0) {
    std::fprintf(stderr, "usage: %s tune-worker --device N\n", argv[0]);
    return 2;
  }
  std::vector<attnjit::harness::ProblemKind> kinds = attnjit::harness::problems();
  kinds.push_back(attnjit::test::tune_probe_problem());
  return attnjit::tune::worker_main(device, kinds);
}
