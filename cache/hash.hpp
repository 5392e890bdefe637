#pragma once
// SHA-256 through OpenSSL: fingerprints of cubins and (with the disk cache) cache keys.
#include <string>
#include <string_view>

namespace attnjit::cache {

std::string sha256_hex(std::string_view bytes);  // 64 lower-case hex digits

}  // namespace attnjit::cache
