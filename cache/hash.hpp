#pragma once
// SHA-256 through OpenSSL: fingerprints of cubins, header sets and cache keys.
#include <memory>
#include <string>
#include <string_view>

namespace attnjit::cache {

std::string sha256_hex(std::string_view bytes);  // 64 lower-case hex digits

// Incremental SHA-256 for records built from many parts. `field` writes a length prefix
// before the bytes, so ("ab", "c") and ("a", "bc") never hash alike.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  Sha256& update(std::string_view bytes);
  Sha256& field(std::string_view bytes);  // 8-byte little-endian length, then the bytes
  std::string hex();                      // finishes; the object is spent afterwards

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

}  // namespace attnjit::cache
