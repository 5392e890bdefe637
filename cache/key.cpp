#include "cache/key.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>

#include "attnjit/error.hpp"
#include "cache/hash.hpp"
#include "jit/kernel_source.hpp"
#include "jit/toolkit.hpp"

#ifndef ATTNJIT_VERSION
#define ATTNJIT_VERSION "unknown"
#endif

namespace attnjit::cache {
namespace {

// One read of the whole file (an istreambuf_iterator copy costs ~1 ms per MB, which
// would dominate a fresh process's first cache hit).
std::optional<std::string> read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary | std::ios::ate);
  if (!in) return std::nullopt;
  std::string text(static_cast<size_t>(in.tellg()), '\0');
  in.seekg(0);
  if (!in.read(text.data(), static_cast<std::streamsize>(text.size()))) return std::nullopt;
  return text;
}

}  // namespace

std::string cache_key(const KeyInputs& in) {
  Sha256 h;
  h.field("attnjit-cache-key").field(std::to_string(kKeyRecordVersion));
  h.field("attnjit_version").field(in.attnjit_version);
  h.field("template_id").field(in.template_id);
  h.field("config").field(in.config_json);
  h.field("source").field(in.source);
  h.field("embedded_headers").field(in.embedded_headers);
  h.field("toolkit_headers").field(in.toolkit_headers);
  h.field("nvrtc").field(in.nvrtc_version);
  h.field("arch").field(in.arch);
  h.field("options").field(std::to_string(in.options.size()));
  for (const std::string& o : in.options) h.field(o);
  return h.hex();
}

nlohmann::ordered_json to_json(const KeyInputs& in) {
  nlohmann::ordered_json j;
  j["record_version"] = kKeyRecordVersion;
  j["attnjit_version"] = in.attnjit_version;
  j["template_id"] = in.template_id;
  j["config"] = in.config_json;
  j["source"] = in.source;
  j["embedded_headers"] = in.embedded_headers;
  j["toolkit_headers"] = in.toolkit_headers;
  j["nvrtc"] = in.nvrtc_version;
  j["arch"] = in.arch;
  j["options"] = in.options;
  return j;
}

KeyInputs key_inputs_from_json(const nlohmann::json& j) {
  auto str = [&](const char* field) {
    auto it = j.find(field);
    if (it == j.end() || !it->is_string())
      throw Error(ErrorKind::kCache,
                  fmt::format("key record field '{}' is missing or not a string", field));
    return it->get<std::string>();
  };
  if (!j.is_object()) throw Error(ErrorKind::kCache, "key record is not a JSON object");
  auto v = j.find("record_version");
  if (v == j.end() || !v->is_number_integer() || v->get<int>() != kKeyRecordVersion)
    throw Error(ErrorKind::kCache, fmt::format("key record_version must be {}", kKeyRecordVersion));
  KeyInputs in;
  in.attnjit_version = str("attnjit_version");
  in.template_id = str("template_id");
  in.config_json = str("config");
  in.source = str("source");
  in.embedded_headers = str("embedded_headers");
  in.toolkit_headers = str("toolkit_headers");
  in.nvrtc_version = str("nvrtc");
  in.arch = str("arch");
  auto o = j.find("options");
  if (o == j.end() || !o->is_array())
    throw Error(ErrorKind::kCache, "key record field 'options' is missing or not a list");
  for (const auto& e : *o) {
    if (!e.is_string())
      throw Error(ErrorKind::kCache, "key record field 'options' holds a non-string");
    in.options.push_back(e.get<std::string>());
  }
  return in;
}

std::string embedded_headers_hash(std::span<const jit::EmbeddedFile> files) {
  std::vector<const jit::EmbeddedFile*> sorted;
  for (const jit::EmbeddedFile& f : files) sorted.push_back(&f);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->path < b->path; });
  Sha256 h;
  h.field("embedded").field(std::to_string(sorted.size()));
  for (const jit::EmbeddedFile* f : sorted) h.field(f->path).field(f->content);
  return h.hex();
}

const std::vector<std::string>& toolkit_key_headers() {
  static const std::vector<std::string> headers = {
      "cuda_bf16.h",
      "cuda_bf16.hpp",
      "cuda_fp16.h",
      "cuda_fp16.hpp",
      "cuda_fp8.h",
      "cuda_fp8.hpp",
      "cccl/cuda/std/__cccl/version.h",
  };
  return headers;
}

std::string toolkit_headers_hash(const std::string& include_dir) {
  Sha256 h;
  h.field("toolkit").field(std::to_string(toolkit_key_headers().size()));
  for (const std::string& rel : toolkit_key_headers()) {
    h.field(rel);  // relative name only: the toolkit's location is not part of the key
    if (auto text = read_file(std::filesystem::path(include_dir) / rel))
      h.field("present").field(*text);
    else
      h.field("missing");
  }
  return h.hex();
}

std::vector<std::string> normalize_options(const std::vector<std::string>& nvrtc_options) {
  std::vector<std::string> out;
  for (const std::string& o : nvrtc_options)
    if (o.rfind("-I", 0) != 0 && o.rfind("--include-path", 0) != 0) out.push_back(o);
  return out;
}

std::vector<std::string> normalized_options(const jit::CompileOptions& opts) {
  return normalize_options(jit::nvrtc_options(opts));
}

const ProcessInputs& process_inputs() {
  // A throw (no toolkit) leaves it unset, so a later call retries.
  static std::mutex mutex;
  static std::optional<ProcessInputs> inputs;
  std::lock_guard lock(mutex);
  if (!inputs) {
    const auto start = std::chrono::steady_clock::now();
    ProcessInputs p;
    p.attnjit_version = ATTNJIT_VERSION;
    p.toolkit_headers = toolkit_headers_hash(jit::toolkit().include_dir);
    p.embedded_headers = embedded_headers_hash(jit::embedded_templates());
    const auto [major, minor] = jit::nvrtc_version();
    p.nvrtc_version = fmt::format("{}.{}", major, minor);
    p.setup_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    inputs = std::move(p);
  }
  return *inputs;
}

KeyInputs key_inputs(const jit::KernelRecipe& recipe) {
  const ProcessInputs& p = process_inputs();
  const jit::KernelSource& s = recipe.source;
  KeyInputs in;
  in.attnjit_version = p.attnjit_version;
  in.template_id = fmt::format("{}:{}:{}", s.op, s.header, s.kernel);
  in.config_json = s.config_json;
  in.source = jit::translation_unit(s);
  in.embedded_headers = p.embedded_headers;
  in.toolkit_headers = p.toolkit_headers;
  in.nvrtc_version = p.nvrtc_version;
  in.arch = recipe.options.arch.name();
  in.options = normalized_options(recipe.options);
  return in;
}

}  // namespace attnjit::cache
