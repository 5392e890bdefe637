#pragma once
// Shared pieces of the attnjit CLI's subcommands.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace attnjit::cli {

// "rows=4096,cols=1024,dtype=bf16" → {{"rows","4096"}, ...}; throws naming a bad item.
std::map<std::string, std::string> parse_shape(const std::string& text);
// The same as JSON (each value an integer but dtype): the harness's case vocabulary
// (harness/<op>_problem.hpp) reads it.
nlohmann::json parse_shape_json(const std::string& text);

struct BenchOptions {
  std::string op;
  std::string shape;   // k=v,...
  std::string config;  // JSON; empty = heuristic
  int iters = 50;
  int warmup = 5;
  uint64_t seed = 0;  // 0: case_seed(the row's case JSON)
  bool json = false;
};

// Runs `attnjit bench`: the op's harness problem (harness/problem.hpp) on its bench rows or
// on --shape; returns the process exit code.
int run_bench(const BenchOptions& opts);

// Runs `attnjit demo`; returns the process exit code.
int run_demo();

// The commit this binary was built from ($ATTNJIT_COMMIT overrides).
std::string commit();
// The first 12 hex digits of the digest of every embedded kernel template (the cache key's
// embedded-headers hash): names the kernel sources a result came from even where the
// build's git commit is stale or unknown (a copied tree, an edited checkout).
std::string templates_digest();

}  // namespace attnjit::cli
