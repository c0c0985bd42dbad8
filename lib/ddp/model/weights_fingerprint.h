#pragma once
// A digest of a weights file that tells copies of it from other files without reading it whole:
// each rank reads model.init_from itself, only the parts it keeps (Note [Deferred initialisation]),
// so ranks whose nodes hold different files at that path would start from different models.

#include <string>

namespace ddp {

/// Hex digest of the weights at `path` (a file, or a Hugging Face directory's config.json and
/// weight files): each file's size, its first and last MiB (safetensors' header; torch.save's
/// central directory, with each record's CRC-32) and 64 blocks of 4 KiB spread over it. Copies of one
/// file agree; another checkpoint of the same model differs in every block. FileError for a file that
/// cannot be read.
std::string weights_fingerprint(const std::string& path);

}  // namespace ddp
