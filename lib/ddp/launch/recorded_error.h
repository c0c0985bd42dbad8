#pragma once
// A failed rank's own report of its exception: torch.distributed.elastic's @record writes it, as
// JSON, to $TORCHELASTIC_ERROR_FILE, which torchrun's summary then shows as the root cause.

#include <optional>
#include <string>

namespace ddp {

/// The exception @record wrote to `path` ("RuntimeError: boom", its first line); nullopt when there
/// is no such file, or it holds no message (a half-written or foreign file is passed over).
std::optional<std::string> recorded_error(const std::string& path);

}  // namespace ddp
