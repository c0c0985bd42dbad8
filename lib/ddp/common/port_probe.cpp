#include "ddp/common/port_probe.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace ddp {

bool port_in_use(int port) {
  if (port == 0) return false;
  for (int family : {AF_INET6, AF_INET}) {
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    int rc;
    if (family == AF_INET6) {
      sockaddr_in6 addr{};
      addr.sin6_family = AF_INET6;
      addr.sin6_addr = in6addr_any;
      addr.sin6_port = htons(static_cast<uint16_t>(port));
      rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    } else {
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_ANY);
      addr.sin_port = htons(static_cast<uint16_t>(port));
      rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    }
    bool busy = rc != 0 && errno == EADDRINUSE;
    close(fd);
    if (busy) return true;
    if (rc == 0) return false;
  }
  return false;
}

}  // namespace ddp
