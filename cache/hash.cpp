#include "cache/hash.hpp"

#include <fmt/format.h>
#include <openssl/evp.h>

#include "attnjit/error.hpp"

namespace attnjit::cache {

std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr) != 1)
    throw Error(ErrorKind::kCache, "OpenSSL EVP_Digest(SHA-256) failed");
  std::string hex;
  hex.reserve(2 * len);
  for (unsigned i = 0; i < len; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

}  // namespace attnjit::cache
