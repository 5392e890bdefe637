#pragma once
// An op as a problem: what `attnjit bench`, the tune worker and the tests run, through one
// interface, so none of them has per-op code. A problem owns one case's inputs on the GPU
// (rotated over copies that keep L2 cold when asked), plans and runs the op as an engine
// would, and judges its output against float64 (or bit for bit, for a copy).
//
// Every op family in runtime/ops/ops.def has one: harness/<op>_problem.cpp defines
// harness::<op>_problem(), and problems() lists them in that file's order.
#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "attnjit/tensor.hpp"
#include "harness/device.hpp"

namespace attnjit::harness {

// A problem's verdict on its current output.
struct Verdict {
  bool passed = false;
  std::string summary;              // one line with every number
  nlohmann::ordered_json numbers;   // {"passed", "rel_l2", ...}: the bench JSON's "check"
};

// A planned run: what the runtime chose and the per-layer call.
struct Prepared {
  nlohmann::json config;      // the op's canonical config that runs
  std::string config_source;  // "given", "heuristic" or "tuning_db"
  int num_splits = 1;
  // Enqueues one op call on `stream` reading input copy `i % copies()`; owns its plan's
  // workspace. Graph capturable, as an engine's per-layer call must be.
  std::function<void(int i, CUstream stream)> enqueue;
  void run(int i) const { enqueue(i, nullptr); }  // the same call on the null stream
  // Enqueues the per-step schedule again (prepare ran it once): what a decode step pays
  // once before its layers' runs. Empty when the plan's schedule enqueues nothing.
  std::function<void()> schedule;
};

class Problem {
 public:
  virtual ~Problem() = default;

  virtual nlohmann::ordered_json case_json() const = 0;  // every key, as the op's case reader reads it
  virtual std::string describe() const = 0;              // one short line
  virtual int copies() const = 0;

  // Plans the op (compiling or loading its kernels) and runs its per-step schedule.
  // `overrides` = nullptr: what a caller gets from the runtime (tuning database, else the
  // heuristic). Otherwise a JSON object of config fields laid over the heuristic's config
  // for this case, plus the op's run-time fields (ops::TuningSpec::runtime_fields, e.g.
  // num_splits): a full tuning candidate or a partial `--config`. Throws Error when the
  // result cannot run here.
  virtual Prepared prepare(const nlohmann::json* overrides) = 0;

  // Fills copy 0's outputs with a pattern no kernel writes (NaN for floats), so a kernel
  // that writes nothing cannot pass.
  virtual void poison_output() = 0;
  virtual std::vector<uint8_t> output_bytes() const = 0;  // copy 0's output (synchronizes)
  // Judges copy 0's output against float64 on `sampled_rows` random rows plus every edge
  // row (0: every row) and the whole output's structure.
  virtual Verdict check(int sampled_rows) const = 0;
  // "" when `got` matches `ref` (another config's output_bytes() on this problem: bit for
  // bit, or within the op's rounding), else what differs. The tune worker's check.
  virtual std::string compare(const std::vector<uint8_t>& ref, const std::vector<uint8_t>& got) const = 0;

  virtual double bytes() const = 0;  // the bytes a call must move at least (docs/performance.md's rule)
  virtual double flops() const = 0;  // 0 for an op without arithmetic
  // The design's target for this case, {"metric": "gbps"|"tflops", "h100": value}, or null.
  virtual nlohmann::json target() const { return nullptr; }
};

struct ProblemKind {
  std::string op;
  // `attnjit bench <op>`'s rows, as case JSON.
  std::function<std::vector<nlohmann::json>()> bench_cases;
  // The bench rows' features at test scale (a few MB each): the GPU tests run every one.
  std::function<std::vector<nlohmann::json>()> test_cases;
  // The case `shape` names (the op's tuning vocabulary plus harness keys; errors name the
  // key), its inputs drawn from `seed`; with `l2_bytes`, enough copies to keep L2 cold.
  std::function<std::unique_ptr<Problem>(const nlohmann::json& shape, uint64_t seed, size_t l2_bytes)> make;
};

// Every op family's problem (runtime/ops/ops.def), in the registry's order.
const std::vector<ProblemKind>& problems();
// Throws Error(kUnsupportedConfig) listing the known ones when `op` has none.
const ProblemKind& find_problem(std::string_view op);

// ---- for the problems' own files -----------------------------------------------------

// The heuristic's config `defaults` with `overrides` laid over it, the run-time fields
// (`runtime_fields`) moved out into `runtime`; errors name the key.
nlohmann::json merge_config(const nlohmann::json& defaults, const nlohmann::json& overrides,
                            const std::vector<std::string>& runtime_fields, nlohmann::json& runtime);
// "given" when overrides were passed, else "heuristic" when the plan's config is the
// heuristic's, else "tuning_db".
std::string config_source(const nlohmann::json* overrides, const nlohmann::json& planned,
                          const nlohmann::json& heuristic);

// The verdict of a float64 comparison (MlaComparison, MhaComparison: passed, summary(),
// rel_l2, worst_row_err, checked_rows).
template <class Comparison>
Verdict verdict_of(const Comparison& r) {
  return {r.passed, r.summary(),
          {{"passed", r.passed},
           {"rel_l2", r.rel_l2},
           {"worst_row_err", r.worst_row_err},
           {"rows_checked", r.checked_rows}}};
}

// The Prepared of an op's plan, as an engine runs it: a workspace of the plan's size owned
// by the run, the per-step schedule enqueued once on args(0), then run(i) = the per-layer
// call on args(i). `args` must outlive the result (a problem's own member function).
template <class Plan, class Args>
Prepared prepared_run(const Plan& plan, const nlohmann::json* overrides, const nlohmann::json& heuristic,
                      std::function<Args(int)> args,
                      void (*schedule)(const Plan&, const Args&, Workspace, CUstream),
                      void (*run)(const Args&, const Plan&, Workspace, CUstream)) {
  auto workspace = std::make_shared<DeviceBuffer>(std::max<size_t>(1, plan.workspace_bytes));
  const Workspace ws{plan.workspace_bytes ? workspace->data() : nullptr, plan.workspace_bytes};
  schedule(plan, args(0), ws, nullptr);
  Prepared p;
  p.config = nlohmann::json::parse(plan.config.to_json());
  p.config_source = config_source(overrides, p.config, heuristic);
  if constexpr (requires { plan.num_splits; }) p.num_splits = plan.num_splits;
  p.enqueue = [plan, ws, workspace, args, run](int i, CUstream stream) { run(args(i), plan, ws, stream); };
  if constexpr (requires { plan.balanced; })  // the plans whose schedule launches a kernel
    if (plan.balanced)
      p.schedule = [plan, ws, workspace, args, schedule] { schedule(plan, args(0), ws, nullptr); };
  return p;
}

// Relative L2 distance of two 16-bit float outputs (bf16 or f16 bits), "" when within
// `limit` and finite where the reference is; else what differs.
std::string compare_16bit(const std::vector<uint8_t>& ref, const std::vector<uint8_t>& got,
                          bool f16, double limit);

}  // namespace attnjit::harness
