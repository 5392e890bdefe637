// attnjit: the command-line front end. `list` shows the ops and their config spaces,
// `compile` builds one variant and prints its ptxas report, `bench` times an op on the
// GPU, `demo` is the README's first command, `precompile` fills the kernel cache and
// `cache` looks after it (precompile.cpp, cache_cmd.cpp).
// Exit codes: 0 success, 1 failure, 2 usage error.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>

#include "attnjit/error.hpp"
#include "cli.hpp"
#include "jit/compiler.hpp"
#include "ops/registry.hpp"

namespace attnjit::cli {
// Each adds its subcommand to `app`; the returned function runs it once parsed.
std::function<int()> add_precompile_command(CLI::App& app);
std::function<int()> add_cache_command(CLI::App& app);
std::function<int()> add_tune_command(CLI::App& app);         // tune_cmd.cpp
std::function<int()> add_tune_worker_command(CLI::App& app);  // hidden: tune's worker process
}  // namespace attnjit::cli

namespace {

using namespace attnjit;

int cmd_list(bool json) {
  if (json) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const ops::OpSpec& op : ops::registry()) {
      nlohmann::ordered_json o;
      o["op"] = op.name;
      o["summary"] = op.summary;
      std::vector<std::string> archs;
      for (const Arch& a : op.archs) archs.push_back(a.name());
      o["archs"] = archs;
      o["fields"] = nlohmann::ordered_json::array();
      for (const ops::FieldSpec& f : op.fields)
        o["fields"].push_back({{"name", f.name},
                               {"allowed", f.allowed},
                               {"default", f.default_value},
                               {"doc", f.doc}});
      o["default_set"] = op.default_set();
      out.push_back(o);
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  for (const ops::OpSpec& op : ops::registry()) {
    std::vector<std::string> archs;
    for (const Arch& a : op.archs) archs.push_back(a.name());
    fmt::print("{}  — {}\n  archs: {}\n  default set: {} variants\n  config fields:\n", op.name,
               op.summary, fmt::join(archs, ", "), op.default_set().size());
    for (const ops::FieldSpec& f : op.fields)
      fmt::print("    {:<10} {:<48} default {:<8} {}\n", f.name, f.allowed, f.default_value, f.doc);
  }
  return 0;
}

int cmd_compile(const std::string& op_name, const std::string& config, const std::string& arch_name,
                const std::string& out_dir) {
  const ops::OpSpec& op = ops::find_op(op_name);
  auto arch = parse_arch(arch_name);
  if (!arch) {
    fmt::print(stderr, "attnjit compile: --arch '{}' is not an arch like sm_90a\n", arch_name);
    return 2;
  }
  nlohmann::json j;
  try {
    j = config.empty() ? op.default_set().front() : nlohmann::json::parse(config);
  } catch (const nlohmann::json::exception& e) {
    fmt::print(stderr, "attnjit compile: --config is not JSON: {}\n", e.what());
    return 2;
  }
  const jit::KernelRecipe recipe = op.recipe(op.canonicalize(j), *arch);
  const jit::CompiledKernel k = jit::compile_recipe(recipe);
  fmt::print("{} {} {}\n  entry {}\n  compile {:.0f} ms, cubin {} B, {} registers, spills {}/{} B, "
             "stack {} B, dynamic smem {} B\n",
             op.name, arch->name(), recipe.source.config_json, k.lowered_name, k.compile_ms,
             k.cubin.size(), k.ptxas.registers, k.ptxas.spill_store_bytes, k.ptxas.spill_load_bytes,
             k.ptxas.stack_frame_bytes, recipe.dynamic_smem_bytes);
  if (!out_dir.empty()) {
    std::filesystem::create_directories(out_dir);
    const std::string base = (std::filesystem::path(out_dir) / op.name).string();
    std::ofstream(base + ".cu") << k.source;
    std::ofstream(base + ".log") << k.log;
    std::ofstream(base + ".cubin", std::ios::binary)
        .write(k.cubin.data(), static_cast<std::streamsize>(k.cubin.size()));
    fmt::print("  wrote {}.cu, .cubin, .log\n", base);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"attnjit: JIT-compiled attention kernels (NVRTC → cubin → CUDA driver)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::function<std::string()>([] {  // run when asked: it hashes the templates
    return fmt::format("attnjit {} (commit {}, kernel templates {})", ATTNJIT_VERSION, cli::commit(),
                       cli::templates_digest());
  }));

  bool list_json = false;
  auto* list = app.add_subcommand("list", "ops, their config fields and allowed values, archs");
  list->add_flag("--json", list_json, "machine-readable output");

  std::string c_op, c_config, c_arch = "sm_90a", c_out;
  auto* compile = app.add_subcommand("compile", "compile one variant and print its ptxas report");
  compile->add_option("op", c_op, "op name (see list)")->required();
  compile->add_option("--config", c_config, "config JSON (default: first of the default set)");
  compile->add_option("--arch", c_arch, "target, e.g. sm_90a or sm_100a");
  compile->add_option("--out", c_out, "write the .cu, .cubin and NVRTC log here");

  cli::BenchOptions b;
  auto* bench = app.add_subcommand("bench", "time an op on the GPU (median of CUDA-event timings)");
  bench->add_option("op", b.op, "op name, or 'dispatch' for launch overhead")->required();
  bench->add_option("--shape", b.shape, "problem shape as k=v,... (op-specific)");
  bench->add_option("--config", b.config, "config JSON (default: the heuristic's)");
  bench->add_option("--iters", b.iters, "timed iterations")->check(CLI::Range(1, 100000));
  bench->add_option("--warmup", b.warmup, "untimed iterations first")->check(CLI::Range(0, 10000));
  bench->add_option("--seed", b.seed, "input seed (default: a hash of each row's case)");
  bench->add_flag("--json", b.json, "print one JSON object");

  auto* demo = app.add_subcommand("demo", "launch and check a kernel (GPU) or compile the default "
                                          "set (no GPU)");

  const std::function<int()> run_precompile = cli::add_precompile_command(app);
  const std::function<int()> run_cache = cli::add_cache_command(app);
  const std::function<int()> run_tune = cli::add_tune_command(app);
  const std::function<int()> run_tune_worker = cli::add_tune_worker_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help/version (rc 0) or the usage error
    return rc == 0 ? 0 : 2;
  }
  try {
    if (*app.get_subcommand("precompile")) return run_precompile();
    if (*app.get_subcommand("cache")) return run_cache();
    if (*app.get_subcommand("tune")) return run_tune();
    if (*app.get_subcommand("tune-worker")) return run_tune_worker();
    if (*list) return cmd_list(list_json);
    if (*compile) return cmd_compile(c_op, c_config, c_arch, c_out);
    if (*bench) return cli::run_bench(b);
    if (*demo) return cli::run_demo();
  } catch (const attnjit::Error& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  }
  return 0;
}
