#pragma once
// SentencePiece for a process that has LibTorch loaded.
//
// Note [SentencePiece's protobuf]
// Debian's libsentencepiece carries its own copy of protobuf 3.14 and exports its symbols, while
// LibTorch loads the system's libprotobuf (3.21): in one process the first one's symbols win for
// both, and SentencePiece's model code aborts at load ("compiled against version 3.14.0 of the
// Protocol Buffer runtime"). So programs that use LibTorch (ddp-generate) reach SentencePiece only
// through libddprun_sentencepiece.so, loaded with RTLD_DEEPBIND: the plugin and its libraries look
// up their own symbols first, and SentencePiece keeps its protobuf. ddp-tokenize has no LibTorch
// and links it directly.

#include <memory>
#include <string>

#include "ddp/text/text_tokenizer.h"

/// The plugin's entry: the model at `path`, or null with the reason in `error` (`error_size` bytes).
extern "C" ddp::TextTokenizer* ddprun_load_sentencepiece(const char* path, char* error, std::size_t error_size);

namespace ddp {

/// The SentencePiece model at `path` through the plugin. FileError naming the file when it is not a
/// SentencePiece model; UserError when the plugin cannot be loaded.
std::unique_ptr<TextTokenizer> load_sentencepiece(const std::string& path);

}  // namespace ddp
