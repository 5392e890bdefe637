// mla_decode_branch_fp8 configs as data: the field tables of the projection (the op's own
// kernel) and of the rope / norm / cache-write kernel, validation (errors name the field),
// the heuristic, the recipes and the registry entries. The attention stage's kernels are
// mla_decode's and mla_decode_fp8's (listed by their own entries).
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "attnjit/error.hpp"
#include "mla_decode_branch_fp8/layout.cuh"
#include "ops/field_table.hpp"
#include "ops/launch_support.hpp"
#include "ops/mla_decode_branch_fp8/internal.hpp"
#include "ops/registry.hpp"

namespace attnjit {
namespace {

namespace dev = layout::mla_decode_branch_fp8;

const auto& table() {
  using namespace ops::rules;
  static const ops::ConfigTable t{
      "mla_decode_branch_fp8"
#define ATTNJIT_FIELD(...) ATTNJIT_CONFIG_ROW(MlaBranchProjConfig, __VA_ARGS__)
#include "attnjit/ops/mla_decode_branch_fp8_config.def"
#undef ATTNJIT_FIELD
  };
  return t;
}

const auto& rope_table() {
  using namespace ops::rules;
  static const ops::ConfigTable t{
      "mla_branch_rope"
#define ATTNJIT_FIELD(...) ATTNJIT_CONFIG_ROW(ops::MlaBranchRopeConfig, __VA_ARGS__)
#include "ops/mla_decode_branch_fp8/rope_config.def"
#undef ATTNJIT_FIELD
  };
  return t;
}

jit::KernelRecipe proj_recipe(const MlaBranchProjConfig& c, Arch arch) {
  ops::require_sm90a(arch, "mla_decode_branch_fp8");  // fp8 wgmma
  return ops::table_recipe(table(), c,
                           {"mla_decode_branch_fp8", "mla_decode_branch_fp8/project.cuh",
                            "attnjit::mla_decode_branch_fp8::project_kernel"},
                           arch, ops::mla_branch_proj_smem_bytes(c));
}

jit::KernelRecipe rope_recipe(const ops::MlaBranchRopeConfig& c, Arch arch) {
  ops::require_sm90a(arch, "mla_branch_rope");  // cvt to e4m3 needs sm_89+
  return ops::table_recipe(rope_table(), c,
                           {"mla_branch_rope", "mla_decode_branch_fp8/rope_write.cuh",
                            "attnjit::mla_decode_branch_fp8::rope_write_kernel"},
                           arch, 0);
}

}  // namespace

std::string_view to_string(MlaBranchCache c) {
  switch (c) {
    case MlaBranchCache::kBF16: return "bf16";
    case MlaBranchCache::kFp8Token: return "fp8_token";
    case MlaBranchCache::kFp8Block: return "fp8_block";
  }
  return "?";
}

std::string_view to_string(MlaBranchStage s) {
  switch (s) {
    case MlaBranchStage::kAll: return "all";
    case MlaBranchStage::kRope: return "rope";
    case MlaBranchStage::kAbsorb: return "absorb";
    case MlaBranchStage::kAttention: return "attention";
    case MlaBranchStage::kOutput: return "output";
  }
  return "?";
}

void MlaBranchProjConfig::validate() const {
  table().check_rules(*this);
  if ((k_dim == 128) != (n_dim == 512))
    fail_config(table().where("n_dim"),
                fmt::format("must be 512 with k_dim 128 (absorption) or 128 with k_dim 512 (output "
                            "projection), got k_dim {} and n_dim {}",
                            k_dim, n_dim));
  if (block_n > n_dim)
    fail_config(table().where("block_n"), fmt::format("must be <= n_dim = {}", n_dim));
  if (block_m * k_dim > dev::kProjMaxActChunks * dev::kProjThreads * 16)
    fail_config(table().where("block_m"),
                fmt::format("block_m · k_dim must be <= {} (the activations the CTA's threads hold at "
                            "once), got {} · {}",
                            dev::kProjMaxActChunks * dev::kProjThreads * 16, block_m, k_dim));
  if (a_e4m3 && k_dim != 512)
    fail_config(table().where("a_e4m3"),
                fmt::format("e4m3 activations are the attention's output: needs k_dim 512, got {}", k_dim));
  const unsigned smem = ops::mla_branch_proj_smem_bytes(*this);
  if (smem > static_cast<unsigned>(kMaxSmemPerBlock))
    fail_config(table().where("m_steps"),
                fmt::format("the plan needs {} bytes of shared memory, over the {} a block may have "
                            "(m_steps > 1 keeps W and stages the output apart from it): a smaller "
                            "block_m or block_n, or m_steps 1",
                            smem, kMaxSmemPerBlock));
}

std::string MlaBranchProjConfig::to_json() const { return table().to_json(*this).dump(); }

MlaBranchProjConfig MlaBranchProjConfig::from_json(std::string_view text) {
  MlaBranchProjConfig c = table().from_json_text(text);
  c.validate();
  return c;
}

std::string MlaBranchProjConfig::describe() const { return table().describe(*this); }

MlaBranchProjConfig mla_branch_proj_default_config(int k_dim, int tokens, int num_heads, bool a_e4m3) {
  (void)num_heads;
  MlaBranchProjConfig c;
  c.k_dim = k_dim == 512 ? 512 : 128;
  c.n_dim = c.k_dim == 128 ? 512 : 128;
  if (c.k_dim == 512 && a_e4m3) {
    // e4m3 activations by TMA (H200, h 128, in a graph): 64 tokens 64 × 1 5.2 µs (32 × 1: 6.1);
    // 128 tokens 64 × 2 7.1 (64 × 1: 7.4, 32 × 2: 7.7); 256 tokens 32 × 4 11.3 (64 × 4: 11.8,
    // 64 × 2: 13.8, 32 × 8: 14.0). No register bound on the tile: the codes land in smem.
    c.a_e4m3 = true;
    c.block_m = 8;  // up to 64 tokens: the smallest tile that holds them, one step
    while (c.block_m < tokens && c.block_m < 64) c.block_m *= 2;
    if (tokens > 64) c.m_steps = 2;  // 65–128: 64 × 2, one CTA a head
    if (tokens > 128) c.block_m = 32, c.m_steps = 4;
    return c;
  }
  // The smallest token tile that holds the step (wgmma N: no idle columns at decode sizes),
  // up to what a thread's activation registers allow (128 at K 128, 64 at K 512); the output
  // projection's 33–64 tokens run best at 32 (6.5 µs; 64: 7.1).
  const int max_m = c.k_dim == 512 ? (tokens <= 64 ? 32 : 64) : 128;
  c.block_m = 8;
  while (c.block_m < tokens && c.block_m < max_m) c.block_m *= 2;
  // The absorption: 128 rows (four CTAs a head, the most weight requests in flight) while
  // the weights dominate (16 tokens: 7.5 µs against 7.7 at 256 and 8.1 at 512); from 33
  // tokens on, 256 rows halve the re-quantization of each head's activations (128 tokens:
  // 12.1 µs against 14.8 at 128 and 13.9 at 512). The output projection has 128 rows in all.
  c.block_n = c.k_dim == 128 && tokens > 32 ? 256 : 128;
  // Past 128 tokens a CTA walks token blocks with its W kept (H200, h 128, 256 tokens, in a
  // graph): the absorption 64 tokens × 512 rows × 2 steps, 14.3 µs (one step of 128 × 256:
  // 18.8); the output projection 32 × 4 steps, 19.1 µs (64 × 1: 24.1; 32 × 8: 31.9).
  // Up to 128 tokens one step a CTA was as fast or faster (128-token output projection: 64 ×
  // 1 10.2 µs, 32 × 2 10.3, 32 × 4 13.0).
  if (tokens > 128) {
    c.block_m = c.k_dim == 512 ? 32 : 64;
    c.block_n = c.n_dim;
    c.m_steps = c.k_dim == 512 ? 4 : 2;
  }
  return c;
}

namespace ops {

void MlaBranchRopeConfig::validate() const { rope_table().check_rules(*this); }

unsigned mla_branch_proj_smem_bytes(const MlaBranchProjConfig& c) {
  return dev::proj_smem_bytes(c.k_dim, c.block_m, c.block_n, c.m_steps, c.a_e4m3);
}

const jit::Kernel& mla_branch_proj_kernel(const MlaBranchProjConfig& c, Arch arch) {
  return table_kernel(table(), op_id("mla_decode_branch_fp8"), c, arch, proj_recipe);
}

const jit::Kernel& mla_branch_rope_kernel(const MlaBranchRopeConfig& c, Arch arch) {
  return table_kernel(rope_table(), op_id("mla_branch_rope"), c, arch, rope_recipe);
}

namespace {

OpSpec main_spec() {
  OpSpec op;
  op.name = "mla_decode_branch_fp8";
  op.id = op_id(op.name);
  op.summary = "the MLA decode branch: fp8 block-scale Q absorption and output projection "
               "around mla_branch_rope and the dense attention (bf16 or 640-byte fp8 cache)";
  op.archs = {kSm90a};
  // Not tunable yet; `attnjit bench mla_decode_branch_fp8` runs issue 22's rows.
  op.tuning.shape_keys = "b, q_len, h, s_k, cache";
  for (const char* cache : {"bf16", "fp8"})
    for (int h : {128, 16})
      for (int q_len : {1, 2})
        for (int s_k : {4096, 32768})
          op.tuning.bench_shapes.push_back(
              {{"b", 128}, {"q_len", q_len}, {"h", h}, {"s_k", s_k}, {"cache", cache}});
  op.default_set = [] {
    std::vector<nlohmann::json> set;
    for (int k : {128, 512})
      for (int tokens : {8, 16, 32, 64, 128, 256})
        for (bool a_e4m3 : {false, true})
          set.push_back(nlohmann::json::parse(mla_branch_proj_default_config(k, tokens, 128, a_e4m3).to_json()));
    std::sort(set.begin(), set.end());
    set.erase(std::unique(set.begin(), set.end()), set.end());
    return set;
  };
  bind_config<MlaBranchProjConfig>(op, table(), proj_recipe);
  return op;
}

OpSpec rope_spec() {
  OpSpec op;
  op.name = "mla_branch_rope";
  op.id = op_id(op.name);
  op.summary = "the MLA branch's RoPE of q and of the new KV rows, RMSNorm, and the cache "
               "write (bf16 576, fp8 640 with σ per row, fp8 656 with block scales)";
  op.archs = {kSm90a};
  op.default_set = [] {
    std::vector<nlohmann::json> set;
    for (int layout : {0, 1, 2}) {
      MlaBranchRopeConfig c;
      c.cache_layout = layout;
      set.push_back(nlohmann::json::parse(rope_table().to_json(c).dump()));
    }
    return set;
  };
  bind_config<MlaBranchRopeConfig>(op, rope_table(), rope_recipe);
  return op;
}

}  // namespace

std::vector<OpSpec> mla_decode_branch_fp8_op_specs() { return {main_spec(), rope_spec()}; }

}  // namespace ops
}  // namespace attnjit
