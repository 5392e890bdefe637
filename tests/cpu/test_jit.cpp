// The JIT path without a GPU: instantiation text, NVRTC success and failure, ptxas
// reports, the toolkit preflight, and every registered op's default set compiled for
// every arch it declares (zero spills; SASS shows the instructions it was written for).
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attnjit/ops/tma_copy.hpp"
#include "jit/compiler.hpp"
#include "jit/cubin_info.hpp"
#include "jit/embedded.hpp"
#include "jit/toolkit.hpp"
#include "ops/registry.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/sass.hpp"

using namespace attnjit;

namespace {

// A tma_copy source as the registry builds it (so a new config field needs no edit here),
// its dtype argument's text replaced by `dtype_value`.
jit::KernelSource tma_copy_source(const std::string& dtype_value = "attnjit::DType::kBF16") {
  const nlohmann::json config = {{"block_m", 64}, {"block_n", 64}, {"stages", 2}, {"swizzle", "128B"}};
  jit::KernelSource s = ops::find_op("tma_copy").recipe(config, kSm90a).source;
  for (jit::TemplateArg& a : s.args)
    if (a.field == "dtype") a.value = dtype_value;
  return s;
}

// Sets an environment variable for one scope.
struct ScopedEnv {
  std::string name;
  std::string old;
  bool had;
  ScopedEnv(const char* n, const char* value) : name(n) {
    const char* o = std::getenv(n);
    had = o != nullptr;
    if (had) old = o;
    ::setenv(n, value, 1);
  }
  ~ScopedEnv() {
    if (had) ::setenv(name.c_str(), old.c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

}  // namespace

TEST_CASE("instantiation names every template argument", "[jit]") {
  const jit::KernelSource s = tma_copy_source();
  // One designated initializer per template-argument field, in the table's order.
  std::string inits;
  for (const jit::TemplateArg& a : s.args)
    inits += fmt::format("{}.{} = {}", inits.empty() ? "" : ", ", a.field, a.value);
  CHECK(jit::instantiation_expression(s) ==
        "attnjit::tma_copy::kernel<attnjit_generated::Params{" + inits + "}>");
  CHECK(inits.rfind(".dtype = attnjit::DType::kBF16, .block_m = 64, .block_n = 64, .stages = 2, "
                    ".swizzle = attnjit::Swizzle::k128B", 0) == 0);
  const std::string tu = jit::translation_unit(s);
  CHECK(tu.find("#include \"tma_copy/tma_copy.cuh\"") != std::string::npos);
  CHECK(tu.find(jit::instantiation_expression(s)) != std::string::npos);
  CHECK(tu.find("struct Params {\n  attnjit::DType dtype;\n  int block_m;\n") != std::string::npos);
}

TEST_CASE("kernel templates are embedded", "[jit]") {
  CHECK_FALSE(jit::embedded_template("common/tma.cuh").empty());
  CHECK_FALSE(jit::embedded_template("tma_copy/tma_copy.cuh").empty());
  CHECK(jit::embedded_template("common/nope.cuh").empty());
  for (const auto& f : jit::embedded_templates()) {
    // Headers reach each other by their kernel_templates/-relative path, which must be
    // the embedded name; a sibling-relative include would not resolve under NVRTC.
    CHECK(f.path.find("..") == std::string_view::npos);
  }
}

TEST_CASE("NVRTC compiles a kernel to a cubin with its ptxas report", "[jit][nvrtc]") {
  jit::CompileOptions opts;
  opts.arch = kSm90a;
  const jit::CompiledKernel k = jit::compile(tma_copy_source(), opts);
  CHECK(k.cubin.size() > 1000);
  CHECK(std::string(k.cubin.data(), 4) == "\x7f" "ELF");  // a cubin, not PTX
  CHECK(k.lowered_name.rfind("_ZN7attnjit8tma_copy6kernel", 0) == 0);
  REQUIRE(k.ptxas.parsed);
  CHECK(k.ptxas.registers > 0);
  CHECK(k.ptxas.spill_store_bytes == 0);
  CHECK(k.ptxas.spill_load_bytes == 0);
  // The report usually comes from NVRTC's log; where the log is empty (seen on the GPU
  // machines in processes that had initialized the driver) it comes from the cubin.
  if (!k.ptxas.from_cubin) CHECK(k.log.find("ptxas info") != std::string::npos);
  CHECK(k.compile_ms > 0);
}

TEST_CASE("a failed compile reports the log and writes out the generated source",
          "[jit][nvrtc]") {
  jit::CompileOptions opts;
  const jit::KernelSource bad = tma_copy_source("attnjit::DType::kNotAType");
  try {
    jit::compile(bad, opts);
    FAIL("compile should have failed");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kCompile);
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("kNotAType") != std::string::npos);  // the log names the bad value
    const std::string key = "generated source: ";
    const size_t pos = msg.find(key);
    REQUIRE(pos != std::string::npos);
    const std::string path = msg.substr(pos + key.size(), msg.find('\n', pos) - pos - key.size());
    REQUIRE(std::filesystem::exists(path));
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(text == jit::translation_unit(bad));
  }
}

TEST_CASE("ptxas reports are parsed per entry function", "[jit]") {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function '_Z3fooILi1EEvv' for 'sm_90a'\n"
      "ptxas info    : Function properties for _Z3fooILi1EEvv\n"
      "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 168 registers, used 2 barriers, 1024 bytes smem\n"
      "ptxas info    : Compiling entry function '_Z3barv' for 'sm_90a'\n"
      "ptxas info    : Used 10 registers\n";
  const jit::PtxasInfo a = jit::parse_ptxas_info(log, "_Z3fooILi1EEvv");
  CHECK(a.parsed);
  CHECK(a.registers == 168);
  CHECK(a.stack_frame_bytes == 8);
  CHECK(a.spill_store_bytes == 4);
  CHECK(a.spill_load_bytes == 12);
  CHECK(a.barriers == 2);
  CHECK(a.static_smem_bytes == 1024);
  CHECK(jit::parse_ptxas_info(log, "_Z3barv").registers == 10);
  CHECK_FALSE(jit::parse_ptxas_info(log, "_Z3bazv").parsed);
}

TEST_CASE("the toolkit preflight names what to set", "[jit][toolkit]") {
  const jit::Toolkit tk = jit::find_toolkit();
  for (const std::string& h : jit::required_toolkit_headers())
    CHECK(std::filesystem::exists(std::filesystem::path(tk.include_dir) / h));
  {
    ScopedEnv env("CUDA_HOME", "/nonexistent/cuda");
    ScopedEnv env2("ATTNJIT_CUDA_HOME", "");
    REQUIRE_ERROR(jit::find_toolkit(), ErrorKind::kCompile, "CUDA_HOME", "/nonexistent/cuda",
                  "cuda_bf16.h");
  }
}

TEST_CASE("every op's default set compiles for every declared arch", "[jit][nvrtc][default-set]") {
  for (const ops::OpSpec& op : ops::registry()) {
    for (const Arch& arch : op.archs) {
      for (const nlohmann::json& config : op.default_set()) {
        INFO(op.name << " " << arch.name() << " " << config.dump());
        const jit::CompiledKernel k = jit::compile_recipe(op.recipe(config, arch));
        INFO("entry " << k.lowered_name << "\nptxas log:\n" << k.log);
        REQUIRE(k.ptxas.parsed);
        // The cubin fallback (used where NVRTC returns no log) must read every shipped
        // kernel, static shared memory included, and agree with ptxas where both exist.
        const auto res = jit::cubin_resources(k.cubin, k.lowered_name);
        REQUIRE(res.has_value());
        CHECK(res->registers == k.ptxas.registers);
        CHECK(res->frame_bytes == k.ptxas.stack_frame_bytes);
        CHECK(k.ptxas.spill_store_bytes == 0);
        CHECK(k.ptxas.spill_load_bytes == 0);
        CHECK(k.ptxas.stack_frame_bytes == 0);
        if (auto sass = test::disassemble(k.cubin)) {
          CHECK(test::count_opcode(*sass, "LDL") == 0);
          CHECK(test::count_opcode(*sass, "STL") == 0);
          if (op.name == "tma_copy") {
            CHECK(test::count_opcode(*sass, "UTMALDG") > 0);
            CHECK(test::count_opcode(*sass, "UTMASTG") > 0);
          }
          if (op.name == "mla_decode" || op.name == "mha_fwd" || op.name == "mla_decode_fp8" ||
              op.name == "mla_decode_sparse") {
            CHECK(test::count_opcode(*sass, "HGMMA") > 0);
            CHECK(test::count_opcode(*sass, "UTMALDG") > 0);
          }
        }
        // ptxas's C7520/C7515 say it serialized wgmma (a wait after each one): a silent
        // several-fold slowdown that must not ship.
        CHECK(k.log.find("C7520") == std::string::npos);
        CHECK(k.log.find("C7515") == std::string::npos);
      }
    }
  }
}

TEST_CASE("mla_decode_sparse's opt-in cluster pair compiles without spills", "[jit][nvrtc]") {
  // Not in the default set (cluster 2 is slower; docs/performance.md), so compiled here: the
  // pair's copy between the CTAs' rings is a bulk copy (UBLKCP) and its barriers cluster-wide.
  const nlohmann::json config = {{"cache_layout", "bf16"}, {"num_heads", 128}, {"block_n", 64},
                                 {"stages", 4}, {"schedule", "two_consumers"}, {"cluster", 2}};
  const jit::CompiledKernel k = jit::compile_recipe(ops::find_op("mla_decode_sparse").recipe(config, kSm90a));
  INFO("ptxas log:\n" << k.log);
  REQUIRE(k.ptxas.parsed);
  CHECK(k.ptxas.spill_store_bytes == 0);
  CHECK(k.ptxas.spill_load_bytes == 0);
  CHECK(k.log.find("C7515") == std::string::npos);
  if (auto sass = test::disassemble(k.cubin)) {
    CHECK(test::count_opcode(*sass, "LDL") == 0);
    CHECK(test::count_opcode(*sass, "UBLKCP") > 0);
    CHECK(test::count_opcode(*sass, "HGMMA") > 0);
  }
}

TEST_CASE("registers and stack frame are read from the cubin too", "[jit][nvrtc]") {
  const jit::CompiledKernel k = jit::compile(tma_copy_source(), jit::CompileOptions{});
  const auto res = jit::cubin_resources(k.cubin, k.lowered_name);
  REQUIRE(res.has_value());
  CHECK(res->registers == k.ptxas.registers);  // agrees with ptxas's own report
  CHECK(res->frame_bytes == k.ptxas.stack_frame_bytes);
  CHECK_FALSE(jit::cubin_resources(k.cubin, "_Z7missingv").has_value());
  CHECK_FALSE(jit::cubin_resources(std::vector<char>(100, 'x'), k.lowered_name).has_value());
}
