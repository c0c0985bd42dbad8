#include "ddp/launch/kv_store.h"

#include <dlfcn.h>

#include <stdexcept>

#include "ddp/common/error.h"
#include "ddp/launch/machine.h"

namespace ddp {
namespace {

using OpenFunction = decltype(&ddprun_open_tcp_store);

OpenFunction load_plugin() {
  static OpenFunction open = [] {
    std::string dir = executable_dir();
    std::string tried;
    // Beside ddprun in a build tree; installed, in libexec (a private module: no ldconfig, so the
    // Debian package needs no maintainer scripts), or lib as `cmake --install` used to put it.
    for (const std::string& path : {dir + "/libddprun_tcpstore.so", dir + "/../libexec/ddprun/libddprun_tcpstore.so",
                                    dir + "/../lib/ddprun/libddprun_tcpstore.so"}) {
      // Kept loaded for the life of the process: stores made by it may live until exit.
      if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
        if (auto function = reinterpret_cast<OpenFunction>(dlsym(handle, "ddprun_open_tcp_store"))) return function;
      }
      const char* reason = dlerror();  // each call clears it
      tried += (tried.empty() ? "" : "; ") + std::string(reason ? reason : path);
    }
    throw UserError("cannot load ddprun's TCP store plugin (" + tried + "); reinstall ddprun");
  }();
  return open;
}

}  // namespace

std::unique_ptr<KvStore> open_tcp_store(const KvStoreOptions& options) {
  char error[1024] = {};
  KvStore* store = load_plugin()(&options, error, sizeof error);
  if (!store) throw std::runtime_error(error);
  return std::unique_ptr<KvStore>(store);
}

}  // namespace ddp
