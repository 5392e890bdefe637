// mla_decode_fp8 configs as data: the field tables of the main kernel and the quantizer,
// validation (errors name the field), the heuristic, the recipes and the registry entries.
// The combine, balance and check kernels are mla_decode's (listed by its registry entry).
#include <fmt/format.h>

#include <array>
#include <nlohmann/json.hpp>

#include "attnjit/error.hpp"
#include "mla_decode_fp8/layout.cuh"
#include "ops/field_table.hpp"
#include "ops/launch_support.hpp"
#include "ops/mla_decode_fp8/internal.hpp"
#include "ops/registry.hpp"

namespace attnjit {
namespace {

const auto& table() {
  using namespace ops::rules;
  static const ops::ConfigTable t{
      "mla_decode_fp8"
#define ATTNJIT_FIELD(...) ATTNJIT_CONFIG_ROW(MlaDecodeFp8Config, __VA_ARGS__)
#include "attnjit/ops/mla_decode_fp8_config.def"
#undef ATTNJIT_FIELD
  };
  return t;
}

const auto& quantize_table() {
  using namespace ops::rules;
  static const ops::ConfigTable t{
      "mla_fp8_quantize"
#define ATTNJIT_FIELD(...) ATTNJIT_CONFIG_ROW(ops::MlaFp8QuantizeConfig, __VA_ARGS__)
#include "ops/mla_decode_fp8/quantize_config.def"
#undef ATTNJIT_FIELD
  };
  return t;
}

jit::KernelRecipe main_recipe(const MlaDecodeFp8Config& c, Arch arch) {
  ops::require_sm90a(arch, "mla_decode_fp8");
  const ops::KernelEntry entry{
      "mla_decode_fp8",
      c.schedule == 2   ? "mla_decode_fp8/sm90_mla_decode_fp8_narrow.cuh"
      : c.schedule == 1 ? "mla_decode_fp8/sm90_mla_decode_fp8_seesaw.cuh"
      : c.fp8_mma       ? "mla_decode_fp8/sm90_mla_decode_fp8_qgmma.cuh"
                        : "mla_decode_fp8/sm90_mla_decode_fp8.cuh",
      c.schedule == 2   ? "attnjit::mla_decode_fp8::narrow::kernel"
      : c.schedule == 1 ? "attnjit::mla_decode_fp8::seesaw8::kernel"
      : c.fp8_mma       ? "attnjit::mla_decode_fp8::qgmma::kernel"
                        : "attnjit::mla_decode_fp8::kernel"};
  return ops::table_recipe(table(), c, entry, arch, ops::mla_fp8_smem_bytes(c));
}

jit::KernelRecipe quantize_recipe(const ops::MlaFp8QuantizeConfig& c, Arch arch) {
  ops::require_sm90a(arch, "mla_fp8_quantize");  // cvt to e4m3 needs sm_89+
  return ops::table_recipe(quantize_table(), c,
                           {"mla_fp8_quantize", "mla_decode_fp8/quantize.cuh",
                            "attnjit::mla_decode_fp8::quantize_kernel"},
                           arch, 0);
}

}  // namespace

void MlaDecodeFp8Config::validate() const {
  table().check_rules(*this);
  // Each schedule is its own kernel with its own tile shape.
  if (schedule != 0 && fp8_mma != 0)
    fail_config(table().where("fp8_mma"), "the fp8 wgmma kernel is schedule 0's: set schedule 0, block_n 32");
  if ((schedule == 2) != (block_m < 64))
    fail_config(table().where("block_m"), schedule == 2 ? "schedule 2 (narrow) puts 8, 16 or 32 query rows per CTA"
                                                        : "schedules 0 and 1 put 64 query rows per CTA");
  if (schedule == 2 && block_n != 64)
    fail_config(table().where("block_n"), "schedule 2 (narrow) runs 64-key tiles: block_n 64");
  if (schedule == 2 && stages != 2 && stages != 4)
    fail_config(table().where("stages"), "schedule 2 (narrow) runs a ring of 2 or 4 stages (each warpgroup "
                                         "owns every other stage)");
  if (schedule == 1 && (block_n != 64 || stages != 2))
    fail_config(table().where(block_n != 64 ? "block_n" : "stages"),
                "schedule 1 (seesaw) runs 64-key tiles in 2 buffers: block_n 64, stages 2");
  if (schedule == 0 && block_n != 32)
    fail_config(table().where("block_n"), "schedule 0 (softmax warpgroup) runs 32-key tiles: block_n 32");
  if (ops::mla_fp8_smem_bytes(*this) > kMaxSmemPerBlock)
    fail_config(table().where("stages"), fmt::format("needs {} B of shared memory, over {}",
                                                     ops::mla_fp8_smem_bytes(*this), kMaxSmemPerBlock));
}

std::string MlaDecodeFp8Config::to_json() const { return table().to_json(*this).dump(); }

MlaDecodeFp8Config MlaDecodeFp8Config::from_json(std::string_view text) {
  MlaDecodeFp8Config c = table().from_json_text(text);
  c.validate();
  return c;
}

std::string MlaDecodeFp8Config::describe() const { return table().describe(*this); }

MlaDecodeFp8Config mla_decode_fp8_default_config(int num_heads, int q_len, int page_size) {
  MlaDecodeFp8Config c;
  c.num_heads = num_heads;
  c.max_q_len = q_len <= 1 ? 1 : (q_len <= 2 ? 2 : 8);  // as mla_decode: 1, 2 and MTP to 8
  c.page_size = page_size;
  // The narrow kernel (schedule 2) at every shape: the fastest on every issue 19 row, the
  // h ≤ 16 rows by 2.2-2.6× and the h 128 ones by 10-12 % over the seesaw, with zero
  // spills (docs/performance.md, "mla_decode_fp8: the narrow kernel"). Its cost is e4m3
  // P′: rel_l2 ~1e-2 where the widening kernels keep ~2e-3 (harness/mla_fp8_reference.hpp).
  // The smallest wgmma N that holds q_len·h rows, else 32 (more row tiles per sequence).
  const int rows = c.max_q_len * num_heads;
  c.schedule = 2;
  c.block_m = rows <= 8 ? 8 : rows <= 16 ? 16 : 32;
  c.block_n = 64;
  c.stages = 4;
  // Q·Kᵀ promoted to f32 every two k32 steps: 9 waits a tile instead of 17, +10 % at h 128
  // and +10 % at (128, 2, 16, 8192), inside the fp8 error model (the config field's note).
  c.score_chain = 2;
  return c;
}

namespace mla_fp8_detail {

MlaDecodeShape as_mla_shape(const MlaDecodeFp8Shape& s) {
  MlaDecodeShape m;
  m.dtype = DType::kBF16;  // the output's type; the schedule does not read it
  m.batch = s.batch;
  m.q_len = s.q_len;
  m.num_heads = s.num_heads;
  m.page_size = s.page_size;
  m.max_pages = s.max_pages;
  m.ragged = s.ragged;
  m.max_len = s.max_len;
  m.num_splits = s.num_splits;
  return m;
}

MlaDecodeConfig as_mla_config(const MlaDecodeFp8Config& c) {
  MlaDecodeConfig m;
  m.dtype = DType::kBF16;
  m.num_heads = c.num_heads;
  m.max_q_len = c.max_q_len;
  m.page_size = c.page_size;
  m.block_m = c.block_m;
  m.block_n = c.block_n;
  m.invariant_tiles = 0;
  return m;
}

}  // namespace mla_fp8_detail

namespace ops {

void MlaFp8QuantizeConfig::validate() const { quantize_table().check_rules(*this); }

unsigned mla_fp8_smem_bytes(const MlaDecodeFp8Config& c) {
  return layout::mla_decode_fp8::smem_bytes(c.block_m, c.block_n, c.stages, c.fp8_mma, c.schedule);
}

const jit::Kernel& mla_fp8_main_kernel(const MlaDecodeFp8Config& c, Arch arch) {
  return table_kernel(table(), op_id("mla_decode_fp8"), c, arch, main_recipe);
}

const jit::Kernel& mla_fp8_quantize_kernel(const MlaFp8QuantizeConfig& c, Arch arch) {
  return table_kernel(quantize_table(), op_id("mla_fp8_quantize"), c, arch, quantize_recipe);
}

namespace {

OpSpec main_spec() {
  OpSpec op;
  op.name = "mla_decode_fp8";
  op.id = op_id(op.name);
  op.summary = "MLA decode over an fp8 e4m3 latent cache, per-row scales, bf16 rope (640-byte "
               "rows or three tensors); mla_decode's split-KV, combine and MTP";
  op.archs = {kSm90a};
  // Not tunable yet (no search space); the benchmark shapes are issue 19's rows, which
  // `attnjit bench mla_decode_fp8` runs in each cache form (harness/mla_decode_fp8_problem.cpp).
  op.tuning.shape_keys = "b, q_len, h, s_k, page";
  for (const auto& [b, q_len, h, s_k] : {std::array<int, 4>{128, 1, 16, 4096}, {128, 2, 16, 8192},
                                        {128, 1, 8, 8192}, {128, 1, 128, 4096}, {128, 2, 128, 4096},
                                        {32, 1, 64, 8192}})
    op.tuning.bench_shapes.push_back({{"b", b}, {"q_len", q_len}, {"h", h}, {"s_k", s_k}, {"page", 64}});
  op.default_set = [] {
    std::vector<nlohmann::json> set;
    for (int h : {8, 16, 32, 64, 128})
      for (int q : {1, 2, 8})
        set.push_back(nlohmann::json::parse(mla_decode_fp8_default_config(h, q, 64).to_json()));
    return set;
  };
  bind_config<MlaDecodeFp8Config>(op, table(), main_recipe);
  return op;
}

OpSpec quantize_spec() {
  OpSpec op;
  op.name = "mla_fp8_quantize";
  op.id = op_id(op.name);
  op.summary = "bf16 MLA rows → mla_decode_fp8's fp8 rows and scales (per row, token or tensor)";
  op.archs = {kSm90a};
  op.default_set = [] {
    return std::vector<nlohmann::json>{nlohmann::json::parse(quantize_table().to_json({}).dump())};
  };
  bind_config<MlaFp8QuantizeConfig>(op, quantize_table(), quantize_recipe);
  return op;
}

}  // namespace

std::vector<OpSpec> mla_decode_fp8_op_specs() { return {main_spec(), quantize_spec()}; }

}  // namespace ops
}  // namespace attnjit
