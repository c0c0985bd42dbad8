#pragma once
// Whether a TCP port is taken on this machine, found by trying to bind it: c10d reports a busy port
// after logging through glog, in words that differ between LibTorch versions, so the launcher and
// the workers probe instead (a clean message first, and an error classified by what is so).

namespace ddp {

/// Whether a TCP port is bound on this machine (any address, IPv6 or IPv4). Port 0 never is.
bool port_in_use(int port);

}  // namespace ddp
