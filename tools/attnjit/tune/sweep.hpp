#pragma once
// One `attnjit tune` sweep: for each shape, enumerate the op's candidates, compile them in
// parallel on CPU threads through the kernel cache, then time them in worker processes
// (one per GPU, scheduler.hpp) against the reference (the op's default candidate), keep
// the fastest that matches it, and merge the result into the tuning database.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ops/registry.hpp"
#include "space.hpp"
#include "tuning/db.hpp"

namespace attnjit::tune {

struct SweepOptions {
  const ops::OpSpec* op = nullptr;
  std::vector<nlohmann::json> shapes;
  std::optional<nlohmann::json> space;  // --space: replaces the op's search space
  std::string db_path;                  // "" = do not save
  std::string cache_dir;                // "" = the usual cache root
  int iters = 50, warmup = 5;
  int jobs = 0;                // parallel compiles; 0 = hardware threads
  double timeout_s = 60;       // per candidate (load, check, timing); then the worker is killed
  double setup_timeout_s = 300;  // a worker's start: context, inputs, reference run
  std::string devices;         // "" = every visible device of the first one's kind
  std::vector<std::string> worker_argv;  // the worker command; "--device N" is appended
  bool progress = true;        // stderr progress
};

struct CandidateResult {
  nlohmann::json candidate;
  std::string status;  // ok, mismatch, compile_failed, launch_failed, fault, timeout, crashed
  double us = -1;
  std::string error;
  int device = -1;
};

struct ShapeResult {
  Space space;
  std::vector<CandidateResult> results;  // one per space.candidates, same order
  int best = -1;                         // index of the fastest ok result, -1 if none
  double wall_ms = 0;
  double default_us() const { return results.empty() ? -1 : results.front().us; }
};

struct SweepResult {
  std::string op;
  tuning::Fingerprint fingerprint;
  std::vector<int> devices;
  std::vector<ShapeResult> shapes;
  std::vector<std::string> notes;  // devices left out or retired, database warnings
  double wall_ms = 0;
};

// Throws Error(kDriver) without a usable GPU or when no device can run the worker,
// Error(kCompile) when the reference itself does not compile, UsageError for bad options.
SweepResult run_sweep(const SweepOptions& options);

tuning::Entry entry_of(const std::string& op, const ShapeResult& r, int iters);
nlohmann::json to_json(const SweepResult& r);
std::string to_text(const SweepResult& r);

}  // namespace attnjit::tune
