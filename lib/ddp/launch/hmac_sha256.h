#pragma once
// HMAC-SHA256 (RFC 2104 over FIPS 180-4), for the control values nodes leave in the rendezvous store:
// the store can be read and written by anyone who reaches its port, so a value counts only if it
// carries a tag that only holders of the job's secret can make. OpenSSL's libcrypto computes it: the
// reviewed implementation a security reviewer expects, and a small library beside the launcher's others.

#include <string>
#include <string_view>

namespace ddp {

/// HMAC-SHA256 of `message` under `key`, as 64 lowercase hex digits.
std::string hmac_sha256_hex(std::string_view key, std::string_view message);

/// Whether two strings are equal, in time that does not depend on where they differ.
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace ddp
