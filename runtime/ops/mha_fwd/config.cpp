// mha_fwd config as data: validation (errors name the field), canonical JSON, the built-in
// heuristic, and the kernel recipes (generated instantiations) of the main and combine
// kernels.
#include "ops/mha_fwd/config.hpp"

#include <fmt/format.h>

#include <array>
#include <nlohmann/json.hpp>

#include "attnjit/error.hpp"
#include "mha_fwd/layout.cuh"
#include "ops/field_table.hpp"
#include "ops/launch_support.hpp"
#include "ops/registry.hpp"

namespace attnjit {
namespace ops {

template <>
struct EnumSpelling<MaskKind> {
  static constexpr std::array<Spelled<MaskKind>, 5> kAll{{
      {MaskKind::kNone, "none", "attnjit::mha_fwd::Mask::kNone"},
      {MaskKind::kCausal, "causal", "attnjit::mha_fwd::Mask::kCausal"},
      {MaskKind::kWindow, "window", "attnjit::mha_fwd::Mask::kWindow"},
      {MaskKind::kCausalWindow, "causal_window", "attnjit::mha_fwd::Mask::kCausalWindow"},
      {MaskKind::kChunked, "chunked", "attnjit::mha_fwd::Mask::kChunked"},
  }};
};
template <>
struct EnumSpelling<ScoreMod> {
  static constexpr std::array<Spelled<ScoreMod>, 3> kAll{{
      {ScoreMod::kNone, "none", "attnjit::mha_fwd::Mod::kNone"},
      {ScoreMod::kSoftcap, "softcap", "attnjit::mha_fwd::Mod::kSoftcap"},
      {ScoreMod::kAlibi, "alibi", "attnjit::mha_fwd::Mod::kAlibi"},
  }};
};
template <>
struct EnumSpelling<KvLayout> {
  static constexpr std::array<Spelled<KvLayout>, 2> kAll{{
      {KvLayout::kContiguous, "contiguous", "attnjit::mha_fwd::Layout::kContiguous"},
      {KvLayout::kPaged, "paged", "attnjit::mha_fwd::Layout::kPaged"},
  }};
};

}  // namespace ops

std::string_view to_string(MaskKind m) noexcept { return ops::enum_name(m); }
std::string_view to_string(ScoreMod s) noexcept { return ops::enum_name(s); }
std::string_view to_string(KvLayout l) noexcept { return ops::enum_name(l); }

namespace {

bool pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

// The config's fields are the rows of attnjit/ops/mha_fwd_config.def.
const auto& table() {
  using namespace ops::rules;
  static const ops::ConfigTable t{
      "mha_fwd"
#define ATTNJIT_FIELD(...) ATTNJIT_CONFIG_ROW(MhaFwdConfig, __VA_ARGS__)
#include "attnjit/ops/mha_fwd_config.def"
#undef ATTNJIT_FIELD
  };
  return t;
}

const auto& combine_table() {
  using namespace ops::rules;
  static const ops::ConfigTable t{
      "mha_fwd_combine"
#define ATTNJIT_FIELD(...) ATTNJIT_CONFIG_ROW(ops::MhaCombineConfig, __VA_ARGS__)
#include "ops/mha_fwd/combine_config.def"
#undef ATTNJIT_FIELD
  };
  return t;
}

const auto& check_table() {
  using namespace ops::rules;
  static const ops::ConfigTable t{
      "mha_fwd_check"
#define ATTNJIT_FIELD(...) ATTNJIT_CONFIG_ROW(ops::MhaCheckConfig, __VA_ARGS__)
#include "ops/mha_fwd/check_config.def"
#undef ATTNJIT_FIELD
  };
  return t;
}

}  // namespace

int MhaFwdConfig::q_buffers() const {
  return layout::mha_fwd::q_buffers(dtype_bytes(dtype), head_dim, head_dim_v, block_m, block_n,
                                    stages, persistent);
}

unsigned MhaFwdConfig::dynamic_smem_bytes() const {
  return layout::mha_fwd::smem_bytes(dtype_bytes(dtype), head_dim, head_dim_v, block_m, block_n,
                                     stages, persistent);
}

void MhaFwdConfig::validate() const {
  table().check_rules(*this);
  auto bad = [](const char* field, const std::string& rule) { fail_config(table().where(field), rule); };
  if (!(head_dim_v == head_dim && head_dim != 192) && !(head_dim == 192 && head_dim_v == 128))
    bad("head_dim_v", fmt::format("must equal head_dim (64, 128, 256), or be 128 with head_dim "
                                  "192; got head_dim {} head_dim_v {}",
                                  head_dim, head_dim_v));
  if (persistent && block_m != 128)
    bad("persistent", fmt::format("needs block_m 128 (a producer and two consumer warpgroups "
                                  "share the registers), got block_m {}",
                                  block_m));
  // Registers per consumer thread: O (dv/2 floats), S (block_n/2) and P (block_n/4) under
  // the cap, with room for addresses and row state: 255 for two consumer warpgroups, 232
  // for them next to a producer (persistent), 168 for three (384 threads).
  const int cap = block_m == 192 ? 168 : (persistent ? 232 : 255);
  const int accumulators = cap == 168 ? 128 : (cap == 232 ? 192 : 224);
  if (head_dim_v / 2 + 3 * block_n / 4 > accumulators)
    bad("block_n", fmt::format("{} keys with head_dim_v {} need {} accumulator registers per "
                               "thread (O + S + P), over the {} that fit the {}-register cap of "
                               "block_m {}{}",
                               block_n, head_dim_v, head_dim_v / 2 + 3 * block_n / 4, accumulators,
                               cap, block_m, persistent ? " persistent" : ""));
  if (kv_layout == KvLayout::kPaged) {
    if (page_size < 16 || page_size > 256 || !pow2(page_size))
      bad("page_size", fmt::format("must be a power of two in 16..256 for paged KV, got {}", page_size));
    if (!pow2(block_n))
      bad("block_n", fmt::format("must be a power of two with paged KV (pages tile the KV block "
                                 "or the other way round), got {}",
                                 block_n));
  } else {
    if (page_size != 0)
      bad("page_size", fmt::format("must be 0 unless kv_layout is paged, got {}", page_size));
  }
  if (dynamic_smem_bytes() > static_cast<unsigned>(kMaxSmemPerBlock))
    bad("stages", fmt::format("{} stages of {}-key K/V tiles need {} B of shared memory, over {}",
                              stages, block_n, dynamic_smem_bytes(), kMaxSmemPerBlock));
}

std::string MhaFwdConfig::to_json() const { return table().to_json(*this).dump(); }

MhaFwdConfig MhaFwdConfig::from_json(std::string_view text) {
  MhaFwdConfig c = table().from_json_text(text);
  c.validate();
  return c;
}

std::string MhaFwdConfig::describe() const { return table().describe(*this); }

MhaFwdFeatures mha_fwd_features(const MhaFwdConfig& c) {
  return {c.dtype,  c.head_dim,  c.head_dim_v, c.mask,  c.score_mod,
          c.ragged, c.kv_layout, c.page_size,  c.group, c.sink};
}

MhaFwdConfig mha_fwd_default_config(const MhaFwdFeatures& f) {
  MhaFwdConfig c;
  c.dtype = f.dtype;
  c.head_dim = f.head_dim;
  c.head_dim_v = f.head_dim_v;
  c.mask = f.mask;
  c.score_mod = f.score_mod;
  c.ragged = f.ragged;
  c.kv_layout = f.kv_layout;
  c.page_size = f.kv_layout == KvLayout::kPaged ? f.page_size : 0;
  c.sink = f.sink;
  // Persistent launch for contiguous KV: 5–19 % faster on every bench row on an H100
  // (docs/performance.md, "What the heuristics rest on"), the short rows most. Not for paged KV (grid launch as
  // before) nor for d256 with a score mod (its consumers spill at the 232-register cap).
  const bool paged = f.kv_layout == KvLayout::kPaged;
  c.persistent = !paged && (f.head_dim_v < 256 || f.score_mod == ScoreMod::kNone);
  c.block_n = ops::mha_default_block_n(c);
  // 2 stages: a third never paid, except for persistent d64 unmasked (208 keys: 4k 2548
  // against 2599 µs; the tile is short enough that a load takes about as long as one).
  c.stages = c.persistent && f.head_dim_v == 64 && f.mask == MaskKind::kNone ? 3 : 2;
  c.group = f.group;
  return ops::mha_grid_for_packed_groups(c);  // packed query heads: the grid launch
}

namespace ops {

int mha_default_block_n(const MhaFwdConfig& c) {
  // Key tiles measured on an H100 (docs/performance.md): the largest tile whose O + S + P
  // fragments fit the registers wins while softmax per tile is the bottleneck. Persistent
  // (232 registers): d64 208 keys unmasked (with 3 stages), 192 under a mask; d128 160
  // (4k: 1710 against 1888 µs for 128; 192 spills); d256 80; d192 128. Grid launch (255 registers): d64 256 keys
  // (240 under a mask, whose per-key test spills at 256), d128 192, d256 80 (64 paged).
  // Paged KV needs a power of two.
  const bool paged = c.kv_layout == KvLayout::kPaged;
  if (c.persistent) {
    if (c.head_dim_v == 64) return c.mask == MaskKind::kNone ? 208 : 192;
    return c.head_dim_v == 128 ? (c.head_dim == 128 ? 160 : 128) : 80;
  }
  if (c.head_dim_v == 64) return c.mask == MaskKind::kNone ? 256 : (paged ? 128 : 240);
  if (c.head_dim_v == 128) return c.head_dim == 128 && !paged ? 192 : 128;
  return paged ? 64 : 80;
}

MhaFwdConfig mha_grid_for_packed_groups(MhaFwdConfig c) {
  if (c.group > 0 && c.persistent) {
    c.persistent = false;
    c.block_n = mha_default_block_n(c);
    c.stages = 2;
  }
  return c;
}

int mha_short_call_block_n(const MhaFwdConfig& base, int64_t s_k) {
  const bool causal = base.mask == MaskKind::kCausal;
  if ((!causal && base.mask != MaskKind::kNone) || base.kv_layout == KvLayout::kPaged || s_k <= 0)
    return 0;
  auto padded = [s_k](int64_t n) { return (s_k + n - 1) / n * n; };
  // Unmasked: a tile whose last one wastes over 5 % of the keys fewer than base's.
  auto less_padding = [&](int n) { return (padded(base.block_n) - padded(n)) * 20 > s_k ? n : 0; };
  if (base.head_dim == 64 && base.head_dim_v == 64) {
    // Persistent: 128 keys up to 2k under causal (1k: 486 against 562 µs with 192). Grid:
    // 64 up to 4k.
    if (base.persistent) return causal && s_k <= 2048 ? 128 : 0;
    return causal && s_k <= 4096 ? 64 : 0;
  }
  if (base.head_dim != 128 || base.head_dim_v != 128 || s_k > 2048 || base.block_n <= 128) return 0;
  if (causal) return 128;
  return less_padding(128);
}

void MhaCombineConfig::validate() const { combine_table().check_rules(*this); }
void MhaCheckConfig::validate() const { check_table().check_rules(*this); }

jit::KernelRecipe mha_fwd_recipe(const MhaFwdConfig& c, Arch arch) {
  require_sm90a(arch, "mha_fwd");
  return table_recipe(table(), c,
                      {"mha_fwd", "mha_fwd/sm90_mha_fwd.cuh", "attnjit::mha_fwd::kernel"},
                      arch, c.dynamic_smem_bytes());
}

jit::KernelRecipe mha_combine_recipe(const MhaCombineConfig& c, Arch arch) {
  require_sm90a(arch, "mha_fwd_combine");
  return table_recipe(combine_table(), c,
                      {"mha_fwd_combine", "mha_fwd/combine.cuh", "attnjit::mha_fwd::combine_kernel"},
                      arch, 0);
}

jit::KernelRecipe mha_check_recipe(const MhaCheckConfig& c, Arch arch) {
  return table_recipe(check_table(), c,
                      {"mha_fwd_check", "mha_fwd/check.cuh", "attnjit::mha_fwd::check_kernel"},
                      arch, 0);
}

const jit::Kernel& mha_main_kernel(const MhaFwdConfig& c, Arch arch) {
  return table_kernel(table(), op_id("mha_fwd"), c, arch, mha_fwd_recipe);
}

const jit::Kernel& mha_combine_kernel(const MhaCombineConfig& c, Arch arch) {
  return table_kernel(combine_table(), op_id("mha_fwd_combine"), c, arch, mha_combine_recipe);
}

const jit::Kernel& mha_check_kernel(const MhaCheckConfig& c, Arch arch) {
  return table_kernel(check_table(), op_id("mha_fwd_check"), c, arch, mha_check_recipe);
}

void bind_mha_fwd_config(OpSpec& op) { bind_config<MhaFwdConfig>(op, table(), mha_fwd_recipe); }
void bind_mha_combine_config(OpSpec& op) {
  bind_config<MhaCombineConfig>(op, combine_table(), mha_combine_recipe);
}
nlohmann::json mha_combine_json(const MhaCombineConfig& c) {
  return nlohmann::json::parse(combine_table().to_json(c).dump());
}

// ---- registry ------------------------------------------------------------------------------


namespace {

OpSpec main_spec() {
  OpSpec op;
  op.name = "mha_fwd";
  op.id = op_id(op.name);
  op.summary = "FlashAttention forward: masks, GQA, ragged/paged KV, sinks, split-KV";
  op.archs = {kSm90a};
  op.default_set = [] {
    std::vector<nlohmann::json> set;
    auto add = [&](const MhaFwdConfig& c) { set.push_back(nlohmann::json::parse(c.to_json())); };
    const std::pair<int, int> dims[] = {{64, 64}, {128, 128}, {256, 256}, {192, 128}};
    for (DType dt : {DType::kBF16, DType::kF16})
      for (auto [d, dv] : dims)
        for (MaskKind m : {MaskKind::kNone, MaskKind::kCausal}) {
          MhaFwdConfig c = mha_fwd_default_config({.dtype = dt, .head_dim = d, .head_dim_v = dv, .mask = m});
          add(c);
          // The smaller tile mha_fwd_selected_config picks for short calls.
          if (const int n = mha_short_call_block_n(c, 1024); n > 0) {
            c.block_n = n;
            add(c);
          }
        }
    for (MaskKind m : {MaskKind::kNone, MaskKind::kCausal}) {
      add(mha_fwd_default_config({.mask = m, .ragged = true}));
      add(mha_fwd_default_config({.mask = m, .kv_layout = KvLayout::kPaged, .page_size = 64}));
      add(mha_fwd_default_config(
          {.mask = m, .ragged = true, .kv_layout = KvLayout::kPaged, .page_size = 64}));
    }
    for (MaskKind m : {MaskKind::kWindow, MaskKind::kCausalWindow, MaskKind::kChunked})
      add(mha_fwd_default_config({.mask = m, .ragged = true}));
    for (ScoreMod mod : {ScoreMod::kSoftcap, ScoreMod::kAlibi}) {
      add(mha_fwd_default_config({.mask = MaskKind::kCausal, .score_mod = mod, .ragged = true}));
    }
    add(mha_fwd_default_config({.mask = MaskKind::kCausal, .ragged = true, .sink = true}));
    // Decode with GQA 8: packed query heads over a paged cache and a padded one.
    for (KvLayout l : {KvLayout::kPaged, KvLayout::kContiguous}) {
      add(mha_fwd_default_config({.mask = MaskKind::kCausal,
                                  .kv_layout = l,
                                  .page_size = l == KvLayout::kPaged ? 64 : 0,
                                  .group = 8}));
    }
    return set;
  };
  bind_mha_fwd_config(op);
  op.tuning = mha_fwd_tuning_spec();
  return op;
}

OpSpec combine_spec() {
  OpSpec op;
  op.name = "mha_fwd_combine";
  op.id = op_id(op.name);
  op.summary = "merges mha_fwd's split-KV partials through their lse (launched by mha_fwd)";
  op.archs = {kSm90a};
  op.default_set = [] {
    std::vector<nlohmann::json> set;
    for (DType dt : {DType::kBF16, DType::kF16})
      for (int dv : {64, 128, 256})
        for (bool ragged : {false, true})
          set.push_back(mha_combine_json({dt, dv, ragged, false}));
    set.push_back(mha_combine_json({DType::kBF16, 128, true, true}));
    return set;
  };
  bind_mha_combine_config(op);
  return op;
}

}  // namespace

std::vector<OpSpec> mha_fwd_op_specs() { return {main_spec(), combine_spec()}; }

}  // namespace ops
}  // namespace attnjit
