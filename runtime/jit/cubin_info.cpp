#include "jit/cubin_info.hpp"

#include <cstdint>
#include <cstring>
#include <string_view>

namespace attnjit::jit {
namespace {

template <class T>
bool read(const std::vector<char>& b, uint64_t off, T& out) {
  if (off + sizeof(T) > b.size()) return false;
  std::memcpy(&out, b.data() + off, sizeof(T));
  return true;
}

struct Section {
  uint32_t name = 0, type = 0;
  uint64_t offset = 0, size = 0;
  uint32_t link = 0;
};

constexpr uint32_t kShtSymtab = 2;
constexpr uint32_t kShtNobits = 8;  // .nv.shared.*: a size, but no bytes in the file
constexpr uint8_t kEifmtSval = 0x04;
constexpr uint8_t kEiattrFrameSize = 0x11;
constexpr uint8_t kEiattrRegcount = 0x2f;

}  // namespace

std::optional<CubinResources> cubin_resources(const std::vector<char>& cubin,
                                              const std::string& mangled_name) {
  // ELF64 little-endian header: section table offset, entry size, count, names index.
  if (cubin.size() < 64 || std::memcmp(cubin.data(), "\x7f" "ELF", 4) != 0 || cubin[4] != 2)
    return std::nullopt;
  uint64_t shoff = 0;
  uint16_t shentsize = 0, shnum = 0, shstrndx = 0;
  if (!read(cubin, 0x28, shoff) || !read(cubin, 0x3A, shentsize) || !read(cubin, 0x3C, shnum) ||
      !read(cubin, 0x3E, shstrndx) || shentsize < 64 || shstrndx >= shnum)
    return std::nullopt;
  std::vector<Section> sections(shnum);
  for (uint16_t i = 0; i < shnum; ++i) {
    const uint64_t h = shoff + uint64_t{i} * shentsize;
    Section& s = sections[i];
    if (!read(cubin, h + 0, s.name) || !read(cubin, h + 4, s.type) ||
        !read(cubin, h + 24, s.offset) || !read(cubin, h + 32, s.size) ||
        !read(cubin, h + 40, s.link))
      return std::nullopt;
    // A NOBITS section's size is memory the loader reserves (a kernel's static shared
    // memory), not file bytes: its offset + size may lie past the end of the file.
    if (s.type == kShtNobits) s.size = 0;
    if (s.offset > cubin.size() || s.size > cubin.size() - s.offset) return std::nullopt;
  }
  auto c_string = [&](const Section& table, uint32_t at) -> std::string_view {
    if (at >= table.size) return {};
    const char* p = cubin.data() + table.offset + at;
    return {p, strnlen(p, table.size - at)};
  };

  // The function's symbol index (.nv.info records name functions by it).
  int64_t symbol = -1;
  const Section* nv_info = nullptr;
  for (const Section& s : sections) {
    const std::string_view name = c_string(sections[shstrndx], s.name);
    if (name == ".nv.info") nv_info = &s;
    if (s.type != kShtSymtab || s.link >= shnum) continue;
    for (uint64_t e = 0; e * 24 + 24 <= s.size; ++e) {
      uint32_t st_name = 0;
      read(cubin, s.offset + e * 24, st_name);
      if (c_string(sections[s.link], st_name) == mangled_name) symbol = static_cast<int64_t>(e);
    }
  }
  if (symbol < 0 || nv_info == nullptr) return std::nullopt;

  // Records: u8 format, u8 attribute, u16 size/value; SVAL carries `size` bytes, here
  // {u32 symbol, u32 value} for the per-function attributes we want.
  CubinResources out;
  for (uint64_t at = nv_info->offset; at + 4 <= nv_info->offset + nv_info->size;) {
    const uint8_t format = static_cast<uint8_t>(cubin[at]);
    const uint8_t attr = static_cast<uint8_t>(cubin[at + 1]);
    uint16_t size = 0;
    read(cubin, at + 2, size);
    if (format != kEifmtSval) {
      at += 4;
      continue;
    }
    uint32_t sym = 0, value = 0;
    if (size >= 8 && read(cubin, at + 4, sym) && read(cubin, at + 8, value) &&
        sym == static_cast<uint32_t>(symbol)) {
      if (attr == kEiattrRegcount) out.registers = static_cast<int>(value);
      if (attr == kEiattrFrameSize) out.frame_bytes = static_cast<int>(value);
    }
    at += 4 + size;
  }
  if (out.registers < 0) return std::nullopt;
  return out;
}

}  // namespace attnjit::jit
