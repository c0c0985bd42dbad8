#pragma once
// A look at what listens on the rendezvous port before c10d's client talks to it. c10d reads any
// reply as its own protocol: a greeting from another service (an SSH banner) becomes a length, and
// the client dies with std::bad_alloc in a thread of its own, where no caller can catch it. A
// service that waits to be asked (HTTP) would hold the client until --rdzv-timeout: it is asked.

#include <chrono>
#include <functional>
#include <optional>
#include <string>

namespace ddp {

/// What a service on host:port says, or that it hangs up, within `wait` of a connection, before it
/// is asked anything; or, if it stays quiet, what it answers within `wait` to an HTTP request line.
/// nullopt when it stays quiet throughout, as a c10d store does (Note [Asking a quiet service]), or
/// nothing accepts yet.
std::optional<std::string> service_reply(const std::string& host, int port, std::chrono::milliseconds wait);

/// Whether something accepts a connection at host:port within `within`, trying again while nothing
/// does and `interrupted` (if given) says false; the connection is closed at once. Where c10d's
/// client would wait out its whole timeout (and log through glog as it gives up), this asks with a
/// bound of the caller's.
bool accepts_within(const std::string& host, int port, std::chrono::milliseconds within,
                    const std::function<bool()>& interrupted = nullptr);

}  // namespace ddp
