// mha_fwd config as data: validation (errors name the field), canonical JSON, the built-in
// heuristic, and the kernel recipes (generated instantiations) of the main and combine
// kernels.
#include "ops/mha_fwd/config.hpp"

#include <fmt/format.h>

#include <array>
#include <nlohmann/json.hpp>

#include "attnjit/error.hpp"
#include "ops/config_json.hpp"
#include "ops/template_args.hpp"

namespace attnjit {
namespace {

constexpr std::array<std::string_view, 5> kMaskNames{"none", "causal", "window", "causal_window",
                                                     "chunked"};
constexpr std::array<std::string_view, 3> kModNames{"none", "softcap", "alibi"};
constexpr std::array<std::string_view, 2> kLayoutNames{"contiguous", "paged"};

bool pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

std::string cxx_bool(bool b) { return b ? "true" : "false"; }

std::string cxx_mask(MaskKind m) {
  static constexpr std::array<const char*, 5> kCxx{"kNone", "kCausal", "kWindow", "kCausalWindow",
                                                   "kChunked"};
  return std::string("attnjit::mha_fwd::Mask::") + kCxx[static_cast<size_t>(m)];
}
std::string cxx_mod(ScoreMod s) {
  static constexpr std::array<const char*, 3> kCxx{"kNone", "kSoftcap", "kAlibi"};
  return std::string("attnjit::mha_fwd::Mod::") + kCxx[static_cast<size_t>(s)];
}

}  // namespace

std::string_view to_string(MaskKind m) noexcept { return kMaskNames[static_cast<size_t>(m)]; }
std::string_view to_string(ScoreMod s) noexcept { return kModNames[static_cast<size_t>(s)]; }
std::string_view to_string(KvLayout l) noexcept { return kLayoutNames[static_cast<size_t>(l)]; }

namespace {
// Q + stages × (K + V) tiles of a plan with `q_tiles` Q buffers.
int tile_bytes(const MhaFwdConfig& c, int q_tiles) {
  const int e = dtype_bytes(c.dtype);
  return q_tiles * c.block_m * c.head_dim * e + c.stages * c.block_n * (c.head_dim + c.head_dim_v) * e;
}
}  // namespace

int MhaFwdConfig::q_buffers() const {
  // Mirrors Traits::kQBuffers: the barriers and the base alignment take 2048 bytes at most.
  return persistent && tile_bytes(*this, 2) + 2048 <= static_cast<int>(kMhaMaxSmemPerBlock) ? 2 : 1;
}

unsigned MhaFwdConfig::dynamic_smem_bytes() const {
  // Mirrors SharedStorage<P> (kernel_templates/mha_fwd/params.cuh; the kernel traps if
  // launched with less): the tiles, 2 barriers per Q buffer and 4 per stage, rounded to the
  // 1024-byte tile alignment, plus 1024 for aligning the dynamic base.
  const int body = tile_bytes(*this, q_buffers()) + (2 * q_buffers() + 4 * stages) * 8;
  return static_cast<unsigned>((body + 1023) / 1024 * 1024 + 1024);
}

void MhaFwdConfig::validate() const {
  auto bad = [](const char* field, const std::string& rule) {
    fail_config(fmt::format("mha_fwd config field '{}'", field), rule);
  };
  if (dtype != DType::kBF16 && dtype != DType::kF16)
    bad("dtype", fmt::format("must be bf16 or f16, got {}", to_string(dtype)));
  if (head_dim != 64 && head_dim != 128 && head_dim != 192 && head_dim != 256)
    bad("head_dim", fmt::format("must be 64, 128, 192 or 256, got {}", head_dim));
  if (!(head_dim_v == head_dim && head_dim != 192) && !(head_dim == 192 && head_dim_v == 128))
    bad("head_dim_v", fmt::format("must equal head_dim (64, 128, 256), or be 128 with head_dim "
                                  "192; got head_dim {} head_dim_v {}",
                                  head_dim, head_dim_v));
  if (block_m != 128 && block_m != 192)
    bad("block_m", fmt::format("must be 128 or 192 (two or three consumer warpgroups × 64 rows), "
                               "got {}",
                               block_m));
  if (block_n < 16 || block_n > 256 || block_n % 16 != 0)
    bad("block_n", fmt::format("must be a multiple of 16 in 16..256, got {}", block_n));
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
  // ≥ 2: K of tile i+1 and V of tile i are refilled while tile i is in use.
  if (stages < 2 || stages > 4) bad("stages", fmt::format("must be 2..4, got {}", stages));
  if (swizzle != Swizzle::k128B)
    bad("swizzle", fmt::format("must be 128B (head dims are whole 128-byte spans), got {}",
                               to_string(swizzle)));
  if (static_cast<int>(mask) > static_cast<int>(MaskKind::kChunked))
    bad("mask", "unknown mask kind");
  if (static_cast<int>(score_mod) > static_cast<int>(ScoreMod::kAlibi))
    bad("score_mod", "unknown score mod");
  if (kv_layout == KvLayout::kPaged) {
    if (page_size < 16 || page_size > 256 || !pow2(page_size))
      bad("page_size", fmt::format("must be a power of two in 16..256 for paged KV, got {}", page_size));
    if (!pow2(block_n))
      bad("block_n", fmt::format("must be a power of two with paged KV (pages tile the KV block "
                                 "or the other way round), got {}",
                                 block_n));
  } else if (kv_layout == KvLayout::kContiguous) {
    if (page_size != 0)
      bad("page_size", fmt::format("must be 0 unless kv_layout is paged, got {}", page_size));
  } else {
    bad("kv_layout", "unknown KV layout");
  }
  if (group != 0 && group != 2 && group != 4 && group != 8 && group != 16)
    bad("group", fmt::format("must be 0 (one query head per CTA) or 2, 4, 8, 16 (query heads "
                             "packed per KV head), got {}",
                             group));
  if (dynamic_smem_bytes() > kMhaMaxSmemPerBlock)
    bad("stages", fmt::format("{} stages of {}-key K/V tiles need {} B of shared memory, over {}",
                              stages, block_n, dynamic_smem_bytes(), kMhaMaxSmemPerBlock));
}

std::string MhaFwdConfig::to_json() const {
  nlohmann::ordered_json j;
  j["dtype"] = std::string(to_string(dtype));
  j["head_dim"] = head_dim;
  j["head_dim_v"] = head_dim_v;
  j["block_m"] = block_m;
  j["block_n"] = block_n;
  j["stages"] = stages;
  j["swizzle"] = std::string(to_string(swizzle));
  j["mask"] = std::string(to_string(mask));
  j["score_mod"] = std::string(to_string(score_mod));
  j["ragged"] = ragged;
  j["kv_layout"] = std::string(to_string(kv_layout));
  j["page_size"] = page_size;
  j["group"] = group;
  j["sink"] = sink;
  j["persistent"] = persistent;
  return j.dump();
}

MhaFwdConfig MhaFwdConfig::from_json(std::string_view text) {
  const nlohmann::json j = ops::parse_config_text(text, "mha_fwd");
  ops::ConfigReader r(j, "mha_fwd");
  const MhaFwdConfig d;
  MhaFwdConfig c;
  c.dtype = r.get_dtype("dtype", d.dtype);
  c.head_dim = r.get_int("head_dim", d.head_dim);
  c.head_dim_v = r.get_int("head_dim_v", c.head_dim == 192 ? 128 : c.head_dim);
  c.block_m = r.get_int("block_m", d.block_m);
  c.block_n = r.get_int("block_n", d.block_n);
  c.stages = r.get_int("stages", d.stages);
  c.swizzle = r.get_swizzle("swizzle", d.swizzle);
  c.mask = static_cast<MaskKind>(r.get_choice("mask", kMaskNames, static_cast<int>(d.mask)));
  c.score_mod =
      static_cast<ScoreMod>(r.get_choice("score_mod", kModNames, static_cast<int>(d.score_mod)));
  c.ragged = r.get_bool("ragged", d.ragged);
  c.kv_layout =
      static_cast<KvLayout>(r.get_choice("kv_layout", kLayoutNames, static_cast<int>(d.kv_layout)));
  c.page_size = r.get_int("page_size", d.page_size);
  c.group = r.get_int("group", d.group);
  c.sink = r.get_bool("sink", d.sink);
  c.persistent = r.get_bool("persistent", d.persistent);
  r.finish();
  c.validate();
  return c;
}

std::string MhaFwdConfig::describe() const {
  std::string s = fmt::format("{} d{}", to_string(dtype), head_dim);
  if (head_dim_v != head_dim) s += fmt::format("/{}", head_dim_v);
  s += fmt::format(" {}x{} s{} {}", block_m, block_n, stages, to_string(mask));
  if (score_mod != ScoreMod::kNone) s += fmt::format(" {}", to_string(score_mod));
  if (ragged) s += " ragged";
  if (kv_layout == KvLayout::kPaged) s += fmt::format(" paged{}", page_size);
  if (group > 0) s += fmt::format(" g{}", group);
  if (sink) s += " sink";
  if (persistent) s += " persistent";
  return s;
}

MhaFwdConfig mha_fwd_default_config(DType dtype, int head_dim, int head_dim_v, MaskKind mask,
                                    bool ragged, KvLayout kv_layout, int page_size,
                                    ScoreMod score_mod) {
  MhaFwdConfig c;
  c.dtype = dtype;
  c.head_dim = head_dim;
  c.head_dim_v = head_dim_v;
  c.mask = mask;
  c.score_mod = score_mod;
  c.ragged = ragged;
  c.kv_layout = kv_layout;
  c.page_size = kv_layout == KvLayout::kPaged ? page_size : 0;
  // Persistent launch for contiguous KV: 8–19 % faster on every bench row on an H100
  // (docs/bench-notes.md, session 6), the short rows most. Not for paged KV (grid launch as
  // before) nor for d256 with a score mod (its consumers spill at the 232-register cap).
  const bool paged = kv_layout == KvLayout::kPaged;
  c.persistent = !paged && (head_dim_v < 256 || score_mod == ScoreMod::kNone);
  c.block_n = ops::mha_default_block_n(c);
  // 2 stages: a third never paid, except for persistent d64 unmasked (208 keys: 4k 2548
  // against 2599 µs; the tile is short enough that a load takes about as long as one).
  c.stages = c.persistent && head_dim_v == 64 && mask == MaskKind::kNone ? 3 : 2;
  return c;
}

namespace ops {

int mha_default_block_n(const MhaFwdConfig& c) {
  // Key tiles measured on an H100 (docs/bench-notes.md): the largest tile whose O + S + P
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

jit::KernelRecipe mha_fwd_recipe(const MhaFwdConfig& c, Arch arch) {
  jit::KernelRecipe r;
  r.source.op = "mha_fwd";
  r.source.header = "mha_fwd/sm90_mha_fwd.cuh";
  r.source.kernel = "attnjit::mha_fwd::kernel";
  r.source.params_type = "attnjit::mha_fwd::Params";
  r.source.args = {
      {"dtype", cxx_enum(c.dtype)},
      {"head_dim", std::to_string(c.head_dim)},
      {"head_dim_v", std::to_string(c.head_dim_v)},
      {"block_m", std::to_string(c.block_m)},
      {"block_n", std::to_string(c.block_n)},
      {"stages", std::to_string(c.stages)},
      {"swizzle", cxx_enum(c.swizzle)},
      {"mask", cxx_mask(c.mask)},
      {"score_mod", cxx_mod(c.score_mod)},
      {"ragged", cxx_bool(c.ragged)},
      {"paged", cxx_bool(c.kv_layout == KvLayout::kPaged)},
      {"page_size", std::to_string(c.page_size)},
      {"group", std::to_string(c.group)},
      {"sink", cxx_bool(c.sink)},
      {"persistent", cxx_bool(c.persistent)},
  };
  r.source.config_json = c.to_json();
  r.options.arch = arch;
  r.dynamic_smem_bytes = c.dynamic_smem_bytes();
  return r;
}

std::string MhaCombineConfig::to_json() const {
  nlohmann::ordered_json j;
  j["dtype"] = std::string(to_string(dtype));
  j["head_dim_v"] = head_dim_v;
  j["ragged"] = ragged;
  j["sink"] = sink;
  return j.dump();
}

MhaCombineConfig MhaCombineConfig::from_json(const nlohmann::json& j) {
  ConfigReader r(j, "mha_fwd_combine");
  MhaCombineConfig c;
  c.dtype = r.get_dtype("dtype", c.dtype);
  c.head_dim_v = r.get_int("head_dim_v", c.head_dim_v);
  c.ragged = r.get_bool("ragged", c.ragged);
  c.sink = r.get_bool("sink", c.sink);
  r.finish();
  if (c.dtype != DType::kBF16 && c.dtype != DType::kF16)
    fail_config("mha_fwd_combine config field 'dtype'",
                fmt::format("must be bf16 or f16, got {}", to_string(c.dtype)));
  if (c.head_dim_v != 64 && c.head_dim_v != 128 && c.head_dim_v != 256)
    fail_config("mha_fwd_combine config field 'head_dim_v'",
                fmt::format("must be 64, 128 or 256, got {}", c.head_dim_v));
  return c;
}

jit::KernelRecipe mha_combine_recipe(const MhaCombineConfig& c, Arch arch) {
  jit::KernelRecipe r;
  r.source.op = "mha_fwd_combine";
  r.source.header = "mha_fwd/combine.cuh";
  r.source.kernel = "attnjit::mha_fwd::combine_kernel";
  r.source.params_type = "attnjit::mha_fwd::CombineParams";
  r.source.args = {{"dtype", cxx_enum(c.dtype)},
                   {"head_dim_v", std::to_string(c.head_dim_v)},
                   {"ragged", cxx_bool(c.ragged)},
                   {"sink", cxx_bool(c.sink)}};
  r.source.config_json = c.to_json();
  r.options.arch = arch;
  r.dynamic_smem_bytes = 0;
  return r;
}

}  // namespace ops
}  // namespace attnjit
