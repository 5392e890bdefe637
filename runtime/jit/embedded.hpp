#pragma once
// The kernel templates (everything under kernel_templates/), embedded into the library
// at build time by cmake/embed_templates.cmake. NVRTC receives them as in-memory
// headers under their path relative to kernel_templates/.
#include <span>
#include <string_view>

namespace attnjit::jit {

struct EmbeddedFile {
  std::string_view path;     // "common/tma.cuh"
  std::string_view content;
};

std::span<const EmbeddedFile> embedded_templates();

// Content of one embedded file, or an empty view when absent.
std::string_view embedded_template(std::string_view path);

}  // namespace attnjit::jit
