// Host side of mla_decode: config (validation, JSON, registry), argument checks, the
// split heuristic, tensor maps and the two launches (main kernel, then the combine kernel
// through programmatic dependent launch when the KV range is split).
#include "attnjit/ops/mla_decode.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>

#include "attnjit/error.hpp"
#include "attnjit/runtime.hpp"
#include "attnjit/tma.hpp"
#include "driver/driver.hpp"
#include "ops/config_json.hpp"
#include "ops/mla_decode/mla_decode_tuning.hpp"
#include "ops/launch_support.hpp"
#include "ops/registry.hpp"
#include "ops/template_args.hpp"

namespace attnjit {
namespace {

constexpr std::array<std::string_view, 2> kScheduleNames = {"seesaw", "softmax_wg"};

constexpr int kCombineThreads = 128;  // 4 output columns per thread
constexpr int kMaxSplits = 256;
constexpr int kMaxSmemPerBlock = 232448;

// 384 threads (softmax + two P·V warpgroups) or 256 (the two seesaw warpgroups).
int threads_of(const MlaDecodeConfig& c) { return c.schedule == MlaSchedule::kSeesaw ? 256 : 384; }

// Mirrors SharedStorage<P> of the schedule's kernel (kernel_templates/mla_decode/
// sm90_mla_decode{,_seesaw}.cuh; the kernel traps if launched with less): Q + stages × K
// tile + P, row stats, barriers, realignment.
unsigned smem_bytes(const MlaDecodeConfig& c) {
  const int q_tile = c.block_m * kMlaHeadDim * dtype_bytes(c.dtype);   // 72 KiB
  const int kv_tile = c.block_n * kMlaHeadDim * dtype_bytes(c.dtype);  // 72 KiB at 64 keys
  const int p_tile = c.block_m * c.block_n * dtype_bytes(c.dtype);     // 8 KiB at 64 keys
  const bool seesaw = c.schedule == MlaSchedule::kSeesaw;
  // seesaw: row_max, scale_even, scale_odd, 2 × row_sum; q_full + one per chunk of each
  // buffer.
  const int stats = (seesaw ? 5 : 3) * c.block_m * 4;
  const int chunks = kMlaHeadDim * dtype_bytes(c.dtype) / 128;
  const int barriers = (seesaw ? 1 + chunks * c.stages : 1 + c.stages) * 8;
  const int body = q_tile + kv_tile * c.stages + p_tile + stats + barriers;
  return static_cast<unsigned>((body + 1023) / 1024 * 1024 + 1024);
}

struct MainKey {
  int32_t dtype, num_heads, max_q_len, page_size, block_m, block_n, stages, swizzle, schedule;
};
struct CombineKey {
  int32_t dtype, num_heads;
};

// Device-side argument blocks; layouts must match attnjit::mla_decode::{QRows, Args,
// CombineArgs}.
struct QRows {
  const void* offsets;  // null: padded
  int q_len;            // padded q_len, or the ragged bound
  int total_q;
};
struct KernelArgs {
  const void* block_table;
  const void* cache_lens;
  void* out;
  float* lse;
  float* part_out;
  float* part_lse;
  QRows q;
  int max_pages;
  int num_splits;
  float scale_log2;
};
struct CombineArgs {
  const float* part_out;
  const float* part_lse;
  void* out;
  float* lse;
  QRows q;
  int num_splits;
};


jit::KernelRecipe main_recipe(const MlaDecodeConfig& c, Arch arch) {
  jit::KernelRecipe r;
  const bool seesaw = c.schedule == MlaSchedule::kSeesaw;
  r.source.op = "mla_decode";
  r.source.header = seesaw ? "mla_decode/sm90_mla_decode_seesaw.cuh" : "mla_decode/sm90_mla_decode.cuh";
  r.source.kernel = seesaw ? "attnjit::mla_decode::seesaw::kernel" : "attnjit::mla_decode::kernel";
  r.source.params_type = "attnjit::mla_decode::Params";
  r.source.args = {
      {"dtype", ops::cxx_enum(c.dtype)},
      {"num_heads", std::to_string(c.num_heads)},
      {"max_q_len", std::to_string(c.max_q_len)},
      {"page_size", std::to_string(c.page_size)},
      {"block_m", std::to_string(c.block_m)},
      {"block_n", std::to_string(c.block_n)},
      {"stages", std::to_string(c.stages)},
      {"swizzle", ops::cxx_enum(c.swizzle)},
  };
  r.source.config_json = c.to_json();
  r.options.arch = arch;
  r.dynamic_smem_bytes = smem_bytes(c);
  return r;
}

jit::KernelRecipe combine_recipe(DType dtype, int num_heads, Arch arch) {
  jit::KernelRecipe r;
  r.source.op = "mla_decode_combine";
  r.source.header = "mla_decode/combine.cuh";
  r.source.kernel = "attnjit::mla_decode::combine_kernel";
  r.source.params_type = "attnjit::mla_decode::CombineParams";
  r.source.args = {{"dtype", ops::cxx_enum(dtype)}, {"num_heads", std::to_string(num_heads)}};
  nlohmann::ordered_json j;
  j["dtype"] = std::string(to_string(dtype));
  j["num_heads"] = num_heads;
  r.source.config_json = j.dump();
  r.options.arch = arch;
  r.dynamic_smem_bytes = 0;
  return r;
}

struct CheckKey {
  int32_t page_size;
};
struct CheckArgs {
  const void* block_table;
  const void* cache_lens;
  const void* q_offsets;
  unsigned long long* first_bad;
  int max_pages;
  int num_pages;
  int total_q;
  int max_q_len;
};
// What a report's low 32 bits name; mirrors mla_decode/check.cuh.
constexpr unsigned kBadQOffsets = 0, kBadLength = 1, kBadSlot0 = 2;

jit::KernelRecipe check_recipe(int page_size, Arch arch) {
  jit::KernelRecipe r;
  r.source.op = "mla_decode_check";
  r.source.header = "mla_decode/check.cuh";
  r.source.kernel = "attnjit::mla_decode::check_kernel";
  r.source.params_type = "attnjit::mla_decode::CheckParams";
  r.source.args = {{"page_size", std::to_string(page_size)}};
  r.source.config_json = fmt::format("{{\"page_size\":{}}}", page_size);
  r.options.arch = arch;
  return r;
}


const jit::Kernel& main_kernel(const MlaDecodeConfig& c, Arch arch) {
  const MainKey key{static_cast<int32_t>(c.dtype), c.num_heads, c.max_q_len, c.page_size,
                    c.block_m, c.block_n, c.stages, static_cast<int32_t>(c.swizzle),
                    static_cast<int32_t>(c.schedule)};
  return jit::get_kernel(jit::make_key(ops::kMlaDecodeOpId, arch, key), [&] {
    c.validate();
    ops::require_sm90a(arch, "mla_decode");
    return main_recipe(c, arch);
  });
}

const jit::Kernel& combine_kernel(DType dtype, int num_heads, Arch arch) {
  const CombineKey key{static_cast<int32_t>(dtype), num_heads};
  return jit::get_kernel(jit::make_key(ops::kMlaDecodeCombineOpId, arch, key), [&] {
    ops::require_sm90a(arch, "mla_decode_combine");
    return combine_recipe(dtype, num_heads, arch);
  });
}

// Host-visible sizes of a call (check_args). Ragged: q_len is the max_q_len bound.
struct Shapes {
  bool ragged = false;
  int64_t b = 0, q_len = 0, h = 0, total_q = 0, num_pages = 0, page_size = 0, max_pages = 0;
};

// Checked mode: runs the validation kernel, synchronizes, and names the first bad value.
// Reading back is allowed here only: this is a debugging mode, never the hot path.
void device_check(const MlaDecodeArgs& a, const MlaDecodeConfig& c, const Shapes& s, Arch arch,
                  CUstream stream) {
  const jit::Kernel& k = jit::get_kernel(
      jit::make_key(ops::kMlaDecodeCheckOpId, arch, CheckKey{c.page_size}),
      [&] { return check_recipe(c.page_size, arch); });
  const unsigned long long found = ops::run_device_check(stream, [&](unsigned long long* word) {
    CheckArgs ca{a.block_table.data,
                 a.cache_lens.data,
                 s.ragged ? a.q_offsets.data : nullptr,
                 word,
                 static_cast<int>(s.max_pages),
                 static_cast<int>(s.num_pages),
                 static_cast<int>(s.total_q),
                 static_cast<int>(s.q_len)};
    jit::LaunchShape shape;
    shape.grid[0] = static_cast<unsigned>(s.b);
    shape.block[0] = 128;
    void* args[] = {&ca};
    k.launch(shape, stream, args);
  });
  if (found == ~0ull) return;
  const int batch = static_cast<int>(found >> 32);
  const unsigned what = static_cast<unsigned>(found & 0xffffffffu);
  if (what == kBadQOffsets) {
    const int start = ops::read_device_i32(a.q_offsets.data, batch);
    const int end = ops::read_device_i32(a.q_offsets.data, batch + 1);
    fail_arg("q_offsets", fmt::format("ATTNJIT_CHECK: q_offsets[{}..{}] = {}, {} must satisfy "
                                      "0 <= start <= end <= total_q = {} and end - start <= "
                                      "max_q_len = {}",
                                      batch, batch + 1, start, end, s.total_q, s.q_len));
  }
  const int len = ops::read_device_i32(a.cache_lens.data, batch);
  if (what == kBadLength)
    fail_arg("cache_lens", fmt::format("ATTNJIT_CHECK: cache_lens[{}] = {} is outside 0..{} "
                                       "(max_pages × page_size)",
                                       batch, len, s.max_pages * c.page_size));
  const int slot = static_cast<int>(what - kBadSlot0);
  const int page = ops::read_device_i32(a.block_table.data, batch * s.max_pages + slot);
  fail_arg("block_table", fmt::format("ATTNJIT_CHECK: block_table[{}][{}] = {} is not a page "
                                      "(0..{}), and cache_lens[{}] = {} makes it visible",
                                      batch, slot, page, s.num_pages - 1, batch, len));
}

void check_contiguous(const TensorView& t, const char* name) {
  if (!t.is_contiguous())
    fail_arg(name, fmt::format("must be contiguous (row-major), got {}", t.describe()));
}

void check_shape(const TensorView& t, const char* name, std::initializer_list<int64_t> dims,
                 const char* layout) {
  bool ok = t.rank == static_cast<int>(dims.size());
  int d = 0;
  for (int64_t want : dims) {
    if (ok && want >= 0 && t.shape[static_cast<size_t>(d)] != want) ok = false;
    ++d;
  }
  if (!ok) fail_arg(name, fmt::format("must be {}, got {}", layout, t.describe()));
}

// Every host-visible rule, before anything touches the GPU.
Shapes check_args(const MlaDecodeArgs& a, const MlaDecodeConfig& c) {
  const TensorView& q = a.q;
  Shapes s;
  s.ragged = a.q_offsets.data != nullptr;
  if (s.ragged) {
    if (q.rank != 3 || q.shape[2] != kMlaHeadDim)
      fail_arg("q", fmt::format("with q_offsets (ragged) must be rank 3 [total_q, h, {}], got {}",
                                kMlaHeadDim, q.describe()));
    const TensorView& off = a.q_offsets;
    if (off.rank != 1 || off.shape[0] < 1)
      fail_arg("q_offsets", fmt::format("must be rank 1 [b + 1] i32, got {}", off.describe()));
    check_dtype(off, "q_offsets", DType::kI32);
    check_contiguous(off, "q_offsets");
    check_aligned(off, "q_offsets", 4);
    if (off.device != q.device)
      fail_arg("q_offsets", fmt::format("must be on q's device {}, got device {}", q.device,
                                        off.device));
    s.b = off.shape[0] - 1;
    s.total_q = q.shape[0];
    s.h = q.shape[1];
    s.q_len = a.max_q_len;
    if (s.q_len < 1 || s.q_len > c.max_q_len)
      fail_arg("max_q_len", fmt::format("the ragged form needs the bound on every sequence's "
                                        "q_len, 1..max_q_len = {} of the config; got {}",
                                        c.max_q_len, a.max_q_len));
  } else {
    if (q.rank != 4 || q.shape[3] != kMlaHeadDim)
      fail_arg("q", fmt::format("must be rank 4 [b, q_len, h, {}] (or rank 3 [total_q, h, {}] "
                                "with q_offsets), got {}",
                                kMlaHeadDim, kMlaHeadDim, q.describe()));
    s.b = q.shape[0];
    s.q_len = q.shape[1];
    s.h = q.shape[2];
    s.total_q = s.b * s.q_len;
    if (s.q_len < 1 || s.q_len > c.max_q_len)
      fail_arg("q", fmt::format("q_len {} is outside 1..max_q_len = {} of the config", s.q_len,
                                c.max_q_len));
    if (a.max_q_len != 0 && a.max_q_len != s.q_len)
      fail_arg("max_q_len", fmt::format("is for the ragged form (q_offsets); padded q takes its "
                                        "q_len {} from q's shape, got max_q_len = {}",
                                        s.q_len, a.max_q_len));
  }
  if (q.dtype != DType::kBF16 && q.dtype != DType::kF16)
    fail_arg("q", fmt::format("must be bf16 or f16, got {}", to_string(q.dtype)));
  check_contiguous(q, "q");
  check_aligned(q, "q", 16);
  if (s.h != c.num_heads)
    fail_arg("q", fmt::format("has {} heads but the config was built for num_heads = {}", s.h,
                              c.num_heads));
  if (q.dtype != c.dtype)
    fail_arg("q", fmt::format("dtype {} does not match the config's dtype {}", to_string(q.dtype),
                              to_string(c.dtype)));
  if (s.total_q * s.h > INT32_MAX)  // q rows are int32 TMA coordinates
    fail_arg("q", fmt::format("holds {} × {} query rows, over 2^31", s.total_q, s.h));

  const TensorView& kv = a.kv_cache;
  if (kv.rank != 3 || kv.shape[2] != kMlaHeadDim)
    fail_arg("kv_cache", fmt::format("must be rank 3 [num_pages, page_size, {}], got {}", kMlaHeadDim,
                                     kv.describe()));
  check_dtype(kv, "kv_cache", q.dtype);
  check_contiguous(kv, "kv_cache");
  check_aligned(kv, "kv_cache", 16);
  s.num_pages = kv.shape[0];
  s.page_size = kv.shape[1];
  if (s.page_size != c.page_size)
    fail_arg("kv_cache", fmt::format("has page size {} but the config was built for {}",
                                     s.page_size, c.page_size));
  if (s.num_pages < 1 || s.num_pages * s.page_size > INT32_MAX)
    fail_arg("kv_cache", fmt::format("must hold 1..2^31 rows (num_pages × page_size), got {}",
                                     kv.describe()));

  const TensorView& bt = a.block_table;
  if (bt.rank != 2 || bt.shape[0] != s.b)
    fail_arg("block_table", fmt::format("must be rank 2 [b = {}, max_pages], got {}", s.b, bt.describe()));
  check_dtype(bt, "block_table", DType::kI32);
  check_contiguous(bt, "block_table");
  check_aligned(bt, "block_table", 4);
  s.max_pages = bt.shape[1];
  if (s.max_pages < 1 || s.max_pages * s.page_size > INT32_MAX)
    fail_arg("block_table", fmt::format("needs 1.. pages per sequence, got {}", bt.describe()));

  check_shape(a.cache_lens, "cache_lens", {s.b}, "rank 1 [b] i32");
  check_dtype(a.cache_lens, "cache_lens", DType::kI32);
  check_contiguous(a.cache_lens, "cache_lens");
  check_aligned(a.cache_lens, "cache_lens", 4);

  if (s.ragged)
    check_shape(a.out, "out", {s.total_q, s.h, kMlaValueDim}, "rank 3 [total_q, h, 512] like q");
  else
    check_shape(a.out, "out", {s.b, s.q_len, s.h, kMlaValueDim}, "rank 4 [b, q_len, h, 512] like q");
  check_dtype(a.out, "out", q.dtype);
  check_contiguous(a.out, "out");
  check_aligned(a.out, "out", 16);

  if (a.lse.data != nullptr) {
    if (s.ragged)
      check_shape(a.lse, "lse", {s.h, s.total_q}, "rank 2 [h, total_q] f32 (ragged)");
    else
      check_shape(a.lse, "lse", {s.b, s.h, s.q_len}, "rank 3 [b, h, q_len] f32");
    check_dtype(a.lse, "lse", DType::kF32);
    check_contiguous(a.lse, "lse");
    check_aligned(a.lse, "lse", 4);
  }
  for (const TensorView* t : {&a.kv_cache, &a.block_table, &a.cache_lens, &a.out, &a.lse})
    if (t->data != nullptr && t->device != q.device)
      fail_arg("tensors", fmt::format("must all be on q's device {}, found one on device {}",
                                      q.device, t->device));
  if (!(a.softmax_scale > 0.0f) || !std::isfinite(a.softmax_scale))
    fail_arg("softmax_scale", fmt::format("must be a positive finite number, got {}", a.softmax_scale));
  if (a.max_len_hint < 0)
    fail_arg("max_len_hint", fmt::format("must be >= 0, got {}", a.max_len_hint));
  if (a.max_len_hint > s.max_pages * s.page_size)
    fail_arg("block_table", fmt::format("{} pages × page size {} = {} tokens cannot hold "
                                        "max_len_hint = {}",
                                        s.max_pages, s.page_size, s.max_pages * s.page_size,
                                        a.max_len_hint));
  if (a.num_splits < 0 || a.num_splits > kMaxSplits)
    fail_arg("num_splits", fmt::format("must be 0 (heuristic) or 1..{}, got {}", kMaxSplits,
                                       a.num_splits));
  return s;
}

int heuristic_splits(const Shapes& s, int max_len_hint, int sm_count) {
  const int64_t m_tiles = (s.q_len * s.h + 63) / 64;
  const int64_t ctas = s.b * m_tiles;
  const int64_t max_len = max_len_hint > 0 ? max_len_hint : s.max_pages * s.page_size;
  const int64_t kv_tiles = std::max<int64_t>(1, (max_len + 63) / 64);
  if (ctas >= sm_count) return 1;
  // Fill one wave (one 229 KiB CTA per SM) without spilling into a second one — rounding
  // up cost 1.7x at b = 8 (9 splits = 144 CTAs on 132 SMs; the tuning sweep found 8) — but
  // keep >= 4 KV tiles per split so the partial's fixed costs (Q load, epilogue, combine)
  // stay small.
  const int64_t splits = sm_count / ctas;
  return static_cast<int>(std::clamp<int64_t>(std::min(splits, kv_tiles / 4), 1, kMaxSplits));
}

// Calls with num_splits = 0: the tuning database's split count for these shapes when it
// has one (mla_tuning::lookup), else the heuristic's.
int default_splits(const Shapes& s, DType dtype, int max_len_hint, int sm_count) {
  const int64_t max_len = max_len_hint > 0 ? max_len_hint : s.max_pages * s.page_size;
  const mla_tuning::Choice t = mla_tuning::lookup(dtype, s.b, s.q_len, s.h, s.page_size, max_len);
  if (t.found && t.num_splits > 0) return t.num_splits;
  return heuristic_splits(s, max_len_hint, sm_count);
}

void check_workspace(const MlaDecodeArgs& a, const Shapes& s, int splits) {
  const size_t need = mla_decode_workspace_bytes(static_cast<int>(s.b), static_cast<int>(s.q_len),
                                                 static_cast<int>(s.h), splits);
  if (need == 0) return;
  if (a.workspace == nullptr || a.workspace_bytes < need)
    fail_arg("workspace", fmt::format("{} splits need {} B (mla_decode_workspace_bytes), got {} B "
                                      "at {}",
                                      splits, need, a.workspace_bytes, a.workspace));
  if (reinterpret_cast<uintptr_t>(a.workspace) % 16 != 0)
    fail_arg("workspace", fmt::format("pointer {} must be 16-byte aligned", a.workspace));
}

}  // namespace

void MlaDecodeConfig::validate() const {
  auto bad = [](const char* field, const std::string& rule) {
    fail_config(fmt::format("mla_decode config field '{}'", field), rule);
  };
  if (dtype != DType::kBF16 && dtype != DType::kF16)
    bad("dtype", fmt::format("must be bf16 or f16, got {}", to_string(dtype)));
  if (num_heads < 16 || num_heads > 128 || num_heads % 16 != 0)
    bad("num_heads", fmt::format("must be a multiple of 16 in 16..128, got {}", num_heads));
  if (max_q_len < 1 || max_q_len > 8)
    bad("max_q_len", fmt::format("must be 1..8, got {}", max_q_len));
  if (page_size < 16 || page_size > 256 || (page_size & (page_size - 1)) != 0)
    bad("page_size", fmt::format("must be a power of two in 16..256, got {}", page_size));
  if (block_m != 64) bad("block_m", fmt::format("must be 64 (one wgmma M), got {}", block_m));
  if (block_n != 32 && block_n != 64)
    bad("block_n", fmt::format("must be 32 or 64 keys per tile, got {}", block_n));
  if (stages < 2 || stages > 4) bad("stages", fmt::format("must be 2..4, got {}", stages));
  if (swizzle != Swizzle::k128B)
    bad("swizzle", fmt::format("must be 128B (the Q/K/V tile layout), got {}", to_string(swizzle)));
  if (schedule == MlaSchedule::kSeesaw && (block_n != 64 || stages != 2))
    bad("schedule", fmt::format("seesaw runs 64-key tiles in 2 buffers (block_n 64, stages 2), "
                                "got block_n {} and stages {}; softmax_wg takes other tiles",
                                block_n, stages));
  if (static_cast<int>(smem_bytes(*this)) > kMaxSmemPerBlock)
    bad("stages", fmt::format("needs {} B of shared memory, over {}", smem_bytes(*this),
                              kMaxSmemPerBlock));
}

std::string MlaDecodeConfig::to_json() const {
  nlohmann::ordered_json j;
  j["dtype"] = std::string(to_string(dtype));
  j["num_heads"] = num_heads;
  j["max_q_len"] = max_q_len;
  j["page_size"] = page_size;
  j["block_m"] = block_m;
  j["block_n"] = block_n;
  j["stages"] = stages;
  j["swizzle"] = std::string(to_string(swizzle));
  j["schedule"] = std::string(to_string(schedule));
  return j.dump();
}

MlaDecodeConfig MlaDecodeConfig::from_json(std::string_view text) {
  const nlohmann::json j = ops::parse_config_text(text, "mla_decode");
  ops::ConfigReader r(j, "mla_decode");
  const MlaDecodeConfig d;
  MlaDecodeConfig c;
  c.dtype = r.get_dtype("dtype", d.dtype);
  c.num_heads = r.get_int("num_heads", d.num_heads);
  c.max_q_len = r.get_int("max_q_len", d.max_q_len);
  c.page_size = r.get_int("page_size", d.page_size);
  c.block_m = r.get_int("block_m", d.block_m);
  c.block_n = r.get_int("block_n", d.block_n);
  c.stages = r.get_int("stages", d.stages);
  c.swizzle = r.get_swizzle("swizzle", d.swizzle);
  c.schedule = static_cast<MlaSchedule>(r.get_choice("schedule", kScheduleNames,
                                                     static_cast<int>(d.schedule)));
  r.finish();
  c.validate();
  return c;
}

std::string MlaDecodeConfig::describe() const {
  return fmt::format("{} h{} q<={} page{} {}x{} s{} {} {}", to_string(dtype), num_heads,
                     max_q_len, page_size, block_m, block_n, stages, to_string(swizzle),
                     to_string(schedule));
}

std::string_view to_string(MlaSchedule s) { return kScheduleNames[static_cast<size_t>(s)]; }

MlaDecodeConfig mla_decode_default_config(DType dtype, int num_heads, int q_len, int page_size) {
  MlaDecodeConfig c;
  c.dtype = dtype;
  c.num_heads = num_heads;
  // Two compiled q_len bounds cover 1..8: plain decode, and MTP up to 8 (causal).
  c.max_q_len = q_len <= 1 ? 1 : (q_len <= 2 ? 2 : 8);
  c.page_size = page_size;
  return c;
}

size_t mla_decode_workspace_bytes(int batch, int q_len, int num_heads, int num_splits) {
  if (num_splits <= 1) return 0;
  const size_t rows = static_cast<size_t>(batch) * static_cast<size_t>(num_splits) *
                      static_cast<size_t>(q_len) * static_cast<size_t>(num_heads);
  const size_t out = rows * kMlaValueDim * sizeof(float);
  return out + (rows * sizeof(float) + 15) / 16 * 16;  // partial outputs, then their lse
}

namespace mla_detail {

CallShape call_shape(const MlaDecodeArgs& a) {
  CallShape cs;
  if (a.q_offsets.data != nullptr) {
    if (a.q.rank != 3 || a.q_offsets.rank != 1) return cs;
    cs.ragged = true;
    cs.b = a.q_offsets.shape[0] - 1;
    cs.q_len = a.max_q_len;
    cs.h = a.q.shape[1];
  } else {
    if (a.q.rank != 4) return cs;
    cs.b = a.q.shape[0];
    cs.q_len = a.q.shape[1];
    cs.h = a.q.shape[2];
  }
  cs.ok = true;
  return cs;
}

}  // namespace mla_detail

int mla_decode_num_splits(const MlaDecodeArgs& args) {
  if (args.num_splits > 0) return args.num_splits;
  const mla_detail::CallShape cs = mla_detail::call_shape(args);
  if (!cs.ok || args.block_table.rank != 2 || args.kv_cache.rank != 3)
    fail_arg("args", "q (rank 4, or rank 3 with q_offsets rank 1), block_table (rank 2) and "
                     "kv_cache (rank 3) must be set to size the split");
  Shapes s;
  s.ragged = cs.ragged;
  s.b = cs.b;
  s.q_len = cs.q_len;
  s.h = cs.h;
  s.num_pages = args.kv_cache.shape[0];
  s.page_size = args.kv_cache.shape[1];
  s.max_pages = args.block_table.shape[1];
  const driver::DeviceInfo& info = driver::cached_device_info(driver::current_device());
  return default_splits(s, args.q.dtype, args.max_len_hint, info.sm_count);
}

void mla_decode_prepare(const MlaDecodeConfig& config) {
  config.validate();
  const driver::DeviceInfo& info = driver::cached_device_info(driver::current_device());
  const Arch arch = ops::device_arch(info);
  main_kernel(config, arch).prepare_current_device();
  combine_kernel(config.dtype, config.num_heads, arch).prepare_current_device();
}

void mla_decode(const MlaDecodeArgs& a, CUstream stream, const MlaDecodeConfig* config) {
  if (!mla_detail::call_shape(a).ok)
    fail_arg("q", fmt::format("must be rank 4 [b, q_len, h, {}], or rank 3 [total_q, h, {}] with "
                              "q_offsets rank 1 [b + 1]; got q {} and q_offsets {}",
                              kMlaHeadDim, kMlaHeadDim, a.q.describe(), a.q_offsets.describe()));
  const MlaDecodeConfig c = config ? *config : mla_decode_selected_config(a);
  c.validate();
  const Shapes s = check_args(a, c);
  if (a.num_splits > 0) check_workspace(a, s, a.num_splits);
  if (s.b == 0 || s.total_q == 0) return;  // no query rows: nothing to write

  // Tensor maps: q as [total_q·h, 576] and the page pool as [pages·page_size, 576], both
  // in 128B-swizzled boxes of 64 columns (one swizzle span).
  const int elems_per_span = 128 / dtype_bytes(c.dtype);
  TmaMapSpec q_spec;
  q_spec.tensor = TensorView::contiguous(a.q.data, c.dtype, {s.total_q * s.h, kMlaHeadDim},
                                         a.q.device);
  q_spec.box[0] = static_cast<uint32_t>(c.block_m);
  q_spec.box[1] = static_cast<uint32_t>(elems_per_span);
  q_spec.swizzle = c.swizzle;
  TmaMapSpec kv_spec;
  kv_spec.tensor = TensorView::contiguous(a.kv_cache.data, c.dtype,
                                          {s.num_pages * s.page_size, kMlaHeadDim}, a.q.device);
  kv_spec.box[0] = static_cast<uint32_t>(std::min(c.block_n, c.page_size));
  kv_spec.box[1] = static_cast<uint32_t>(elems_per_span);
  kv_spec.swizzle = c.swizzle;
  kv_spec.l2_promotion = TmaL2Promotion::k256B;
  validate_tma(q_spec, "q");
  validate_tma(kv_spec, "kv_cache");

  const CUdevice dev = driver::current_device();
  if (a.q.device != static_cast<int>(dev))
    fail_arg("q", fmt::format("lives on device {} but the current device is {}", a.q.device,
                              static_cast<int>(dev)));
  const driver::DeviceInfo& info = driver::cached_device_info(dev);
  const int splits = a.num_splits > 0 ? a.num_splits : default_splits(s, c.dtype, a.max_len_hint, info.sm_count);
  if (a.num_splits == 0) check_workspace(a, s, splits);
  const Arch arch = ops::device_arch(info);
  const jit::Kernel& main = main_kernel(c, arch);
  const jit::Kernel* combine = splits > 1 ? &combine_kernel(c.dtype, c.num_heads, arch) : nullptr;

  if (check_mode()) device_check(a, c, s, arch, stream);
  const TmaDescriptor q_map = encode_tma(q_spec, "q");
  const TmaDescriptor kv_map = encode_tma(kv_spec, "kv_cache");
  const size_t part_rows = static_cast<size_t>(s.b * splits * s.q_len * s.h);
  float* part_out = splits > 1 ? static_cast<float*>(a.workspace) : nullptr;
  float* part_lse = splits > 1 ? part_out + part_rows * kMlaValueDim : nullptr;
  const QRows q_rows{s.ragged ? a.q_offsets.data : nullptr, static_cast<int>(s.q_len),
                     static_cast<int>(s.total_q)};
  KernelArgs ka{a.block_table.data,
                a.cache_lens.data,
                a.out.data,
                static_cast<float*>(a.lse.data),
                part_out,
                part_lse,
                q_rows,
                static_cast<int>(s.max_pages),
                splits,
                a.softmax_scale * 1.4426950408889634f};
  jit::LaunchShape shape;
  shape.grid[0] = static_cast<unsigned>((s.q_len * s.h + c.block_m - 1) / c.block_m);
  shape.grid[1] = static_cast<unsigned>(splits);
  shape.grid[2] = static_cast<unsigned>(s.b);
  shape.block[0] = static_cast<unsigned>(threads_of(c));
  shape.dynamic_smem = main.dynamic_smem_bytes();
  void* main_args[] = {const_cast<TmaDescriptor*>(&q_map), const_cast<TmaDescriptor*>(&kv_map), &ka};
  main.launch(shape, stream, main_args);
  if (combine == nullptr) return;

  CombineArgs ca{part_out, part_lse, a.out.data, static_cast<float*>(a.lse.data), q_rows,
                 splits};
  jit::LaunchShape cshape;
  cshape.grid[0] = static_cast<unsigned>(s.q_len * s.h);
  cshape.grid[1] = static_cast<unsigned>(s.b);
  cshape.block[0] = kCombineThreads;
  cshape.programmatic_dependent_launch = true;  // its prologue overlaps the main kernel's tail
  void* combine_args[] = {&ca};
  combine->launch(cshape, stream, combine_args);
}

namespace ops {

OpSpec mla_decode_op_spec() {
  OpSpec op;
  op.name = "mla_decode";
  op.id = kMlaDecodeOpId;
  op.summary = "DeepSeek MLA decode over a paged latent cache (576/512), split-KV, MTP causal";
  op.fields = {
      {"dtype", "bf16, f16", "\"bf16\"", "q, cache and out type"},
      {"num_heads", "16..128, multiple of 16", "128", "query heads h"},
      {"max_q_len", "1..8", "1", "q_len bound; > 1 compiles the causal (MTP) mask"},
      {"page_size", "16, 32, 64, 128, 256", "64", "tokens per cache page"},
      {"block_m", "64", "64", "query rows (q_len × h packed) per CTA"},
      {"block_n", "32, 64", "64", "keys per KV tile"},
      {"stages", "2..4, Q + stages × tile within 227 KiB (64 keys: 2; 32 keys: 4)", "2",
       "KV tile ring depth"},
      {"swizzle", "128B", "\"128B\"", "Q/K/V smem layout"},
      {"schedule", "seesaw (block_n 64, stages 2), softmax_wg", "\"seesaw\"",
       "warpgroup roles: two taking turns, or softmax + two P·V"},
  };
  op.archs = {kSm90a};
  op.tuning = mla_decode_tuning_spec();
  op.default_set = [] {
    std::vector<nlohmann::json> set;
    for (DType d : {DType::kBF16, DType::kF16})
      for (int h : {16, 32, 64, 128})
        for (int q : {1, 2, 8}) {
          MlaDecodeConfig c = mla_decode_default_config(d, h, q, 64);
          set.push_back(nlohmann::json::parse(c.to_json()));
        }
    return set;
  };
  op.canonicalize = [](const nlohmann::json& j) {
    return nlohmann::json::parse(MlaDecodeConfig::from_json(j.dump()).to_json());
  };
  op.recipe = [](const nlohmann::json& j, Arch arch) {
    ops::require_sm90a(arch, "mla_decode");
    return main_recipe(MlaDecodeConfig::from_json(j.dump()), arch);
  };
  return op;
}

OpSpec mla_decode_combine_op_spec() {
  OpSpec op;
  op.name = "mla_decode_combine";
  op.id = kMlaDecodeCombineOpId;
  op.summary = "merges mla_decode's split-KV partials through their lse (launched by mla_decode)";
  op.fields = {
      {"dtype", "bf16, f16", "\"bf16\"", "output type"},
      {"num_heads", "16..128, multiple of 16", "128", "query heads h"},
  };
  op.archs = {kSm90a};
  auto parse = [](const nlohmann::json& j) {
    ConfigReader r(j, "mla_decode_combine");
    const DType d = r.get_dtype("dtype", DType::kBF16);
    const int h = r.get_int("num_heads", 128);
    r.finish();
    MlaDecodeConfig c;  // reuse the field rules
    c.dtype = d;
    c.num_heads = h;
    c.validate();
    return std::pair{d, h};
  };
  op.default_set = [] {
    std::vector<nlohmann::json> set;
    for (DType d : {DType::kBF16, DType::kF16})
      for (int h : {16, 32, 64, 128})
        set.push_back({{"dtype", std::string(to_string(d))}, {"num_heads", h}});
    return set;
  };
  op.canonicalize = [parse](const nlohmann::json& j) {
    auto [d, h] = parse(j);
    return nlohmann::json{{"dtype", std::string(to_string(d))}, {"num_heads", h}};
  };
  op.recipe = [parse](const nlohmann::json& j, Arch arch) {
    ops::require_sm90a(arch, "mla_decode_combine");
    auto [d, h] = parse(j);
    return combine_recipe(d, h, arch);
  };
  return op;
}

}  // namespace ops
}  // namespace attnjit
