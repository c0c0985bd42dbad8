#pragma once
// Reader for IDX files (the MNIST / Fashion-MNIST format), raw or gzip-compressed.

#include "ddp/data/dataset.h"

#include <torch/types.h>

#include <string>

namespace ddp {

/// Reads one IDX file (gzip detected by its magic bytes, not its name) into a uint8 tensor with the
/// file's dims. Only element type 0x08 (unsigned byte) is supported. Throws FileError naming the file
/// and the cause: missing, not IDX, unsupported type, truncated, trailing garbage, corrupt gzip.
torch::Tensor read_idx(const std::string& path);

/// The file of `stem` in `dir`: `stem` or `stem`.gz, "" when neither is there. Both there: `stem`
/// where they hold the same data (torchvision's layout), else a FileError.
std::string find_idx_file(const std::string& dir, const std::string& stem);

/// Loads `split` ("train" or "test") from `dir`: {train,t10k}-images-idx3-ubyte and
/// {train,t10k}-labels-idx1-ubyte, each raw or with a .gz suffix. Throws FileError if files are
/// missing, have the wrong rank, or disagree on the sample count.
Dataset load_idx_split(const std::string& dir, const std::string& split);

}  // namespace ddp
