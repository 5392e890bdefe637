#pragma once
// attnjit's public API in one include.
#include "attnjit/error.hpp"
#include "attnjit/ops/merge_states.hpp"
#include "attnjit/ops/mha_fwd.hpp"
#include "attnjit/ops/mla_decode.hpp"
#include "attnjit/ops/mla_decode_fp8.hpp"
#include "attnjit/ops/tma_copy.hpp"
#include "attnjit/precompile.hpp"
#include "attnjit/runtime.hpp"
#include "attnjit/tensor.hpp"
#include "attnjit/tma.hpp"
#include "attnjit/tuning.hpp"
#include "attnjit/types.hpp"
