// `attnjit tune`: autotuning sweeps, the tuning database report, and the hidden
// `attnjit tune-worker` that times candidates in a separate process (tune/worker.hpp).
// docs/tuning.md is the user guide.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <climits>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "attnjit/error.hpp"
#include "tune/report.hpp"
#include "tune/space.hpp"
#include "tune/sweep.hpp"
#include "tune/worker.hpp"
#include "tuning/db.hpp"

namespace attnjit::cli {
namespace {

using nlohmann::json;

struct TuneOptions {
  std::string op, shape, shapes, space, db, cache_dir, devices, plot, bucket;
  int iters = 50, warmup = 5, jobs = 0;
  double timeout_s = 60;
  bool json = false, report = false, list_space = false, bench_shapes = false;
};

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw Error(ErrorKind::kDriver, "attnjit tune: cannot find its own executable (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

std::vector<json> shapes_of(const TuneOptions& o, const ops::OpSpec& op) {
  const int given = !o.shape.empty() + !o.shapes.empty() + o.bench_shapes;
  if (given != 1) throw tune::UsageError("give exactly one of --shape, --shapes FILE, --bench-shapes");
  if (!o.shape.empty()) return {tune::shape_from_text(o.shape)};
  if (!o.shapes.empty()) return tune::read_shapes_file(o.shapes);
  if (op.tuning.bench_shapes.empty())
    throw tune::UsageError(fmt::format("--bench-shapes: {} declares no benchmark shapes", op.name));
  return op.tuning.bench_shapes;
}

int list_space(const TuneOptions& o, const ops::OpSpec& op, const std::vector<json>& shapes,
               const std::optional<json>& space) {
  json out = json::array();
  for (const json& shape : shapes) {
    const tune::Space s = tune::enumerate(op, shape, space);
    json j = {{"shape", s.shape}, {"bucket", s.bucket}, {"default", s.default_candidate},
              {"candidates", s.candidates}, {"pruned", json::array()}};
    for (const tune::Pruned& p : s.pruned) j["pruned"].push_back({{"candidate", p.candidate}, {"reason", p.reason}});
    out.push_back(j);
    if (!o.json) {
      fmt::print("{} [{}]: {} candidates, {} pruned\n", op.name, s.bucket, s.candidates.size(), s.pruned.size());
      for (const json& c : s.candidates)
        fmt::print("  {:<40} {}\n", tune::describe_change(c, s.default_candidate), c.dump());
      for (const tune::Pruned& p : s.pruned) fmt::print("  pruned {}: {}\n", p.candidate.dump(), p.reason);
    }
  }
  if (o.json) std::cout << out.dump(2) << "\n";
  return 0;
}

int report(const TuneOptions& o, const std::string& db_path) {
  if (db_path.empty()) throw tune::UsageError("--report: no database (ATTNJIT_TUNING_DB=off and no --db)");
  const tuning::Db db = tuning::load_db(db_path);  // a corrupt file: warning naming it, ignored
  if (db.empty()) {
    fmt::print(stderr, "attnjit tune --report: no tuning entries in {}\n", db_path);
    return 1;
  }
  if (o.json)
    std::cout << tuning::to_json(db).dump(2) << "\n";
  else
    fmt::print("{}", tune::report_text(db, db_path));
  if (!o.plot.empty()) {
    const tuning::Environment* env = nullptr;
    const tuning::Entry* e = tune::pick_entry(db, o.op, o.bucket, &env);
    if (!e) {
      fmt::print(stderr, "attnjit tune --plot: no entry for op '{}' bucket '{}' in {}\n", o.op, o.bucket, db_path);
      return 1;
    }
    std::ofstream out(o.plot);
    out << tune::plot_svg(*e, env->fingerprint);
    if (!out) throw Error(ErrorKind::kCache, fmt::format("--plot: cannot write {}", o.plot));
    fmt::print(stderr, "wrote {} ({} {})\n", o.plot, e->op, e->bucket);
  }
  return 0;
}

int run(const TuneOptions& o) {
  try {
    const std::string db_path = o.db.empty() ? tuning::db_path_for(o.cache_dir) : o.db;
    if (o.report) return report(o, db_path);
    if (o.op.empty()) throw tune::UsageError("--op is required (or --report)");
    const ops::OpSpec& op = tune::tunable_op(o.op);
    const std::vector<json> shapes = shapes_of(o, op);
    std::optional<json> space;
    if (!o.space.empty()) space = tune::read_space_file(o.space);
    if (o.list_space) return list_space(o, op, shapes, space);
    for (const json& s : shapes) tune::enumerate(op, s, space);  // usage errors before any GPU work

    tune::SweepOptions so;
    so.op = &op;
    so.shapes = shapes;
    so.space = space;
    so.db_path = db_path;
    so.cache_dir = o.cache_dir;
    so.iters = o.iters;
    so.warmup = o.warmup;
    so.jobs = o.jobs;
    so.timeout_s = o.timeout_s;
    so.devices = o.devices;
    so.worker_argv = {self_exe(), "tune-worker"};
    const tune::SweepResult r = tune::run_sweep(so);
    if (o.json) {
      json j = tune::to_json(r);
      j["db"] = db_path;
      std::cout << j.dump(2) << "\n";
    } else {
      fmt::print("{}", tune::to_text(r));
      fmt::print("\ndatabase: {}\n", db_path.empty() ? std::string("(not saved)") : db_path);
    }
    for (const tune::ShapeResult& s : r.shapes)
      if (s.best < 0) return 1;  // nothing usable for a shape: say so with the exit status
    return 0;
  } catch (const tune::UsageError& e) {
    fmt::print(stderr, "attnjit tune: {}\n", e.what());
    return 2;
  }
}

}  // namespace

std::function<int()> add_tune_command(CLI::App& app) {
  auto o = std::make_shared<TuneOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tune", "autotune an op: time its search space on the GPU, keep the fastest verified config");
  cmd->add_option("--op", o->op, "op to tune (tma_copy, mla_decode, mha_fwd)");
  cmd->add_option("--shape", o->shape, "one shape as k=v,... (docs/tuning.md lists the keys)");
  cmd->add_option("--shapes", o->shapes, "JSON list of shapes (objects or \"k=v,...\" strings)");
  cmd->add_flag("--bench-shapes", o->bench_shapes, "the op's benchmark shapes");
  cmd->add_option("--space", o->space,
                  "JSON: a list of candidates or {field: [values]}, replacing the op's space");
  cmd->add_option("--db", o->db, "tuning database (default: ATTNJIT_TUNING_DB, <cache root>/tuning.json)");
  cmd->add_option("--cache-dir", o->cache_dir, "kernel cache root (default as `attnjit cache`)");
  cmd->add_option("--iters", o->iters, "timed iterations per candidate (median)")->check(CLI::Range(1, 100000));
  cmd->add_option("--warmup", o->warmup, "untimed iterations first")->check(CLI::Range(0, 10000));
  cmd->add_option("--jobs,-j", o->jobs, "parallel compiles (default: hardware threads)")->check(CLI::Range(1, 1024));
  cmd->add_option("--timeout", o->timeout_s, "seconds per candidate before its worker is killed")
      ->check(CLI::Range(0.1, 86400.0));
  cmd->add_option("--devices", o->devices, "GPU ordinals to use, e.g. 0,1 (default: all of one kind)");
  cmd->add_flag("--list-space", o->list_space, "print the candidates and what was pruned (no GPU)");
  cmd->add_flag("--report", o->report, "print the database: a table per op and bucket");
  cmd->add_option("--plot", o->plot, "with --report: write an SVG bar chart of one entry's timings");
  cmd->add_option("--bucket", o->bucket, "with --plot: the bucket to plot (default: the newest entry)");
  cmd->add_flag("--json", o->json, "machine-readable output");
  return [o] { return run(*o); };
}

std::function<int()> add_tune_worker_command(CLI::App& app) {
  auto device = std::make_shared<int>(0);
  CLI::App* cmd = app.add_subcommand("tune-worker", "internal: times candidates for `attnjit tune`");
  cmd->group("");  // hidden from --help
  cmd->add_option("--device", *device, "GPU ordinal")->required();
  return [device] { return tune::worker_main(*device, harness::problems()); };
}

}  // namespace attnjit::cli
