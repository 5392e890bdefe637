#pragma once
// Resource usage read from a cubin's ELF (`.nv.info`: EIATTR_REGCOUNT, EIATTR_FRAME_SIZE),
// independent of NVRTC's log. On the GPU machines NVRTC has been seen returning an empty
// log in processes that had initialized the driver, so the ptxas report alone is not a
// dependable source for the register count.
#include <optional>
#include <string>
#include <vector>

namespace attnjit::jit {

struct CubinResources {
  int registers = -1;
  int frame_bytes = -1;  // local-memory stack frame (spills live there)
};

// nullopt when the cubin is not an ELF or the function is not in it.
std::optional<CubinResources> cubin_resources(const std::vector<char>& cubin,
                                              const std::string& mangled_name);

}  // namespace attnjit::jit
