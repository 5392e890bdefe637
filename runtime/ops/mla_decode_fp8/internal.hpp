#pragma once
// mla_decode_fp8's host internals: the config tables' kernels (config.cpp), the argument
// checks (args.cpp), read by the plan and the launches (launch.cpp) and the quantizer
// (quantize.cpp). The split machinery, Sizes and the device check are mla_decode's.
#include <cuda.h>

#include "attnjit/ops/mla_decode_fp8.hpp"
#include "jit/kernel_table.hpp"
#include "mla_decode_fp8/layout.cuh"
#include "ops/mla_decode/internal.hpp"

namespace attnjit::ops {

// The quantizer's compile-time shape: the rows of quantize_config.def.
struct MlaFp8QuantizeConfig {
#define ATTNJIT_FIELD ATTNJIT_CONFIG_MEMBER
#include "ops/mla_decode_fp8/quantize_config.def"
#undef ATTNJIT_FIELD
  void validate() const;
};

unsigned mla_fp8_smem_bytes(const MlaDecodeFp8Config& c);
// Three warpgroups (softmax + two P·V, or two seesaw roles + the widening producer); the
// narrow schedule's two consumer warpgroups.
inline int mla_fp8_threads(int schedule) {
  return schedule == 2 ? layout::mla_decode_fp8::kNarrowConsumers * 128 : 3 * 128;
}

const jit::Kernel& mla_fp8_main_kernel(const MlaDecodeFp8Config& c, Arch arch);
const jit::Kernel& mla_fp8_quantize_kernel(const MlaFp8QuantizeConfig& c, Arch arch);

}  // namespace attnjit::ops

namespace attnjit::mla_fp8_detail {

// mla_decode's view of an fp8 shape / config: the split schedule, its bounds and the
// shape rules are mla_decode's, read through these.
MlaDecodeShape as_mla_shape(const MlaDecodeFp8Shape& s);
MlaDecodeConfig as_mla_config(const MlaDecodeFp8Config& c);

// The sizes of a checked call (mla_decode's) and its row form.
struct Fp8Sizes {
  mla_detail::Sizes s;
  bool per_tensor = false;  // 576-byte q and cache rows, one σ_Q and one σ_KV
  bool three = false;       // the three-tensor cache form
  int q_scale_mode = 0;     // layout::mla_decode_fp8::QScaleMode
};

// Every host-visible rule of a call (errors name the argument).
Fp8Sizes check_args(const MlaDecodeFp8Args& a, const MlaDecodeFp8Config& c);

}  // namespace attnjit::mla_fp8_detail
