// Host side of merge_states: config validation/JSON, the argument rules, the registry
// entry, and the launch.
#include "attnjit/ops/merge_states.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "attnjit/error.hpp"
#include "driver/driver.hpp"
#include "merge_states/layout.cuh"
#include "ops/field_table.hpp"
#include "ops/launch_support.hpp"
#include "ops/registry.hpp"

namespace attnjit {
namespace {

namespace dev = layout::merge_states;  // the kernel's layout (kernel_templates/merge_states/layout.cuh)

constexpr int kCtasPerSm = 64;  // the launch's cap before the kernel's grid-stride loop

// The config's fields are the rows of attnjit/ops/merge_states_config.def.
const auto& table() {
  using namespace ops::rules;
  static const ops::ConfigTable t{
      "merge_states"
#define ATTNJIT_FIELD(...) ATTNJIT_CONFIG_ROW(MergeStatesConfig, __VA_ARGS__)
#include "attnjit/ops/merge_states_config.def"
#undef ATTNJIT_FIELD
  };
  return t;
}

constexpr ops::KernelEntry kEntry{"merge_states", "merge_states/merge_states.cuh",
                                  "attnjit::merge_states::kernel"};

void check_arch(Arch arch) {
  if (!(arch == kSm90a || arch == kSm100a))
    fail_config("merge_states", fmt::format("not built for {} (supported: sm_90a, sm_100a)", arch.name()));
}

jit::KernelRecipe recipe_of(const MergeStatesConfig& c, Arch arch) {
  check_arch(arch);
  return ops::table_recipe(table(), c, kEntry, arch, 0);
}

const jit::Kernel& kernel_for(const MergeStatesConfig& c, Arch arch) {
  return ops::table_kernel(table(), ops::op_id("merge_states"), c, arch, recipe_of);
}

}  // namespace

void MergeStatesConfig::validate() const {
  table().check_rules(*this);
  const int row = head_dim * dtype_bytes(dtype);
  if (row % dev::kVectorBytes != 0)
    fail_config("merge_states config field 'head_dim'",
                fmt::format("a row must be whole 16-byte vectors: {} x {} B = {} B", head_dim,
                            dtype_bytes(dtype), row));
}

std::string MergeStatesConfig::to_json() const { return table().to_json(*this).dump(); }

MergeStatesConfig MergeStatesConfig::from_json(std::string_view text) {
  MergeStatesConfig c = table().from_json_text(text);
  c.validate();
  return c;
}

std::string MergeStatesConfig::describe() const { return table().describe(*this); }

MergeStatesConfig merge_states_default_config(DType dtype, int head_dim) {
  // 256 threads: 8 CTAs fill an SM; a grid-stride loop over rows keeps one wave. Each lane
  // has its row's two vectors per 16 bytes in flight before any math (a memory-bound pass).
  MergeStatesConfig c;
  c.dtype = dtype;
  c.head_dim = head_dim;
  c.threads = 256;
  return c;
}

MergeStatesConfig merge_states_selected_config(const MergeStatesShape& shape) {
  return merge_states_default_config(shape.dtype, static_cast<int>(shape.head_dim));
}

namespace {

// ---- argument rules (each names the argument) ------------------------------------------

// A view's bytes [first, last) (strides are checked non-negative first).
struct Span {
  uintptr_t first = 0, last = 0;
};
Span span_of(const TensorView& t) {
  int64_t extent = 1;  // elements from the first to one past the last
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] == 0) return {};
    extent += (t.shape[d] - 1) * t.strides[d];
  }
  const auto first = reinterpret_cast<uintptr_t>(t.data);
  return {first, first + static_cast<uintptr_t>(extent * t.element_bytes())};
}

bool same_view(const TensorView& a, const TensorView& b) {
  if (a.data != b.data || a.rank != b.rank || a.dtype != b.dtype) return false;
  for (int d = 0; d < a.rank; ++d)
    if (a.shape[d] != b.shape[d] || a.strides[d] != b.strides[d]) return false;
  return true;
}

// An output may be an input itself (in place) but may not overlap one otherwise.
void check_no_overlap(const TensorView& out, const char* out_name, const TensorView& in,
                      const char* in_name, bool in_place_ok) {
  if (in_place_ok && same_view(out, in)) return;
  const Span o = span_of(out), i = span_of(in);
  if (o.first < i.last && i.first < o.last)
    fail_arg(out_name, fmt::format("overlaps {} ({} vs {}){}", in_name, out.describe(), in.describe(),
                                   in_place_ok ? "; in place it must be the same view" : ""));
}

void check_strides(const TensorView& t, const char* name) {
  for (int d = 0; d < t.rank; ++d)
    if (t.strides[d] < 0 || t.shape[d] < 0)
      fail_arg(name, fmt::format("sizes and strides must be non-negative, got {}", t.describe()));
}

// A values view's rules; v_b and v_out must also match v_a (`ref`) in dtype, shape, device.
void check_values(const TensorView& t, const char* name, const TensorView& ref, const char* ref_name) {
  if (t.data == nullptr) fail_arg(name, "is not set (data == nullptr)");
  if (t.rank != 3 && t.rank != 4)
    fail_arg(name, fmt::format("must be rank 3 [n, h, d] or 4 [b, s, h, d], got {}", t.describe()));
  if (t.dtype != DType::kBF16 && t.dtype != DType::kF16 && t.dtype != DType::kF32)
    fail_arg(name, fmt::format("must be bf16, f16 or f32, got {}", to_string(t.dtype)));
  check_strides(t, name);
  if (&t != &ref) {
    check_dtype(t, name, ref.dtype);
    check_same_shape(ref, ref_name, t, name);  // the helpers name their second view
    check_same_device(ref, ref_name, t, name);
  }
  const int64_t eb = t.element_bytes(), d = t.shape[t.rank - 1];
  if (d > 1 && t.strides[t.rank - 1] != 1)
    fail_arg(name, fmt::format("the last dimension (d) must be contiguous, got {}", t.describe()));
  if (d * eb % dev::kVectorBytes != 0)
    fail_arg(name, fmt::format("a row of d = {} {} values must be whole 16-byte vectors ({} B)", d,
                               to_string(t.dtype), d * eb));
  if (reinterpret_cast<uintptr_t>(t.data) % dev::kVectorBytes != 0)
    fail_arg(name, "must be 16-byte aligned");
  for (int i = 0; i + 1 < t.rank; ++i)
    if (t.strides[i] * eb % dev::kVectorBytes != 0)
      fail_arg(name, fmt::format("stride {} of dimension {} must be a multiple of 16 bytes ({})",
                                 t.strides[i], i, t.describe()));
}

// An lse view: f32, v's leading dimensions.
void check_lse(const TensorView& t, const char* name, const TensorView& v, const char* v_name) {
  if (t.data == nullptr) fail_arg(name, "is not set (data == nullptr)");
  check_dtype(t, name, DType::kF32);
  check_same_device(v, v_name, t, name);
  bool ok = t.rank == v.rank - 1;
  for (int d = 0; ok && d < t.rank; ++d) ok = t.shape[d] == v.shape[d];
  if (!ok)
    fail_arg(name, fmt::format("must be {}'s leading dimensions (rank {}), got {}", v_name, v.rank - 1,
                               t.describe()));
  check_strides(t, name);
  if (reinterpret_cast<uintptr_t>(t.data) % 4 != 0) fail_arg(name, "must be 4-byte aligned");
}

void check_args(const MergeStatesArgs& a) {
  check_values(a.v_a, "v_a", a.v_a, "v_a");
  check_values(a.v_b, "v_b", a.v_a, "v_a");
  check_values(a.v_out, "v_out", a.v_a, "v_a");
  check_lse(a.lse_a, "lse_a", a.v_a, "v_a");
  check_lse(a.lse_b, "lse_b", a.v_a, "v_a");
  const bool want_lse = a.lse_out.data != nullptr;
  if (want_lse) check_lse(a.lse_out, "lse_out", a.v_a, "v_a");
  for (int d = 0; d + 1 < a.v_a.rank; ++d)
    if (a.v_a.shape[d] > INT32_MAX)
      fail_arg("v_a", fmt::format("dimension {} of {} is past 2^31 - 1", d, a.v_a.describe()));
  check_no_overlap(a.v_out, "v_out", a.v_a, "v_a", true);
  check_no_overlap(a.v_out, "v_out", a.v_b, "v_b", true);
  check_no_overlap(a.v_out, "v_out", a.lse_a, "lse_a", false);
  check_no_overlap(a.v_out, "v_out", a.lse_b, "lse_b", false);
  if (want_lse) {
    check_no_overlap(a.lse_out, "lse_out", a.lse_a, "lse_a", true);
    check_no_overlap(a.lse_out, "lse_out", a.lse_b, "lse_b", true);
    check_no_overlap(a.lse_out, "lse_out", a.v_a, "v_a", false);
    check_no_overlap(a.lse_out, "lse_out", a.v_b, "v_b", false);
    check_no_overlap(a.lse_out, "lse_out", a.v_out, "v_out", false);
  }
}

void check_shape(const MergeStatesShape& s, const MergeStatesConfig& c) {
  if (s.tokens < 0 || s.heads < 0 || s.head_dim < 1 || s.tokens > INT32_MAX || s.heads > INT32_MAX)
    fail_arg("shape", fmt::format("tokens {} and heads {} must be 0..2^31 - 1, head_dim {} >= 1",
                                  s.tokens, s.heads, s.head_dim));
  if (c.dtype != s.dtype || c.head_dim != s.head_dim)
    fail_arg("config", fmt::format("{} d{} does not match the states' {} d{}", to_string(c.dtype), c.head_dim,
                                   to_string(s.dtype), s.head_dim));
}

int64_t rows_of(const MergeStatesShape& s) { return s.tokens * s.heads; }

// The view's strides for (n0, n1, head): a rank-3 view has n0 = 1.
void strides_of(const TensorView& t, int value_dims, long long (&out)[3]) {
  const int lead = t.rank - value_dims;  // 2 (rank-3 values / rank-2 lse) or 3
  out[0] = lead == 3 ? t.strides[0] : 0;
  out[1] = t.strides[lead - 2];
  out[2] = t.strides[lead - 1];
}

dev::State state_of(const TensorView& v, const TensorView& lse) {
  dev::State s{v.data, static_cast<float*>(lse.data), {}, {}};
  strides_of(v, 1, s.v_stride);
  if (lse.data != nullptr) strides_of(lse, 0, s.lse_stride);
  return s;
}

}  // namespace

MergeStatesShape merge_states_shape(const MergeStatesArgs& a) {
  check_values(a.v_a, "v_a", a.v_a, "v_a");
  const TensorView& v = a.v_a;
  const int64_t tokens = v.rank == 4 ? v.shape[0] * v.shape[1] : v.shape[0];
  return {v.dtype, tokens, v.shape[v.rank - 2], v.shape[v.rank - 1]};
}

namespace {

// Every rule of a call, and its shape against the plan's.
void check_call(const MergeStatesArgs& a, const MergeStatesPlan& plan) {
  check_args(a);
  const MergeStatesShape s = merge_states_shape(a);
  const MergeStatesShape& p = plan.shape;
  if (s.dtype != p.dtype || s.tokens != p.tokens || s.heads != p.heads || s.head_dim != p.head_dim)
    fail_arg("v_a", fmt::format("{} is not the plan's {} [{} tokens, {} heads, {}] (merge_states_plan)",
                                a.v_a.describe(), to_string(p.dtype), p.tokens, p.heads, p.head_dim));
  plan.config.validate();
  check_shape(p, plan.config);
}

}  // namespace

MergeStatesPlan merge_states_plan(const MergeStatesShape& shape, const MergeStatesConfig* config) {
  MergeStatesPlan plan;
  plan.shape = shape;
  plan.config = config ? *config : merge_states_selected_config(shape);
  plan.config.validate();
  check_shape(shape, plan.config);
  const CUdevice dev = driver::current_device();
  kernel_for(plan.config, ops::device_arch(driver::cached_device_info(dev))).prepare_current_device();
  return plan;
}

void merge_states_schedule(const MergeStatesPlan& plan, const MergeStatesArgs& args, Workspace /*workspace*/,
                           CUstream /*stream*/) {
  check_call(args, plan);  // what the run would refuse is refused here too
}

void merge_states(const MergeStatesArgs& a, const MergeStatesPlan& plan, Workspace /*workspace*/,
                  CUstream stream) {
  check_call(a, plan);
  const MergeStatesShape& p = plan.shape;
  const MergeStatesConfig& c = plan.config;
  if (rows_of(p) == 0) return;  // nothing to merge; no launch

  const CUdevice device = driver::current_device();
  if (a.v_a.device != static_cast<int>(device))
    fail_arg("v_a", fmt::format("lives on device {} but the current device is {}", a.v_a.device,
                                static_cast<int>(device)));
  const driver::DeviceInfo& info = driver::cached_device_info(device);
  const jit::Kernel& kernel = kernel_for(c, ops::device_arch(info));

  const TensorView& v = a.v_a;
  dev::Args ka{state_of(a.v_a, a.lse_a), state_of(a.v_b, a.lse_b), state_of(a.v_out, a.lse_out),
               static_cast<int>(v.rank == 4 ? v.shape[0] : 1), static_cast<int>(v.shape[v.rank - 3]),
               static_cast<int>(p.heads), 0};
  const int64_t per_cta = dev::rows_per_cta(c.threads, c.head_dim, dtype_bytes(c.dtype));
  // A CTA per kRowsPerCta rows up to kCtasPerSm per SM (several waves: whatever the
  // kernel's registers allow resident, the last wave is a small share), then the kernel
  // strides over the rest.
  jit::LaunchShape shape;
  shape.grid[0] = static_cast<unsigned>(
      std::min<int64_t>((rows_of(p) + per_cta - 1) / per_cta, int64_t{info.sm_count} * kCtasPerSm));
  shape.block[0] = static_cast<unsigned>(c.threads);
  void* args[] = {&ka};
  kernel.launch(shape, stream, args);
}

void merge_states(const MergeStatesArgs& a, CUstream stream, const MergeStatesConfig* config) {
  check_args(a);  // every argument rule before the plan touches the device
  const MergeStatesShape shape = merge_states_shape(a);
  const MergeStatesConfig c = config ? *config : merge_states_selected_config(shape);
  c.validate();
  check_shape(shape, c);
  if (rows_of(shape) == 0) return;
  merge_states(a, merge_states_plan(shape, &c), {}, stream);
}

namespace ops {

TuningSpec merge_states_tuning_spec();  // merge_states_tuning.cpp

std::vector<OpSpec> merge_states_op_specs() {
  OpSpec op;
  op.name = "merge_states";
  op.id = op_id(op.name);
  op.summary = "(v_a, lse_a) + (v_b, lse_b): two attention states merged (cascade, context parallel)";
  op.archs = {kSm90a, kSm100a};
  op.tuning = merge_states_tuning_spec();
  op.default_set = [] {
    // The value widths engines merge: MHA heads 64..256, MLA's 512 latent; f32 partials.
    std::vector<nlohmann::json> set;
    for (DType d : {DType::kBF16, DType::kF16})
      for (int head_dim : {64, 128, 192, 256, 512})
        set.push_back(nlohmann::json::parse(merge_states_default_config(d, head_dim).to_json()));
    for (int head_dim : {128, 512})
      set.push_back(nlohmann::json::parse(merge_states_default_config(DType::kF32, head_dim).to_json()));
    return set;
  };
  ops::bind_config<MergeStatesConfig>(op, table(), recipe_of);
  return {op};
}

}  // namespace ops
}  // namespace attnjit
