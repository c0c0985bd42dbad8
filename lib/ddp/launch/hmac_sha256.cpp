#include "ddp/launch/hmac_sha256.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdio>
#include <stdexcept>

namespace ddp {

std::string hmac_sha256_hex(std::string_view key, std::string_view message) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  // OpenSSL takes a null key pointer with length 0 as "no key" on some versions: point at a byte.
  static const unsigned char kNoKey = 0;
  const void* key_bytes = key.empty() ? &kNoKey : static_cast<const void*>(key.data());
  if (!HMAC(EVP_sha256(), key_bytes, static_cast<int>(key.size()),
            reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &size))
    throw std::runtime_error("OpenSSL's HMAC-SHA256 failed");
  std::string hex;
  char byte[3];
  for (unsigned int i = 0; i < size; ++i) {
    std::snprintf(byte, sizeof byte, "%02x", mac[i]);
    hex += byte;
  }
  return hex;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace ddp
