// mla_prefill_sparse configs as data: the field table, validation (errors name the field),
// the default, the mapping onto mla_decode_sparse's kernel config, and the registry entry.
#include <fmt/format.h>

#include <array>
#include <nlohmann/json.hpp>

#include "attnjit/error.hpp"
#include "attnjit/ops/mla_prefill_sparse.hpp"
#include "ops/field_table.hpp"
#include "ops/launch_support.hpp"
#include "ops/mla_decode_sparse/internal.hpp"
#include "ops/registry.hpp"

namespace attnjit {
namespace {

const auto& table() {
  using namespace ops::rules;
  static const ops::ConfigTable t{
      "mla_prefill_sparse"
#define ATTNJIT_FIELD(...) ATTNJIT_CONFIG_ROW(MlaPrefillSparseConfig, __VA_ARGS__)
#include "attnjit/ops/mla_prefill_sparse_config.def"
#undef ATTNJIT_FIELD
  };
  return t;
}

// The decode kernel's recipe under this op's arch rule, so a refusal names the prefill.
jit::KernelRecipe recipe(const MlaPrefillSparseConfig& c, Arch arch) {
  ops::require_sm90a(arch, "mla_prefill_sparse");
  return ops::mla_sparse_main_recipe(c.kernel(), arch);
}

}  // namespace

void MlaPrefillSparseConfig::validate() const {
  table().check_rules(*this);
  if (block_n == 64 && stages != 4)  // the ring must hold two 64-key steps
    fail_config(table().where("block_n"), fmt::format("64 needs stages 4, got stages {}", stages));
  if (schedule == MlaSparseSchedule::kTwoConsumers && block_n != 64)  // each consumer's S: 64 keys
    fail_config(table().where("schedule"), fmt::format("two_consumers needs block_n 64, got block_n {}", block_n));
  if (persistent && (schedule != MlaSparseSchedule::kTwoConsumers || cluster != 1))
    fail_config(table().where("persistent"),
                fmt::format("true needs two_consumers and cluster 1, got {} and cluster {}",
                            to_string(schedule), cluster));
  kernel().validate();  // the kernel's own limits (shared memory)
}

std::string MlaPrefillSparseConfig::to_json() const { return table().to_json(*this).dump(); }

MlaPrefillSparseConfig MlaPrefillSparseConfig::from_json(std::string_view text) {
  MlaPrefillSparseConfig c = table().from_json_text(text);
  c.validate();
  return c;
}

std::string MlaPrefillSparseConfig::describe() const { return table().describe(*this); }

MlaDecodeSparseConfig MlaPrefillSparseConfig::kernel() const {
  MlaDecodeSparseConfig k;
  k.cache_layout = MlaSparseLayout::kBF16;
  k.num_heads = num_heads;
  k.block_n = block_n;
  k.schedule = schedule;
  k.stages = stages;
  k.cluster = cluster;
  k.persistent = persistent;
  return k;
}

MlaPrefillSparseConfig mla_prefill_sparse_default_config(int num_heads) {
  MlaPrefillSparseConfig c;
  c.num_heads = num_heads;
  // Q (72 KiB) + four 36 KiB stages of 32 gathered keys (the 227 KiB exactly, with P);
  // two_consumers: each consumer's S over 64 keys, 128 a step (at the target row
  // 5681 µs against softmax_wg's 6381, H200).
  c.block_n = 64;
  c.stages = 4;
  c.schedule = MlaSparseSchedule::kTwoConsumers;
  // Persistent CTAs: the next tile's first fills under the current one's tail (config
  // JSON without the field reads false, so a softmax_wg or cluster-2 config stays valid).
  c.persistent = true;
  return c;
}

namespace ops {

std::vector<OpSpec> mla_prefill_sparse_op_specs() {
  OpSpec op;
  op.name = "mla_prefill_sparse";
  op.id = op_id(op.name);
  op.summary = "DeepSeek V3.2 sparse MLA prefill: each token's top-k bf16 rows by index, sink, "
               "lse and max logit";
  op.archs = {kSm90a};
  // Not tunable yet (one config per h): issue 21's benchmark table.
  op.tuning.shape_keys = "tokens, h, topk, pool";
  for (int h : {128, 64})
    for (int topk : {512, 2048, 8192})
      for (int pool : {32768, 131072})
        op.tuning.bench_shapes.push_back({{"tokens", 4096}, {"h", h}, {"topk", topk}, {"pool", pool}});
  op.default_set = [] {
    std::vector<nlohmann::json> set;
    for (int h : {16, 32, 64, 128})  // V3.2's 128 heads and its tensor-parallel shares
      set.push_back(nlohmann::json::parse(mla_prefill_sparse_default_config(h).to_json()));
    return set;
  };
  bind_config<MlaPrefillSparseConfig>(op, table(), recipe);
  return {op};
}

}  // namespace ops
}  // namespace attnjit
