// mla_decode configs as data: the field tables of the main, combine, balance and check kernels,
// validation (errors name the field), the built-in heuristic, the kernels' recipes and the
// registry entries.
#include "ops/mla_decode/config.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "attnjit/error.hpp"
#include "mla_decode/layout.cuh"
#include "ops/field_table.hpp"
#include "ops/launch_support.hpp"
#include "ops/registry.hpp"

namespace attnjit {
namespace ops {

template <>
struct EnumSpelling<MlaSchedule> {
  static constexpr std::array<Spelled<MlaSchedule>, 2> kAll{{
      {MlaSchedule::kSeesaw, "seesaw", "attnjit::mla_decode::Schedule::kSeesaw"},
      {MlaSchedule::kSoftmaxWarpgroup, "softmax_wg", "attnjit::mla_decode::Schedule::kSoftmaxWarpgroup"},
  }};
};

}  // namespace ops

namespace {


// The config's fields are the rows of attnjit/ops/mla_decode_config.def.
const auto& table() {
  using namespace ops::rules;
  static const ops::ConfigTable t{
      "mla_decode"
#define ATTNJIT_FIELD(...) ATTNJIT_CONFIG_ROW(MlaDecodeConfig, __VA_ARGS__)
#include "attnjit/ops/mla_decode_config.def"
#undef ATTNJIT_FIELD
  };
  return t;
}

const auto& combine_table() {
  using namespace ops::rules;
  static const ops::ConfigTable t{
      "mla_decode_combine"
#define ATTNJIT_FIELD(...) ATTNJIT_CONFIG_ROW(ops::MlaCombineConfig, __VA_ARGS__)
#include "ops/mla_decode/combine_config.def"
#undef ATTNJIT_FIELD
  };
  return t;
}

const auto& balance_table() {
  using namespace ops::rules;
  static const ops::ConfigTable t{
      "mla_decode_balance"
#define ATTNJIT_FIELD(...) ATTNJIT_CONFIG_ROW(ops::MlaBalanceConfig, __VA_ARGS__)
#include "ops/mla_decode/balance_config.def"
#undef ATTNJIT_FIELD
  };
  return t;
}

const auto& check_table() {
  using namespace ops::rules;
  static const ops::ConfigTable t{
      "mla_decode_check"
#define ATTNJIT_FIELD(...) ATTNJIT_CONFIG_ROW(ops::MlaCheckConfig, __VA_ARGS__)
#include "ops/mla_decode/check_config.def"
#undef ATTNJIT_FIELD
  };
  return t;
}

jit::KernelRecipe main_recipe(const MlaDecodeConfig& c, Arch arch) {
  ops::require_sm90a(arch, "mla_decode");
  const bool seesaw = c.schedule == MlaSchedule::kSeesaw;
  const ops::KernelEntry entry{
      "mla_decode",
      seesaw ? "mla_decode/sm90_mla_decode_seesaw.cuh" : "mla_decode/sm90_mla_decode.cuh",
      seesaw ? "attnjit::mla_decode::seesaw::kernel" : "attnjit::mla_decode::kernel"};
  return ops::table_recipe(table(), c, entry, arch, ops::mla_smem_bytes(c));
}

jit::KernelRecipe combine_recipe(const ops::MlaCombineConfig& c, Arch arch) {
  ops::require_sm90a(arch, "mla_decode_combine");
  return ops::table_recipe(combine_table(), c,
                           {"mla_decode_combine", "mla_decode/combine.cuh",
                            "attnjit::mla_decode::combine_kernel"},
                           arch, 0);
}

jit::KernelRecipe balance_recipe(const ops::MlaBalanceConfig& c, Arch arch) {
  ops::require_sm90a(arch, "mla_decode_balance");
  return ops::table_recipe(balance_table(), c,
                           {"mla_decode_balance", "mla_decode/balance.cuh",
                            "attnjit::mla_decode::balance_kernel"},
                           arch, 0);
}

jit::KernelRecipe check_recipe(const ops::MlaCheckConfig& c, Arch arch) {
  return ops::table_recipe(check_table(), c,
                           {"mla_decode_check", "mla_decode/check.cuh",
                            "attnjit::mla_decode::check_kernel"},
                           arch, 0);
}

}  // namespace

std::string_view to_string(MlaSchedule s) { return ops::enum_name(s); }

void MlaDecodeConfig::validate() const {
  table().check_rules(*this);
  if (schedule == MlaSchedule::kSeesaw && (block_n != 64 || stages != 2))
    fail_config(table().where("schedule"),
                fmt::format("seesaw runs 64-key tiles in 2 buffers (block_n 64, stages 2), got "
                            "block_n {} and stages {}; softmax_wg takes other tiles",
                            block_n, stages));
  if (ops::mla_smem_bytes(*this) > kMaxSmemPerBlock)
    fail_config(table().where("stages"), fmt::format("needs {} B of shared memory, over {}",
                                                     ops::mla_smem_bytes(*this), kMaxSmemPerBlock));
}

std::string MlaDecodeConfig::to_json() const { return table().to_json(*this).dump(); }

MlaDecodeConfig MlaDecodeConfig::from_json(std::string_view text) {
  MlaDecodeConfig c = table().from_json_text(text);
  c.validate();
  return c;
}

std::string MlaDecodeConfig::describe() const { return table().describe(*this); }

MlaDecodeConfig mla_decode_default_config(DType dtype, int num_heads, int q_len, int page_size) {
  MlaDecodeConfig c;
  c.dtype = dtype;
  c.num_heads = num_heads;
  // Two compiled q_len bounds cover 1..8: plain decode, and MTP up to 8 (causal).
  c.max_q_len = q_len <= 1 ? 1 : (q_len <= 2 ? 2 : 8);
  c.page_size = page_size;
  return c;
}

namespace ops {

void MlaCombineConfig::validate() const { combine_table().check_rules(*this); }
void MlaBalanceConfig::validate() const { balance_table().check_rules(*this); }
void MlaCheckConfig::validate() const { check_table().check_rules(*this); }

int mla_threads(const MlaDecodeConfig& c) {
  // 384 threads (softmax + two P·V warpgroups) or 256 (the two seesaw warpgroups).
  return c.schedule == MlaSchedule::kSeesaw ? 2 * kWarpgroupThreads : 3 * kWarpgroupThreads;
}

unsigned mla_smem_bytes(const MlaDecodeConfig& c) {
  return layout::mla_decode::smem_bytes(dtype_bytes(c.dtype), c.block_m, c.block_n, c.stages,
                                        c.schedule == MlaSchedule::kSeesaw);
}

const jit::Kernel& mla_main_kernel(const MlaDecodeConfig& c, Arch arch) {
  return table_kernel(table(), op_id("mla_decode"), c, arch, main_recipe);
}

const jit::Kernel& mla_combine_kernel(const MlaCombineConfig& c, Arch arch) {
  return table_kernel(combine_table(), op_id("mla_decode_combine"), c, arch, combine_recipe);
}

const jit::Kernel& mla_balance_kernel(const MlaBalanceConfig& c, Arch arch) {
  return table_kernel(balance_table(), op_id("mla_decode_balance"), c, arch, balance_recipe);
}

const jit::Kernel& mla_check_kernel(const MlaCheckConfig& c, Arch arch) {
  return table_kernel(check_table(), op_id("mla_decode_check"), c, arch, check_recipe);
}

namespace {

OpSpec main_spec() {
  OpSpec op;
  op.name = "mla_decode";
  op.id = op_id(op.name);
  op.summary = "DeepSeek MLA decode over a paged latent cache (576/512), split-KV, MTP causal";
  op.archs = {kSm90a};
  op.tuning = mla_decode_tuning_spec();
  op.default_set = [] {
    std::vector<nlohmann::json> set;
    for (DType d : {DType::kBF16, DType::kF16})
      for (int h : {8, 16, 32, 64, 128})  // 8: 64- and 128-head models at TP 8 and 16
        for (int q : {1, 2, 8})
          set.push_back(nlohmann::json::parse(mla_decode_default_config(d, h, q, 64).to_json()));
    return set;
  };
  bind_config<MlaDecodeConfig>(op, table(), main_recipe);
  return op;
}

OpSpec combine_spec() {
  OpSpec op;
  op.name = "mla_decode_combine";
  op.id = op_id(op.name);
  op.summary = "merges mla_decode's split-KV partials through their lse (launched by mla_decode)";
  op.archs = {kSm90a};
  op.default_set = [] {
    std::vector<nlohmann::json> set;
    for (DType d : {DType::kBF16, DType::kF16})
      for (int h : {8, 16, 32, 64, 128})
        set.push_back(nlohmann::json::parse(combine_table().to_json({d, h}).dump()));
    return set;
  };
  bind_config<MlaCombineConfig>(op, combine_table(), combine_recipe);
  return op;
}

OpSpec balance_spec() {
  OpSpec op;
  op.name = "mla_decode_balance";
  op.id = op_id(op.name);
  op.summary = "mla_decode's balanced schedule: cuts a step's KV tiles into equal pieces "
               "(launched by mla_decode_schedule)";
  op.archs = {kSm90a};
  op.default_set = [] {
    std::vector<nlohmann::json> set;
    for (int n : {32, 64}) set.push_back(nlohmann::json::parse(balance_table().to_json({n}).dump()));
    return set;
  };
  bind_config<MlaBalanceConfig>(op, balance_table(), balance_recipe);
  return op;
}

}  // namespace

std::vector<OpSpec> mla_decode_op_specs() { return {main_spec(), combine_spec(), balance_spec()}; }

}  // namespace ops
}  // namespace attnjit
