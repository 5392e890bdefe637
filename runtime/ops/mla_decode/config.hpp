#pragma once
// Internal to the mla_decode op: the config tables' kernels (main, combine, balance, check), shared
// by the launcher (launch.cpp) and the registry entries (config.cpp).
#include "attnjit/ops/mla_decode.hpp"
#include "jit/kernel_table.hpp"

namespace attnjit::ops {

// The combine kernel's compile-time shape: the rows of combine_config.def.
struct MlaCombineConfig {
#define ATTNJIT_FIELD ATTNJIT_CONFIG_MEMBER
#include "ops/mla_decode/combine_config.def"
#undef ATTNJIT_FIELD
  void validate() const;
};

// The balanced schedule's kernel (mla_decode_schedule): the rows of balance_config.def.
struct MlaBalanceConfig {
#define ATTNJIT_FIELD ATTNJIT_CONFIG_MEMBER
#include "ops/mla_decode/balance_config.def"
#undef ATTNJIT_FIELD
  void validate() const;
};

// The checked mode's validation kernel: the rows of check_config.def.
struct MlaCheckConfig {
#define ATTNJIT_FIELD ATTNJIT_CONFIG_MEMBER
#include "ops/mla_decode/check_config.def"
#undef ATTNJIT_FIELD
  void validate() const;
};

struct TuningSpec;
TuningSpec mla_decode_tuning_spec();  // tuning.cpp

unsigned mla_smem_bytes(const MlaDecodeConfig& c);
int mla_threads(const MlaDecodeConfig& c);

// The loaded kernel of a config on `arch` (compiled on first use; validated then).
const jit::Kernel& mla_main_kernel(const MlaDecodeConfig& c, Arch arch);
const jit::Kernel& mla_combine_kernel(const MlaCombineConfig& c, Arch arch);
const jit::Kernel& mla_balance_kernel(const MlaBalanceConfig& c, Arch arch);
const jit::Kernel& mla_check_kernel(const MlaCheckConfig& c, Arch arch);

}  // namespace attnjit::ops
