#include "cache/hash.hpp"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <cstdint>

#include "attnjit/error.hpp"

namespace attnjit::cache {
namespace {

std::string to_hex(const unsigned char* digest, unsigned len) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(2 * len, '0');
  for (unsigned i = 0; i < len; ++i) {
    hex[2 * i] = kDigits[digest[i] >> 4];
    hex[2 * i + 1] = kDigits[digest[i] & 15];
  }
  return hex;
}

void check(int ok, const char* call) {
  if (ok != 1) throw Error(ErrorKind::kCache, fmt::format("OpenSSL {} (SHA-256) failed", call));
}

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  check(EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr), "EVP_Digest");
  return to_hex(digest, len);
}

struct Sha256::Ctx {
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  ~Ctx() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
  if (!ctx_->md) throw Error(ErrorKind::kCache, "OpenSSL EVP_MD_CTX_new failed");
  check(EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr), "EVP_DigestInit_ex");
}

Sha256::~Sha256() = default;

Sha256& Sha256::update(std::string_view bytes) {
  check(EVP_DigestUpdate(ctx_->md, bytes.data(), bytes.size()), "EVP_DigestUpdate");
  return *this;
}

Sha256& Sha256::field(std::string_view bytes) {
  unsigned char len[8];
  const uint64_t n = bytes.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  update(std::string_view(reinterpret_cast<const char*>(len), 8));
  return update(bytes);
}

std::string Sha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  check(EVP_DigestFinal_ex(ctx_->md, digest, &len), "EVP_DigestFinal_ex");
  return to_hex(digest, len);
}

}  // namespace attnjit::cache
