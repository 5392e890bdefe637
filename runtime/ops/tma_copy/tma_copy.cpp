// Host side of tma_copy: config validation/JSON, the registry entry, and the launch.
#include "attnjit/ops/tma_copy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "attnjit/error.hpp"
#include "attnjit/tma.hpp"
#include "common/constants.cuh"
#include "driver/driver.hpp"
#include "ops/registry.hpp"
#include "ops/field_table.hpp"

namespace attnjit {
namespace {

constexpr int kSmemPerSm = 233472;        // 228 KiB per SM, of which 1 KiB per block is reserved
constexpr int kThreads = 32;              // one warp; one elected lane drives the copy engine

int box_inner_bytes(const TmaCopyConfig& c) {
  return c.swizzle == Swizzle::kNone ? c.block_n * dtype_bytes(c.dtype) : swizzle_bytes(c.swizzle);
}
int tile_bytes(const TmaCopyConfig& c) { return c.block_m * c.block_n * dtype_bytes(c.dtype); }

// The config's fields are the rows of attnjit/ops/tma_copy_config.def.
const auto& table() {
  using namespace ops::rules;
  static const ops::ConfigTable t{
      "tma_copy"
#define ATTNJIT_FIELD(...) ATTNJIT_CONFIG_ROW(TmaCopyConfig, __VA_ARGS__)
#include "attnjit/ops/tma_copy_config.def"
#undef ATTNJIT_FIELD
  };
  return t;
}

constexpr ops::KernelEntry kEntry{"tma_copy", "tma_copy/tma_copy.cuh", "attnjit::tma_copy::kernel"};

jit::KernelRecipe recipe_of(const TmaCopyConfig& c, Arch arch) {
  return ops::table_recipe(table(), c, kEntry, arch, c.dynamic_smem_bytes());
}

Arch arch_of(const driver::DeviceInfo& info) {
  return Arch{info.cc_major, info.cc_minor, true};
}

void check_arch(Arch arch) {
  if (!(arch == kSm90a || arch == kSm100a))
    fail_config("tma_copy", fmt::format("not built for {} (supported: sm_90a, sm_100a)", arch.name()));
}

const jit::Kernel& kernel_for(const TmaCopyConfig& c, Arch arch) {
  return ops::table_kernel(table(), ops::op_id("tma_copy"), c, arch, [](const TmaCopyConfig& cc, Arch a) {
    check_arch(a);
    return recipe_of(cc, a);
  });
}

}  // namespace

void TmaCopyConfig::validate() const {
  auto bad = [](const char* field, const std::string& rule) {
    fail_config(fmt::format("tma_copy config field '{}'", field), rule);
  };
  table().check_rules(*this);
  const int eb = dtype_bytes(dtype);
  const int row = block_n * eb;
  if (row % 16 != 0)
    bad("block_n", fmt::format("a tile row must be a multiple of 16 bytes: {} x {} B = {} B",
                               block_n, eb, row));
  if (swizzle == Swizzle::kNone && block_n > 256)
    bad("block_n", fmt::format("without swizzle one box spans the row, at most 256 elements, got {}",
                               block_n));
  if (swizzle != Swizzle::kNone && row % swizzle_bytes(swizzle) != 0)
    bad("block_n", fmt::format("a {} tile row must be whole {}-byte spans: {} B", to_string(swizzle),
                               swizzle_bytes(swizzle), row));
  if (static_cast<int>(dynamic_smem_bytes()) > kMaxSmemPerBlock)
    bad("stages", fmt::format("{} stages x {} B tiles need {} B of shared memory, over the {} B "
                              "a block may use",
                              stages, tile_bytes(*this), dynamic_smem_bytes(), kMaxSmemPerBlock));
}

unsigned TmaCopyConfig::dynamic_smem_bytes() const {
  // Mirrors SharedStorage<P> + realignment slack in kernel_templates/tma_copy/tma_copy.cuh;
  // the kernel traps if the launch gives it less.
  const int ring = stages * tile_bytes(*this);
  const int barriers = stages * 8;
  const int storage = (ring + barriers + 1023) / 1024 * 1024;  // alignas(1024) struct size
  return static_cast<unsigned>(storage + 1024);
}

std::string TmaCopyConfig::to_json() const { return table().to_json(*this).dump(); }

TmaCopyConfig TmaCopyConfig::from_json(std::string_view text) {
  TmaCopyConfig c = table().from_json_text(text);
  c.validate();
  return c;
}

std::string TmaCopyConfig::describe() const { return table().describe(*this); }

TmaCopyConfig tma_copy_default_config(DType dtype) {
  // 128 rows × 256 bytes per tile, unswizzled (one box per tile: a copy has no consumer
  // that needs a swizzled layout), 4 stages = 128 KiB, one CTA per SM with ~96 KiB of
  // loads in flight, well past bandwidth × latency / SMs. Measured on an H100 against
  // the swizzled and the narrower/deeper variants: docs/performance.md (tma_copy).
  TmaCopyConfig c;
  c.dtype = dtype;
  c.block_m = 128;
  c.block_n = 256 / dtype_bytes(dtype);
  c.stages = 4;
  c.swizzle = Swizzle::kNone;
  return c;
}

TmaCopyShape tma_copy_shape(const TmaCopyArgs& a) {
  check_rank(a.src, "src", 2);
  return {a.src.dtype, a.src.shape[0], a.src.shape[1]};
}

namespace {

// Every rule of a shape and of the config against it.
void check_shape(const TmaCopyShape& s, const TmaCopyConfig& c) {
  if (s.rows < 0 || s.cols < 0 || s.rows > INT32_MAX || s.cols > INT32_MAX)
    fail_arg("shape", fmt::format("rows {} and cols {} must be 0..2^31 (TMA coordinates)",
                                  s.rows, s.cols));
  if (c.dtype != s.dtype && dtype_bytes(c.dtype) != dtype_bytes(s.dtype))
    fail_arg("config", fmt::format("dtype {} does not match the tensors' {}", to_string(c.dtype),
                                   to_string(s.dtype)));
}

// The tensor maps of a call: every host-visible rule of the tensors, checked against the
// plan's shape (errors name the argument).
std::pair<TmaMapSpec, TmaMapSpec> map_specs(const TmaCopyArgs& a, const TmaCopyPlan& plan) {
  const TensorView &src = a.src, &dst = a.dst;
  check_rank(src, "src", 2);
  check_rank(dst, "dst", 2);
  check_dtype(dst, "dst", src.dtype);
  check_same_shape(src, "src", dst, "dst");
  check_same_device(src, "src", dst, "dst");
  const TmaCopyShape& p = plan.shape;
  if (src.dtype != p.dtype || src.shape[0] != p.rows || src.shape[1] != p.cols)
    fail_arg("src", fmt::format("{} is not the plan's {} [{}, {}] (tma_copy_plan)",
                                src.describe(), to_string(p.dtype), p.rows, p.cols));
  const TmaCopyConfig& c = plan.config;
  c.validate();
  check_shape(p, c);
  TmaMapSpec src_spec;
  src_spec.tensor = src;
  src_spec.box[0] = static_cast<uint32_t>(c.block_m);
  src_spec.box[1] = static_cast<uint32_t>(box_inner_bytes(c) / dtype_bytes(c.dtype));
  src_spec.swizzle = c.swizzle;
  src_spec.l2_promotion = TmaL2Promotion::k256B;
  TmaMapSpec dst_spec = src_spec;
  dst_spec.tensor = dst;
  if (p.rows > 0 && p.cols > 0) {
    validate_tma(src_spec, "src");
    validate_tma(dst_spec, "dst");
  }
  return {src_spec, dst_spec};
}

}  // namespace

TmaCopyPlan tma_copy_plan(const TmaCopyShape& shape, const TmaCopyConfig* config) {
  TmaCopyPlan plan;
  plan.shape = shape;
  plan.config = config ? *config : tma_copy_selected_config(shape);
  plan.config.validate();
  check_shape(shape, plan.config);
  const CUdevice dev = driver::current_device();
  kernel_for(plan.config, arch_of(driver::cached_device_info(dev))).prepare_current_device();
  return plan;
}

void tma_copy_schedule(const TmaCopyPlan& plan, const TmaCopyArgs& args, Workspace /*workspace*/,
                       CUstream /*stream*/) {
  map_specs(args, plan);  // what the run would refuse is refused here too
}

void tma_copy(const TmaCopyArgs& a, const TmaCopyPlan& plan, Workspace /*workspace*/,
              CUstream stream) {
  // Tensor-map rules are checked here, before anything touches the driver.
  const auto [src_spec, dst_spec] = map_specs(a, plan);
  const TmaCopyConfig& c = plan.config;
  const int64_t rows = plan.shape.rows, cols = plan.shape.cols;
  if (rows == 0 || cols == 0) return;  // nothing to move; no launch

  const CUdevice dev = driver::current_device();
  const driver::DeviceInfo& info = driver::cached_device_info(dev);
  if (a.src.device != static_cast<int>(dev))
    fail_arg("src", fmt::format("lives on device {} but the current device is {}", a.src.device,
                                static_cast<int>(dev)));
  const jit::Kernel& kernel = kernel_for(c, arch_of(info));
  const TmaDescriptor src_map = encode_tma(src_spec, "src");
  const TmaDescriptor dst_map = encode_tma(dst_spec, "dst");

  int rows32 = static_cast<int>(rows), cols32 = static_cast<int>(cols);
  const int64_t tiles = ((rows + c.block_m - 1) / c.block_m) * ((cols + c.block_n - 1) / c.block_n);
  const int per_sm = std::max(1, std::min(16, kSmemPerSm / (static_cast<int>(kernel.dynamic_smem_bytes()) + 1024)));
  jit::LaunchShape shape;
  shape.grid[0] = static_cast<unsigned>(std::min<int64_t>(tiles, int64_t{info.sm_count} * per_sm));
  shape.block[0] = kThreads;
  shape.dynamic_smem = kernel.dynamic_smem_bytes();
  void* args[] = {const_cast<TmaDescriptor*>(&src_map), const_cast<TmaDescriptor*>(&dst_map),
                  &rows32, &cols32};
  kernel.launch(shape, stream, args);
}

void tma_copy(const TmaCopyArgs& a, CUstream stream, const TmaCopyConfig* config) {
  const TmaCopyShape shape = tma_copy_shape(a);
  TmaCopyPlan unloaded{shape, config ? *config : tma_copy_selected_config(shape), 0};
  map_specs(a, unloaded);  // every argument rule before the plan touches the device
  if (shape.rows == 0 || shape.cols == 0) return;
  const TmaCopyPlan plan = tma_copy_plan(shape, &unloaded.config);
  tma_copy(a, plan, {}, stream);
}

namespace ops {

TuningSpec tma_copy_tuning_spec();  // tma_copy_tuning.cpp

std::vector<OpSpec> tma_copy_op_specs() {
  OpSpec op;
  op.name = "tma_copy";
  op.id = op_id(op.name);
  op.summary = "2-D copy through shared memory with TMA loads/stores (bandwidth probe)";
  op.archs = {kSm90a, kSm100a};
  op.tuning = tma_copy_tuning_spec();
  op.default_set = [] {
    std::vector<nlohmann::json> set;
    for (DType d : {DType::kBF16, DType::kE4M3}) {
      for (Swizzle s : {Swizzle::kNone, Swizzle::k32B, Swizzle::k64B, Swizzle::k128B}) {
        TmaCopyConfig c = tma_copy_default_config(d);
        c.swizzle = s;
        set.push_back(nlohmann::json::parse(c.to_json()));
      }
    }
    return set;
  };
  ops::bind_config<TmaCopyConfig>(op, table(), [](const TmaCopyConfig& c, Arch arch) {
    check_arch(arch);
    return recipe_of(c, arch);
  });
  return {op};
}

}  // namespace ops
}  // namespace attnjit
