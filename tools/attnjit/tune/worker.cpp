// The tuning worker loop (worker.hpp).
#include "worker.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "attnjit/error.hpp"
#include "attnjit/tuning.hpp"
#include "bench_util.hpp"

namespace attnjit::tune {
namespace {

using nlohmann::json;

// Driver errors after which the context is dead for good.
bool sticky(const std::string& message) {
  for (const char* name : {"CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED",
                           "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_MISALIGNED_ADDRESS",
                           "CUDA_ERROR_INVALID_ADDRESS_SPACE", "CUDA_ERROR_INVALID_PC",
                           "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_ASSERT",
                           "CUDA_ERROR_LAUNCH_TIMEOUT", "CUDA_ERROR_ECC_UNCORRECTABLE"})
    if (message.find(name) != std::string::npos) return true;
  return false;
}

void answer(const json& j) { std::cout << j.dump() << std::endl; }

// Every candidate of a sweep sees the same inputs.
constexpr uint64_t kInputSeed = 0x74756E65u;

}  // namespace

int worker_main(int device, const std::vector<harness::ProblemKind>& kinds) {
  ::setenv("ATTNJIT_TUNING_DB", "off", 1);
  reload_tuning_db();
  std::unique_ptr<harness::Problem> problem;
  std::vector<uint8_t> reference;
  int warmup = 5, iters = 50;
  for (std::string line; std::getline(std::cin, line);) {
    json req = json::parse(line, nullptr, false);
    if (req.is_discarded() || !req.is_object() || !req.contains("cmd")) {
      answer({{"status", "launch_failed"}, {"error", "worker: request is not a JSON command"}});
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      const std::string cmd = req.at("cmd").get<std::string>();
      if (cmd == "setup") {
        driver::use_device(device);
        const driver::DeviceInfo& info = driver::cached_device_info(device);
        const std::string op = req.at("op").get<std::string>();
        const harness::ProblemKind* kind = nullptr;
        for (const harness::ProblemKind& k : kinds)
          if (k.op == op) kind = &k;
        if (!kind) throw std::runtime_error(fmt::format("worker: no problem for op '{}'", op));
        warmup = req.value("warmup", 5);
        iters = req.value("iters", 50);
        problem.reset();
        problem = kind->make(req.at("shape"), kInputSeed, static_cast<size_t>(info.l2_bytes));
        const harness::Prepared ref = problem->prepare(&req.at("reference"));
        problem->poison_output();
        ref.run(0);
        reference = problem->output_bytes();
        answer({{"status", "ok"},
                {"ms", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count()}});
      } else if (cmd == "run") {
        if (!problem) throw std::runtime_error("worker: run before setup");
        const harness::Prepared candidate = problem->prepare(&req.at("candidate"));
        problem->poison_output();
        candidate.run(0);
        const std::string why = problem->compare(reference, problem->output_bytes());
        if (!why.empty()) {
          answer({{"status", "mismatch"}, {"error", why}});
          continue;
        }
        const double ms = cli::median_ms(warmup, iters, [&](int i) { candidate.run(i); });
        answer({{"status", "ok"}, {"us", ms * 1e3}});
      } else {
        answer({{"status", "launch_failed"}, {"error", fmt::format("worker: unknown cmd '{}'", cmd)}});
      }
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kDriver) {
        answer({{"status", sticky(e.what()) ? "fault" : "launch_failed"},
                {"error", e.what()},
                {"restart", true}});
        return 3;
      }
      answer({{"status", "launch_failed"}, {"error", e.what()}});  // refused before any launch
    } catch (const std::exception& e) {
      answer({{"status", "launch_failed"}, {"error", e.what()}, {"restart", true}});
      return 3;
    }
  }
  return 0;
}

}  // namespace attnjit::tune
