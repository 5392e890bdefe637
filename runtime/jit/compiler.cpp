#include "jit/compiler.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nvrtc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <regex>

#include "attnjit/error.hpp"
#include "jit/cubin_info.hpp"
#include "jit/embedded.hpp"
#include "jit/toolkit.hpp"

namespace attnjit::jit {
namespace {

namespace fs = std::filesystem;

void nvrtc_check(nvrtcResult r, const char* call) {
  if (r != NVRTC_SUCCESS)
    throw Error(ErrorKind::kCompile, fmt::format("{} failed: {}", call, nvrtcGetErrorString(r)));
}

struct ProgramDeleter {
  void operator()(nvrtcProgram* p) const {
    nvrtcDestroyProgram(p);
    delete p;
  }
};

// Keeps a failed build inspectable: the generated TU and the log go to
// $TMPDIR/attnjit-failed/<op>-<n>.cu|.log; the path is returned for the error message.
std::string write_failed_source(const std::string& op, const std::string& source,
                                const std::string& log) {
  static std::atomic<int> counter{0};
  std::error_code ec;
  const char* tmp = std::getenv("TMPDIR");
  fs::path dir = fs::path(tmp && *tmp ? tmp : "/tmp") / "attnjit-failed";
  fs::create_directories(dir, ec);
  fs::path base = dir / fmt::format("{}-{}-{}", op, static_cast<long>(::getpid()), counter++);
  std::ofstream(base.string() + ".cu") << source;
  std::ofstream(base.string() + ".log") << log;
  return base.string() + ".cu";
}

}  // namespace

PtxasInfo parse_ptxas_info(const std::string& log, const std::string& mangled_name) {
  PtxasInfo info;
  // ptxas reports per entry: "Compiling entry function '<name>' for 'sm_90a'", then the
  // function properties (stack, spills) and "Used N registers, ..., M bytes smem".
  const std::string marker = "Compiling entry function '" + mangled_name + "'";
  size_t pos = log.find(marker);
  if (pos == std::string::npos) return info;
  size_t end = log.find("Compiling entry function", pos + marker.size());
  std::string block = log.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
  std::smatch m;
  auto grab = [&](const char* pattern, int& out) {
    if (std::regex_search(block, m, std::regex(pattern))) out = std::stoi(m[1].str());
  };
  grab(R"((\d+) bytes stack frame)", info.stack_frame_bytes);
  grab(R"((\d+) bytes spill stores)", info.spill_store_bytes);
  grab(R"((\d+) bytes spill loads)", info.spill_load_bytes);
  grab(R"(Used (\d+) registers)", info.registers);
  grab(R"(used (\d+) barriers)", info.barriers);
  grab(R"((\d+) bytes smem)", info.static_smem_bytes);
  info.parsed = info.registers >= 0;
  return info;
}

std::vector<std::string> nvrtc_options(const CompileOptions& opts) {
  std::vector<std::string> o = {
      "--gpu-architecture=" + opts.arch.name(),  // sm_XXa → NVRTC emits a cubin, not PTX
      "-std=c++20",
      "--ptxas-options=--verbose",  // resource usage into the log
  };
  if (opts.line_info) o.push_back("-lineinfo");
  for (const std::string& e : opts.extra) o.push_back(e);
  return o;
}

std::pair<int, int> nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return {major, minor};
}

CompiledKernel compile(const KernelSource& src, const CompileOptions& opts) {
  const Toolkit& tk = toolkit();  // preflight: throws naming what to set
  CompiledKernel out;
  out.op = src.op;
  out.arch = opts.arch;
  out.source = translation_unit(src);
  const std::string expr = instantiation_expression(src);

  // The embedded templates, as NVRTC in-memory headers.
  auto files = embedded_templates();
  std::vector<std::string> header_text;
  std::vector<const char*> header_ptrs, header_names;
  header_text.reserve(files.size());
  for (const EmbeddedFile& f : files) {
    header_text.emplace_back(f.content);
    header_ptrs.push_back(header_text.back().c_str());
    header_names.push_back(f.path.data());  // NUL-terminated: string literals in the table
  }

  out.options = nvrtc_options(opts);
  out.options.push_back("-I" + tk.include_dir);
  out.options.push_back("-I" + tk.cccl_dir);
  std::vector<const char*> option_ptrs;
  for (const std::string& o : out.options) option_ptrs.push_back(o.c_str());

  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<nvrtcProgram, ProgramDeleter> prog(new nvrtcProgram{});
  const std::string tu_name = src.op + ".cu";
  nvrtc_check(nvrtcCreateProgram(prog.get(), out.source.c_str(), tu_name.c_str(),
                                 static_cast<int>(header_ptrs.size()), header_ptrs.data(),
                                 header_names.data()),
              "nvrtcCreateProgram");
  nvrtc_check(nvrtcAddNameExpression(*prog, expr.c_str()), "nvrtcAddNameExpression");
  nvrtcResult result =
      nvrtcCompileProgram(*prog, static_cast<int>(option_ptrs.size()), option_ptrs.data());

  size_t log_size = 0;
  nvrtcGetProgramLogSize(*prog, &log_size);
  out.log.resize(log_size);
  if (log_size) nvrtcGetProgramLog(*prog, out.log.data());
  while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n')) out.log.pop_back();

  if (result != NVRTC_SUCCESS) {
    std::string path = write_failed_source(src.op, out.source, out.log);
    throw Error(ErrorKind::kCompile,
                fmt::format("NVRTC failed to compile op '{}' for {} ({}).\nconfig: {}\ngenerated "
                            "source: {}\noptions: {}\nlog:\n{}",
                            src.op, opts.arch.name(), nvrtcGetErrorString(result),
                            src.config_json, path, fmt::join(out.options, " "), out.log));
  }

  const char* lowered = nullptr;
  nvrtc_check(nvrtcGetLoweredName(*prog, expr.c_str(), &lowered), "nvrtcGetLoweredName");
  out.lowered_name = lowered;
  size_t cubin_size = 0;
  nvrtc_check(nvrtcGetCUBINSize(*prog, &cubin_size), "nvrtcGetCUBINSize");
  if (cubin_size == 0)
    throw Error(ErrorKind::kCompile,
                fmt::format("NVRTC produced no cubin for {} (is '{}' a real GPU arch?)",
                            src.op, opts.arch.name()));
  out.cubin.resize(cubin_size);
  nvrtc_check(nvrtcGetCUBIN(*prog, out.cubin.data()), "nvrtcGetCUBIN");
  out.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  out.ptxas = parse_ptxas_info(out.log, out.lowered_name);
  if (!out.ptxas.parsed) {
    // No ptxas report in the log (seen on GPU machines once the driver is initialized):
    // take registers and the stack frame from the cubin itself. Spills live in that frame,
    // so an empty frame proves there are none; otherwise count the frame as spill.
    if (auto res = cubin_resources(out.cubin, out.lowered_name)) {
      out.ptxas.registers = res->registers;
      out.ptxas.stack_frame_bytes = std::max(res->frame_bytes, 0);
      out.ptxas.spill_store_bytes = out.ptxas.stack_frame_bytes;
      out.ptxas.spill_load_bytes = out.ptxas.stack_frame_bytes;
      out.ptxas.parsed = true;
      out.ptxas.from_cubin = true;
    }
  }
  return out;
}

}  // namespace attnjit::jit
