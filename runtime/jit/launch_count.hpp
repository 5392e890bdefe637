#pragma once
// How many kernel launches attnjit has attempted in this process. Every kernel an op runs
// (main, combine, schedule and check kernels alike) reaches the driver through
// jit::Kernel::launch, which counts the call before it touches the driver. Internal: tests
// read it to show that a refused call launched nothing, on a machine with a GPU as well as
// without one.
#include <cstdint>

namespace attnjit::jit {

uint64_t launch_count() noexcept;

}  // namespace attnjit::jit
