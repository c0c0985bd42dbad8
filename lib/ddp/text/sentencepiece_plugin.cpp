// libddprun_sentencepiece.so: the plugin of Note [SentencePiece's protobuf].
#include "ddp/text/sentencepiece_plugin.h"

#include <cstring>
#include <exception>

#include "ddp/text/sentencepiece_tokenizer.h"

extern "C" ddp::TextTokenizer* ddprun_load_sentencepiece(const char* path, char* error, std::size_t error_size) {
  try {
    return new ddp::Tokenizer(ddp::Tokenizer::load(path));
  } catch (const std::exception& e) {
    std::snprintf(error, error_size, "%s", e.what());
    return nullptr;
  }
}
