// Arch mismatch, for every kernel family in the registry (ops added later are walked too):
// precompiling for an arch the family does not declare is refused naming the op and the
// arch, and so is the kernel a plan would look up on a device of that arch — before any
// compile, cache write or launch.
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "attnjit/ops/mha_fwd.hpp"
#include "attnjit/ops/mla_decode.hpp"
#include "attnjit/precompile.hpp"
#include "ops/mha_fwd/config.hpp"
#include "ops/mla_decode/config.hpp"
#include "ops/registry.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"

using namespace attnjit;

namespace {

// Targets a family may lack: an A100 (as the CLI spells it and as ops::device_arch names the
// device), sm_90 without the arch-specific features wgmma needs, Hopper, Blackwell
// datacenter and consumer parts.
const std::vector<Arch> kArchs = {{8, 0, false}, {8, 0, true}, {9, 0, false}, kSm90a, kSm100a, {12, 0, true}};

}  // namespace

TEST_CASE("every kernel family refuses an arch it is not built for", "[args][arch]") {
  // A cache root that must never come into being (one per process: runs may overlap).
  const std::filesystem::path root = std::filesystem::temp_directory_path() /
                                     ("attnjit-test-op-archs-" + std::to_string(::getpid()));
  std::filesystem::remove_all(root);
  int refused = 0;
  for (const ops::OpSpec& op : ops::registry()) {
    const nlohmann::json config = op.default_set().front();
    for (const Arch& arch : kArchs) {
      if (op.supports(arch)) continue;
      INFO(op.name << " on " << arch.name());
      const std::string quoted = "'" + op.name + "'", rule = "not built for " + arch.name();
      // The public precompile. (The CLI skips such variants and counts them: test_precompile_cli.)
      REQUIRE_REFUSED(precompile(op.name, config.dump(), arch, root.string()),
                      ErrorKind::kUnsupportedConfig, quoted.c_str(), rule.c_str());
      // The recipe itself, which the op's plan reaches with the device's arch.
      REQUIRE_REFUSED(op.recipe(config, arch), ErrorKind::kUnsupportedConfig, op.name.c_str(),
                      rule.c_str());
      ++refused;
    }
  }
  // Each family lacks at least sm_80, sm_80a, sm_90 and sm_120a.
  CHECK(refused >= 4 * static_cast<int>(ops::registry().size()));
  CHECK_FALSE(std::filesystem::exists(root));  // nothing reached the cache
}

TEST_CASE("the sm_90a ops' plans refuse a Blackwell device's kernels", "[args][arch][mla_decode][mha_fwd]") {
  // What mla_decode_plan and mha_fwd_plan ask for on an sm_100 device (ops::device_arch):
  // the wgmma kernels exist for sm_90a only, and nothing is compiled for the other.
  const Arch blackwell{10, 0, true};
  const MlaDecodeConfig mla = mla_decode_default_config(DType::kBF16, 128, 1, 64);
  REQUIRE_REFUSED(ops::mla_main_kernel(mla, blackwell), ErrorKind::kUnsupportedConfig, "mla_decode",
                  "not built for sm_100a", "sm_90a only");
  REQUIRE_REFUSED(ops::mla_combine_kernel({mla.dtype, mla.num_heads}, blackwell),
                  ErrorKind::kUnsupportedConfig, "mla_decode_combine", "not built for sm_100a");
  REQUIRE_REFUSED(ops::mla_balance_kernel({mla.block_n}, blackwell), ErrorKind::kUnsupportedConfig,
                  "mla_decode_balance", "not built for sm_100a");
  const MhaFwdConfig mha = mha_fwd_default_config({});
  REQUIRE_REFUSED(ops::mha_main_kernel(mha, blackwell), ErrorKind::kUnsupportedConfig, "mha_fwd",
                  "not built for sm_100a", "sm_90a only");
  REQUIRE_REFUSED(ops::mha_combine_kernel({mha.dtype, mha.head_dim_v, false, false}, blackwell),
                  ErrorKind::kUnsupportedConfig, "mha_fwd_combine", "not built for sm_100a");
}
