#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>

#include "ddp/common/error.h"
#include "ddp/text/sentencepiece_plugin.h"

namespace ddp {
namespace {

using LoadFunction = decltype(&ddprun_load_sentencepiece);

LoadFunction load_plugin() {
  static LoadFunction load = [] {
    namespace fs = std::filesystem;
    const fs::path dir = fs::read_symlink("/proc/self/exe").parent_path();
    std::string tried;
    // Beside the program in a build tree; installed, in libexec as libddprun_tcpstore.so is.
    for (const fs::path& path : {dir / "libddprun_sentencepiece.so", dir / "../libexec/ddprun/libddprun_sentencepiece.so"}) {
      // Kept loaded for the life of the process. RTLD_DEEPBIND: Note [SentencePiece's protobuf].
      if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND)) {
        if (auto function = reinterpret_cast<LoadFunction>(dlsym(handle, "ddprun_load_sentencepiece"))) return function;
      }
      const char* reason = dlerror();
      tried += (tried.empty() ? "" : "; ") + std::string(reason ? reason : path.string());
    }
    throw UserError("cannot load ddprun's SentencePiece plugin (" + tried + "); reinstall ddprun");
  }();
  return load;
}

}  // namespace

std::unique_ptr<TextTokenizer> load_sentencepiece(const std::string& path) {
  char error[1024] = "";
  std::unique_ptr<TextTokenizer> tokenizer(load_plugin()(path.c_str(), error, sizeof error));
  if (!tokenizer) throw FileError(error);
  return tokenizer;
}

}  // namespace ddp
