// The device-library test kernels (device_library_kernels.hpp) compile without spills
// or local memory, and their SASS holds the instructions each test is about. No GPU
// needed; the GPU runs are in test_device_library.cpp.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "attnjit/tma.hpp"
#include "attnjit/types.hpp"
#include "driver/driver.hpp"
#include "jit/kernel_table.hpp"
#include "support/catch.hpp"
#include "support/gpu.hpp"
#include "support/sass.hpp"
#include "gpu/device_library_kernels.hpp"

using namespace attnjit;
using namespace attnjit::test::device_lib;

// =========================================================================================
// No GPU needed: every variant compiles without spills or local memory, and its SASS holds
// the instructions the test is about.
// =========================================================================================

namespace {

void check_common(const jit::CompiledKernel& k, const std::optional<std::string>& sass) {
  // CHECK, not REQUIRE: without a parsed ptxas report the SASS checks below still run.
  CHECK(k.ptxas.parsed);
  CHECK(k.ptxas.spill_store_bytes == 0);
  CHECK(k.ptxas.spill_load_bytes == 0);
  CHECK(k.ptxas.stack_frame_bytes == 0);
  if (sass) {
    CHECK(test::count_opcode(*sass, "LDL") == 0);
    CHECK(test::count_opcode(*sass, "STL") == 0);
  }
}

}  // namespace

TEST_CASE("device-library test kernels compile to the expected SASS", "[device-lib][nvrtc]") {
  for (const TmaMulticastParams& p : multicast_cases()) {
    INFO(describe(p));
    const jit::CompiledKernel k = jit::compile_recipe(multicast_recipe(p));
    const auto sass = test::disassemble(k.cubin);
    check_common(k, sass);
    // The report as NVRTC gave it: one GPU-machine run found no "used N barriers" in it
    // where the same build had found it the call before.
    INFO("NVRTC log:\n" << k.log);
    CHECK(k.ptxas.barriers == 2);  // MulticastBar: __syncthreads' 0 and kConsumersRead
    if (sass) {
      const std::string load = p.rank == 2 ? "UTMALDG.2D.MULTICAST" : "UTMALDG.3D.MULTICAST";
      CHECK(test::count_opcode(*sass, load) >= 1);
      CHECK(test::count_opcode(*sass, "UTMALDG") == test::count_opcode(*sass, load));
    }
  }
  for (const WsPipelineParams& p : ws_cases()) {
    INFO(describe(p));
    const jit::CompiledKernel k = jit::compile_recipe(ws_recipe(p));
    // setmaxnreg is honoured: ptxas did not warn that it ignores it (C7508).
    CHECK(k.log.find("C7508") == std::string::npos);
    const auto sass = test::disassemble(k.cubin);
    check_common(k, sass);
    // ConsumerBar ids 0..3 as immediates (an id in a register would reserve all 16).
    INFO("NVRTC log:\n" << k.log);
    CHECK(k.ptxas.barriers == 4);
    if (sass) {
      CHECK(test::count_opcode(*sass, "USETMAXREG") >= 2);  // dealloc + alloc
      CHECK(test::count_opcode(*sass, "HGMMA") == 4);       // one k-block: 4 k16 steps
      CHECK(test::count_opcode(*sass, "UTMALDG") == 2);     // A and B per stage
    }
  }
  for (const PvFragmentParams& p : pv_cases()) {
    INFO(describe(p));
    const jit::CompiledKernel k = jit::compile_recipe(pv_recipe(p));
    const auto sass = test::disassemble(k.cubin);
    check_common(k, sass);
    if (sass) {
      CHECK(test::count_opcode(*sass, "HGMMA") == p.k1 / 16 + p.n1 / 16);
      CHECK(test::count_opcode(*sass, "F2FP") == p.n1 / 4);  // one cvt per packed pair
    }
  }
  // The PDL kernels the GPU case launches: griddepcontrol.launch_dependents is PREEXIT,
  // griddepcontrol.wait is ACQBULK.
  for (const auto& [primary, p] : {std::pair{true, PdlParams{kPdlDelayNs, 1}},
                                   std::pair{false, PdlParams{0, 1}},
                                   std::pair{false, PdlParams{0, 0}}}) {
    INFO((primary ? "pdl primary" : "pdl dependent") << " wait " << p.wait_prior_grids);
    const jit::CompiledKernel k = jit::compile_recipe(pdl_recipe(primary, p));
    const auto sass = test::disassemble(k.cubin);
    check_common(k, sass);
    if (sass) {
      CHECK(test::count_opcode(*sass, "PREEXIT") == 1);
      CHECK(test::count_opcode(*sass, "ACQBULK") == p.wait_prior_grids);
    }
  }
}
