// HMAC-SHA256 against RFC 4231's known answers.
#include <catch2/catch.hpp>

#include "ddp/launch/hmac_sha256.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

TEST_CASE("hmac_sha256_hex gives RFC 4231's test vectors", "[launch][hmac]") {
  // Test case 1: a 20-byte key of 0x0b, "Hi There".
  CHECK(ddp::hmac_sha256_hex(std::string(20, '\x0b'), "Hi There") ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2: a key shorter than the block.
  CHECK(ddp::hmac_sha256_hex("Jefe", "what do ya want for nothing?") ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 6: a 131-byte key, longer than the block, so it is hashed first.
  CHECK(ddp::hmac_sha256_hex(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First") ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  // A message over one 64-byte block, padded across two.
  CHECK(ddp::hmac_sha256_hex("Jefe", std::string(100, 'x')) != ddp::hmac_sha256_hex("Jefe", std::string(101, 'x')));
}

TEST_CASE("constant_time_equal compares whole strings", "[launch][hmac]") {
  CHECK(ddp::constant_time_equal("abc", "abc"));
  CHECK_FALSE(ddp::constant_time_equal("abc", "abd"));
  CHECK_FALSE(ddp::constant_time_equal("abc", "abcd"));
  CHECK(ddp::constant_time_equal("", ""));
}

}  // namespace DDP_TEST_FILE
