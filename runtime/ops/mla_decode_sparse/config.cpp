// mla_decode_sparse configs as data: the field tables of the main kernel and its helpers
// (quantizer, remap, check), validation (errors name the field), the heuristic, the
// kernels' recipes and the registry entries.
#include <fmt/format.h>

#include <array>
#include <nlohmann/json.hpp>

#include "attnjit/error.hpp"
#include "mla_decode_sparse/layout.cuh"
#include "ops/field_table.hpp"
#include "ops/launch_support.hpp"
#include "ops/mla_decode_sparse/internal.hpp"
#include "ops/registry.hpp"

namespace attnjit {

namespace {

namespace dev = layout::mla_decode_sparse;

const auto& table() {
  using namespace ops::rules;
  static const ops::ConfigTable t{
      "mla_decode_sparse"
#define ATTNJIT_FIELD(...) ATTNJIT_CONFIG_ROW(MlaDecodeSparseConfig, __VA_ARGS__)
#include "attnjit/ops/mla_decode_sparse_config.def"
#undef ATTNJIT_FIELD
  };
  return t;
}

// The helpers share one row set; each is its own registry entry (name = table name).
template <int kWhich>
const auto& helper_table() {
  using namespace ops::rules;
  static constexpr const char* kNames[] = {"mla_sparse_quantize", "mla_sparse_remap",
                                           "mla_decode_sparse_check"};
  static const ops::ConfigTable t{
      kNames[kWhich]
#define ATTNJIT_FIELD(...) ATTNJIT_CONFIG_ROW(ops::MlaSparseHelperConfig, __VA_ARGS__)
#include "ops/mla_decode_sparse/helper_config.def"
#undef ATTNJIT_FIELD
  };
  return t;
}
enum Helper { kQuantize, kRemap, kCheck };

jit::KernelRecipe main_recipe(const MlaDecodeSparseConfig& c, Arch arch) {
  ops::require_sm90a(arch, "mla_decode_sparse");
  return ops::mla_sparse_main_recipe(c, arch);
}

template <int kWhich>
jit::KernelRecipe helper_recipe(const ops::MlaSparseHelperConfig& c, Arch arch) {
  static constexpr const char* kKernels[] = {"attnjit::mla_decode_sparse::quantize_kernel",
                                             "attnjit::mla_decode_sparse::remap_kernel",
                                             "attnjit::mla_decode_sparse::check_kernel"};
  const auto& t = helper_table<kWhich>();
  // cvt to e4m3 needs sm_89+; the three share one header, so one arch rule.
  ops::require_sm90a(arch, std::string(t.op()).c_str());
  return ops::table_recipe(t, c, {t.op(), "mla_decode_sparse/helpers.cuh", kKernels[kWhich]},
                           arch, 0);
}

}  // namespace

std::string_view to_string(MlaSparseLayout l) { return ops::enum_name(l); }
std::string_view to_string(MlaSparseSchedule s) { return ops::enum_name(s); }

void MlaDecodeSparseConfig::validate() const {
  table().check_rules(*this);
  // A 64-key step is two adjacent 32-key stages of the KV ring, and the ring must hold two
  // steps (softmax_wg: S of one beside P·V of the other; two_consumers: its two buffers).
  // softmax_wg's fp8 widens into 32-key steps only.
  const bool fp8 = cache_layout == MlaSparseLayout::kFp8;
  const bool two = schedule == MlaSparseSchedule::kTwoConsumers;
  if (block_n == 64 && (stages != 4 || (fp8 && schedule == MlaSparseSchedule::kSoftmaxWarpgroup)))
    fail_config(table().where("block_n"),
                fmt::format("64 needs stages 4, and with fp8 schedule two_consumers; got stages {}, {}, {}",
                            stages, to_string(cache_layout), to_string(schedule)));
  if (two && block_n != 64)  // stages 4 follows from 64
    fail_config(table().where("schedule"),
                fmt::format("two_consumers needs block_n 64 (stages 4), got block_n {}", block_n));
  if (schedule == MlaSparseSchedule::kNarrow &&
      (!fp8 || (num_heads != 8 && num_heads != 16) || block_n != 64 || stages != 4))
    fail_config(table().where("schedule"),
                fmt::format("narrow needs fp8 rows, num_heads 8 or 16, block_n 64 and stages 4; got "
                            "{}, num_heads {}, block_n {}, stages {}",
                            to_string(cache_layout), num_heads, block_n, stages));
  if (cluster == 2 && (fp8 || !two || dev::row_tiles(num_heads) != 2))
    fail_config(table().where("cluster"),
                fmt::format("2 pairs a token's two 64-head tiles: needs bf16 rows, two_consumers and "
                            "num_heads 65..128; got {}, {}, num_heads {}",
                            to_string(cache_layout), to_string(schedule), num_heads));
  if (persistent && (fp8 || !two || cluster != 1))
    fail_config(table().where("persistent"),
                fmt::format("true needs bf16 rows, two_consumers and cluster 1; got {}, {}, cluster {}",
                            to_string(cache_layout), to_string(schedule), cluster));
  if (ops::mla_sparse_smem_bytes(*this) > kMaxSmemPerBlock)
    fail_config(table().where("stages"), fmt::format("needs {} B of shared memory, over {}",
                                                     ops::mla_sparse_smem_bytes(*this),
                                                     kMaxSmemPerBlock));
}

std::string MlaDecodeSparseConfig::to_json() const { return table().to_json(*this).dump(); }

MlaDecodeSparseConfig MlaDecodeSparseConfig::from_json(std::string_view text) {
  MlaDecodeSparseConfig c = table().from_json_text(text);
  c.validate();
  return c;
}

std::string MlaDecodeSparseConfig::describe() const { return table().describe(*this); }

MlaDecodeSparseConfig mla_decode_sparse_default_config(MlaSparseLayout layout, int num_heads) {
  MlaDecodeSparseConfig c;
  c.cache_layout = layout;
  c.num_heads = num_heads;
  // Both layouts: two_consumers over 4 gather stages of 32 keys (36 KiB each), each
  // consumer's S over 64 keys of them. bf16: 2-8 % faster than softmax_wg's 64-key steps on
  // the rows; fp8 (each fill widened in place, the lo halves by the producer, the
  // hi halves by the consumers): 1.5× softmax_wg's 32-key steps on the target row (438
  // against 665 µs, H200, docs/performance.md, "mla_decode_sparse").
  c.block_n = 64;
  c.stages = 4;
  c.schedule = MlaSparseSchedule::kTwoConsumers;
  // fp8 at h ≤ 16: the keys on wgmma's M (narrow.cuh), exact products, 2-15 % faster than
  // two_consumers (H100: (128, 1, 16, 2048) 113 against 115 µs, 91 against 108 from L2;
  // (64, 1, 8, 2048) 63 against 67).
  if (layout == MlaSparseLayout::kFp8 && (num_heads == 8 || num_heads == 16))
    c.schedule = MlaSparseSchedule::kNarrow;
  return c;
}

namespace ops {

void MlaSparseHelperConfig::validate() const { helper_table<kQuantize>().check_rules(*this); }

unsigned mla_sparse_smem_bytes(const MlaDecodeSparseConfig& c) {
  if (c.schedule == MlaSparseSchedule::kNarrow) return dev::narrow_smem_bytes(c.num_heads, c.stages);
  return dev::smem_bytes(c.cache_layout == MlaSparseLayout::kFp8, c.block_n, c.stages,
                        c.schedule == MlaSparseSchedule::kTwoConsumers);
}

jit::KernelRecipe mla_sparse_main_recipe(const MlaDecodeSparseConfig& c, Arch arch) {
  const bool narrow = c.schedule == MlaSparseSchedule::kNarrow;
  return table_recipe(table(), c,
                      {"mla_decode_sparse", "mla_decode_sparse/sm90_mla_decode_sparse.cuh",
                       narrow ? "attnjit::mla_decode_sparse::narrow::kernel" : "attnjit::mla_decode_sparse::kernel"},
                      arch, mla_sparse_smem_bytes(c));
}

const jit::Kernel& mla_sparse_main_kernel(const MlaDecodeSparseConfig& c, Arch arch) {
  return table_kernel(table(), op_id("mla_decode_sparse"), c, arch, main_recipe);
}

const jit::Kernel& mla_sparse_quantize_kernel(Arch arch) {
  return table_kernel(helper_table<kQuantize>(), op_id("mla_sparse_quantize"),
                      MlaSparseHelperConfig{}, arch, helper_recipe<kQuantize>);
}
const jit::Kernel& mla_sparse_remap_kernel(Arch arch) {
  return table_kernel(helper_table<kRemap>(), op_id("mla_sparse_remap"), MlaSparseHelperConfig{},
                      arch, helper_recipe<kRemap>);
}
const jit::Kernel& mla_sparse_check_kernel(Arch arch) {
  return table_kernel(helper_table<kCheck>(), op_id("mla_decode_sparse_check"),
                      MlaSparseHelperConfig{}, arch, helper_recipe<kCheck>);
}

namespace {

OpSpec main_spec() {
  OpSpec op;
  op.name = "mla_decode_sparse";
  op.id = op_id(op.name);
  op.summary = "DeepSeek V3.2 sparse MLA decode: top-k rows by index (656 B fp8 or bf16), "
               "sink, extra cache";
  op.archs = {kSm90a};
  // Not tunable yet (one config per layout and h): the benchmark rows only, issue 20's
  // table, each in both layouts (32k cache rows per sequence, pages in random order).
  op.tuning.shape_keys = "b, q_len, h, topk, layout";
  for (const char* layout : {"fp8", "bf16"})
    for (auto [b, q_len, h, topk] : {std::array{128, 2, 128, 2048}, {128, 1, 128, 2048}, {64, 1, 64, 2048},
                                     {128, 2, 128, 8192}, {128, 1, 16, 2048}, {64, 1, 8, 2048}})
      op.tuning.bench_shapes.push_back(
          {{"b", b}, {"q_len", q_len}, {"h", h}, {"topk", topk}, {"layout", layout}});
  op.default_set = [] {
    std::vector<nlohmann::json> set;
    for (MlaSparseLayout l : {MlaSparseLayout::kFp8, MlaSparseLayout::kBF16})
      for (int h : {8, 16, 32, 64, 128})  // one token's heads per tile: h ≤ 64 pads to 64
        set.push_back(nlohmann::json::parse(mla_decode_sparse_default_config(l, h).to_json()));
    return set;
  };
  bind_config<MlaDecodeSparseConfig>(op, table(), main_recipe);
  return op;
}

template <int kWhich>
OpSpec helper_spec(const char* summary) {
  OpSpec op;
  op.name = std::string(helper_table<kWhich>().op());
  op.id = op_id(op.name);
  op.summary = summary;
  op.archs = {kSm90a};
  op.default_set = [] {
    return std::vector<nlohmann::json>{
        nlohmann::json::parse(helper_table<kWhich>().to_json(MlaSparseHelperConfig{}).dump())};
  };
  bind_config<MlaSparseHelperConfig>(op, helper_table<kWhich>(), helper_recipe<kWhich>);
  return op;
}

}  // namespace

std::vector<OpSpec> mla_decode_sparse_op_specs() {
  return {main_spec(),
          helper_spec<kQuantize>("bf16 576 → 656-byte fp8 cache rows (amax/448 per 128 values)"),
          helper_spec<kRemap>("logical top-k positions → physical cache rows through a block table"),
          helper_spec<kCheck>("checked mode: the first index outside the pool or length past topk "
                              "(launched by mla_decode_sparse under ATTNJIT_CHECK=1)")};
}

}  // namespace ops
}  // namespace attnjit
