#include "jit/key_record.hpp"

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

namespace attnjit::jit {
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

cache::KeyRecord to_record(const KeyInputs& in) {
  // The names and the order are part of every stored key (the cache hashes them as
  // given): change them only with kKeyRecordVersion.
  return cache::KeyRecord{kKeyRecordVersion,
                          {{"attnjit_version", in.attnjit_version},
                           {"template_id", in.template_id},
                           {"config", in.config_json},
                           {"source", in.source},
                           {"embedded_headers", in.embedded_headers},
                           {"toolkit_headers", in.toolkit_headers},
                           {"nvrtc", in.nvrtc_version},
                           {"arch", in.arch},
                           {"options", in.options}}};
}

KeyInputs key_inputs_from_record(const cache::KeyRecord& record) {
  if (record.version != kKeyRecordVersion)
    throw Error(ErrorKind::kCache, fmt::format("key record_version must be {}", kKeyRecordVersion));
  auto str = [&](const char* field) {
    const std::string* v = record.text(field);
    if (!v)
      throw Error(ErrorKind::kCache,
                  fmt::format("key record field '{}' is missing or not a string", field));
    return *v;
  };
  KeyInputs in;
  in.attnjit_version = str("attnjit_version");
  in.template_id = str("template_id");
  in.config_json = str("config");
  in.source = str("source");
  in.embedded_headers = str("embedded_headers");
  in.toolkit_headers = str("toolkit_headers");
  in.nvrtc_version = str("nvrtc");
  in.arch = str("arch");
  const std::vector<std::string>* options = nullptr;
  for (const cache::KeyField& f : record.fields)
    if (f.name == "options") options = std::get_if<std::vector<std::string>>(&f.value);
  if (!options) throw Error(ErrorKind::kCache, "key record field 'options' is missing or not a list");
  in.options = *options;
  return in;
}

std::string cache_key(const KeyInputs& in) { return cache::cache_key(to_record(in)); }

std::string embedded_headers_hash(std::span<const EmbeddedFile> files) {
  std::vector<const EmbeddedFile*> sorted;
  for (const EmbeddedFile& f : files) sorted.push_back(&f);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->path < b->path; });
  cache::Sha256 h;
  h.field("embedded").field(std::to_string(sorted.size()));
  for (const EmbeddedFile* f : sorted) h.field(f->path).field(f->content);
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
  cache::Sha256 h;
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

std::vector<std::string> normalized_options(const CompileOptions& opts) {
  return normalize_options(nvrtc_options(opts));
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
    p.toolkit_headers = toolkit_headers_hash(toolkit().include_dir);
    p.embedded_headers = embedded_headers_hash(embedded_templates());
    const auto [major, minor] = nvrtc_version();
    p.nvrtc_version = fmt::format("{}.{}", major, minor);
    p.setup_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    inputs = std::move(p);
  }
  return *inputs;
}

KeyInputs key_inputs(const KernelRecipe& recipe) {
  const ProcessInputs& p = process_inputs();
  const KernelSource& s = recipe.source;
  KeyInputs in;
  in.attnjit_version = p.attnjit_version;
  in.template_id = fmt::format("{}:{}:{}", s.op, s.header, s.kernel);
  in.config_json = s.config_json;
  in.source = translation_unit(s);
  in.embedded_headers = p.embedded_headers;
  in.toolkit_headers = p.toolkit_headers;
  in.nvrtc_version = p.nvrtc_version;
  in.arch = recipe.options.arch.name();
  in.options = normalized_options(recipe.options);
  return in;
}

}  // namespace attnjit::jit
